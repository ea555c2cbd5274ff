package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Result is one workload's figures on one system (one row of the tables,
// one object of results.json).
type Result struct {
	Workload string `json:"workload"` // Workload.Name()
	Kind     string `json:"kind"`
	Clients  int    `json:"clients,omitempty"`
	Variant  string `json:"variant,omitempty"`
	System   string `json:"system"` // chubby, etcd, zookeeper, redis
	Nodes    int    `json:"nodes"`

	NA string `json:"na,omitempty"` // why the workload does not apply (or did not run)
	// Unavailable: the whole system could not run (NA says why); the
	// markdown lists such systems once instead of a row per workload.
	Unavailable bool   `json:"system_unavailable,omitempty"`
	Error       string `json:"error,omitempty"` // what went wrong (figures may still be partial)

	// Closed-loop workloads; failover puts its trials' percentiles in P50/P99.
	Ops        int64   `json:"ops,omitempty"`
	Errors     int64   `json:"errors,omitempty"`
	Seconds    float64 `json:"seconds,omitempty"`
	Throughput float64 `json:"throughput_per_s,omitempty"`
	P50Ms      float64 `json:"p50_ms,omitempty"`
	P99Ms      float64 `json:"p99_ms,omitempty"`
	MaxMs      float64 `json:"max_ms,omitempty"`

	// transfer: the transaction attempts of the operations counted (each
	// operation is one committed transaction and the attempts aborted
	// before it) and how many of them were aborted. Results of runs
	// before transfer existed have neither.
	Attempts int64 `json:"attempts,omitempty"`
	Aborts   int64 `json:"aborts,omitempty"`

	// sessions-held: sessions established, how fast, and what the master
	// (leader, primary) process used meanwhile. P50/P99 are of probe reads
	// made during the hold.
	Sessions       int     `json:"sessions,omitempty"`
	SessionsTarget int     `json:"sessions_target,omitempty"`
	SetupPerS      float64 `json:"setup_per_s,omitempty"`
	HoldSeconds    float64 `json:"hold_s,omitempty"`
	CPUCores       float64 `json:"cpu_cores,omitempty"`
	RSSBytes       int64   `json:"rss_bytes,omitempty"`
	RSSBaseBytes   int64   `json:"rss_base_bytes,omitempty"` // before the sessions
	CPUCoresAll    float64 `json:"cpu_cores_all_nodes,omitempty"`
	RSSAllBytes    int64   `json:"rss_all_nodes_bytes,omitempty"`

	// failover: seconds from kill -9 to the end of the first lock cycle
	// started after it, one per trial.
	TrialsS []float64 `json:"trials_s,omitempty"`
	// MasterTrialsS: seconds from the fault to when a new master served,
	// by the servers' own word (ours: chubby_is_master on another replica),
	// one per trial where it was seen; the client's failover above adds
	// how long the client took to find it.
	MasterTrialsS []float64 `json:"master_trials_s,omitempty"`

	// chubbybench avail. Hog: busy-loop processes beside the cluster (0:
	// none). CPUWindowS: the window CPUCoresAll (every server process,
	// from /proc) was measured over (idle, lock-load). ViewChanges: views
	// the cell moved through in the window (from each replica's /status);
	// LeaseRefusals: calls refused because the master lease had lapsed,
	// and SlowInputs: replica-loop inputs that took at least
	// slowInputSeconds, both summed over the replicas' /metrics. These
	// three are ours only (nil: not known). LoadAvg: /proc/loadavg at the
	// end of the measurement.
	Hog           int     `json:"hog,omitempty"`
	CPUWindowS    float64 `json:"cpu_window_s,omitempty"`
	ViewChanges   *int64  `json:"view_changes,omitempty"`
	LeaseRefusals *int64  `json:"lease_refusals,omitempty"`
	SlowInputs    *int64  `json:"slow_loop_inputs,omitempty"`
	LoadAvg       string  `json:"load_avg,omitempty"`

	Bound string `json:"bound,omitempty"` // what bounds the figure
	Note  string `json:"note,omitempty"`
}

// Label names the system and its size: "etcd×3".
func (r Result) Label() string { return label(r.System, r.Nodes) }

func label(system string, nodes int) string { return fmt.Sprintf("%s×%d", system, nodes) }

// measured reports whether r carries figures.
func (r Result) measured() bool {
	return r.NA == "" && (r.Ops > 0 || r.Sessions > 0 || len(r.TrialsS) > 0 || r.CPUWindowS > 0)
}

// abortRate is the share of transaction attempts that were aborted, and
// whether it is known (there were attempts).
func (r Result) abortRate() (float64, bool) {
	if r.Attempts <= 0 {
		return 0, false
	}
	return float64(r.Aborts) / float64(r.Attempts), true
}

// rssPerSession is the resident memory the sessions added, per session.
func (r Result) rssPerSession() float64 {
	if r.Sessions == 0 {
		return 0
	}
	return float64(max(0, r.RSSBytes-r.RSSBaseBytes)) / float64(r.Sessions)
}

// cpuPerSession is the cores used per session held.
func (r Result) cpuPerSession() float64 {
	if r.Sessions == 0 {
		return 0
	}
	return r.CPUCores / float64(r.Sessions)
}

// newResult starts the Result of w on sys.
func newResult(w Workload, sys System) Result {
	return Result{
		Workload: w.Name(), Kind: w.Kind, Clients: w.Clients, Variant: w.Variant, Hog: w.Hog,
		System: sys.Kind(), Nodes: sys.Nodes(), Bound: sys.Bound(w.boundAs()),
	}
}

// fill copies a closed loop's Summary into r.
func (r *Result) fill(s Summary) {
	r.Ops, r.Errors = s.Ops, s.Errors
	r.Seconds = s.Elapsed.Seconds()
	r.Throughput = s.Throughput
	r.P50Ms, r.P99Ms, r.MaxMs = ms(s.P50), ms(s.P99), ms(s.Max)
}

// progress prints what the run is doing to stderr, each line stamped with
// the time since the start.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func newProgress(w io.Writer) *progress { return &progress{w: w, start: time.Now()} }

func (p *progress) printf(format string, args ...any) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%6.1fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}
