package rpc_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/cloudwego/kitex/server"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chubbygo/chubby/gen/rpctest"
	"github.com/chubbygo/chubby/gen/rpctest/echo"
	"github.com/chubbygo/chubby/rpc"
)

// TestStopLeavesOtherDescriptorsAlone stops 200 servers built with
// NewServer while the process keeps opening files and connections, and
// checks that every file and connection opened while a server was stopping
// still works afterwards: stopping a server may close its own descriptors
// only. (Linux reuses the lowest free descriptor number at once, so a
// number that a server closes twice, or keeps using after closing it,
// belongs to someone else by then.)
//
// Eight workers stop servers concurrently, so that the test takes seconds,
// not the 20 s that 200 stops of at least 100 ms each would take one after
// the other.
func TestStopLeavesOtherDescriptorsAlone(t *testing.T) {
	const stops, workers = 200, 8
	dir := t.TempDir()
	echoAddr := startTCPEcho(t)

	var (
		damagedStops       atomic.Int64
		files, conns       atomic.Int64
		badFiles, badConns atomic.Int64
		mu                 sync.Mutex
		examples           []string
	)
	report := func(format string, args ...any) {
		mu.Lock()
		if len(examples) < 10 {
			examples = append(examples, fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}

	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				r := stopWhileOpening(i, dir, echoAddr)
				files.Add(int64(r.files))
				conns.Add(int64(r.conns))
				badFiles.Add(int64(r.badFiles))
				badConns.Add(int64(r.badConns))
				if r.damaged() {
					damagedStops.Add(1)
					for _, e := range r.errs {
						report("stop %d: %v", i, e)
					}
				}
			}
		}()
	}
	for i := range stops {
		jobs <- i
	}
	close(jobs)
	wg.Wait()

	t.Logf("%d stops; %d of %d files and %d of %d connections opened meanwhile were damaged; %d stops damaged something",
		stops, badFiles.Load(), files.Load(), badConns.Load(), conns.Load(), damagedStops.Load())
	if n := damagedStops.Load(); n > 0 {
		t.Errorf("%d of %d stops damaged a file, connection or server of someone else; for example:", n, stops)
		for _, e := range examples {
			t.Error("  ", e)
		}
	}
	if files.Load() < stops || conns.Load() < stops {
		t.Errorf("only %d files and %d connections were opened during %d stops: the test checked too little", files.Load(), conns.Load(), stops)
	}
}

// stopResult is what one stop did to the files and connections opened
// while it ran.
type stopResult struct {
	files, conns       int     // opened (or tried)
	badFiles, badConns int     // of those, failed or damaged
	errs               []error // the server's own trouble and the damage seen
}

func (r *stopResult) damaged() bool { return len(r.errs) > 0 }

// stopWhileOpening starts an Echo server built with NewServer, waits
// until it answers, stops it, and while Stop runs opens a file (in dir) and
// a connection (to the echo server at echoAddr) every 2 ms. Once the server
// is stopped it checks that every one of them still works.
func stopWhileOpening(i int, dir, echoAddr string) (r stopResult) {
	fail := func(err error) { r.errs = append(r.errs, err) }

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
		return r
	}
	svr, err := rpc.NewServer(rpc.ServerConfig{
		Listener:     ln,
		ExitWaitTime: 50 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, func(opts ...server.Option) server.Server { return echo.NewServer(newEchoHandler(false), opts...) })
	if err != nil {
		fail(err)
		ln.Close()
		return r
	}
	ran := make(chan error, 1)
	go func() { ran <- svr.Run() }()
	if err := framedEcho(ln.Addr().String(), fmt.Sprint("ready ", i)); err != nil {
		fail(fmt.Errorf("server never answered: %w", err))
	}

	stopped := make(chan error, 1)
	go func() { stopped <- svr.Stop() }()

	var fs []*openFile
	var cs []*openConn
	giveUp := time.After(10 * time.Second)
opening:
	for j := 0; ; j++ {
		select {
		case <-stopped:
			break opening
		case <-giveUp:
			fail(errors.New("Stop did not return within 10 s"))
			break opening
		default:
		}
		r.files++
		f, err := createFile(dir, fmt.Sprintf("stop %d file %d\n", i, j))
		if err != nil {
			r.badFiles++
			fail(err)
		} else {
			fs = append(fs, f)
		}
		r.conns++
		c, err := dialEcho(echoAddr, fmt.Sprintf("stop %d conn %d\n", i, j))
		if err != nil {
			r.badConns++
			fail(err)
		} else {
			cs = append(cs, c)
		}
		time.Sleep(2 * time.Millisecond)
	}
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		fail(errors.New("Run did not return within 10 s of Stop"))
	}

	for _, f := range fs {
		if err := f.check(); err != nil {
			r.badFiles++
			fail(err)
		}
	}
	for _, c := range cs {
		if err := c.check(); err != nil {
			r.badConns++
			fail(err)
		}
	}
	return r
}

