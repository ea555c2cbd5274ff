package client

import (
	"context"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
)

// End-to-end tests run against a real one-replica cell (Kitex, Badger with
// fsync, the fs state machine) started in the test process by celltest.

// startCell starts a cell and returns its address; it stops when the test ends.
func startCell(t *testing.T) (addr string) {
	return startCellLease(t, 0).Addr
}

// startCellLease starts a cell with the given session lease (0: default).
func startCellLease(t *testing.T, lease time.Duration) *celltest.Cell {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: starts a cell (skipped with -short)")
	}
	return celltest.Start(t, celltest.Options{Lease: lease})
}

// connect returns a client of the cell at addr, closed when the test ends.
func connect(t *testing.T, addr string) *Client {
	t.Helper()
	return connectCfg(t, Config{Addrs: []string{addr}})
}

// connectCfg returns a client made with cfg (ClientName and CallTimeout
// filled in when zero), closed when the test ends.
func connectCfg(t *testing.T, cfg Config) *Client {
	t.Helper()
	if cfg.ClientName == "" {
		cfg.ClientName = t.Name()
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	c, err := Connect(context.Background(), cfg)
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
