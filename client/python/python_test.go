// Package python runs the tests of the Python client library chubbycell
// (client/python/chubbycell) against real cells: it generates the
// library's Thrift modules (./build.sh python), starts cells with
// celltest, and runs Debian's python3 on the tests in client/python/tests
// with the cell's addresses in CHUBBY_CELL. Scenarios only the Go side can
// stage — stopping the master of a replicated cell, restarting a cell on
// its data — are driven through the lines of tests/drive.py.
package python

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/rpc/tlsconf"
	"github.com/chubbygo/chubby/rpc/tlsconf/tlstest"
)

// python is Debian's interpreter, which has python3-thrift (another python3
// may come first on PATH without it).
const python = "/usr/bin/python3"

// lease is the session lease of the cells started here: short, so that a
// killed holder's session expires and a stopped master is noticed quickly.
const lease = 2 * time.Second

// suiteLease is the session lease of the three-replica cell the unittest
// suite and drive.py's remove run against: long enough that a Python
// session's next KeepAlive (the master answers the parked one a
// KeepAliveMargin, a quarter lease, before the lease ends) still arrives
// in time when the interpreter is starved on a busy machine (with 2 s, a
// session of tests/test_example.py expired beside a CPU hog), short
// enough that tests/test_kill.py's dead holder's lock is free well within
// its 30 s wait.
const suiteLease = 5 * time.Second

var (
	genOnce sync.Once
	genErr  error
)

// here is client/python.
func here() string {
	_, f, _, _ := runtime.Caller(0)
	return filepath.Dir(f)
}

// generate runs ./build.sh python once per test binary: the tests use
// the modules it writes to chubbycell/_thrift.
func generate(t *testing.T) {
	t.Helper()
	genOnce.Do(func() {
		b, err := exec.Command("bash", filepath.Join(here(), "..", "..", "build.sh"), "python").CombinedOutput()
		if err != nil {
			genErr = fmt.Errorf("./build.sh python: %v\n%s", err, b)
		}
	})
	if genErr != nil {
		t.Fatal(genErr)
	}
}

// proc is a python process whose output the test reads line by line.
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // stdout and stderr, line by line; closed at the end
	done  chan struct{}
	out   strings.Builder // everything it printed
	mu    sync.Mutex
}

// startPython starts python with args in client/python, with CHUBBY_CELL
// set to addrs. It dies with the test (its own process group, SIGKILL when
// the test process dies), is killed by its pid when the test ends, and
// after timeout at the latest.
func startPython(t *testing.T, addrs []string, timeout time.Duration, args ...string) *proc {
	t.Helper()
	return startPythonEnv(t, addrs, nil, timeout, args...)
}

// startPythonEnv is startPython with env (KEY=value) added to its
// environment.
func startPythonEnv(t *testing.T, addrs, env []string, timeout time.Duration, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Dir = here()
	cmd.Env = append(os.Environ(), "CHUBBY_CELL="+strings.Join(addrs, ","), "PYTHONPATH="+here(),
		"PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1")
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	p := &proc{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 4096), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default: // nobody reads lines: the output is kept anyway
			}
		}
		close(p.lines)
		r.Close()
		cmd.Wait()
		cancel()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill() // by its pid; harmless once it has exited
		<-p.done
	})
	return p
}

// output returns everything the process printed so far.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// expect waits (bounded by within) for a line starting with prefix and
// returns it; lines before it are skipped.
func (p *proc) expect(prefix string, within time.Duration) string {
	p.t.Helper()
	timeout := time.After(within)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("python ended before printing %q:\n%s", prefix, p.output())
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			p.t.Fatalf("no %q from python within %v:\n%s", prefix, within, p.output())
		}
	}
}

// send writes a line to the process's stdin.
func (p *proc) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		p.t.Fatalf("writing to python: %v", err)
	}
}

// wait waits for the process to end and fails the test unless it exited 0.
func (p *proc) wait() {
	p.t.Helper()
	<-p.done
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		p.t.Fatalf("python exited %d (%v):\n%s", code, p.cmd.ProcessState, p.output())
	}
}

func startReplicas(t *testing.T) *celltest.Replicas {
	t.Helper()
	rc := celltest.StartStaticWith(t, 3, func(c *cell.Config) { c.Lease = suiteLease })
	rc.Master()
	return rc
}

