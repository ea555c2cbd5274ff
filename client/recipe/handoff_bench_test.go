package recipe

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
)

// The hand-off measurement: many waiters in separate sessions (each with
// a client of its own) take one lock in turn, through the cell's own FIFO
// queue (Mutex) and through ZooKeeper's recipe on sequential nodes
// (SeqLock). Not part of the default suite:
//
//	CHUBBY_RECIPE_BENCH=1 go test ./client/recipe -run TestLockHandoff -v
//
// Knobs: CHUBBY_RECIPE_BENCH_WAITERS (64), CHUBBY_RECIPE_BENCH_HANDOFFS
// (hand-offs measured, 1920, after one warm-up round of as many as there
// are waiters), CHUBBY_RECIPE_BENCH_CELL (disk, memory or both: the cell's
// log fsync'd to disk, or in memory; both).
//
// A hand-off's latency runs from the moment one holder starts to release
// (just before Unlock) to the moment Lock returns in the next. The herd
// is counted from the calls each side makes (lkStats): all calls of all
// participants per hand-off (the releaser's and the next holder's, and
// the re-queueing of the one that just left), the ReadDir calls among
// them and the events the waiters were woken by, plus the reads the
// sessions' caches could not answer (sent to the cell).

func lkBenchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// lkLocker is a lock recipe as the hand-off measurement and lkExclusion
// use it: a Mutex or a SeqLock.
type lkLocker interface {
	Lock(context.Context) error
	Unlock(context.Context) error
}

type lkHandoffResult struct {
	handoffs            int
	elapsed             time.Duration
	lat                 []time.Duration // sorted
	calls, dirs, events int64
	cacheMisses         int64
}

func (r lkHandoffResult) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)-1, int(p*float64(len(r.lat))))]
}

// lkHandoff runs waiters participants made by mk, each in a session of
// its own client, until measure hand-offs after warm-up ones.
func lkHandoff(t *testing.T, addr string, waiters, warmup, measure int,
	mk func(s *client.Session) (lkLocker, *lkStats)) lkHandoffResult {
	ctx := lkCtx(t, 10*time.Minute)
	type part struct {
		l     lkLocker
		stats *lkStats
		c     *client.Client
	}
	parts := make([]part, waiters)
	for i := range parts {
		s := lkSession(t, addr)
		l, st := mk(s)
		parts[i] = part{l, st, s.Client()}
	}
	snap := func() (calls, dirs, events, misses int64) {
		for _, p := range parts {
			calls += p.stats.calls.Load()
			dirs += p.stats.readDirs.Load()
			events += p.stats.events.Load()
			misses += int64(p.c.CacheStats().Misses)
		}
		return
	}

	var (
		mu          sync.Mutex // guards the hand-off record (the lock itself orders it)
		n           int        // acquisitions so far
		lastHolder  = -1
		lastRelease time.Time
		lat         []time.Duration
		start, end  time.Time
		c0, d0, e0  int64
		m0          int64
		res         lkHandoffResult
	)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := parts[i].l
			for {
				if err := l.Lock(ctx); err != nil {
					t.Errorf("waiter %d: %v", i, err)
					stop.Store(true)
					return
				}
				now := time.Now()
				mu.Lock()
				n++
				switch {
				case n == warmup+1:
					start = now
					c0, d0, e0, m0 = snap()
				case n > warmup+1 && n <= warmup+1+measure:
					if lastHolder != i {
						lat = append(lat, now.Sub(lastRelease))
					}
					if n == warmup+1+measure {
						end = now
						c1, d1, e1, m1 := snap()
						res.calls, res.dirs, res.events, res.cacheMisses = c1-c0, d1-d0, e1-e0, m1-m0
						stop.Store(true)
					}
				}
				lastHolder = i
				lastRelease = time.Now()
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("waiter %d: %v", i, err)
					stop.Store(true)
					return
				}
				if stop.Load() {
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	slices.Sort(lat)
	res.handoffs, res.elapsed, res.lat = measure, end.Sub(start), lat
	return res
}

// TestLockHandoff measures hand-offs of one lock among 64 waiters: the
// cell's queue (Mutex) against ZooKeeper's recipe (SeqLock).
func TestLockHandoff(t *testing.T) {
	if os.Getenv("CHUBBY_RECIPE_BENCH") != "1" {
		t.Skip("a measurement: set CHUBBY_RECIPE_BENCH=1 to run it")
	}
	waiters := lkBenchEnv("CHUBBY_RECIPE_BENCH_WAITERS", 64)
	measure := lkBenchEnv("CHUBBY_RECIPE_BENCH_HANDOFFS", 1920)
	cells := []string{"disk", "memory"}
	if c := os.Getenv("CHUBBY_RECIPE_BENCH_CELL"); c == "disk" || c == "memory" {
		cells = []string{c}
	}
	type row struct {
		recipe, cell string
		r            lkHandoffResult
	}
	var rows []row
	for _, cellKind := range cells {
		for _, recipe := range []string{"Mutex (cell queue)", "SeqLock (seq nodes)"} {
			mk := func(s *client.Session) (lkLocker, *lkStats) {
				m := NewMutex(s, "/bench/mutex")
				return m, &m.stats
			}
			if strings.HasPrefix(recipe, "SeqLock") {
				mk = func(s *client.Session) (lkLocker, *lkStats) {
					l := NewSeqLock(s, "/bench/seq")
					return l, &l.stats
				}
			}
			// A subtest each: its sessions close, then its cell stops.
			t.Run(strings.Fields(recipe)[0]+"-"+cellKind, func(t *testing.T) {
				cl := celltest.Start(t, celltest.Options{InMemory: cellKind == "memory"})
				r := lkHandoff(t, cl.Addr, waiters, waiters, measure, mk)
				rows = append(rows, row{recipe, cellKind, r})
				t.Logf("%d hand-offs in %v", r.handoffs, r.elapsed.Round(time.Millisecond))
			})
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d waiters (separate clients and sessions), %d hand-offs measured each, on %d CPUs\n", waiters, measure, runtime.NumCPU())
	fmt.Fprintf(&b, "%-20s %-6s %11s %9s %9s %12s %10s %10s %12s\n",
		"recipe", "cell", "hand-offs/s", "p50", "p99", "calls/h-off", "ReadDir/h", "events/h", "cell reads/h")
	for _, r := range rows {
		h := float64(r.r.handoffs)
		fmt.Fprintf(&b, "%-20s %-6s %11.0f %9s %9s %12.2f %10.2f %10.2f %12.2f\n",
			r.recipe, r.cell, h/r.r.elapsed.Seconds(),
			r.r.pct(0.50).Round(10*time.Microsecond), r.r.pct(0.99).Round(10*time.Microsecond),
			float64(r.r.calls)/h, float64(r.r.dirs)/h, float64(r.r.events)/h, float64(r.r.cacheMisses)/h)
	}
	t.Log(b.String())
}