// openFile is a temporary file kept open, with what was written to it.
type openFile struct {
	f    *os.File
	want []byte
}

func createFile(dir, content string) (*openFile, error) {
	f, err := os.CreateTemp(dir, "f")
	if err != nil {
		return nil, err
	}
	of := &openFile{f: f, want: []byte(content)}
	if _, err := f.Write(of.want); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("file %s: first write: %w", f.Name(), err)
	}
	return of, nil
}

// check writes more through the same descriptor, reads everything back
// through it, closes it, and reads the file again by name.
func (of *openFile) check() error {
	f := of.f
	defer os.Remove(f.Name())
	more := []byte("and more\n")
	if _, err := f.Write(more); err != nil {
		f.Close()
		return fmt.Errorf("file %s: second write: %w", f.Name(), err)
	}
	want := append(of.want, more...)
	got := make([]byte, len(want)+16)
	n, err := f.ReadAt(got, 0)
	if err != nil && err != io.EOF {
		f.Close()
		return fmt.Errorf("file %s: read back: %w", f.Name(), err)
	}
	if !bytes.Equal(got[:n], want) {
		f.Close()
		return fmt.Errorf("file %s: read back %q through its descriptor, wrote %q", f.Name(), got[:n], want)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("file %s: close: %w", f.Name(), err)
	}
	onDisk, err := os.ReadFile(f.Name())
	if err != nil || !bytes.Equal(onDisk, want) {
		return fmt.Errorf("file %s: on disk %q (%v), wrote %q", f.Name(), onDisk, err, want)
	}
	return nil
}

// openConn is a connection to the test's TCP echo server, kept open.
type openConn struct {
	c   net.Conn
	msg []byte
}

func dialEcho(addr, msg string) (*openConn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	oc := &openConn{c: c, msg: []byte(msg)}
	if err := oc.exchange(); err != nil {
		c.Close()
		return nil, fmt.Errorf("connection %v: first exchange: %w", c.LocalAddr(), err)
	}
	return oc, nil
}

// exchange sends the message and expects it back within 5 s.
func (oc *openConn) exchange() error {
	oc.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := oc.c.Write(oc.msg); err != nil {
		return err
	}
	got := make([]byte, len(oc.msg))
	if _, err := io.ReadFull(oc.c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, oc.msg) {
		return fmt.Errorf("echo returned %q, sent %q", got, oc.msg)
	}
	return nil
}

func (oc *openConn) check() error {
	err := oc.exchange()
	if cerr := oc.c.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		return fmt.Errorf("connection %v: exchange after the stop: %w", oc.c.LocalAddr(), err)
	}
	return nil
}

// startTCPEcho serves a plain TCP echo (Go's net package, as the rest of
// the process uses it) on a fresh 127.0.0.1 port until the test ends.
func startTCPEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(c, c)
				c.Close()
				mu.Lock()
				delete(open, c)
				mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// framedEcho makes one Echo call as a plain framed Thrift client and waits
// for the reply (any reply: it shows the server serves), retrying for up to
// 30 s while the server starts (the first servers of a test binary, eight
// at once under -race on a loaded machine, took more than 5 s).
func framedEcho(addr, msg string) error {
	args := rpctest.NewEchoEchoArgs()
	args.Msg = msg
	body := make([]byte, args.BLength())
	args.FastWrite(body)
	req := framedCall("Echo", body)

	deadline := time.Now().Add(30 * time.Second)
	for {
		err := func() error {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(time.Second))
			if _, err := c.Write(req); err != nil {
				return err
			}
			var size [4]byte
			if _, err := io.ReadFull(c, size[:]); err != nil {
				return err
			}
			n := binary.BigEndian.Uint32(size[:])
			if n > 1<<16 {
				return fmt.Errorf("reply of %d bytes to an Echo of %q", n, msg)
			}
			_, err = io.ReadFull(c, make([]byte, n))
			return err
		}()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}