// runUnittest runs python -m unittest discover on the tests in
// client/python/tests whose file names match pattern, with env added, and
// fails unless every test ran and passed.
func runUnittest(t *testing.T, addrs, env []string, pattern string) {
	t.Helper()
	p := startPythonEnv(t, addrs, env, 3*time.Minute, "-m", "unittest", "discover", "-v", "-s", "tests", "-p", pattern)
	<-p.done
	out := p.output()
	t.Logf("python -m unittest (%s):\n%s", pattern, out)
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the Python tests failed (exit %d)", code)
	}
	// Nothing may pass by being skipped, or by finding no tests.
	if !strings.Contains(out, "\nOK\n") || strings.Contains(out, "skipped") || !strings.Contains(out, "Ran ") ||
		strings.Contains(out, "Ran 0 tests") {
		t.Fatalf("the Python tests did not all run and pass")
	}
}

// TestPythonTLS runs client/python/tests/tls_*.py against a one-replica
// cell with mutual TLS whose first administrator is "admin": the Python
// client reads its TLS files from the Go client's CHUBBY_TLS_*
// variables (as admin) or takes a TLSConfig (alice, bob, anonymous), and
// the tests check WhoAmI, the ACLs as each principal meets them, SetACL,
// a renewed certificate picked up from disk, and that a plaintext client,
// a client trusting another CA and a certificate another CA signed get
// nowhere.
func TestPythonTLS(t *testing.T) {
	generate(t)
	pki := tlstest.NewPKI(t, "cell")
	rep := pki.Files(t, "replica-1", tlstest.Both)
	r, err := tlsconf.New(tlsconf.Config{Files: tlsconf.Files{Cert: rep.Cert, Key: rep.Key, CA: rep.CA}})
	if err != nil {
		t.Fatal(err)
	}
	c := celltest.Start(t, celltest.Options{TLS: r, Admin: "admin", Lease: lease})
	admin := pki.Files(t, "admin", tlstest.Client)
	for _, cn := range []string{"alice", "bob"} {
		pki.Files(t, cn, tlstest.Client)
	}
	other := tlstest.NewPKI(t, "other")
	stranger := other.Files(t, "alice", tlstest.Client) // another CA's "alice"
	runUnittest(t, []string{c.Addr}, []string{
		"CHUBBY_TLS_CA=" + admin.CA, "CHUBBY_TLS_CERT=" + admin.Cert, "CHUBBY_TLS_KEY=" + admin.Key,
		"CHUBBY_TEST_TLS_DIR=" + pki.Dir, "CHUBBY_TEST_OTHER_TLS_DIR=" + other.Dir,
		"CHUBBY_TEST_STRANGER_CERT=" + stranger.Cert, "CHUBBY_TEST_STRANGER_KEY=" + stranger.Key,
	}, "tls_*.py")
}

// TestPythonPipInstall installs the package as its pyproject.toml
// says, with no package index: a copy of client/python without the
// generated Thrift modules (and of idl/chubby.thrift beside it, where the
// build looks) goes into a fresh venv over Debian's python3 with pip
// --no-build-isolation --no-index, so the package's build must generate
// the modules itself; then tests/installed.py, run by the venv's python
// outside the source tree and without PYTHONPATH, imports it from the venv
// and uses it against a real cell.
func TestPythonPipInstall(t *testing.T) {
	generate(t) // installs the Debian packages the build needs
	// The install the READMEs print is the one run here: the venv made
	// by Debian's python3 (another python3 on PATH sees neither
	// python3-thrift nor python3-wheel), pip with no index.
	for _, readme := range []string{filepath.Join(here(), "..", "..", "README.md"), filepath.Join(here(), "README.md")} {
		b, err := os.ReadFile(readme)
		if err != nil {
			t.Fatal(err)
		}
		var block string
		for _, part := range strings.Split(string(b), "```sh\n")[1:] {
			if code, _, ok := strings.Cut(part, "```"); ok && strings.Contains(code, "pip install") {
				block = code
				break
			}
		}
		for _, step := range []string{python + " -m venv --system-site-packages /tmp/v",
			"\n/tmp/v/bin/pip install --no-build-isolation --no-index ./client/python\n"} {
			if !strings.Contains(block, step) {
				t.Errorf("%s: the install block does not say %q:\n%s", readme, strings.TrimSpace(step), block)
			}
		}
	}
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src", "client", "python")
	copyFile := func(from, to string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"pyproject.toml", "setup.py", "README.md"} {
		copyFile(filepath.Join(here(), f), filepath.Join(src, f))
	}
	mods, err := filepath.Glob(filepath.Join(here(), "chubbycell", "*.py"))
	if err != nil || len(mods) == 0 {
		t.Fatalf("no chubbycell/*.py: %v", err)
	}
	for _, m := range mods {
		copyFile(m, filepath.Join(src, "chubbycell", filepath.Base(m)))
	}
	copyFile(filepath.Join(here(), "..", "..", "idl", "chubby.thrift"), filepath.Join(tmp, "src", "idl", "chubby.thrift"))

	venv := filepath.Join(tmp, "venv")
	run := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = tmp
		cmd.Env = noPythonPath(os.Environ())
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	run(python, "-m", "venv", "--system-site-packages", venv)
	out := run(filepath.Join(venv, "bin", "pip"), "install", "--no-build-isolation", "--no-index", src)
	t.Logf("pip install:\n%s", out)
	if _, err := os.Stat(filepath.Join(src, "chubbycell", "_thrift")); err == nil {
		t.Errorf("the build wrote its generated modules into the source tree")
	}

	c := celltest.Start(t, celltest.Options{Lease: lease})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(venv, "bin", "python"), filepath.Join(here(), "tests", "installed.py"), "/installed")
	cmd.Dir = tmp
	cmd.Env = append(noPythonPath(os.Environ()), "CHUBBY_CELL="+c.Addr, "PYTHONDONTWRITEBYTECODE=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	b, err := cmd.CombinedOutput()
	t.Logf("installed.py:\n%s", b)
	if err != nil || !strings.Contains(string(b), "INSTALLED OK "+filepath.Join(venv, "lib")) {
		t.Fatalf("the installed package does not work: %v", err)
	}
}

