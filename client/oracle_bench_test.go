package client

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
)

// TestOracleThroughput measures the timestamp oracle: timestamps per second
// and the p50/p99 of one request, for 1 and 64 callers of one client (whose
// concurrent requests are batched, at most maxTSInFlight calls at a time),
// for 64 callers with a client each (no batching: one call per request),
// and for 64 callers asking 16 at a time.
// A measurement, not a check: it runs only with CHUBBY_ORACLE_BENCH=1
// (seconds per window in CHUBBY_ORACLE_SECONDS, default 3).
//
//	CHUBBY_ORACLE_BENCH=1 go test ./client -run TestOracleThroughput -v
func TestOracleThroughput(t *testing.T) {
	if os.Getenv("CHUBBY_ORACLE_BENCH") == "" {
		t.Skip("a measurement: set CHUBBY_ORACLE_BENCH=1")
	}
	window := envSeconds(t, "CHUBBY_ORACLE_SECONDS", 3*time.Second)
	cl := celltest.Start(t, celltest.Options{})
	ctx := testCtx(t)
	connect := func() *Client {
		c := must[*Client](t, "connect")(Connect(ctx, Config{Addrs: []string{cl.Addr}}))
		t.Cleanup(func() { c.Close() })
		return c
	}
	shared := connect()
	var b strings.Builder
	fmt.Fprintf(&b, "\n| callers | timestamps per request | clients | timestamps/s | calls to the cell/s | p50 | p99 |\n|---|---|---|---|---|---|---|\n")
	for _, m := range []struct {
		callers, n int
		own        bool // a client per caller
	}{{1, 1, false}, {64, 1, false}, {64, 1, true}, {64, 16, false}} {
		clients := make([]*Client, m.callers)
		for i := range clients {
			clients[i] = shared
			if m.own {
				clients[i] = connect()
			}
		}
		before := shared.ts.calls.Load()
		lat := closedLoop(t, m.callers, window, func(i int) error {
			_, err := clients[i].Timestamps(ctx, m.n)
			return err
		})
		calls := shared.ts.calls.Load() - before
		if m.own {
			calls = 0
			for _, c := range clients {
				calls += c.ts.calls.Load()
			}
		}
		who := "1 shared"
		if m.own {
			who = "1 each"
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %.0f | %.0f | %v | %v |\n", m.callers, m.n, who, float64(len(lat)*m.n)/window.Seconds(),
			float64(calls)/window.Seconds(), lat.at(0.5).Round(time.Microsecond), lat.at(0.99).Round(time.Microsecond))
	}
	t.Log(b.String())
}
