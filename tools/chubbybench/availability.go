package main

// chubbybench avail: does the cell stay up? For each system and size, and
// for each hog setting (busy-loop processes beside the cluster, as other
// work on a shared machine would be), a fresh cluster is started and
// measured in turn:
//
//   - idle: nothing connected for --avail-window; the CPU of every server
//     process (utime+stime from /proc), and for our cell the views it moved
//     through (each replica's /status) and its replica-loop stalls and
//     lease refusals (each replica's /metrics);
//   - lock-load: --load-clients clients each cycling its own lock for the
//     window: cycles/s, latency, the same counters and CPU;
//   - failover: kill -9 of the leader, --failover-trials times;
//   - failover-pause: SIGSTOP of the leader (a silent master), then
//     SIGCONT, --pause-trials times.
//
// A real partition of the master (its packets dropped, not its process
// stopped) needs network namespaces; tools/clustertest has that harness
// for the safety tests, and this benchmark does not (yet) use it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/replica/vr"
)

// availSettle is how long a fresh cluster (and the hog beside it) runs
// before the idle window opens: its start-up work is not idle work.
const availSettle = 2 * time.Second

// slowInputSeconds is the replica-loop input duration counted as a stall:
// inputs above the bucket boundary of chubby_replica_loop_input_seconds at
// or above it count (its buckets are 0.1 ms × 4^k: above 0.1024 s).
const slowInputSeconds = 0.1

// Mode of a Report: "" is the comparison benchmark, modeAvail the
// availability run.
const modeAvail = "avail"

