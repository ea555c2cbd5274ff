package cell

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/gen/chubby"
)

// Benchmarks through real Kitex on loopback, fsync on (Badger on disk).
// Run: go test ./cell -run '^$' -bench . -benchtime 3s

// latencies collects per-operation durations and reports p50/p99.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	if len(l.d) == 0 {
		return
	}
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	p := func(q float64) float64 { return float64(l.d[int(q*float64(len(l.d)-1))].Microseconds()) }
	b.ReportMetric(p(0.50), "p50-µs")
	b.ReportMetric(p(0.99), "p99-µs")
}

// BenchmarkRoundTrip: one read (GetStat through a handle) per op, one
// caller: the RPC round trip with the cell's handler in it.
func BenchmarkRoundTrip(b *testing.B) {
	tc := startCell(b, Config{DataDir: b.TempDir()})
	defer tc.stop()
	s := tc.session("bench")
	h := tc.open(s, "/rt", chubby.CreateMode_OPEN_OR_CREATE, false)
	var lat latencies
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := tc.cli.GetStat(ctx, &chubby.HandleRequest{Handle: h}); err != nil {
			b.Fatal(err)
		}
		lat.add(time.Since(t0))
	}
	b.StopTimer()
	lat.report(b)
}

// BenchmarkLockCycle: Acquire+Release of an exclusive lock, each client on
// its own lock (its own file), with 1 and 16 clients. Two commands, so two
// fsynced log writes (batched across clients), per cycle.
func BenchmarkLockCycle(b *testing.B) {
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			tc := startCell(b, Config{DataDir: b.TempDir()})
			defer tc.stop()
			hs := make([]*chubby.Handle, clients)
			for i := range hs {
				s := tc.session(fmt.Sprint("c", i))
				hs[i] = tc.open(s, fmt.Sprintf("/lock%d", i), chubby.CreateMode_OPEN_OR_CREATE, false)
			}
			var lat latencies
			var wg sync.WaitGroup
			per := (b.N + clients - 1) / clients
			b.ResetTimer()
			for i := 0; i < clients; i++ {
				wg.Add(1)
				go func(h *chubby.Handle) {
					defer wg.Done()
					for j := 0; j < per; j++ {
						t0 := time.Now()
						if _, err := tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: h, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 5000}); err != nil {
							b.Error(err)
							return
						}
						if err := tc.cli.Release(ctx, &chubby.HandleRequest{Handle: h}); err != nil {
							b.Error(err)
							return
						}
						lat.add(time.Since(t0))
					}
				}(hs[i])
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(per*clients)/b.Elapsed().Seconds(), "cycles/s")
			lat.report(b)
		})
	}
}

// BenchmarkParkedKeepAlive measures the server-side memory of parked
// KeepAlive calls: N sessions each with one KeepAlive parked (one
// connection each, as the default Kitex pool does), heap+stack growth / N.
// The client side lives in the same process, so the figure is an upper
// bound for the server alone. N stays at 4,000 so client and server
// connections fit in this machine's 20,000 open files.
func BenchmarkParkedKeepAlive(b *testing.B) {
	const n = 4000
	tc := startCell(b, Config{DataDir: b.TempDir(), Lease: time.Minute, MaxParkedKeepAlives: n + 10})
	defer tc.stop()
	mem := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse + m.StackInuse
	}
	for i := 0; i < b.N; i++ {
		ids := make([]chubby.SessionID, n)
		for i := range ids {
			ids[i] = tc.session("ka")
		}
		before := mem()
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tc.cli.KeepAlive(ctx, &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{{Session: id}}},
					callopt.WithRPCTimeout(2*time.Minute))
			}()
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, parked := tc.s.leases.count(); parked == n {
				break
			}
			if time.Now().After(deadline) {
				_, parked := tc.s.leases.count()
				b.Fatalf("only %d of %d KeepAlives parked", parked, n)
			}
		}
		during := mem()
		b.ReportMetric(float64(during-before)/n, "bytes/parked-call(client+server)")
		// Unpark them all: ending the sessions answers their KeepAlives.
		tc.s.leases.ended(ids)
		wg.Wait()
	}
}
