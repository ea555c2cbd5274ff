package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sampleResults is a small run: our cell and etcd at one node, etcd at
// three (no chubby×3 to pair it with), a Redis row that does not apply and
// a system that could not run at all.
func sampleResults() []Result {
	return []Result{
		{Workload: "lock-distinct/1", Kind: kindLockDistinct, Clients: 1, System: sysChubby, Nodes: 1, Ops: 2000, Throughput: 2000, P50Ms: 0.5, P99Ms: 1.0, Bound: "2 fsynced commands"},
		{Workload: "lock-distinct/1", Kind: kindLockDistinct, Clients: 1, System: sysEtcd, Nodes: 1, Ops: 1000, Throughput: 1000, P50Ms: 1.0, P99Ms: 4.0, Bound: "raft | WAL"},
		{Workload: "lock-distinct/1", Kind: kindLockDistinct, Clients: 1, System: sysEtcd, Nodes: 3, Ops: 500, Throughput: 500, P50Ms: 2.0, P99Ms: 8.0},
		{Workload: "lock-distinct/1", Kind: kindLockDistinct, Clients: 1, System: sysChubby, Nodes: 3, NA: "not available yet: no --peers", Unavailable: true},
		{Workload: "read-cached/1", Kind: kindReadCached, Clients: 1, System: sysChubby, Nodes: 1, NA: "n/a (no cache yet)"},
		{Workload: "read-cached/1", Kind: kindReadCached, Clients: 1, System: sysEtcd, Nodes: 1, Ops: 9000, Throughput: 9000, P50Ms: 0.1, P99Ms: 0.3},
		{Workload: "sessions-held/batched", Kind: kindSessionsHeld, Variant: variantBatched, System: sysChubby, Nodes: 1,
			Sessions: 100_000, SessionsTarget: 100_000, CPUCores: 0.2, RSSBytes: 500 << 20, RSSBaseBytes: 100 << 20, Ops: 10, P50Ms: 0.5, P99Ms: 1},
		{Workload: "sessions-held/batched", Kind: kindSessionsHeld, Variant: variantBatched, System: sysEtcd, Nodes: 1,
			Sessions: 10_000, SessionsTarget: 10_000, CPUCores: 0.01, RSSBytes: 60 << 20, RSSBaseBytes: 20 << 20, Ops: 10, P50Ms: 1, P99Ms: 2},
		{Workload: "failover", Kind: kindFailover, System: sysChubby, Nodes: 1, NA: "n/a until replication"},
		{Workload: "failover", Kind: kindFailover, System: sysEtcd, Nodes: 3, TrialsS: []float64{2.0, 2.2}, Ops: 2, P50Ms: 2000, P99Ms: 2200},
		{Workload: "lock-distinct/1", Kind: kindLockDistinct, Clients: 1, System: sysRedis, Nodes: 1, Error: "start: boom"},
	}
}

func TestComputeRatiosPairsSameNodeCount(t *testing.T) {
	rs := computeRatios(sampleResults())
	var got []string
	for _, r := range rs {
		got = append(got, r.Workload+" "+r.Ours+"/"+r.Peer)
	}
	if len(rs) != 2 {
		t.Fatalf("ratios %v, want lock-distinct/1 and sessions-held/batched against etcd×1 only", got)
	}
	l := rs[0]
	if l.Workload != "lock-distinct/1" || l.Peer != "etcd×1" || l.Throughput != 2 || l.P50 != 0.5 || l.P99 != 0.25 {
		t.Errorf("lock ratio %+v, want throughput 2, p50 0.5, p99 0.25", l)
	}
	s := rs[1]
	// ours: 0.2 cores / 100k = 2e-6 per session; etcd: 0.01/10k = 1e-6 → 2×.
	// ours: 400 MiB / 100k; etcd: 40 MiB / 10k → 1×.
	if s.CPUPerSession < 1.99 || s.CPUPerSession > 2.01 || s.RSSPerSession < 0.99 || s.RSSPerSession > 1.01 {
		t.Errorf("sessions ratio %+v, want CPU/session 2×, RSS/session 1×", s)
	}
}

