package main

import (
	"fmt"
	"strings"
)

// Target is one of the performance goals the project set itself against
// the durable peers, checked on this run's figures: our cell at five
// replicas against the best durable peer (etcd, ZooKeeper) at three nodes,
// both measured in the same run (the Chubby paper's cells are typically
// five replicas; three nodes is the smallest etcd or ZooKeeper ensemble
// that survives a failure). computeTargets lists the goals.
type Target struct {
	Name string `json:"name"`
	Goal string `json:"goal"`
	Ours string `json:"ours,omitempty"` // label and figure
	Peer string `json:"peer,omitempty"`
	// Ratio is ours ÷ peer (or ours alone for the absolute goals); Met says
	// whether it reaches the goal. NA says why the run cannot tell.
	Ratio float64 `json:"ratio,omitempty"`
	Met   bool    `json:"met"`
	NA    string  `json:"na,omitempty"`
}

// The targets' configuration: ours at targetOursNodes replicas, peers at
// targetPeerNodes nodes; the sessions-held goal counts only when
// targetSessions sessions were held.
const (
	targetOursNodes = 5
	targetPeerNodes = 3
	targetSessions  = 100_000
)

var durablePeers = []string{sysEtcd, sysZooKeeper}

// computeTargets checks every goal against the results.
func computeTargets(results []Result) []Target {
	find := func(system string, nodes int, workload string) (Result, bool) {
		for _, r := range results {
			if r.System == system && r.Nodes == nodes && r.Workload == workload && r.measured() {
				return r, true
			}
		}
		return Result{}, false
	}
	ours := func(workload string) (Result, bool) { return find(sysChubby, targetOursNodes, workload) }
	// best returns the peer result of workload that is best by better
	// (true when a beats b).
	best := func(workload string, systems []string, better func(a, b Result) bool) (Result, bool) {
		var out Result
		found := false
		for _, s := range systems {
			if r, ok := find(s, targetPeerNodes, workload); ok && (!found || better(r, out)) {
				out, found = r, true
			}
		}
		return out, found
	}
	oursLbl := label(sysChubby, targetOursNodes)
	missing := func(t Target, what string) Target {
		t.NA = "not measured in this run: " + what
		return t
	}
	var out []Target

	// Throughput goals: ours ÷ the peer with the highest throughput.
	tput := func(name, workload string, factor float64) {
		t := Target{Name: name, Goal: fmt.Sprintf("≥ %g× the best peer's cycles/s", factor)}
		o, ok := ours(workload)
		if !ok {
			out = append(out, missing(t, oursLbl+" "+workload))
			return
		}
		p, ok := best(workload, durablePeers, func(a, b Result) bool { return a.Throughput > b.Throughput })
		if !ok {
			out = append(out, missing(t, "etcd×3 or zookeeper×3 "+workload))
			return
		}
		t.Ours = fmt.Sprintf("%s %s", o.Label(), fmtRate(o.Throughput))
		t.Peer = fmt.Sprintf("%s %s", p.Label(), fmtRate(p.Throughput))
		t.Ratio = div(o.Throughput, p.Throughput)
		t.Met = t.Ratio >= factor
		out = append(out, t)
	}
	// Latency goals: ours ÷ the chosen peer's latency, at most factor.
	lat := func(name, workload string, systems []string, p99 bool, factor float64, goal string) {
		t := Target{Name: name, Goal: goal}
		pick := func(r Result) float64 {
			if p99 {
				return r.P99Ms
			}
			return r.P50Ms
		}
		o, ok := ours(workload)
		if !ok {
			out = append(out, missing(t, oursLbl+" "+workload))
			return
		}
		p, ok := best(workload, systems, func(a, b Result) bool { return pick(a) > 0 && pick(a) < pick(b) })
		if !ok {
			out = append(out, missing(t, strings.Join(systems, "×3 or ")+"×3 "+workload))
			return
		}
		t.Ours = fmt.Sprintf("%s %s", o.Label(), fmtMs(pick(o)))
		t.Peer = fmt.Sprintf("%s %s", p.Label(), fmtMs(pick(p)))
		t.Ratio = div(pick(o), pick(p))
		t.Met = t.Ratio > 0 && t.Ratio <= factor
		out = append(out, t)
	}

	tput("lock cycles, 64 clients, distinct locks", Workload{Kind: kindLockDistinct, Clients: 64}.Name(), 3)
	lat("lock cycle p99, 64 clients, distinct locks", Workload{Kind: kindLockDistinct, Clients: 64}.Name(),
		durablePeers, true, 1, "p99 ≤ the best peer's")
	lat("one client's lock cycle p50", Workload{Kind: kindLockDistinct, Clients: 1}.Name(),
		[]string{sysEtcd}, false, 0.5, "p50 ≤ ½ etcd's")
	tput("lock cycles, 64 clients, one contended lock", Workload{Kind: kindLockContended, Clients: 64}.Name(), 10)
	lat("cached read p50 (etcd: serializable read)", Workload{Kind: kindReadCached, Clients: 1}.Name(),
		[]string{sysEtcd}, false, 0.01, "p50 ≤ 1/100 of etcd's")

	held := Target{Name: "100,000 sessions held by one master", Goal: "< 0.5 core and < 1 GiB RSS"}
	if o, ok := ours(Workload{Kind: kindSessionsHeld, Variant: variantBatched}.Name()); !ok {
		out = append(out, missing(held, oursLbl+" sessions-held/batched"))
	} else if o.Sessions < targetSessions {
		held.Ours = fmt.Sprintf("%s: %s sessions, %.3f cores, %s", o.Label(), groupThousands(int64(o.Sessions)), o.CPUCores, fmtBytes(o.RSSBytes))
		held.NA = fmt.Sprintf("only %s sessions held (the full run holds %s)", groupThousands(int64(o.Sessions)), groupThousands(targetSessions))
		out = append(out, held)
	} else {
		held.Ours = fmt.Sprintf("%s: %.3f cores, %s", o.Label(), o.CPUCores, fmtBytes(o.RSSBytes))
		held.Ratio = o.CPUCores
		held.Met = o.CPUCores < 0.5 && o.RSSBytes < 1<<30
		out = append(out, held)
	}

	lat("failover (kill -9 → next lock cycle) p50", Workload{Kind: kindFailover}.Name(),
		durablePeers, false, 0.5, "≤ ½ the fastest peer's")
	return out
}

// writeTargets writes the targets table.
func writeTargets(b *strings.Builder, ts []Target) {
	if len(ts) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## Targets: our cell at %d replicas against the best durable peer (etcd, ZooKeeper) at %d nodes, this run\n\n",
		targetOursNodes, targetPeerNodes)
	b.WriteString("| target | goal | ours | best peer | ours ÷ peer | met |\n|---|---|--:|--:|--:|---|\n")
	for _, t := range ts {
		met := "no"
		switch {
		case t.NA != "":
			met = "n/a: " + cell(t.NA)
		case t.Met:
			met = "**yes**"
		}
		ratio := "—"
		if t.NA == "" && t.Ratio > 0 && t.Peer != "" {
			ratio = fmtRatio(t.Ratio)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", t.Name, t.Goal, orDash(t.Ours), orDash(t.Peer), ratio, met)
	}
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return cell(s)
}