// noPythonPath is env without PYTHONPATH, so that python finds only what
// is installed, and without pip's variables naming places to look for
// packages, so that pip uses only what is here.
func noPythonPath(env []string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, "PYTHONPATH=") && !strings.HasPrefix(e, "PIP_FIND_LINKS=") &&
			!strings.HasPrefix(e, "PIP_INDEX_URL=") && !strings.HasPrefix(e, "PIP_EXTRA_INDEX_URL=") {
			out = append(out, e)
		}
	}
	return out
}

// TestPythonReadmeQuickStart runs the Python examples of README.md
// ("Other languages") and client/python/README.md, as printed there but
// for the cell's address, each against a fresh cell: they must work on a
// cell that has nothing yet.
func TestPythonReadmeQuickStart(t *testing.T) {
	generate(t)
	for _, readme := range []string{filepath.Join(here(), "..", "..", "README.md"), filepath.Join(here(), "README.md")} {
		b, err := os.ReadFile(readme)
		if err != nil {
			t.Fatal(err)
		}
		var blocks []string
		for _, part := range strings.Split(string(b), "```python\n")[1:] {
			code, _, ok := strings.Cut(part, "```")
			if ok && strings.Contains(code, "import chubbycell") {
				blocks = append(blocks, code)
			}
		}
		if len(blocks) != 1 {
			t.Fatalf("%s: %d Python examples importing chubbycell, want 1", readme, len(blocks))
		}
		if !strings.Contains(blocks[0], "127.0.0.1:7000") {
			t.Fatalf("%s: the example does not connect to 127.0.0.1:7000:\n%s", readme, blocks[0])
		}
		c := celltest.Start(t, celltest.Options{Lease: lease})
		p := startPython(t, []string{c.Addr}, time.Minute, "-c", strings.ReplaceAll(blocks[0], "127.0.0.1:7000", c.Addr))
		p.wait()
		t.Logf("%s:\n%s", readme, p.output())
		if !strings.Contains(p.output(), "holding chubby-seq:v1:E:") {
			t.Errorf("%s: the example did not take its lock", readme)
		}
	}
}

// TestPythonUnittest runs the unittest suite (client/python/tests/test_*.py)
// against a three-replica cell: files, locks, events, errors, validation,
// NOT_MASTER following, exactly-once resends through a proxy that loses
// replies, the lock of a SIGKILLed holder, and examples/lock.py.
func TestPythonUnittest(t *testing.T) {
	generate(t)
	rc := startReplicas(t)
	p := startPython(t, rc.Addrs(), 3*time.Minute, "-m", "unittest", "discover", "-v", "-s", "tests")
	<-p.done
	out := p.output()
	t.Logf("python -m unittest:\n%s", out)
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the Python tests failed (exit %d)", code)
	}
	// Nothing may pass by being skipped, or by finding no tests.
	if !strings.Contains(out, "\nOK\n") || strings.Contains(out, "skipped") || !strings.Contains(out, "Ran ") {
		t.Fatalf("the Python tests did not all run and pass")
	}
}