func TestMarkdownTables(t *testing.T) {
	rep := &Report{
		Started: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), Finished: time.Date(2026, 11, 30, 10, 2, 0, 0, time.UTC),
		Command: []string{"chubbybench", "--quick"}, Quick: true, Machine: Machine{CPUs: 2, Kernel: "6.1", GoVersion: "go1.26.8", OpenFiles: "20,000"},
		Workloads: []string{"lock-distinct/1", "read-cached/1", "failover", "sessions-held/batched"},
		Results:   sampleResults(),
	}
	rep.Ratios = computeRatios(rep.Results)
	var b strings.Builder
	if err := writeMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"| lock-distinct/1 | chubby×1 | 2,000/s | 0.500 ms | 1.00 ms | — | — | — |  |",
		"| lock-distinct/1 | etcd×1 | 1,000/s | 1.00 ms | 4.00 ms | 2.00× | 0.50× | 0.25× |  |",
		"- lock-distinct, chubby×1: 2 fsynced commands",
		"- lock-distinct, etcd×1: raft | WAL",
		"| lock-distinct/1 | etcd×3 | 500/s | 2.00 ms | 8.00 ms | — (chubby×3: n/a) | — | — |",
		"| read-cached/1 | chubby×1 | n/a (no cache yet) |",
		"| read-cached/1 | etcd×1 | 9,000/s | 0.100 ms | 0.300 ms | — (chubby×1: n/a) |",
		"| lock-distinct/1 | redis×1 | failed: start: boom |",
		"Not run: **chubby×3**: not available yet: no --peers.",
		"| etcd×3 | 2.000 s, 2.200 s | 2.00 s | 2.20 s |",
		"| chubby×1 | n/a until replication |",
		"| sessions-held/batched | chubby×1 | 100,000 (100,000) |",
		"| 2.00× | 1.00× |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	// An unavailable system gets no row of its own, only the one line.
	if strings.Contains(md, "| lock-distinct/1 | chubby×3 |") {
		t.Error("unavailable chubby×3 has a table row")
	}
	// Tables follow the run's workload order, whatever order results came in.
	if strings.Index(md, "| lock-distinct/1 | chubby×1") > strings.Index(md, "| read-cached/1 | chubby×1") {
		t.Error("rows out of the run's order")
	}
}

func TestWriteOutputs(t *testing.T) {
	dir := t.TempDir()
	rep := &Report{Started: time.Now(), Finished: time.Now(), Command: []string{"chubbybench"},
		Workloads: []string{"lock-distinct/1", "read-cached/1"}, Results: sampleResults()}
	rep.Ratios = computeRatios(rep.Results)
	md, err := writeOutputs(dir, rep, 20, 14)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md, "lock-distinct/1") {
		t.Error("markdown returned is empty")
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if len(back.Results) != len(rep.Results) || len(back.Ratios) != len(rep.Ratios) {
		t.Errorf("results.json has %d results, %d ratios", len(back.Results), len(back.Ratios))
	}
	png, err := os.ReadFile(filepath.Join(dir, "results.png"))
	if err != nil {
		t.Fatal(err)
	}
	if len(png) < 1000 || string(png[1:4]) != "PNG" {
		t.Errorf("results.png is not a PNG (%d bytes)", len(png))
	}
}

func TestNoChartWithoutLoadFigures(t *testing.T) {
	dir := t.TempDir()
	rep := &Report{Workloads: []string{"failover"}, Results: []Result{sampleResults()[9]}}
	if _, err := writeOutputs(dir, rep, 20, 14); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "results.png")); !os.IsNotExist(err) {
		t.Errorf("results.png without a load figure: %v", err)
	}
}

