package main

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
)

const lease = time.Second

// build compiles this example into a temporary directory, once per test.
func build(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "monitor")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// worker starts "monitor work" as a real process and waits until its file
// exists.
func worker(t *testing.T, bin, cell, name string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "work", "--cell", cell, "--dir", "/workers", "--name", name, "--status", "ready-"+name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if !strings.HasPrefix(s, "working /workers/"+name) {
			t.Fatalf("worker %s said %q", name, s)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("worker %s did not start", name)
	}
	return cmd
}

// await returns once the monitor reports want, failing after d.
func await(t *testing.T, changes <-chan Change, d time.Duration, want Change) time.Duration {
	t.Helper()
	return awaitAny(t, changes, d, want)
}

// awaitAny returns once the monitor reports one of wants, failing after d.
func awaitAny(t *testing.T, changes <-chan Change, d time.Duration, wants ...Change) time.Duration {
	t.Helper()
	start := time.Now()
	timeout := time.After(d)
	for {
		select {
		case c := <-changes:
			t.Logf("monitor: %v", c)
			for _, w := range wants {
				if c == w {
					return time.Since(start)
				}
			}
		case <-timeout:
			t.Fatalf("monitor did not report %v within %v", wants, d)
		}
	}
}

// TestMonitor: a monitor hears of three worker processes as they start,
// of the one killed with kill -9 once its lease runs out, and of a new
// one.
func TestMonitor(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example and starts processes (skipped with -short)")
	}
	bin := build(t)
	cell := celltest.Start(t, celltest.Options{Lease: lease})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	c, err := client.Connect(ctx, client.Config{Addrs: []string{cell.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan Change, 100)
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() { watched <- Watch(wctx, s, "/workers", func(c Change) { changes <- c }) }()

	procs := map[string]*exec.Cmd{}
	for _, name := range []string{"w1", "w2", "w3"} {
		procs[name] = worker(t, bin, cell.Addr, name)
		// The monitor may list a worker that started before its Open.
		awaitAny(t, changes, 10*time.Second,
			Change{Kind: "added", Worker: name, Status: "ready-" + name},
			Change{Kind: "present", Worker: name, Status: "ready-" + name})
	}

	// kill -9: no clean close; the file goes when the lease runs out.
	if err := procs["w2"].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	took := await(t, changes, 2*lease+10*time.Second, Change{Kind: "removed", Worker: "w2"})
	t.Logf("w2's removal reported %v after kill -9 (lease %v)", took.Round(time.Millisecond), lease)

	procs["w4"] = worker(t, bin, cell.Addr, "w4")
	await(t, changes, 10*time.Second, Change{Kind: "added", Worker: "w4", Status: "ready-w4"})

	// A clean exit (SIGTERM) closes the session: removed at once.
	procs["w1"].Process.Signal(syscall.SIGTERM)
	took = await(t, changes, 10*time.Second, Change{Kind: "removed", Worker: "w1"})
	t.Logf("w1's removal reported %v after SIGTERM", took.Round(time.Millisecond))

	stopWatch()
	select {
	case err := <-watched:
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return")
	}
}
