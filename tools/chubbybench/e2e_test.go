package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
)

// TestEndToEndAgainstOneReplica runs the smallest workload, one client's
// lock cycles, through the whole runner against a real one-replica cell
// (Kitex, Badger with fsync) started in-process, then renders the report.
// The peers are not started by go test; ./build.sh bench does that.
func TestEndToEndAgainstOneReplica(t *testing.T) {
	c := celltest.Start(t, celltest.Options{})
	// A bound, not a target: the windows are 300 ms, but the set-up of five
	// workloads (transactions' accounts included) took over 20 s under -race
	// beside four busy loops.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cfg := DefaultConfig()
	cfg.Duration, cfg.Warmup, cfg.ClusterWarmup, cfg.OpTimeout = 300*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond, 5*time.Second
	cfg.ChubbyCell = []string{c.Addr}
	e := &env{cfg: &cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)), procs: newProcSet(), work: t.TempDir(), logs: t.TempDir(), prog: newProgress(io.Discard)}
	r := &runner{cfg: &cfg, env: e, prog: e.prog}
	sys := newChubbySystem(e, 0, "", false, cfg.ChubbyCell)
	wls := []Workload{{Kind: kindLockDistinct, Clients: 1}, {Kind: kindReadCached, Clients: 1}, {Kind: kindFailover, Clients: 1},
		{Kind: kindTransferSpread, Clients: 4}, {Kind: kindTransferHot, Clients: 4}}
	r.runSystem(ctx, sys, wls)

	if len(r.results) != len(wls) {
		t.Fatalf("%d results for %d workloads: %+v", len(r.results), len(wls), r.results)
	}
	var lock Result
	for _, res := range r.results {
		switch res.Workload {
		case "lock-distinct/1":
			lock = res
		case "read-cached/1":
			if !res.measured() || res.Errors > 0 || res.NA != "" {
				t.Errorf("read-cached: %+v", res)
			}
		case "failover":
			if res.NA == "" {
				t.Errorf("failover on one replica ran: %+v", res)
			}
		case "transfer-spread/4", "transfer-hot/4":
			// Every operation is a committed transfer; its aborted attempts
			// are counted beside it, and the balances still add up (Note).
			if !res.measured() || res.Error != "" || res.Errors != 0 || res.Note != "" {
				t.Errorf("%s: %+v", res.Workload, res)
			}
			if res.Attempts < res.Ops || res.Aborts != res.Attempts-res.Ops {
				t.Errorf("%s: %d attempts, %d aborts for %d committed transfers", res.Workload, res.Attempts, res.Aborts, res.Ops)
			}
			rate, _ := res.abortRate()
			t.Logf("%s on a one-replica cell: %.0f txns/s, p50 %.3f ms, p99 %.3f ms, %d of %d attempts aborted (%.1f%%)",
				res.Workload, res.Throughput, res.P50Ms, res.P99Ms, res.Aborts, res.Attempts, 100*rate)
		}
	}
	if !lock.measured() || lock.Error != "" || lock.Errors != 0 {
		t.Fatalf("lock-distinct/1: %+v", lock)
	}
	if lock.Throughput <= 0 || lock.P50Ms <= 0 || lock.P99Ms < lock.P50Ms || lock.Label() != "chubby×1" {
		t.Errorf("lock-distinct/1 figures: %+v", lock)
	}
	t.Logf("lock-distinct/1 on a one-replica cell: %.0f cycles/s, p50 %.3f ms, p99 %.3f ms", lock.Throughput, lock.P50Ms, lock.P99Ms)
	cl, err := client.Connect(ctx, client.Config{Addrs: []string{c.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if st, err := cl.Status(ctx); err != nil {
		t.Error(err)
	} else if st.GetLocksHeld() != 0 {
		t.Errorf("%d locks still held after the run", st.GetLocksHeld())
	}

	rep := &Report{Started: time.Now(), Finished: time.Now(), Workloads: []string{"lock-distinct/1", "read-cached/1", "failover", "transfer-spread/4", "transfer-hot/4"}, Results: r.results}
	if _, err := writeOutputs(t.TempDir(), rep, 20, 14); err != nil {
		t.Fatal(err)
	}
}
