package main

import (
	"bytes"
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

// This file starts real chubbyd processes for the end-to-end tests (the same
// stop-gap as in package client, until package cell offers a test helper):
// chubbyd is built once per test binary and run as `chubbyd dev` on a free
// loopback port.

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

type testCell struct {
	addr string
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
}

// startCell starts `chubbyd dev` on a free port with its data in a
// temporary directory and returns its address; it is killed when the test ends.
func startCell(t *testing.T) (addr string) {
	return startCellWith(t).addr
}

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

func (c *testCell) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

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
