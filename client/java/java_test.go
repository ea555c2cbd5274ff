// Package java holds the test of the Java client library (client/java):
// it builds the library with ./build.sh java and runs its test runner
// (test/io/chubby/cell/CellTest.java) as child processes against real
// cells, coordinating the failover and kill scenarios through the child's
// stdin and stdout.
package java

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/rpc/tlsconf"
	"github.com/chubbygo/chubby/rpc/tlsconf/tlstest"
)

// TestJavaClient builds the Java client (javac is slow: once for every
// scenario) and runs the scenarios of CellTest against real cells. A
// missing JDK or Thrift is installed by ./build.sh java (as root) or
// fails the test; it does not skip.
func TestJavaClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the Java client with javac and starts JVMs")
	}
	java, err := exec.LookPath("java")
	if err != nil {
		t.Fatal("no java on PATH (apt-get install openjdk-17-jdk-headless; ./build.sh test does it)")
	}
	_, here, _, _ := runtime.Caller(0)
	dir := filepath.Dir(here)
	root := filepath.Join(dir, "..", "..")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, filepath.Join(root, "build.sh"), "java")
	build.Dir = root
	start := time.Now()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("./build.sh java: %v\n%s", err, out)
	}
	t.Logf("./build.sh java took %v", time.Since(start).Round(time.Millisecond))
	cp, err := os.ReadFile(filepath.Join(dir, "build", "classpath"))
	if err != nil {
		t.Fatal(err)
	}
	jr := &jvm{java: java, cp: strings.TrimSpace(string(cp)) + ":" + filepath.Join(dir, "build", "test-classes")}

	t.Run("basic", func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Lease: 2 * time.Second})
		p := jr.start(t, "basic", c.Addr)
		p.Expect("PASS", 60*time.Second)
		if code := p.Wait(10 * time.Second); code != 0 {
			t.Fatalf("CellTest basic exited %d", code)
		}

		// The example takes its lock, prints the sequencer and, held for
		// 0 s, releases it.
		ex := jr.startMain(t, "LockExample", "LockExample", c.Addr, "/java-example", "0")
		held := ex.Expect("holding /java-example with sequencer chubby-seq:v1:E:1:", 30*time.Second)
		ex.Expect("releasing /java-example (still held: true)", 30*time.Second)
		if code := ex.Wait(10 * time.Second); code != 0 {
			t.Fatalf("LockExample exited %d after %q", code, held)
		}
	})

	t.Run("quickstart", func(t *testing.T) {
		// The README's quick start, on a fresh cell (only "/"), twice: the
		// second run finds what the first made.
		c := celltest.Start(t, celltest.Options{Lease: 2 * time.Second})
		for _, created := range []string{"true", "false"} {
			p := jr.startMain(t, "QuickStart", "QuickStart", c.Addr)
			p.Expect("leading with chubby-seq:v1:E:", 30*time.Second)
			p.Expect("timestamp ", 30*time.Second)
			p.Expect("created /svc/config: "+created, 30*time.Second)
			p.Expect("/svc/config: v1 (generation 1)", 30*time.Second)
			if code := p.Wait(10 * time.Second); code != 0 {
				t.Fatalf("QuickStart exited %d", code)
			}
		}
		// And the lock example with a path whose parent is missing.
		ex := jr.startMain(t, "LockExample", "LockExample", c.Addr, "/example/leader", "0")
		ex.Expect("holding /example/leader with sequencer chubby-seq:v1:E:1:", 30*time.Second)
		if code := ex.Wait(10 * time.Second); code != 0 {
			t.Fatalf("LockExample exited %d", code)
		}
	})

	t.Run("readme", func(t *testing.T) {
		// The README's Java block itself, as printed there but for the
		// cell's address, in a main method, compiled against the jar and
		// run on a fresh cell.
		b, err := os.ReadFile(filepath.Join(root, "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(string(b), "```java\n")
		if len(parts) != 2 {
			t.Fatalf("README.md has %d Java blocks, want 1", len(parts)-1)
		}
		block, _, ok := strings.Cut(parts[1], "```")
		if !ok || !strings.Contains(block, `"127.0.0.1:7000"`) {
			t.Fatalf("README.md's Java block is not closed or does not connect to 127.0.0.1:7000:\n%s", block)
		}
		javac, err := exec.LookPath("javac")
		if err != nil {
			t.Fatal("no javac on PATH (./build.sh java installs it)")
		}
		c := celltest.Start(t, celltest.Options{Lease: 2 * time.Second})
		src := "import io.chubby.cell.*;\nimport java.nio.charset.StandardCharsets;\nimport java.time.Duration;\n" +
			"import java.util.List;\n\npublic final class ReadmeJava {\n    public static void main(String[] args) throws Exception {\n" +
			strings.ReplaceAll(block, "127.0.0.1:7000", c.Addr) + "    }\n}\n"
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "ReadmeJava.java"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, javac, "--release", "17", "-encoding", "UTF-8", "-cp", jr.cp, "-d", dir,
			filepath.Join(dir, "ReadmeJava.java")).CombinedOutput(); err != nil {
			t.Fatalf("javac of the README's Java block: %v\n%s\n%s", err, out, src)
		}
		rj := &jvm{java: jr.java, cp: jr.cp + ":" + dir}
		p := rj.startMain(t, "ReadmeJava", "ReadmeJava")
		p.Expect("chubby-seq:v1:E:", 30*time.Second)
		if code := p.Wait(30 * time.Second); code != 0 {
			t.Fatalf("the README's Java block exited %d", code)
		}
	})

	t.Run("features", func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Lease: 2 * time.Second})
		p := jr.start(t, "features", c.Addr)
		p.Expect("PASS", 90*time.Second)
		if code := p.Wait(10 * time.Second); code != 0 {
			t.Fatalf("CellTest features exited %d", code)
		}
	})

	t.Run("deadlines", func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Lease: 2 * time.Second})
		p := jr.start(t, "deadlines", c.Addr)
		p.Expect("PASS", 120*time.Second)
		if code := p.Wait(10 * time.Second); code != 0 {
			t.Fatalf("CellTest deadlines exited %d", code)
		}
	})

	t.Run("cache", func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Lease: 2 * time.Second})
		p := jr.start(t, "cache", c.Addr)
		p.Expect("PASS", 120*time.Second)
		if code := p.Wait(10 * time.Second); code != 0 {
			t.Fatalf("CellTest cache exited %d", code)
		}
	})

	t.Run("tls", func(t *testing.T) {
		// A cell with mutual TLS and ACLs whose administrator is "admin";
		// the Java process is admin through CHUBBY_TLS_* (as the Go
		// client reads them) and bob through bob's files.
		pki := tlstest.NewPKI(t, "cell")
		replica := pki.Files(t, "replica-1", tlstest.Both)
		admin := pki.Files(t, "admin", tlstest.Client)
		pki.Files(t, "bob", tlstest.Client)
		pki.Files(t, "carol", tlstest.Client) // the Java test renews a copy of bob's files with carol's
		other := tlstest.NewPKI(t, "other-cell")
		r, err := tlsconf.New(tlsconf.Config{Files: tlsconf.Files{Cert: replica.Cert, Key: replica.Key, CA: replica.CA}})
		if err != nil {
			t.Fatal(err)
		}
		c := celltest.Start(t, celltest.Options{Lease: 2 * time.Second, TLS: r, Admin: "admin"})
		env := []string{"CHUBBY_TLS_CA=" + admin.CA, "CHUBBY_TLS_CERT=" + admin.Cert, "CHUBBY_TLS_KEY=" + admin.Key}
		p := jr.startEnv(t, env, "tls", "io.chubby.cell.CellTest", "tls", c.Addr, pki.Dir, other.CAFile())
		p.Expect("PASS", 90*time.Second)
		if code := p.Wait(10 * time.Second); code != 0 {
			t.Fatalf("CellTest tls exited %d", code)
		}
	})

	t.Run("replicated", func(t *testing.T) {
		rc := celltest.StartStaticWith(t, 3, func(c *cell.Config) { c.Lease = 2 * time.Second })
		m := rc.Master()
		other := (m + 1) % 3

		// NOT_MASTER: the Java client is given only a replica that is not
		// the master.
		p := jr.start(t, "notmaster", rc.Addr(other), rc.Addr(m))
		p.Expect("PASS", 30*time.Second)
		if code := p.Wait(10 * time.Second); code != 0 {
			t.Fatalf("CellTest notmaster exited %d", code)
		}

		// Failover: the Java process holds a lock and writes; the master
		// is stopped; the session, the lock and the writes go on.
		p = jr.start(t, "failover", rc.Addrs()...)
		locked := p.Expect("LOCKED ", 30*time.Second)
		t.Logf("java: %s; stopping the master, replica %d", locked, m+1)
		rc.Stop(m)
		next := rc.Master(m)
		t.Logf("replica %d is the new master", next+1)
		p.Send("STOPPED")
		p.Expect("PASS", 60*time.Second)
		if code := p.Wait(10 * time.Second); code != 0 {
			t.Fatalf("CellTest failover exited %d", code)
		}
	})

	t.Run("jeopardy", func(t *testing.T) {
		// The cell's one replica stops and comes back on the same data and
		// address (a new master, a new epoch) within the grace period.
		dir := t.TempDir()
		c := celltest.Start(t, celltest.Options{Lease: 2 * time.Second, DataDir: dir})
		p := jr.start(t, "jeopardy", c.Addr)
		p.Expect("READY", 30*time.Second)
		c.Stop()
		p.Send("STOPPED")
		p.Expect("JEOPARDY", 30*time.Second)
		celltest.Start(t, celltest.Options{Lease: 2 * time.Second, DataDir: dir, Addr: c.Addr})
		p.Send("RESTARTED")
		p.Expect("PASS", 60*time.Second)
		if code := p.Wait(10 * time.Second); code != 0 {
			t.Fatalf("CellTest jeopardy exited %d", code)
		}
	})

	t.Run("killed-holder", func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Lease: 2 * time.Second})
		holder := jr.start(t, "holder", c.Addr, "/java-killed")
		locked := holder.Expect("LOCKED ", 30*time.Second)
		waiter := jr.start(t, "waiter", c.Addr, "/java-killed")
		waiter.Expect("HELD", 30*time.Second)
		holder.Kill() // SIGKILL: its session is never closed, it expires
		waiter.Send("GO " + strings.TrimPrefix(locked, "LOCKED "))
		waiter.Expect("PASS", 60*time.Second)
		if code := waiter.Wait(10 * time.Second); code != 0 {
			t.Fatalf("CellTest waiter exited %d", code)
		}
	})
}

