package cell_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
)

// tsCall is one answered Timestamps call as its caller saw it.
type tsCall struct {
	sent, got   time.Time
	first, last int64
}

// TestOracleAcrossFailovers: timestamps taken by concurrent clients while
// the master is stopped twice (each time another replica takes over) are
// never handed out twice, and a call sent after another's answer came gets
// larger timestamps: the order users of a timestamp oracle rely on.
func TestOracleAcrossFailovers(t *testing.T) {
	rc := celltest.StartStatic(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var calls []tsCall
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		c, err := client.Connect(ctx, client.Config{Addrs: rc.Addrs(), CallTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := 1 + (w+i)%4
				sent := time.Now()
				first, err := c.Timestamps(ctx, n)
				if err != nil {
					continue // a failover under way: the client retried as far as it would
				}
				mu.Lock()
				calls = append(calls, tsCall{sent: sent, got: time.Now(), first: first, last: first + int64(n) - 1})
				mu.Unlock()
			}
		})
	}
	var stopped []int
	for range 2 {
		time.Sleep(700 * time.Millisecond)
		m := rc.Master(stopped...)
		rc.Stop(m)
		stopped = append(stopped, m)
		rc.Master(stopped...)
	}
	time.Sleep(700 * time.Millisecond)
	close(stop)
	wg.Wait()
	checkTimestamps(t, calls)
}

// checkTimestamps checks that no timestamp was handed out twice and that
// a call sent after another's answer got larger timestamps.
func checkTimestamps(t *testing.T, calls []tsCall) {
	t.Helper()
	if len(calls) < 100 {
		t.Fatalf("only %d calls answered", len(calls))
	}
	byFirst := slices.Clone(calls)
	slices.SortFunc(byFirst, func(a, b tsCall) int { return int(a.first - b.first) })
	for i := 1; i < len(byFirst); i++ {
		if byFirst[i].first <= byFirst[i-1].last {
			t.Fatalf("timestamps %d..%d handed out twice (calls %+v and %+v)", byFirst[i].first, byFirst[i-1].last, byFirst[i-1], byFirst[i])
		}
	}
	// Real-time order: sweep calls by send time, keeping the largest
	// timestamp answered before each send.
	byGot := slices.Clone(calls)
	slices.SortFunc(byGot, func(a, b tsCall) int { return a.got.Compare(b.got) })
	bySent := slices.Clone(calls)
	slices.SortFunc(bySent, func(a, b tsCall) int { return a.sent.Compare(b.sent) })
	var maxDone int64
	j := 0
	for _, c := range bySent {
		for ; j < len(byGot) && byGot[j].got.Before(c.sent); j++ {
			maxDone = max(maxDone, byGot[j].last)
		}
		if c.first <= maxDone {
			t.Fatalf("a call sent at %v got %d, but %d had been answered before", c.sent, c.first, maxDone)
		}
	}
	t.Logf("%d calls, timestamps %d..%d", len(calls), byFirst[0].first, byFirst[len(byFirst)-1].last)
}
