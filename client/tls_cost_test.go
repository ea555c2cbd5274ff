package client

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/rpc/tlsconf/tlstest"
)

// TestTLSCost measures what mutual TLS costs against plaintext, in one run
// on one machine: lock cycles (Acquire + Release of an exclusive lock of
// the client's own, fsync on) per second and their p50 at 1 and 64
// clients, and new sessions per second when every session comes with a
// new client (a new connection, so a TLS handshake). Each figure is the
// median of alternating rounds (plaintext then TLS, TLS then plaintext,
// ...), so that the machine's noise falls on both alike. It is a
// measurement, not a check: it runs only with CHUBBY_TLS_COST=1 (seconds
// per window in CHUBBY_TLS_COST_SECONDS, default 3; rounds in
// CHUBBY_TLS_COST_ROUNDS, default 5; CHUBBY_TLS_COST_INMEMORY=1 keeps the
// cells' logs in memory).
//
//	CHUBBY_TLS_COST=1 go test ./client -run TestTLSCost -v -timeout 30m
func TestTLSCost(t *testing.T) {
	if os.Getenv("CHUBBY_TLS_COST") == "" {
		t.Skip("a measurement: set CHUBBY_TLS_COST=1")
	}
	window := envSeconds(t, "CHUBBY_TLS_COST_SECONDS", 3*time.Second)
	rounds := 5
	if s := os.Getenv("CHUBBY_TLS_COST_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CHUBBY_TLS_COST_ROUNDS=%q", s)
		}
		rounds = n
	}
	p := newTestPKI(t)
	// Both cells alike but for TLS (the default lease, Badger on disk, or
	// in memory with CHUBBY_TLS_COST_INMEMORY=1: without fsync's noise).
	inMemory := os.Getenv("CHUBBY_TLS_COST_INMEMORY") != ""
	plainCell := celltest.Start(t, celltest.Options{InMemory: inMemory})
	tlsCell := celltest.Start(t, celltest.Options{TLS: p.Reloader(t, "replica-1", tlstest.Both, nil), InMemory: inMemory})
	tc := p.clientTLS(t, "bench")
	type mode struct {
		name    string
		connect func(t *testing.T) *Client
	}
	modes := []mode{
		{"plaintext", func(t *testing.T) *Client {
			c, err := Connect(testCtx(t), Config{Addrs: []string{plainCell.Addr}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
		{"tls", func(t *testing.T) *Client {
			// One configuration for all clients, as a program has: each
			// new client still makes new connections, so full handshakes.
			c, err := Connect(testCtx(t), Config{Addrs: []string{tlsCell.Addr}, DisableCache: true, TLS: tc})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
	}
	type figure struct{ rate, p50 []float64 }
	results := map[string]*figure{}
	get := func(k string) *figure {
		if results[k] == nil {
			results[k] = &figure{}
		}
		return results[k]
	}
	for r := range rounds {
		order := modes
		if r%2 == 1 { // TLS first every other round: no mode always runs first
			order = []mode{modes[1], modes[0]}
		}
		for _, m := range order {
			for _, n := range []int{1, 64} {
				rate, p50 := lockCycles(t, m.connect, n, window)
				f := get(fmt.Sprintf("lock-cycle/%d %s", n, m.name))
				f.rate, f.p50 = append(f.rate, rate), append(f.p50, p50)
			}
			rate, p50 := newSessions(t, m.connect, 16, window)
			f := get("new-client+session/16 " + m.name)
			f.rate, f.p50 = append(f.rate, rate), append(f.p50, p50)
			t.Logf("round %d %s done", r+1, m.name)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| workload | plaintext /s | TLS /s | TLS ÷ plain | plaintext p50 | TLS p50 | cost |\n|---|---|---|---|---|---|---|\n")
	for _, w := range []string{"lock-cycle/1", "lock-cycle/64", "new-client+session/16"} {
		pl, tl := results[w+" plaintext"], results[w+" tls"]
		pr, tr := median(pl.rate), median(tl.rate)
		pp, tp := median(pl.p50), median(tl.p50)
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.3f | %.2f ms | %.2f ms | %+.1f%% |\n", w, pr, tr, tr/pr, pp, tp, (pr/tr-1)*100)
	}
	t.Log(b.String())
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// lockCycles runs n clients, each cycling its own lock for window, and
// returns cycles per second and the p50 of a cycle in milliseconds.
func lockCycles(t *testing.T, connect func(*testing.T) *Client, n int, window time.Duration) (float64, float64) {
	ctx := testCtx(t)
	hs := make([]*Handle, n)
	for i := range n {
		c := connect(t)
		defer c.Close()
		s := must[*Session](t, "session")(c.NewSession(ctx))
		defer s.Close(context.Background())
		hs[i] = must[*Handle](t, "open")(s.Open(ctx, fmt.Sprintf("/cost-lock-%d", i), OpenOptions{Create: chubby.CreateMode_OPEN_OR_CREATE}))
	}
	return closedLoop(t, n, window, func(i int) error {
		if _, err := hs[i].Acquire(ctx, chubby.LockMode_EXCLUSIVE, 10*time.Second, LockOptions{}); err != nil {
			return err
		}
		return hs[i].Release(ctx)
	}).rateP50(window)
}

// newSessions runs n workers each connecting a new client, creating a
// session, closing both, for window.
func newSessions(t *testing.T, connect func(*testing.T) *Client, n int, window time.Duration) (float64, float64) {
	ctx := testCtx(t)
	return closedLoop(t, n, window, func(int) error {
		c := connect(t)
		defer c.Close()
		s, err := c.NewSession(ctx)
		if err != nil {
			return err
		}
		return s.Close(ctx)
	}).rateP50(window)
}

// envSeconds is the duration the environment variable name gives in
// seconds, def when it is unset.
func envSeconds(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s + "s")
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want seconds", name, s)
	}
	return d
}

// latencies are the sorted durations of a closed loop's operations.
type latencies []time.Duration

// at is the q quantile (0..1); 0 when there is none.
func (l latencies) at(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[int(q*float64(len(l)-1))]
}

// rateP50 is operations per second over window and the p50 in ms.
func (l latencies) rateP50(window time.Duration) (float64, float64) {
	return float64(len(l)) / window.Seconds(), float64(l.at(0.5).Microseconds()) / 1000
}

// closedLoop runs op on n workers for window and returns the sorted
// durations of the operations.
func closedLoop(t *testing.T, n int, window time.Duration, op func(i int) error) latencies {
	var mu sync.Mutex
	var lat latencies
	var wg sync.WaitGroup
	end := time.Now().Add(window)
	for i := range n {
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(end) {
				t0 := time.Now()
				if err := op(i); err != nil {
					t.Errorf("op: %v", err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(lat)
	return lat
}
