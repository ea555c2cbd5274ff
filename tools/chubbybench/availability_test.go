package main

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// A /status document as cell.statusJSON writes it (trimmed).
const statusDoc = `{
  "cell": "local",
  "master_id": "2",
  "master_address": "127.0.0.1:7002",
  "epoch": 5,
  "replicas": [
    {"id": "1", "address": "127.0.0.1:7001", "role": "REPLICA", "committed_op": 10},
    {"id": "2", "address": "127.0.0.1:7002", "role": "MASTER", "committed_op": 10},
    {"id": "3", "address": "127.0.0.1:7003", "role": "RECOVERING", "committed_op": -1}
  ],
  "sessions": 0, "nodes": 3, "handles": 0, "locks_held": 0, "committed_op": 10, "uptime_ms": 100, "version": "dev"
}`

func TestParseReplicaStatus(t *testing.T) {
	st, err := parseReplicaStatus([]byte(statusDoc))
	if err != nil {
		t.Fatal(err)
	}
	if st.MasterID != "2" || st.MasterAddress != "127.0.0.1:7002" || st.Epoch != 5 {
		t.Errorf("status %+v", st)
	}
	for id, want := range map[string]string{"1": "REPLICA", "2": "MASTER", "3": "RECOVERING", "4": ""} {
		if got := st.role(id); got != want {
			t.Errorf("role of %s: %q, want %q", id, got, want)
		}
	}
	for _, bad := range []string{``, `{`, `{"epoch": -1}`, `{"epoch": "five"}`} {
		if _, err := parseReplicaStatus([]byte(bad)); err == nil {
			t.Errorf("parseReplicaStatus(%q) accepted", bad)
		}
	}
}

// loopHistogram is chubby_replica_loop_input_seconds as promhttp writes
// it: buckets 0.1 ms × 4^k, cumulative.
const loopHistogram = `# HELP chubby_replica_loop_input_seconds Time the replica's loop spent on one input.
# TYPE chubby_replica_loop_input_seconds histogram
chubby_replica_loop_input_seconds_bucket{le="0.0001"} 500
chubby_replica_loop_input_seconds_bucket{le="0.0004"} 900
chubby_replica_loop_input_seconds_bucket{le="0.0016"} 980
chubby_replica_loop_input_seconds_bucket{le="0.0064"} 990
chubby_replica_loop_input_seconds_bucket{le="0.0256"} 994
chubby_replica_loop_input_seconds_bucket{le="0.10240000000000002"} 996
chubby_replica_loop_input_seconds_bucket{le="0.4096"} 998
chubby_replica_loop_input_seconds_bucket{le="+Inf"} 1000
chubby_replica_loop_input_seconds_sum 3.5
chubby_replica_loop_input_seconds_count 1000
chubby_is_master 1
chubby_master_lease_refusals_total 7
`

func TestHistogramAbove(t *testing.T) {
	cases := []struct {
		threshold float64
		want      int64
		bound     float64
	}{
		{0.1, 4, 0.10240000000000002}, // 1000 − 996: the inputs above 0.1024 s
		{0.0001, 500, 0.0001},
		{0.2, 2, 0.4096},
		{1, 0, math.Inf(1)}, // only +Inf is at or above 1 s: nothing is counted above it
	}
	for _, c := range cases {
		n, bound, err := histogramAbove(loopHistogram, "chubby_replica_loop_input_seconds", c.threshold)
		if err != nil || n != c.want || bound != c.bound {
			t.Errorf("threshold %g: %d above %g (%v), want %d above %g", c.threshold, n, bound, err, c.want, c.bound)
		}
	}
	if _, _, err := histogramAbove(loopHistogram, "chubby_no_such_seconds", 0.1); err == nil {
		t.Error("a histogram that is not there was counted")
	}
	noCount := strings.ReplaceAll(loopHistogram, "chubby_replica_loop_input_seconds_count 1000", "")
	if _, _, err := histogramAbove(noCount, "chubby_replica_loop_input_seconds", 0.1); err == nil {
		t.Error("a histogram without _count was counted")
	}
}