// spawns carries the JVMs to start to the one OS thread that starts them
// all (spawn).
var (
	spawnOnce sync.Once
	spawns    chan spawnReq
)

type spawnReq struct {
	cmd   *exec.Cmd
	reply chan error
}

// spawn starts cmd from an OS thread locked for the life of the test
// binary: Linux sends the parent-death signal (Pdeathsig) when the
// *thread* that forked the child exits, and the Go runtime may retire
// threads, which killed a JVM in mid-scenario without a word.
func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawns = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawns {
				r.reply <- r.cmd.Start()
			}
		}()
	})
	reply := make(chan error, 1)
	spawns <- spawnReq{cmd: cmd, reply: reply}
	return <-reply
}

// jvm starts CellTest processes.
type jvm struct {
	java string
	cp   string
}

// proc is a running CellTest process.
type proc struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // its stdout, line by line; closed at its end
	done  chan struct{}
}

// start starts CellTest mode args (see startMain).
func (j *jvm) start(t *testing.T, mode string, args ...string) *proc {
	t.Helper()
	return j.startMain(t, mode, "io.chubby.cell.CellTest", append([]string{mode}, args...)...)
}

// startMain starts the Java class main with args, calling the process name
// in the log. The JVM is in its own process group, dies with the test
// process (Pdeathsig; see spawn) and is killed, by its pid, when the test ends. Its
// output is logged line by line as it is read (Expect).
func (j *jvm) startMain(t *testing.T, name, main string, args ...string) *proc {
	t.Helper()
	return j.startEnv(t, nil, name, main, args...)
}