// availCommand is `chubbybench avail`.
// command is the program's command line, for the report.
func availCommand(command []string, stdout, stderr io.Writer) *cobra.Command {
	cfg := DefaultAvailConfig()
	c := &cobra.Command{
		Use:   "avail [flags]",
		Short: "availability: idle CPU, view changes under load and beside a CPU hog, failover after kill -9 and SIGSTOP",
		Long: `chubbybench avail measures whether a cluster stays up, for our cell and the
peers, each without and beside a CPU hog (--hog: busy-loop processes beside
the cluster for its whole measurement). For each system, size and hog
setting a fresh cluster is started, left to settle, and measured:

  idle            nothing connected for --avail-window: CPU of every server
                  process (cores, from /proc); ours: view changes (each
                  replica's /status), replica-loop inputs of 0.1 s or more
                  and calls refused for a lapsed master lease (/metrics)
  lock-load/N     N clients (--load-clients) each cycling its own lock for
                  the window: cycles/s, p50/p99/max, errors, the same counters
  failover        kill -9 of the leader → end of the next successful lock
                  cycle (--failover-trials; median and worst)
  failover-pause  SIGSTOP of the leader (alive but silent, like a paused VM)
                  → the next successful lock cycle; then SIGCONT and rejoin
                  (--pause-trials)

Results: <out>/results.md (a table per measurement, ours ÷ peer at the same
node count, and the goals of issue 22), results.json, logs/.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Quick {
				if err := applyQuick(cmd.Flags(), availQuickValues); err != nil {
					return err
				}
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			return bench(cmd.Context(), &cfg, cmd.Flags(), command, modeAvail, stdout, stderr)
		},
	}
	bindAvailFlags(c.Flags(), &cfg)
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return c
}

// runAvailAll runs the availability workloads on every system, one
// system at a time, one fresh cluster per hog setting.
func (r *runner) runAvailAll(ctx context.Context, systems []System, wls []Workload) {
	for _, sys := range systems {
		if why := sys.Unavailable(); why != "" {
			r.prog.printf("%s: %s", label(sys.Kind(), sys.Nodes()), why)
			for _, w := range wls {
				res := newResult(w, sys)
				res.NA, res.Unavailable = why, true
				r.add(res)
			}
			continue
		}
		for _, group := range byHog(wls) {
			if ctx.Err() != nil {
				r.naAll(sys, group, "not run: "+stopReason(ctx))
				continue
			}
			r.runAvailCluster(ctx, sys, group)
		}
	}
}

// byHog splits wls into runs of the same hog setting, in order.
func byHog(wls []Workload) [][]Workload {
	var out [][]Workload
	for i, w := range wls {
		if i == 0 || w.Hog != wls[i-1].Hog {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], w)
	}
	return out
}

// runAvailCluster starts sys fresh, starts the hog beside it, and runs the
// workloads of one hog setting on it in order.
func (r *runner) runAvailCluster(ctx context.Context, sys System, wls []Workload) {
	lbl := label(sys.Kind(), sys.Nodes())
	var todo []Workload
	for _, w := range wls {
		if why := sys.NA(w.boundAs()); why != "" {
			res := newResult(w, sys)
			res.NA = why
			r.add(res)
			continue
		}
		todo = append(todo, w)
	}
	if len(todo) == 0 {
		return
	}
	hog := todo[0].Hog
	r.prog.printf("%s: starting (hog %d)", lbl, hog)
	defer sys.Stop()
	if err := sys.Start(ctx); err != nil {
		r.prog.printf("%s: start failed: %v", lbl, err)
		for _, w := range todo {
			res := newResult(w, sys)
			res.Error = fmt.Sprintf("start: %v", err)
			r.add(res)
		}
		return
	}
	stopHog, err := startHog(r.env, hog)
	if err != nil {
		for _, w := range todo {
			res := newResult(w, sys)
			res.Error = err.Error()
			r.add(res)
		}
		return
	}
	defer stopHog()
	select {
	case <-ctx.Done():
	case <-time.After(availSettle):
	}
	for _, w := range todo {
		if ctx.Err() != nil {
			res := newResult(w, sys)
			res.NA = "not run: " + stopReason(ctx)
			r.add(res)
			continue
		}
		var res Result
		switch w.Kind {
		case kindIdle:
			res = r.measureWindow(ctx, sys, w, nil)
		case kindLockLoad:
			res = r.runLockLoad(ctx, sys, w)
		default:
			res = r.runFailover(ctx, sys, w)
		}
		res.LoadAvg = loadAvg()
		r.reportAvail(res)
		r.add(res)
	}
}

// runLockLoad opens the load's clients and runs lock-distinct cycles on
// them for the window, measuring it as measureWindow does.
func (r *runner) runLockLoad(ctx context.Context, sys System, w Workload) Result {
	clients, err := r.openClients(ctx, sys, w.Clients)
	if err != nil {
		res := newResult(w, sys)
		res.Error = fmt.Sprintf("clients: %v", err)
		return res
	}
	defer closeClients(clients)
	return r.measureWindow(ctx, sys, w, func(ctx context.Context) Result {
		load := r.runLoad(ctx, sys, clients, Workload{Kind: kindLockDistinct, Clients: w.Clients}, r.cfg.Warmup, r.cfg.AvailWindow)
		res := newResult(w, sys)
		res.Ops, res.Errors, res.Seconds, res.Throughput = load.Ops, load.Errors, load.Seconds, load.Throughput
		res.P50Ms, res.P99Ms, res.MaxMs = load.P50Ms, load.P99Ms, load.MaxMs
		res.Error, res.Note = load.Error, load.Note
		return res
	})
}

// measureWindow measures the CPU of every server process of sys, and the
// cell's counters where sys has them, over work (nil: the idle window,
// AvailWindow of doing nothing).
func (r *runner) measureWindow(ctx context.Context, sys System, w Workload, work func(context.Context) Result) Result {
	cc, counted := sys.(cellCounterSystem)
	var c0 cellCounters
	var cerr error
	if counted {
		c0, cerr = cc.counters(ctx)
	}
	pids := sys.ServerPIDs()
	cpu0, t0 := sumProcStats(pids).CPU, time.Now()
	var res Result
	if work == nil {
		res = newResult(w, sys)
		select {
		case <-ctx.Done():
			res.Error = "interrupted"
		case <-time.After(r.cfg.AvailWindow):
		}
	} else {
		res = work(ctx)
	}
	window := time.Since(t0)
	cpu1 := sumProcStats(pids).CPU
	res.CPUWindowS = window.Seconds()
	res.CPUCoresAll = (cpu1 - cpu0).Seconds() / window.Seconds()
	if !counted {
		return res
	}
	c1, err := cc.counters(ctx)
	if err := errors.Join(cerr, err); err != nil {
		res.Note = joinNonEmpty("; ", res.Note, "counters: "+err.Error())
		return res
	}
	d, why := c1.since(c0)
	if why != "" {
		res.Note = joinNonEmpty("; ", res.Note, why)
	}
	res.ViewChanges, res.LeaseRefusals, res.SlowInputs = &d.Views, &d.LeaseRefusals, &d.SlowInputs
	return res
}

// reportAvail prints one availability result's line of progress.
func (r *runner) reportAvail(res Result) {
	lbl := res.Label()
	counts := ""
	if res.ViewChanges != nil {
		counts = fmt.Sprintf("; %d view changes, %d loop inputs > %.1f s, %d lease refusals", *res.ViewChanges, deref(res.SlowInputs), slowInputSeconds, deref(res.LeaseRefusals))
	}
	switch {
	case res.Kind == kindIdle && res.measured():
		r.prog.printf("  %-12s %-26s %.3f cores (all servers)%s", lbl, res.Workload, res.CPUCoresAll, counts)
	case res.Kind == kindLockLoad && res.Ops > 0:
		r.prog.printf("  %-12s %-26s %9.0f cycles/s p50 %8s p99 %8s max %8s (%d errors); %.3f cores%s", lbl, res.Workload,
			res.Throughput, fmtMs(res.P50Ms), fmtMs(res.P99Ms), fmtMs(res.MaxMs), res.Errors, res.CPUCoresAll, counts)
	default:
		r.report(res)
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// startHog starts n busy-loop processes (sh -c 'while :; do :; done'),
// each in its own process group with SIGKILL as its parent-death signal
// like every process chubbybench starts; stop ends them.
func startHog(e *env, n int) (stop func(), err error) {
	var procs []*proc
	stop = func() {
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Go(func() { e.procs.stop(p) })
		}
		wg.Wait()
	}
	for i := range n {
		p, err := e.procs.start(nodeSpec{
			name: fmt.Sprintf("hog-%d", i+1),
			argv: []string{"sh", "-c", "while :; do :; done"},
			log:  filepath.Join(e.logs, "hog.log"),
		})
		if err != nil {
			stop()
			return func() {}, fmt.Errorf("hog: %w", err)
		}
		procs = append(procs, p)
	}
	return stop, nil
}

// loadAvg is the first three fields of /proc/loadavg ("" if unreadable).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// cellCounterSystem is a System whose servers count what availability is
// made of (our cell).
type cellCounterSystem interface {
	counters(ctx context.Context) (cellCounters, error)
}

// cellCounters is one reading of the cell's availability counters.
type cellCounters struct {
	// View is the highest view any replica is normal in (its /status
	// epoch minus one: cell/master.Epoch).
	View uint64
	// LeaseRefusals and SlowInputs are summed over the replicas that
	// answered: chubby_master_lease_refusals_total, and the replica-loop
	// inputs longer than slowInputSeconds (histogramAbove of
	// chubby_replica_loop_input_seconds).
	LeaseRefusals int64
	SlowInputs    int64
	// Replicas lists the replicas whose /metrics were read, by index.
	Replicas []int
}

// cellDelta is what the counters did between two readings.
type cellDelta struct {
	Views, LeaseRefusals, SlowInputs int64
}

// since is c − before, and why it may not be the whole story ("" when it
// is): a configuration change moves the view by whole epochs, and a
// replica that did not answer both times is not in the sums.
func (c cellCounters) since(before cellCounters) (cellDelta, string) {
	var d cellDelta
	var why []string
	switch {
	case c.View < before.View:
		why = append(why, fmt.Sprintf("the view went back from %d to %d", before.View, c.View))
	case vr.EpochOf(c.View) != vr.EpochOf(before.View):
		why = append(why, fmt.Sprintf("the configuration changed (epoch %d → %d): view changes not counted", vr.EpochOf(before.View), vr.EpochOf(c.View)))
	default:
		d.Views = int64(c.View - before.View)
	}
	if !slices.Equal(c.Replicas, before.Replicas) {
		why = append(why, fmt.Sprintf("metrics read from replicas %v before, %v after", before.Replicas, c.Replicas))
	}
	d.LeaseRefusals = max(0, c.LeaseRefusals-before.LeaseRefusals)
	d.SlowInputs = max(0, c.SlowInputs-before.SlowInputs)
	return d, strings.Join(why, "; ")
}

// counters reads every replica's /status and /metrics. A replica that
// does not answer is left out (a killed one); none answering is an error.
// A view change under way shows as no epoch on the replicas in it: the
// highest view reported is taken, so a change under way at the second
// reading is counted once it is done, in the next window.
func (s *chubbySystem) counters(ctx context.Context) (cellCounters, error) {
	var c cellCounters
	var errs []error
	answered := false
	for i, rep := range s.reps {
		if rep.HTTP == "" {
			continue
		}
		st, err := fetchReplicaStatus(ctx, rep.HTTP)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		answered = true
		if st.Epoch > 0 {
			c.View = max(c.View, uint64(st.Epoch-1))
		}
		m, err := scrapeMetricsText(ctx, "http://"+rep.HTTP+"/metrics")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		slow, _, err := histogramAbove(m, "chubby_replica_loop_input_seconds", slowInputSeconds)
		if err != nil {
			errs = append(errs, fmt.Errorf("replica %d: %w", rep.ID, err))
			continue
		}
		sums, err := parseMetrics(strings.NewReader(m))
		if err != nil {
			errs = append(errs, fmt.Errorf("replica %d: %w", rep.ID, err))
			continue
		}
		c.LeaseRefusals += int64(sums["chubby_master_lease_refusals_total"])
		c.SlowInputs += slow
		c.Replicas = append(c.Replicas, i)
	}
	if !answered {
		return c, fmt.Errorf("no replica answered /status: %w", errors.Join(errs...))
	}
	return c, nil
}

// masterWatcher is a System that can tell, from the servers' own state,
// when a new master serves after the leader was taken out (our cell).
type masterWatcher interface {
	// awaitNewMaster returns once a node other than old serves as master,
	// polling every masterPoll until ctx ends.
	awaitNewMaster(ctx context.Context, old int) error
}

// masterPoll is how often awaitNewMaster asks: the resolution of the
// cell-side failover figure.
const masterPoll = 20 * time.Millisecond

// awaitNewMaster polls the /metrics of every replica but old until one
// says it serves as master (chubby_is_master 1: it is the primary and has
// done its failover duties).
func (s *chubbySystem) awaitNewMaster(ctx context.Context, old int) error {
	t := time.NewTicker(masterPoll)
	defer t.Stop()
	for {
		for i, rep := range s.reps {
			if i == old || rep.HTTP == "" {
				continue
			}
			m, err := scrapeMetricsText(ctx, "http://"+rep.HTTP+"/metrics")
			if err != nil {
				continue // a replica killed in an earlier trial, or slow
			}
			if _, v, ok := findSample(m, "chubby_is_master"); ok && v == 1 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// findSample returns the first sample of metric name in Prometheus text.
func findSample(text, name string) (string, float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if metric, v, ok := sampleValue(line); ok && metric == name {
			return line, v, true
		}
	}
	return "", 0, false
}

// replicaStatus is what the benchmark reads of a replica's /status JSON
// (cell.statusJSON): the master it names, the epoch (the master's view
// plus one; 0 while it knows no master) and the replicas' roles.
type replicaStatus struct {
	MasterID      string `json:"master_id"`
	MasterAddress string `json:"master_address"`
	Epoch         int64  `json:"epoch"`
	Replicas      []struct {
		ID   string `json:"id"`
		Role string `json:"role"`
	} `json:"replicas"`
}

// role is the role st gives replica id ("" if it does not list it).
func (st replicaStatus) role(id string) string {
	for _, r := range st.Replicas {
		if r.ID == id {
			return r.Role
		}
	}
	return ""
}

// parseReplicaStatus decodes a /status JSON document.
func parseReplicaStatus(b []byte) (replicaStatus, error) {
	var st replicaStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("status: %w", err)
	}
	if st.Epoch < 0 {
		return st, fmt.Errorf("status: epoch %d", st.Epoch)
	}
	return st, nil
}

// fetchReplicaStatus reads the /status JSON of the replica whose HTTP
// address is addr (loopback only).
func fetchReplicaStatus(ctx context.Context, addr string) (replicaStatus, error) {
	b, err := httpGet(ctx, "http://"+addr+"/status?format=json", 1<<20)
	if err != nil {
		return replicaStatus{}, err
	}
	return parseReplicaStatus(b)
}

// scrapeMetricsText fetches Prometheus text from url (loopback only).
func scrapeMetricsText(ctx context.Context, url string) (string, error) {
	b, err := httpGet(ctx, url, 16<<20)
	return string(b), err
}

// httpGet fetches url (loopback only), at most limit bytes, in at most 5 s.
func httpGet(ctx context.Context, url string, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if !isLoopback(req.URL.Host) {
		return nil, fmt.Errorf("get %s: not a loopback address", url)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	return b, nil
}

// histogramAbove counts the observations of histogram name (Prometheus
// text) above the smallest bucket boundary at or above threshold: its
// _count less its cumulative bucket there. It returns that boundary too
// (0.1024 for 0.1 with the loop histogram's buckets): the count is as fine
// as the buckets, and leaves out what falls between threshold and it. A
// histogram without count or without such a boundary is an error.
func histogramAbove(text, name string, threshold float64) (n int64, bound float64, err error) {
	count, bound, atBound, found := math.NaN(), math.Inf(1), 0.0, false
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		metric, v, ok := sampleValue(line)
		if !ok {
			continue
		}
		switch metric {
		case name + "_count":
			count = v
		case name + "_bucket":
			le, ok := labelValue(line, "le")
			if !ok {
				continue
			}
			b, err := strconv.ParseFloat(le, 64)
			if err != nil {
				continue
			}
			if b >= threshold && (!found || b < bound) {
				bound, atBound, found = b, v, true
			}
		}
	}
	if math.IsNaN(count) || !found {
		return 0, 0, fmt.Errorf("metrics: no histogram %s with a bucket at or above %g", name, threshold)
	}
	return int64(max(0, count-atBound)), bound, nil
}

// sampleValue splits a sample line, "name{labels} value [timestamp]", into
// its metric name and value.
func sampleValue(line string) (string, float64, bool) {
	name, rest := line, ""
	if i := strings.IndexAny(line, "{ "); i >= 0 {
		name, rest = line[:i], line[i:]
	}
	if strings.HasPrefix(rest, "{") {
		j := strings.LastIndexByte(rest, '}')
		if j < 0 {
			return "", 0, false
		}
		rest = rest[j+1:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return name, v, err == nil
}

// labelValue returns the value of label key in a sample line's {...}.
func labelValue(line, key string) (string, bool) {
	i := strings.IndexByte(line, '{')
	j := strings.LastIndexByte(line, '}')
	if i < 0 || j < i {
		return "", false
	}
	for _, kv := range strings.Split(line[i+1:j], ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k == key {
			return strings.Trim(v, `"`), true
		}
	}
	return "", false
}
