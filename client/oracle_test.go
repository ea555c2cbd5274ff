package client

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
)

// TestTimestamps: timestamps from many concurrent callers are distinct,
// each caller's strictly increasing, and every one handed out after a
// restart of the cell (a new master, on the same data) is larger than all
// handed out before.
func TestTimestamps(t *testing.T) {
	dir := t.TempDir()
	cl := celltest.Start(t, celltest.Options{DataDir: dir})
	addr := cl.Addr
	ctx := testCtx(t)
	collect := func(c *Client) []int64 {
		var mu sync.Mutex
		var all []int64
		var wg sync.WaitGroup
		for w := range 32 {
			wg.Go(func() {
				var last int64
				for i := range 50 {
					n := 1 + (w+i)%3
					first, err := c.Timestamps(ctx, n)
					if err != nil {
						t.Errorf("timestamps: %v", err)
						return
					}
					if first <= last {
						t.Errorf("caller %d: %d after %d", w, first, last)
					}
					last = first + int64(n) - 1
					mu.Lock()
					for k := range int64(n) {
						all = append(all, first+k)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		slices.Sort(all)
		if len(slices.Compact(slices.Clone(all))) != len(all) {
			t.Fatal("a timestamp was handed out twice")
		}
		return all
	}
	c := must[*Client](t, "connect")(Connect(ctx, Config{Addrs: []string{addr}}))
	before := collect(c)
	c.Close()
	cl.Stop()
	cl = celltest.Start(t, celltest.Options{DataDir: dir, Addr: addr})
	c = must[*Client](t, "connect")(Connect(ctx, Config{Addrs: []string{addr}}))
	defer c.Close()
	after := collect(c)
	if after[0] <= before[len(before)-1] {
		t.Fatalf("after the restart %d, before it up to %d", after[0], before[len(before)-1])
	}
	t.Logf("%d timestamps up to %d, then from %d after the restart", len(before), before[len(before)-1], after[0])
	// Bounds.
	if _, err := c.Timestamps(ctx, 0); err == nil {
		t.Error("0 timestamps asked and given")
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if first, err := c.Timestamps(sctx, 1_000_000); err != nil || first <= after[len(after)-1] {
		t.Errorf("a million: %d, %v", first, err)
	}
}