func TestFindSampleAndLabelValue(t *testing.T) {
	if _, v, ok := findSample(loopHistogram, "chubby_is_master"); !ok || v != 1 {
		t.Errorf("chubby_is_master: %v %v", v, ok)
	}
	if _, _, ok := findSample(loopHistogram, "chubby_is"); ok {
		t.Error("a prefix of a metric name matched")
	}
	if v, ok := labelValue(`x_bucket{op="a",le="0.5"} 3`, "le"); !ok || v != "0.5" {
		t.Errorf("le: %q %v", v, ok)
	}
	if _, ok := labelValue(`x_count 3`, "le"); ok {
		t.Error("a label found on a sample without labels")
	}
}

func TestCellCountersSince(t *testing.T) {
	const epoch1 = 1 << 32 // the first view of configuration epoch 1
	cases := []struct {
		name           string
		before, after  cellCounters
		views, refused int64
		why            string
	}{
		{"steady", cellCounters{View: 4, LeaseRefusals: 2, SlowInputs: 1, Replicas: []int{0, 1, 2}},
			cellCounters{View: 7, LeaseRefusals: 5, SlowInputs: 4, Replicas: []int{0, 1, 2}}, 3, 3, ""},
		{"no change", cellCounters{View: 4, Replicas: []int{0, 1}}, cellCounters{View: 4, Replicas: []int{0, 1}}, 0, 0, ""},
		{"configuration changed", cellCounters{View: 4}, cellCounters{View: epoch1 + 1}, 0, 0, "configuration changed"},
		{"view went back", cellCounters{View: 9}, cellCounters{View: 8}, 0, 0, "went back"},
		{"a replica gone", cellCounters{View: 1, LeaseRefusals: 4, Replicas: []int{0, 1, 2}},
			cellCounters{View: 2, LeaseRefusals: 1, Replicas: []int{0, 1}}, 1, 0, "replicas"},
	}
	for _, c := range cases {
		d, why := c.after.since(c.before)
		if d.Views != c.views || d.LeaseRefusals != c.refused {
			t.Errorf("%s: %+v, want %d views and %d refusals", c.name, d, c.views, c.refused)
		}
		if (c.why == "") != (why == "") || !strings.Contains(why, c.why) {
			t.Errorf("%s: why %q, want %q", c.name, why, c.why)
		}
	}
}

func TestParseStatState(t *testing.T) {
	for stat, want := range map[string]byte{
		"1234 (chubbyd) T 1 1234 1234 0 -1": 'T',
		"1234 (my (odd) prog) S 1 2":        'S',
	} {
		if got, err := parseStatState(stat); err != nil || got != want {
			t.Errorf("parseStatState(%q) = %c, %v; want %c", stat, got, err, want)
		}
	}
	for _, bad := range []string{"", "no paren", "1 (x)", "1 (x) RS 2"} {
		if _, err := parseStatState(bad); err == nil {
			t.Errorf("parseStatState(%q) accepted", bad)
		}
	}
}

func TestAvailWorkloadNames(t *testing.T) {
	wls := availWorkloads([]int{0, 4}, 64)
	var names []string
	for _, w := range wls {
		names = append(names, w.Name())
		back := workloadByName(w.Name())
		if back.Kind != w.Kind || back.Hog != w.Hog || !back.Avail || back.Clients != w.Clients {
			t.Errorf("workloadByName(%q) = %+v, want %+v", w.Name(), back, w)
		}
	}
	want := []string{"idle/hog0", "lock-load/64/hog0", "failover/hog0", "failover-pause/hog0",
		"idle/hog4", "lock-load/64/hog4", "failover/hog4", "failover-pause/hog4"}
	if !slices.Equal(names, want) {
		t.Errorf("names %q, want %q", names, want)
	}
	if got := byHog(wls); len(got) != 2 || len(got[0]) != 4 || got[1][0].Hog != 4 {
		t.Errorf("byHog: %v", got)
	}
	// "failover/" selects the kill -9 rows of both hogs, not failover-pause.
	only := selectWorkloads(wls, false, []string{"failover/"})
	for _, w := range only {
		if w.Kind != kindFailover {
			t.Errorf("failover/ selected %s", w.Name())
		}
	}
	if len(only) != 2 {
		t.Errorf("failover/ selected %d workloads, want 2", len(only))
	}
	// The comparison's names are unchanged.
	if n := (Workload{Kind: kindFailover, Clients: 1}).Name(); n != "failover" {
		t.Errorf("comparison failover is named %q", n)
	}
	if w := (Workload{Kind: kindLockLoad, Clients: 64}).boundAs(); w.Kind != kindLockDistinct || w.Clients != 64 {
		t.Errorf("lock-load is bounded as %+v", w)
	}
	if w := (Workload{Kind: kindFailoverPause}).boundAs(); w.Kind != kindFailover {
		t.Errorf("failover-pause is bounded as %+v", w)
	}
}

