package client

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// This file starts real chubbyd processes for the end-to-end tests. It is a
// stop-gap until package cell offers a test helper: chubbyd is built once
// per test binary and run as `chubbyd dev` on a free loopback port.

// chubbydBinary builds tools/chubbyd once per test binary. The build
// directory is removed by TestMain.
var chubbydBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "chubbyd-e2e-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "chubbyd")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/chubbygo/chubby/tools/chubbyd").CombinedOutput()
	if err != nil {
		return dir, fmt.Errorf("go build ./tools/chubbyd: %v\n%s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if bin, _ := chubbydBinary(); bin != "" {
		if filepath.Base(bin) == "chubbyd" {
			bin = filepath.Dir(bin)
		}
		os.RemoveAll(bin)
	}
	os.Exit(code)
}

// testCell is a running chubbyd.
type testCell struct {
	addr string
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{} // closed when the process has exited
}

// startCell starts `chubbyd dev` on a free port with its data in a
// temporary directory and returns its address. The process is killed when
// the test ends.
func startCell(t *testing.T) (addr string) {
	return startCellWith(t).addr
}

// startCellWith is startCell with extra chubbyd flags (e.g. "--lease", "2s").
func startCellWith(t *testing.T, extra ...string) *testCell {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: needs a chubbyd process (skipped with -short)")
	}
	bin, err := chubbydBinary()
	if err != nil {
		t.Skipf("end-to-end test skipped: tools/chubbyd does not build yet: %v", err)
	}
	addr := freeAddr(t)
	args := append([]string{"dev", "--listen", addr, "--http", "", "--data", t.TempDir(), "--log-level", "warn"}, extra...)
	c := &testCell{addr: addr, cmd: exec.Command(bin, args...), log: &syncBuffer{}, done: make(chan struct{})}
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start chubbyd: %v", err)
	}
	go func() { c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			t.Logf("chubbyd output:\n%s", c.log.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return c
		}
		select {
		case <-c.done:
			t.Fatalf("chubbyd exited before accepting connections:\n%s", c.log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("chubbyd does not accept connections on %s after 20s:\n%s", addr, c.log.String())
		}
	}
}

// kill stops the cell at once (SIGKILL) and waits for it.
func (c *testCell) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// syncBuffer is a bytes.Buffer safe for the process's writers and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// connect returns a client of the cell at addr, closed when the test ends.
func connect(t *testing.T, addr string) *Client {
	t.Helper()
	c, err := Connect(context.Background(), Config{Addrs: []string{addr}, ClientName: t.Name(), CallTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newSession returns a session of c, closed when the test ends.
func newSession(t *testing.T, c *Client) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}
