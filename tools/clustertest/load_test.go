package clustertest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// TestLoadNoJeopardy measures what a healthy cell under load costs its
// sessions: five chubbyd processes on loopback, 64 clients each cycling an
// exclusive lock of its own (the benchmark's lock-distinct/64 workload) for
// CHUBBY_LOAD_SECONDS, with a session lease of CHUBBY_LOAD_LEASE (default
// 12 s; a short one packs more KeepAlive rounds into the run). It reports
// how often a session went into jeopardy (none is the goal: a master under
// load must answer every KeepAlive inside its margin, its master lease
// held) and the lock cycles done. On demand only: it takes as long as it is
// told, and its figures depend on the machine.
func TestLoadNoJeopardy(t *testing.T) {
	secs, _ := strconv.Atoi(os.Getenv("CHUBBY_LOAD_SECONDS"))
	if secs <= 0 {
		t.Skip("set CHUBBY_LOAD_SECONDS (and CHUBBY_LOAD_LEASE, default 12s) to run")
	}
	lease := 12 * time.Second
	if s := os.Getenv("CHUBBY_LOAD_LEASE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		lease = d
	}
	const clients = 64
	c := startCell(t, 5, lease)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second+2*time.Minute)
	defer cancel()

	var jeopardies, expiries, cycles, failures atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	start := make(chan struct{})
	stop := make(chan struct{})
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := client.Connect(ctx, client.Config{Addrs: c.clients})
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			defer cl.Close()
			s, err := cl.NewSession(ctx)
			if err != nil {
				t.Errorf("client %d: session: %v", i, err)
				return
			}
			go func() {
				for ev := range s.Events() {
					switch ev.Kind {
					case client.EventJeopardy:
						jeopardies.Add(1)
					case client.EventExpired:
						expiries.Add(1)
					}
				}
			}()
			h, err := s.Open(ctx, fmt.Sprintf("/load-%d", i), client.OpenOptions{
				Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE})
			if err != nil {
				t.Errorf("client %d: open: %v", i, err)
				return
			}
			<-start
			var mine []time.Duration
			for {
				select {
				case <-stop:
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
					return
				default:
				}
				t0 := time.Now()
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := h.Acquire(cctx, chubby.LockMode_EXCLUSIVE, 10*time.Second, client.LockOptions{})
				if err == nil {
					err = h.Release(cctx)
				}
				ccancel()
				if err != nil {
					failures.Add(1)
					continue
				}
				cycles.Add(1)
				mine = append(mine, time.Since(t0))
			}
		}()
	}
	time.Sleep(2 * time.Second) // sessions and handles in place
	t0 := time.Now()
	close(start)
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	deadline := time.After(time.Duration(secs) * time.Second)
loop:
	for {
		select {
		case <-deadline:
			break loop
		case <-tick.C:
			t.Logf("%v: %d cycles, %d failed, %d jeopardies, %d expired", time.Since(t0).Round(time.Second),
				cycles.Load(), failures.Load(), jeopardies.Load(), expiries.Load())
		}
	}
	close(stop)
	wg.Wait()
	el := time.Since(t0)
	slices.Sort(lat)
	var p50, p99 time.Duration
	if n := len(lat); n > 0 {
		p50, p99 = lat[n/2], lat[n*99/100]
	}
	t.Logf("%d clients, lease %v, %v: %d lock cycles (%.0f/s, p50 %v, p99 %v), %d failed, %d jeopardies, %d sessions expired",
		clients, lease, el.Round(time.Second), cycles.Load(), float64(cycles.Load())/el.Seconds(), p50, p99,
		failures.Load(), jeopardies.Load(), expiries.Load())
	if jeopardies.Load() > 0 || expiries.Load() > 0 {
		t.Errorf("a healthy cell under load put sessions into jeopardy %d times (%d expired)", jeopardies.Load(), expiries.Load())
	}
}