func TestAvailConfigAndQuick(t *testing.T) {
	c := DefaultAvailConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.AvailWindow != 5*time.Minute || c.FailoverTrials != 20 || c.PauseTrials != 10 || !slices.Equal(c.Hogs, []int{0, 4}) {
		t.Errorf("avail defaults changed: %+v", c)
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	bindAvailFlags(fs, &c)
	if err := fs.Parse([]string{"--quick", "--pause-trials", "7", "--hog", "0,2"}); err != nil {
		t.Fatal(err)
	}
	if err := applyQuick(fs, availQuickValues); err != nil {
		t.Fatal(err)
	}
	if c.AvailWindow != 20*time.Second || c.FailoverTrials != 3 || c.PauseTrials != 7 || !slices.Equal(c.Hogs, []int{0, 2}) {
		t.Errorf("quick: window %v, trials %d/%d, hogs %v", c.AvailWindow, c.FailoverTrials, c.PauseTrials, c.Hogs)
	}
	for name, mutate := range map[string]func(*Config){
		"negative hog":    func(c *Config) { c.Hogs = []int{-1} },
		"no pause trials": func(c *Config) { c.PauseTrials = 0 },
		"tiny window":     func(c *Config) { c.AvailWindow = time.Millisecond },
		"no load clients": func(c *Config) { c.LoadClients = 0 },
	} {
		c := DefaultAvailConfig()
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func ptr(v int64) *int64 { return &v }

// availResults is a small availability run: ours and etcd at 5 nodes
// without a hog, ours alone beside one.
func availResults() []Result {
	return []Result{
		{Workload: "idle/hog0", Kind: kindIdle, System: sysChubby, Nodes: 5, CPUWindowS: 300, CPUCoresAll: 0.25,
			ViewChanges: ptr(0), SlowInputs: ptr(2), LeaseRefusals: ptr(0), LoadAvg: "1.00 1.00 1.00"},
		{Workload: "idle/hog0", Kind: kindIdle, System: sysEtcd, Nodes: 5, CPUWindowS: 300, CPUCoresAll: 0.05},
		{Workload: "idle/hog4", Kind: kindIdle, Hog: 4, System: sysChubby, Nodes: 5, CPUWindowS: 300, CPUCoresAll: 0.3,
			ViewChanges: ptr(12), SlowInputs: ptr(40), LeaseRefusals: ptr(3)},
		{Workload: "lock-load/64/hog0", Kind: kindLockLoad, Clients: 64, System: sysChubby, Nodes: 5, CPUWindowS: 300, CPUCoresAll: 1.5,
			Ops: 600000, Throughput: 2000, Seconds: 300, P50Ms: 30, P99Ms: 90, MaxMs: 400, ViewChanges: ptr(1), SlowInputs: ptr(0), LeaseRefusals: ptr(0)},
		{Workload: "lock-load/64/hog0", Kind: kindLockLoad, Clients: 64, System: sysEtcd, Nodes: 5, CPUWindowS: 300, CPUCoresAll: 1.0,
			Ops: 300000, Throughput: 1000, Seconds: 300, P50Ms: 60, P99Ms: 180, MaxMs: 500},
		{Workload: "failover/hog0", Kind: kindFailover, System: sysChubby, Nodes: 5, TrialsS: []float64{0.3, 0.4}, Ops: 2, P50Ms: 300, P99Ms: 400, MaxMs: 400,
			MasterTrialsS: []float64{0.25, 0.35}},
		{Workload: "failover/hog0", Kind: kindFailover, System: sysEtcd, Nodes: 5, TrialsS: []float64{1.2, 2.0}, Ops: 2, P50Ms: 1200, P99Ms: 2000, MaxMs: 2000},
		{Workload: "failover-pause/hog0", Kind: kindFailoverPause, System: sysChubby, Nodes: 5, TrialsS: []float64{12.5}, Ops: 1, P50Ms: 12500, P99Ms: 12500, MaxMs: 12500,
			MasterTrialsS: []float64{1.5}},
		{Workload: "failover-pause/hog0", Kind: kindFailoverPause, System: sysEtcd, Nodes: 5, Error: "trial 1: no lock cycle within 1m0s of the SIGSTOP"},
		{Workload: "failover/hog0", Kind: kindFailover, System: sysRedis, Nodes: 5, NA: "n/a: no automatic failover without Sentinel"},
	}
}

func TestAvailRatios(t *testing.T) {
	rs := computeRatios(availResults())
	got := map[string]Ratio{}
	for _, r := range rs {
		got[r.Workload+" "+r.Peer] = r
	}
	if r := got["idle/hog0 etcd×5"]; r.CPU < 4.99 || r.CPU > 5.01 {
		t.Errorf("idle CPU ratio %+v, want 5×", r)
	}
	if r := got["lock-load/64/hog0 etcd×5"]; r.Throughput != 2 || r.P99 != 0.5 || r.CPU != 1.5 {
		t.Errorf("lock-load ratio %+v, want 2× cycles/s, 0.5× p99, 1.5× CPU", r)
	}
	if r := got["failover/hog0 etcd×5"]; r.P50 != 0.25 || r.Max != 0.2 {
		t.Errorf("failover ratio %+v, want median 0.25×, worst 0.2×", r)
	}
	if _, ok := got["failover-pause/hog0 etcd×5"]; ok {
		t.Error("a failed peer row was paired")
	}
}

func TestAvailGoals(t *testing.T) {
	goals := computeAvailGoals(availResults())
	byName := map[string]Target{}
	for _, g := range goals {
		byName[g.Name] = g
	}
	want := map[string]bool{ // met?
		"view changes, idle, no hog":                                                 true,
		"view changes, lock-load, no hog":                                            false, // 1
		"failover after kill -9, median, no hog":                                     true,  // 0.3 s
		"failover after SIGSTOP of the master, median, no hog":                       false, // 12.5 s
		"new master serving after SIGSTOP of the master (cell side), median, no hog": true,  // 1.5 s
		"idle CPU, 5 nodes, no hog":                                                  false, // 0.25 > 0.05
		"view changes, idle, hog 4":                                                  false, // 12
	}
	for name, met := range want {
		g, ok := byName[name]
		if !ok {
			t.Errorf("no goal %q (have %v)", name, goals)
			continue
		}
		if g.NA != "" || g.Met != met {
			t.Errorf("%s: met %v (na %q), want %v", name, g.Met, g.NA, met)
		}
	}
	if g := byName["failover after kill -9, median, hog 4"]; g.NA == "" {
		t.Errorf("a goal with no row is not n/a: %+v", g)
	}
	if g := byName["idle CPU, 5 nodes, hog 4"]; !strings.Contains(g.NA, "etcd×5") {
		t.Errorf("idle CPU beside the hog without etcd: %+v", g)
	}
	for _, g := range goals {
		if strings.Contains(g.Name, "chubby×3") || strings.Contains(g.Ours, "chubby×3") {
			t.Errorf("a goal for a size the run did not have: %+v", g)
		}
	}
}

func TestAvailMarkdown(t *testing.T) {
	rep := &Report{
		Mode: modeAvail, Started: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), Finished: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC),
		Command: []string{"chubbybench", "avail"}, Machine: Machine{CPUs: 2, Kernel: "6.1", GoVersion: "go1.26.8"},
		Workloads: []string{"idle/hog0", "lock-load/64/hog0", "failover/hog0", "failover-pause/hog0", "idle/hog4"},
		Results:   availResults(),
	}
	rep.Ratios = computeRatios(rep.Results)
	rep.Targets = computeTargetsFor(rep)
	var b strings.Builder
	if err := writeMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"# chubbybench avail",
		"| view changes, idle, hog 4 | 0 | chubby×5: 12 in 300 s | — | no |",
		"| chubby×5 | 0 | 300 s | 0.250 cores | — | 0 | 2 | 0 | 1.00 1.00 1.00 |  |",
		"| etcd×5 | 0 | 300 s | 0.050 cores | 5.00× | — | — | — | — |  |", // ours ÷ peer
		"| chubby×5 | 4 | 300 s | 0.300 cores | — | 12 | 40 | 3 | — |  |",
		"| chubby×5 | 0 | 64 | 300 s | 2,000/s | 30.0 ms | 90.0 ms | 400.0 ms | 0 | 1 | 0 | 0 | 1.500 cores | — | — | — | — |  |",
		"| etcd×5 | 0 | 64 | 300 s | 1,000/s | 60.0 ms | 180.0 ms | 500.0 ms | 0 | — | — | — | 1.000 cores | 2.00× | 0.50× | 1.50× | — |  |",
		"| chubby×5 | 0 | 2 | 300.0 ms | 400.0 ms | 0.300, 0.400 s | 250.0 ms | 350.0 ms | — | — | — |  |",
		"| etcd×5 | 0 | 2 | 1.20 s | 2.00 s | 1.200, 2.000 s | — | — | 0.25× | 0.20× | — |  |",
		"| etcd×5 | 0 | failed: trial 1: no lock cycle within 1m0s of the SIGSTOP | — | — | — | — | — | — | — | — | — |",
		"| redis×5 | 0 | n/a: no automatic failover without Sentinel |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q\n%s", want, md)
		}
	}
	// Every table row has as many cells as its header.
	var header int
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			header = 0
			continue
		}
		n := strings.Count(strings.ReplaceAll(line, `\|`, ""), "|")
		if header == 0 {
			header = n
		} else if n != header {
			t.Errorf("row has %d cells, its header %d: %s", n-1, header-1, line)
		}
	}
}

