// Package celltest starts a real cell for end-to-end tests of the packages
// that talk to one (client, chubbyfs, benchmarks): a one-replica
// cell.Server in the test's own process, on a loopback port, with its data
// in a temporary directory (Start), or a replicated cell of such replicas
// (Replicas: static --peers, or replicas added one by one, by gossip too). Everything is real — Kitex, Badger with fsync,
// the fs state machine — only the process boundary is missing; tests that
// need kill -9 of a real process start tools/chubbyd themselves.
package celltest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/rpc/tlsconf"
)

// Options tunes the cell. Zero fields take cell.Config's defaults.
type Options struct {
	Lease   time.Duration // session lease (default: cell.DefaultConfig's)
	DataDir string        // default: a new t.TempDir()
	Logger  *slog.Logger  // default: discard
	// Addr is the host:port to listen on. Default: a free loopback port.
	// Restarting a cell on the Addr and DataDir of a stopped one is how a
	// test makes a one-replica cell fail over to a new master (a new epoch)
	// that clients reach at the same address.
	Addr string
	// TLS and Admin are cell.Config's (nil, "": a plaintext cell without
	// ACLs).
	TLS   *tlsconf.Reloader
	Admin string
	// InMemory keeps the log in memory (no fsync): for measurements that
	// must not drown in the disk's noise.
	InMemory bool
}

// Cell is a running cell.
type Cell struct {
	Addr string // host:port for clients

	srv  *cell.Server
	done chan error
	once sync.Once
	t    testing.TB
}

// Start starts a cell and stops it when the test ends.
func Start(t testing.TB, o Options) *Cell {
	t.Helper()
	if o.DataDir == "" && !o.InMemory {
		o.DataDir = t.TempDir()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	addr := o.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("celltest: listen %s: %v", addr, err)
	}
	srv, err := cell.New(cell.Config{Listener: ln, DataDir: o.DataDir, Lease: o.Lease, Logger: o.Logger, TLS: o.TLS, Admin: o.Admin, InMemory: o.InMemory})
	if err != nil {
		t.Fatalf("celltest: start cell: %v", err)
	}
	c := &Cell{Addr: srv.Addr(), srv: srv, done: make(chan error, 1), t: t}
	go func() { c.done <- srv.Serve(context.Background()) }()
	// Bounded wait until the port accepts connections.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		conn, err := net.DialTimeout("tcp", c.Addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("celltest: cell does not accept connections on %s: %v", c.Addr, err)
		}
	}
	// Bounded wait until the replica is the master (it elects itself at
	// once, but asynchronously).
	for deadline := time.Now().Add(10 * time.Second); !srv.IsMaster(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("celltest: cell at %s is not master after 10s", c.Addr)
		}
	}
	t.Cleanup(c.Stop)
	return c
}

// Server is the running cell.Server (status, epoch).
func (c *Cell) Server() *cell.Server { return c.srv }

// Stop stops the cell: parked calls are answered UNAVAILABLE, connections
// close, nothing more is served. Safe to call more than once.
func (c *Cell) Stop() {
	c.once.Do(func() {
		c.srv.Stop()
		select {
		case <-c.done:
		case <-time.After(15 * time.Second):
			c.t.Errorf("celltest: cell at %s did not stop within 15s", c.Addr)
		}
	})
}

// FreeAddr returns a loopback address whose port was free a moment ago
// (for tests of what happens when nothing listens there).
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
