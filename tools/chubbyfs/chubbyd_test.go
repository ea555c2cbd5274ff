package main

import (
	"bytes"
	"sync"
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

// syncBuffer is a bytes.Buffer safe for concurrent writers and the test.
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