func TestHogStartsAndStops(t *testing.T) {
	dir := t.TempDir()
	e := &env{cfg: &Config{}, procs: newProcSet(), logs: dir}
	stop, err := startHog(e, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n := e.procs.count(); n != 2 {
		t.Fatalf("%d hog processes, want 2", n)
	}
	stop()
	if n := e.procs.count(); n != 0 {
		t.Errorf("%d hog processes left after stop", n)
	}
	stop0, err := startHog(e, 0)
	if err != nil || e.procs.count() != 0 {
		t.Errorf("hog 0: %v, %d processes", err, e.procs.count())
	}
	stop0()
}

func TestClusterPauseResume(t *testing.T) {
	dir := t.TempDir()
	e := &env{cfg: &Config{}, procs: newProcSet(), logs: dir}
	c := &cluster{env: e, specs: []nodeSpec{{name: "sleeper", argv: []string{"sleep", "60"}, dir: dir, log: filepath.Join(dir, "s.log")}}}
	if err := c.startAll(); err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	if err := c.pause(0); err != nil {
		t.Fatal(err)
	}
	if st, err := procState(c.procs[0].pid()); err != nil || st != 'T' {
		t.Errorf("paused: state %c, %v", st, err)
	}
	if err := c.resume(0); err != nil {
		t.Fatal(err)
	}
	// SIGCONT takes effect asynchronously too: eventually not stopped.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := procState(c.procs[0].pid())
		if err != nil {
			t.Fatal(err)
		}
		if st != 'T' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still stopped 5 s after SIGCONT")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.pause(1); err == nil {
		t.Error("pause of a node that does not exist")
	}
	e.procs.kill9(c.procs[0])
	if err := c.resume(0); err == nil {
		t.Error("resume of an exited node")
	}
}