// TestPythonFailover: a Python session holding a lock survives the stop of
// its cell's master: the Go side stops the master of a three-replica cell
// while the Python process holds the lock; the session must go into
// jeopardy and back to safe (never expire), keep its lock (its sequencer
// stays valid, checked from Go too) and go on working. The replicas wait
// 3 s without a master before they elect another (view-change timeout,
// and no dial of the stopped master's port before it: SuspectAfter), more
// than the 2 s session lease, so the failover certainly outlasts the
// session's local lease: with the defaults a stopped master's refused port
// has a new master serving in a third of a second, and jeopardy would be
// a matter of luck.
func TestPythonFailover(t *testing.T) {
	generate(t)
	rc := celltest.StartStaticWith(t, 3, func(c *cell.Config) {
		c.Lease = lease
		c.Replication.ViewChangeTimeout = 3 * time.Second
		c.Replication.SuspectAfter = 3 * time.Second
	})
	rc.Master()
	p := startPython(t, rc.Addrs(), 2*time.Minute, "tests/drive.py", "failover")
	line := p.expect("LOCKED ", 30*time.Second)
	seq, err := client.ParseSequencer(strings.Fields(line)[1])
	if err != nil {
		t.Fatalf("the Python sequencer %q: %v", line, err)
	}
	m := rc.Master()
	rc.Stop(m)
	next := rc.Master(m)
	t.Logf("stopped the master (replica %d); replica %d is master now", m+1, next+1)
	p.send("STOPPED")
	ok := p.expect("OK", time.Minute)
	t.Log("python: " + ok)

	// The lock is still the Python session's, as the Go client sees it.
	var alive []string
	for i, a := range rc.Addrs() {
		if i != m {
			alive = append(alive, a)
		}
	}
	c, err := client.Connect(context.Background(), client.Config{Addrs: alive})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if valid, reason, err := c.CheckSequencer(ctx, seq); err != nil || !valid {
		t.Errorf("CheckSequencer from Go after the failover: valid %v, %q, %v", valid, reason, err)
	}
	p.send("DONE")
	p.wait() // it closes its session and exits 0
	if valid, _, err := c.CheckSequencer(ctx, seq); err != nil || valid {
		t.Errorf("CheckSequencer after the Python session closed: valid %v, %v; want invalid", valid, err)
	}
}

// TestPythonRemoveMember: the Go side stops a replica of a three-replica
// cell that is not the master, and the Python client removes it from the
// configuration (tests/drive.py remove); the Go side then checks that the
// master's configuration has two members.
func TestPythonRemoveMember(t *testing.T) {
	generate(t)
	rc := startReplicas(t)
	m := rc.Master()
	victim := (m + 1) % 3
	rc.Stop(victim)
	p := startPython(t, rc.Addrs(), 2*time.Minute, "tests/drive.py", "remove", strconv.Itoa(victim+1))
	line := p.expect("OK ", time.Minute)
	t.Log("python: " + line)
	p.wait()
	if strings.Contains(line, rc.Addr(victim)) {
		t.Errorf("the removed replica %s is still in the Python client's list: %s", rc.Addr(victim), line)
	}
	c, err := client.Connect(context.Background(), client.Config{Addrs: []string{rc.Addr(m)}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(st.GetReplicas()); n != 2 {
		t.Errorf("the cell has %d members after the removal, want 2: %+v", n, st.GetReplicas())
	}
}

// TestPythonJeopardy: a one-replica cell stops while a Python session holds
// a lock; the session goes into jeopardy (a call made then waits); a new
// master on the same data and address comes up within the grace period;
// the session is safe again (after master-changed) with its lock, and the
// call that waited succeeds.
func TestPythonJeopardy(t *testing.T) {
	generate(t)
	dir := t.TempDir()
	c := celltest.Start(t, celltest.Options{Lease: lease, DataDir: dir})
	p := startPython(t, []string{c.Addr}, 2*time.Minute, "tests/drive.py", "restart")
	p.expect("LOCKED ", 30*time.Second)
	c.Stop()
	p.expect("JEOPARDY", 30*time.Second)
	c2 := celltest.Start(t, celltest.Options{Lease: lease, DataDir: dir, Addr: c.Addr})
	p.send("RESTARTED")
	t.Log("python: " + p.expect("OK", time.Minute))
	p.wait()
	if e1, e2 := c.Server().Epoch(), c2.Server().Epoch(); e2 <= e1 {
		t.Errorf("the restarted cell's epoch %d is not above %d", e2, e1)
	}
}
