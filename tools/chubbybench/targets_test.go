package main

import (
	"strings"
	"testing"
)

func TestComputeTargets(t *testing.T) {
	r := func(system string, nodes int, w Workload, tput, p50, p99 float64) Result {
		res := Result{Workload: w.Name(), Kind: w.Kind, Clients: w.Clients, Variant: w.Variant, System: system, Nodes: nodes,
			Ops: 100, Seconds: 1, Throughput: tput, P50Ms: p50, P99Ms: p99}
		return res
	}
	d64 := Workload{Kind: kindLockDistinct, Clients: 64}
	d1 := Workload{Kind: kindLockDistinct, Clients: 1}
	c64 := Workload{Kind: kindLockContended, Clients: 64}
	fo := Workload{Kind: kindFailover}
	results := []Result{
		r(sysChubby, 5, d64, 9000, 5, 20),
		r(sysEtcd, 3, d64, 2000, 30, 60),
		r(sysZooKeeper, 3, d64, 3000, 20, 15), // best throughput and best p99
		r(sysRedis, 3, d64, 90000, 1, 2),      // not durable: never the reference
		r(sysChubby, 3, d64, 99999, 1, 1),     // wrong size: ignored
		r(sysChubby, 5, d1, 900, 0.7, 2),
		r(sysEtcd, 3, d1, 500, 1.6, 3),
		r(sysZooKeeper, 3, d1, 600, 1.0, 3), // not etcd: not the p50 reference
		r(sysChubby, 5, c64, 1500, 40, 60),
		r(sysZooKeeper, 3, c64, 700, 90, 120),
		r(sysChubby, 5, fo, 0, 300, 400),
		r(sysEtcd, 3, fo, 0, 2000, 2100),
		r(sysZooKeeper, 3, fo, 0, 1100, 1200),
	}
	results = append(results, Result{Workload: Workload{Kind: kindSessionsHeld, Variant: variantBatched}.Name(), Kind: kindSessionsHeld,
		Variant: variantBatched, System: sysChubby, Nodes: 5, Sessions: 100_000, SessionsTarget: 100_000, CPUCores: 0.1, RSSBytes: 300 << 20, HoldSeconds: 30})
	got := map[string]Target{}
	for _, tg := range computeTargets(results) {
		got[tg.Name] = tg
	}
	cases := []struct {
		name  string
		ratio float64
		met   bool
		peer  string
		na    bool
	}{
		{"lock cycles, 64 clients, distinct locks", 3, true, "zookeeper×3", false},
		{"lock cycle p99, 64 clients, distinct locks", 20.0 / 15, false, "zookeeper×3", false},
		{"one client's lock cycle p50", 0.7 / 1.6, true, "etcd×3", false},
		{"lock cycles, 64 clients, one contended lock", 1500.0 / 700, false, "zookeeper×3", false},
		{"cached read p50 (etcd: serializable read)", 0, false, "", true},
		{"100,000 sessions held by one master", 0.1, true, "", false},
		{"failover (kill -9 → next lock cycle) p50", 300.0 / 1100, true, "zookeeper×3", false},
	}
	for _, c := range cases {
		tg, ok := got[c.name]
		if !ok {
			t.Errorf("%s: missing", c.name)
			continue
		}
		if (tg.NA != "") != c.na {
			t.Errorf("%s: NA %q, want NA %v", c.name, tg.NA, c.na)
		}
		if c.na {
			continue
		}
		if d := tg.Ratio - c.ratio; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: ratio %v, want %v", c.name, tg.Ratio, c.ratio)
		}
		if tg.Met != c.met {
			t.Errorf("%s: met %v, want %v", c.name, tg.Met, c.met)
		}
		if !strings.HasPrefix(tg.Peer, c.peer) {
			t.Errorf("%s: peer %q, want %s", c.name, tg.Peer, c.peer)
		}
	}
	var b strings.Builder
	writeTargets(&b, computeTargets(results))
	if !strings.Contains(b.String(), "| **yes** |") || !strings.Contains(b.String(), "n/a: not measured") {
		t.Errorf("table:\n%s", b.String())
	}
}