// startEnv is startMain with env added to the test's environment.
func (j *jvm) startEnv(t *testing.T, env []string, name, main string, args ...string) *proc {
	t.Helper()
	// A quick start matters more than peak speed: C1 only, serial GC.
	cmd := exec.Command(j.java, append([]string{"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss512k",
		"-cp", j.cp, main}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := spawn(cmd); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: name, cmd: cmd, stdin: stdin, lines: make(chan string, 4096), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		cmd.Wait()
	}()
	t.Cleanup(p.Kill)
	return p
}

// Expect waits (bounded by within) for a line starting with prefix and
// returns it, logging every line read. It fails the test if the process
// ends, prints a FAIL line, or the time runs out first.
func (p *proc) Expect(prefix string, within time.Duration) string {
	p.t.Helper()
	timeout := time.After(within)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("java %s ended before printing %q", p.name, prefix)
			}
			p.t.Logf("java %s: %s", p.name, l)
			if strings.HasPrefix(l, "FAIL") {
				p.drain()
				p.t.Fatalf("java %s: %s", p.name, l)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			p.t.Fatalf("no %q from java %s within %v", prefix, p.name, within)
		}
	}
}

// drain logs what the process prints after a failure (its stack trace),
// for at most a second.
func (p *proc) drain() {
	timeout := time.After(time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				return
			}
			p.t.Logf("java %s: %s", p.name, l)
		case <-timeout:
			return
		}
	}
}

// Send writes one line to the process's stdin.
func (p *proc) Send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		p.t.Fatalf("write to java %s: %v", p.name, err)
	}
}

// Kill sends SIGKILL to the process (if it still runs) and waits for it.
func (p *proc) Kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// Wait waits (bounded) for the process to exit by itself and returns its
// exit code.
func (p *proc) Wait(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		p.t.Fatalf("java %s still running after %v", p.name, within)
	}
	return p.cmd.ProcessState.ExitCode()
}
