package recipe

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// idSource is what both id generators offer.
type idSource interface {
	Next(ctx context.Context) (int64, error)
}

// takeIDs has clients sources take perClient ids each, concurrently, and
// returns every id with the time each call took.
func takeIDs(t *testing.T, sources []idSource, perClient int) (ids []int64, took []time.Duration) {
	t.Helper()
	ctx := coordCtx(t, 60*time.Second)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, src := range sources {
		wg.Go(func() {
			var mine []int64
			var times []time.Duration
			for range perClient {
				start := time.Now()
				id, err := src.Next(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				times = append(times, time.Since(start))
				if len(mine) > 0 && id <= mine[len(mine)-1] {
					t.Errorf("one client got %d after %d", id, mine[len(mine)-1])
				}
				mine = append(mine, id)
			}
			mu.Lock()
			ids, took = append(ids, mine...), append(took, times...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return ids, took
}

// counterSources makes n generators of kind ("seq", "cas", or
// "cas-nocache": on sessions that do not cache), each on a session of its
// own.
func counterSources(t *testing.T, addr, kind, where string, n int) []idSource {
	t.Helper()
	var out []idSource
	for range n {
		var s *client.Session
		if kind == "cas-nocache" {
			s = coordSessionWith(t, client.Config{Addrs: []string{addr}, DisableCache: true})
		} else {
			s = coordSession(t, addr)
		}
		var src idSource
		var err error
		if kind == "seq" {
			src, err = NewSequenceIDs(s, where, SequenceOptions{})
		} else {
			src, err = NewCASCounter(s, where)
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, src)
	}
	return out
}

// TestSequenceIDs: ids from sequential names are unique across clients
// and increase per client; their files are deleted unless kept.
func TestSequenceIDs(t *testing.T) {
	cell := coordCell(t)
	ids, _ := takeIDs(t, counterSources(t, cell.Addr, "seq", "/ids/seq", 4), 25)
	slices.Sort(ids)
	if len(ids) != 100 || len(slices.Compact(slices.Clone(ids))) != 100 {
		t.Fatalf("%d ids, %d distinct: %v", len(ids), len(slices.Compact(slices.Clone(ids))), ids)
	}
	s := coordSession(t, cell.Addr)
	waitChildren(t, s, "/ids/seq", 0)

	kept, err := NewSequenceIDs(s, "/ids/kept", SequenceOptions{Prefix: "job-", Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := coordCtx(t, 20*time.Second)
	first, err := kept.Next(ctx)
	if err != nil || first != 1 {
		t.Fatalf("the first id of a new directory is %d (%v), want 1", first, err)
	}
	second, err := kept.Next(ctx)
	if err != nil || second <= first {
		t.Fatalf("ids %d then %d (%v)", first, second, err)
	}
	h, err := s.Open(ctx, fmt.Sprintf("/ids/kept/job-%010d", second-1), client.OpenOptions{}) // named for the counter
	if err != nil {
		t.Fatalf("the kept id's file: %v", err)
	}
	h.Close(ctx)
	for _, p := range []string{"a/b", "a b", strings.Repeat("a", chubby.MAX_NAME_BYTES-9)} {
		if _, err := NewSequenceIDs(s, "/ids/x", SequenceOptions{Prefix: p}); !client.IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
			t.Errorf("prefix %q: %v", p, err)
		}
	}
}

// TestCASCounter: concurrent clients get exactly 1..N between them (dense
// and unique); Add(n) reserves a block; bad content and overflow are
// refused without a write.
func TestCASCounter(t *testing.T) {
	cell := coordCell(t)
	s := coordSession(t, cell.Addr)
	coordMkdir(t, s, "/ids")
	ids, _ := takeIDs(t, counterSources(t, cell.Addr, "cas", "/ids/c", 4), 25)
	slices.Sort(ids)
	for i, id := range ids {
		if id != int64(i+1) {
			t.Fatalf("ids are not 1..100: position %d holds %d (%v)", i, id, ids)
		}
	}
	ctx := coordCtx(t, 20*time.Second)
	c, _ := NewCASCounter(s, "/ids/c")
	if v, err := c.Add(ctx, 10); err != nil || v != 110 {
		t.Fatalf("Add(10) = %d, %v; want 110", v, err)
	}
	if _, err := c.Add(ctx, 0); !client.IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
		t.Fatalf("Add(0): %v", err)
	}
	c.Close(ctx)

	for _, tc := range []struct{ content, why string }{
		{"12x", "not a number"}, {"-3", "negative"}, {fmt.Sprint(uint64(math.MaxInt64) + 1), "out of range"},
		{fmt.Sprint(int64(math.MaxInt64)), "overflow"},
	} {
		h, err := s.Open(ctx, "/ids/bad", client.OpenOptions{Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE})
		if err != nil {
			t.Fatal(err)
		}
		st, err := h.SetContents(ctx, []byte(tc.content))
		if err != nil {
			t.Fatal(err)
		}
		bad, _ := NewCASCounter(s, "/ids/bad")
		if _, err := bad.Next(ctx); !client.IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
			t.Errorf("%s (%q): %v, want INVALID_ARGUMENT", tc.why, tc.content, err)
		}
		if after, err := h.GetStat(ctx); err != nil || after.GetContentGeneration() != st.GetContentGeneration() {
			t.Errorf("%s: the refused Next wrote (%v)", tc.why, err)
		}
		bad.Close(ctx)
		h.Close(ctx)
	}
}

// TestCounterSpeed measures both id generators, 1 and 16 clients (each
// with its own session), for a few seconds each: ids/s and the latency
// of one Next. Set CHUBBY_RECIPE_BENCH=1 to run it.
func TestCounterSpeed(t *testing.T) {
	if os.Getenv("CHUBBY_RECIPE_BENCH") != "1" {
		t.Skip("a measurement: set CHUBBY_RECIPE_BENCH=1")
	}
	cell := celltest.Start(t, celltest.Options{Lease: coordLease})
	s := coordSession(t, cell.Addr)
	coordMkdir(t, s, "/speed")
	for _, kind := range []string{"seq", "cas", "cas-nocache"} {
		for _, clients := range []int{1, 16} {
			where := fmt.Sprintf("/speed/%s-%d", kind, clients)
			sources := counterSources(t, cell.Addr, kind, where, clients)
			ids, took := timedIDs(t, sources, 4*time.Second)
			slices.Sort(took)
			if n := len(slices.Compact(slices.Clone(ids))); n != len(ids) {
				t.Fatalf("%s: %d ids, %d distinct", where, len(ids), n)
			}
			t.Logf("%-11s %2d clients: %6.0f ids/s  p50 %v  p99 %v  (%d ids)", kind, clients,
				float64(len(ids))/4, took[len(took)/2].Round(10*time.Microsecond),
				took[len(took)*99/100].Round(10*time.Microsecond), len(ids))
		}
	}
}

// timedIDs has every source take ids in a closed loop for d.
func timedIDs(t *testing.T, sources []idSource, d time.Duration) (ids []int64, took []time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, src := range sources {
		wg.Go(func() {
			for ctx.Err() == nil {
				start := time.Now()
				id, err := src.Next(ctx)
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				mu.Lock()
				ids, took = append(ids, id), append(took, time.Since(start))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ids, took
}