func TestFormatting(t *testing.T) {
	cases := map[string]string{
		fmtRate(1234567.4):    "1,234,567/s",
		fmtRate(5.25):         "5.2/s",
		fmtRate(0):            "—",
		fmtMs(0.0456):         "0.046 ms",
		fmtMs(0.00018):        "0.18 µs",
		fmtMs(12.34):          "12.3 ms",
		fmtMs(2500):           "2.50 s",
		fmtRatio(3.14159):     "3.14×",
		fmtRatio(0.01234):     "0.012×",
		fmtRatio(123.4):       "123×",
		fmtRatio(0):           "—",
		fmtBytes(3 << 20):     "3072 KiB",
		fmtBytes(50 << 20):    "50 MiB",
		cell("a|b\nc"):        `a\|b c`,
		groupThousands(-1234): "-1,234",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if div(1, 0) != 0 || div(0, 1) != 0 || div(6, 3) != 2 {
		t.Error("div")
	}
}

// transferResults are transfer rows: ours and etcd at one node, one with
// a peer that failed.
func transferResults() []Result {
	return []Result{
		{Workload: "transfer-hot/16", Kind: kindTransferHot, Clients: 16, System: sysChubby, Nodes: 1, Ops: 100, Throughput: 50, P50Ms: 80, P99Ms: 600,
			Attempts: 400, Aborts: 300, Bound: "percolator"},
		{Workload: "transfer-hot/16", Kind: kindTransferHot, Clients: 16, System: sysEtcd, Nodes: 1, Ops: 1000, Throughput: 500, P50Ms: 20, P99Ms: 100,
			Attempts: 4000, Aborts: 3000, Bound: "stm"},
		{Workload: "transfer-spread/16", Kind: kindTransferSpread, Clients: 16, System: sysChubby, Nodes: 1, Ops: 800, Throughput: 400, P50Ms: 30, P99Ms: 70,
			Attempts: 800, Bound: "percolator"},
		{Workload: "transfer-spread/16", Kind: kindTransferSpread, Clients: 16, System: sysRedis, Nodes: 1, Error: "start: boom"},
	}
}

func TestTransferTable(t *testing.T) {
	rep := &Report{Workloads: []string{"lock-distinct/1", "transfer-spread/16", "transfer-hot/16"},
		Results: append(sampleResults()[:2], transferResults()...)}
	rep.Ratios = computeRatios(rep.Results)
	var b strings.Builder
	if err := writeMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"## Transactions (transfer",
		"| workload | system | txns/s | p50 | p99 | abort rate | ours ÷ peer: txns/s | p50 | p99 | note |",
		"| transfer-hot/16 | chubby×1 | 50/s | 80.0 ms | 600.0 ms | 75.0% (300 of 400 attempts) | — | — | — |  |",
		"| transfer-hot/16 | etcd×1 | 500/s | 20.0 ms | 100.0 ms | 75.0% (3,000 of 4,000 attempts) | 0.10× | 4.00× | 6.00× |  |",
		"| transfer-spread/16 | chubby×1 | 400/s | 30.0 ms | 70.0 ms | 0% (0 of 800 attempts) |",
		"| transfer-spread/16 | redis×1 | failed: start: boom |",
		"- transfer, chubby×1: percolator",
		"- transfer, etcd×1: stm",
		"**transfer-spread** — N clients", "**transfer-hot** — the same transfers among 8 accounts",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	// Transfers have their own table, after the locks' (spread before hot:
	// the run's order).
	locks, txns := strings.Index(md, "## Locks"), strings.Index(md, "## Transactions")
	if i := strings.Index(md, "| transfer-hot/16 | chubby×1"); i < txns || txns < locks {
		t.Error("transfer rows are not in the transactions table")
	}
	if strings.Index(md, "| transfer-spread/16 | chubby×1") > strings.Index(md, "| transfer-hot/16 | chubby×1") {
		t.Error("transfer rows out of the run's order")
	}
	if strings.Count(md, "- transfer, chubby×1:") != 1 {
		t.Error("one bound line per system for both transfer workloads")
	}
}

// A results.json of a run before transfer existed renders as before: no
// transactions table; a transfer row without attempts shows no abort rate.
func TestRenderWithoutAbortFigures(t *testing.T) {
	old := `{"workloads": ["lock-distinct/1"], "results": [
		{"workload": "lock-distinct/1", "kind": "lock-distinct", "clients": 1, "system": "chubby", "nodes": 1, "ops": 10, "throughput_per_s": 100, "p50_ms": 1, "p99_ms": 2}]}`
	var rep Report
	if err := json.Unmarshal([]byte(old), &rep); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := writeMarkdown(&b, &rep); err != nil {
		t.Fatal(err)
	}
	if md := b.String(); strings.Contains(md, "## Transactions") || !strings.Contains(md, "| lock-distinct/1 | chubby×1 | 100/s |") {
		t.Errorf("an old run renders differently:\n%s", md)
	}
	if got := fmtAbortRate(Result{Kind: kindTransferHot, Ops: 5}); got != "—" {
		t.Errorf("abort rate without attempts: %q", got)
	}
	if got := fmtAbortRate(Result{Attempts: 100_000, Aborts: 12}); got != "0.012% (12 of 100,000 attempts)" {
		t.Errorf("small abort rate: %q", got)
	}
}
