package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// payload is the content of every small file, key and znode: 64 bytes.
var payload = []byte(strings.Repeat("chubbybench-", 6)[:64])

// runner runs the workloads on the systems, one system at a time, and
// collects the results.
type runner struct {
	cfg     *Config
	env     *env
	prog    *progress
	results []Result
	notes   []string
}

// variantPreparer is a System that needs different server flags for a
// sessions-held variant (our cell raises --max-connections for direct).
type variantPreparer interface {
	prepare(w Workload)
}

// brokenClient is a Client that can tell it is unusable (a ZooKeeper
// client whose connection was closed to unblock the lock recipe).
type brokenClient interface {
	broken() bool
}

// runAll runs every workload on every system. A system that cannot run,
// or a run cut short by ctx, leaves rows saying why.
func (r *runner) runAll(ctx context.Context, systems []System, wls []Workload) {
	for _, sys := range systems {
		if ctx.Err() != nil {
			r.naAll(sys, wls, "not run: "+stopReason(ctx))
			continue
		}
		r.runSystem(ctx, sys, wls)
	}
}

// stopReason says why ctx ended, for rows that did not run.
func stopReason(ctx context.Context) string {
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		return "--timeout reached"
	}
	return "interrupted"
}

func (r *runner) naAll(sys System, wls []Workload, why string) {
	for _, w := range wls {
		res := newResult(w, sys)
		res.NA = why
		r.results = append(r.results, res)
	}
}

func (r *runner) add(res Result) { r.results = append(r.results, res) }

// runSystem runs wls on sys: the load workloads and failover on one
// cluster, then each sessions-held variant on a fresh one.
func (r *runner) runSystem(ctx context.Context, sys System, wls []Workload) {
	lbl := label(sys.Kind(), sys.Nodes())
	if why := sys.Unavailable(); why != "" {
		r.prog.printf("%s: %s", lbl, why)
		for _, w := range wls {
			res := newResult(w, sys)
			res.NA, res.Unavailable = why, true
			r.add(res)
		}
		return
	}
	var loads, held []Workload
	for _, w := range wls {
		if why := sys.NA(w); why != "" {
			res := newResult(w, sys)
			res.NA = why
			r.add(res)
			continue
		}
		if w.Kind == kindSessionsHeld {
			held = append(held, w)
		} else {
			loads = append(loads, w)
		}
	}
	// --quick holds the sessions on the cluster the loads ran on (one start
	// per system); the full run starts a fresh cluster for each variant, so
	// that the master's memory before the sessions is a clean baseline.
	var heldHere []Workload
	if r.cfg.Quick {
		heldHere, held = held, nil
	}
	if len(loads) > 0 || len(heldHere) > 0 {
		r.runShared(ctx, sys, loads, heldHere)
	}
	for _, w := range held {
		if ctx.Err() != nil {
			res := newResult(w, sys)
			res.NA = "not run: " + stopReason(ctx)
			r.add(res)
			continue
		}
		r.add(r.runHeld(ctx, sys, w))
	}
}

// runShared starts sys, warms it up, and runs on it the load workloads,
// then the sessions-held workloads given (--quick), then failover (last: it
// kills nodes).
func (r *runner) runShared(ctx context.Context, sys System, wls, held []Workload) {
	lbl := label(sys.Kind(), sys.Nodes())
	fail := func(err error) {
		for _, w := range slices.Concat(wls, held) {
			res := newResult(w, sys)
			res.Error = err.Error()
			r.add(res)
		}
	}
	if p, ok := sys.(variantPreparer); ok {
		p.prepare(Workload{})
	}
	r.prog.printf("%s: starting", lbl)
	t0 := time.Now()
	defer sys.Stop()
	if err := sys.Start(ctx); err != nil {
		r.prog.printf("%s: start failed: %v", lbl, err)
		fail(fmt.Errorf("start: %w", err))
		return
	}
	t1 := time.Now()
	most := 1
	for _, w := range wls {
		most = max(most, w.Clients)
	}
	clients, err := r.openClients(ctx, sys, most)
	if err != nil {
		r.prog.printf("%s: clients: %v", lbl, err)
		fail(fmt.Errorf("clients: %w", err))
		return
	}
	defer closeClients(clients)
	t2 := time.Now()
	r.warmUp(ctx, sys, clients)
	r.prog.printf("%s: serving after %.1f s; %d clients connected in %.1f s; warmed up in %.1f s", lbl,
		t1.Sub(t0).Seconds(), most, t2.Sub(t1).Seconds(), time.Since(t2).Seconds())
	// Failover goes last: it kills nodes.
	var order []Workload
	for _, w := range wls {
		if w.Kind != kindFailover {
			order = append(order, w)
		}
	}
	order = append(order, held...)
	for _, w := range wls {
		if w.Kind == kindFailover {
			order = append(order, w)
		}
	}
	for _, w := range order {
		if ctx.Err() != nil {
			res := newResult(w, sys)
			res.NA = "not run: " + stopReason(ctx)
			r.add(res)
			continue
		}
		var res Result
		switch w.Kind {
		case kindFailover, kindFailoverPause:
			res = r.runFailover(ctx, sys, w)
			r.report(res)
		case kindSessionsHeld:
			res = r.measureHeld(ctx, sys, w) // reports itself
		default:
			res = r.runLoad(ctx, sys, clients[:w.Clients], w, r.cfg.Warmup, r.cfg.Duration)
			r.report(res)
		}
		r.add(res)
	}
}

// openClients opens n clients, 16 at a time.
func (r *runner) openClients(ctx context.Context, sys System, n int) ([]Client, error) {
	clients := make([]Client, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
			defer cancel()
			clients[i], errs[i] = sys.NewClient(cctx, i)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeClients(clients)
		return nil, err
	}
	return clients, nil
}

func closeClients(cs []Client) {
	var wg sync.WaitGroup
	for _, c := range cs {
		if c != nil {
			wg.Go(func() { c.Close() })
		}
	}
	waitGroupTimeout(&wg, 30*time.Second)
}

// warmUp runs lock cycles with up to 16 clients on a fresh cluster
// (JIT, caches, connection pools), unmeasured.
func (r *runner) warmUp(ctx context.Context, sys System, clients []Client) {
	if r.cfg.ClusterWarmup <= 0 {
		return
	}
	n := min(16, len(clients))
	lockers, err := prepareLockers(ctx, clients[:n], func(i int) string { return fmt.Sprintf("warm-%d", i) })
	if err != nil {
		r.env.log.Warn("warm-up", "system", label(sys.Kind(), sys.Nodes()), "err", err)
		return
	}
	defer closeLockers(lockers)
	l := loop{Workers: n, Duration: r.cfg.ClusterWarmup, OpTimeout: r.cfg.OpTimeout}
	if _, err := l.run(ctx, timed(func(ctx context.Context, w int) error { return lockers[w].Cycle(ctx) })); err != nil {
		r.env.log.Warn("warm-up", "system", label(sys.Kind(), sys.Nodes()), "err", err)
	}
}

func prepareLockers(ctx context.Context, clients []Client, name func(int) string) ([]Locker, error) {
	ls := make([]Locker, len(clients))
	for i, c := range clients {
		l, err := c.Lock(ctx, name(i))
		if err != nil {
			closeLockers(ls)
			return nil, err
		}
		ls[i] = l
	}
	return ls, nil
}

func closeLockers(ls []Locker) {
	for _, l := range ls {
		if l != nil {
			l.Close()
		}
	}
}

// runLoad runs one closed-loop workload with one client per worker:
// warmup unmeasured, then duration measured.
func (r *runner) runLoad(ctx context.Context, sys System, clients []Client, w Workload, warmup, duration time.Duration) Result {
	res := newResult(w, sys)
	n := len(clients)
	var (
		f       op
		cleanup func()
		tr      *transfers
	)
	switch w.Kind {
	case kindLockDistinct, kindLockContended:
		name := func(i int) string { return fmt.Sprintf("d%d-%d", n, i) }
		if w.Kind == kindLockContended {
			name = func(int) string { return fmt.Sprintf("c%d", n) }
		}
		lockers, err := prepareLockers(ctx, clients, name)
		if err != nil {
			res.Error = fmt.Sprintf("prepare locks: %v", err)
			return res
		}
		cleanup = func() { closeLockers(lockers) }
		f = timed(func(ctx context.Context, w int) error { return lockers[w].Cycle(ctx) })
	case kindWrite, kindRead, kindReadCached:
		files := make([]File, n)
		cleanup = func() {
			for _, fl := range files {
				if fl != nil {
					fl.Close()
				}
			}
		}
		for i, c := range clients {
			fl, err := c.File(ctx, fmt.Sprintf("%s%d-%d", w.Kind, n, i))
			if err != nil {
				cleanup()
				res.Error = fmt.Sprintf("prepare files: %v", err)
				return res
			}
			files[i] = fl
		}
		switch w.Kind {
		case kindWrite:
			f = timed(func(ctx context.Context, w int) error { return files[w].Write(ctx, payload) })
		case kindRead:
			f = timed(func(ctx context.Context, w int) error { return files[w].Read(ctx) })
		default:
			f = timed(func(ctx context.Context, w int) error { return files[w].ReadCached(ctx) })
		}
	case kindSessionCreate:
		cleanup = func() {}
		f = func(ctx context.Context, w int) (time.Duration, error) {
			t0 := time.Now()
			end, err := clients[w].NewSession(ctx)
			lat := time.Since(t0)
			if err != nil {
				return lat, err
			}
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.OpTimeout)
			defer cancel()
			if err := end(cctx); err != nil {
				return lat, fmt.Errorf("close session: %w", err)
			}
			return lat, nil
		}
	case kindTransferSpread, kindTransferHot:
		var err error
		if tr, err = prepareTransfers(ctx, clients, w); err != nil {
			res.Error = err.Error()
			return res
		}
		cleanup = tr.close
		f = tr.op
	default:
		res.Error = "unknown workload " + w.Kind
		return res
	}
	defer cleanup()
	l := loop{Workers: n, Warmup: warmup, Duration: duration, OpTimeout: r.cfg.OpTimeout,
		MinOps: 2 * n, MaxDuration: max(4*duration, 5*time.Second)}
	if tr != nil {
		l.Counted = tr.counted
	}
	s, err := l.run(ctx, f)
	res.fill(s)
	if tr != nil {
		res.Attempts, res.Aborts = tr.totals()
		// The check reads every account after the window: a bound of its
		// own, not one operation's (on a loaded machine 1,000 reads by
		// four clients outlasted a 5 s --op-timeout).
		if why := tr.check(ctx, max(r.cfg.OpTimeout, checkTimeout)); why != "" {
			res.Note = why
		}
	}
	if err != nil {
		if s.Ops == 0 {
			res.Error = err.Error()
		} else if s.Errors > 0 {
			res.Note = joinNonEmpty("; ", fmt.Sprintf("%d operations failed; first: %v", s.Errors, err), res.Note)
		} else {
			res.Note = joinNonEmpty("; ", fmt.Sprintf("no operation in the window failed; one in the lead-in or at its end did: %v", err), res.Note)
		}
	}
	return res
}

// report prints one result's line of progress.
func (r *runner) report(res Result) {
	lbl := res.Label()
	switch {
	case res.NA != "":
		r.prog.printf("  %-12s %-26s %s", lbl, res.Workload, res.NA)
	case res.Error != "" && !res.measured():
		r.prog.printf("  %-12s %-26s FAILED: %s", lbl, res.Workload, res.Error)
	case (Workload{Kind: res.Kind}).isFailover():
		trials := make([]string, len(res.TrialsS))
		for i, t := range res.TrialsS {
			trials[i] = fmt.Sprintf("%.3f", t)
		}
		r.prog.printf("  %-12s %-26s trials %s s, p50 %.3f s", lbl, res.Workload, strings.Join(trials, ", "), res.P50Ms/1000)
	case res.Kind == kindSessionsHeld:
		r.prog.printf("  %-12s %-26s %d sessions (%.0f/s to set up); master %.3f cores, RSS %s; probe read p50 %s p99 %s",
			lbl, res.Workload, res.Sessions, res.SetupPerS, res.CPUCores, fmtBytes(res.RSSBytes), fmtMs(res.P50Ms), fmtMs(res.P99Ms))
	case (Workload{Kind: res.Kind}).isTxn():
		r.prog.printf("  %-12s %-26s %9.0f txns/s p50 %8s  p99 %8s  aborts %s%s", lbl, res.Workload, res.Throughput, fmtMs(res.P50Ms), fmtMs(res.P99Ms), fmtAbortRate(res), errSuffix(res))
	default:
		r.prog.printf("  %-12s %-26s %9.0f ops/s  p50 %8s  p99 %8s%s", lbl, res.Workload, res.Throughput, fmtMs(res.P50Ms), fmtMs(res.P99Ms), errSuffix(res))
	}
}

func errSuffix(res Result) string {
	if res.Errors > 0 {
		return fmt.Sprintf("  (%d errors)", res.Errors)
	}
	return ""
}

// failoverBound bounds one trial: no successful cycle within it fails it.
const failoverBound = 60 * time.Second

// runFailover takes the leader out, trial after trial, and measures from
// the fault to the end of the first lock cycle started after it. The fault
// is kill -9 (failover: FailoverTrials trials; the killed node is
// restarted before the next trial, and after the last in an availability
// run, which goes on on the cluster) or SIGSTOP (failover-pause:
// PauseTrials trials; the paused node is continued with SIGCONT after
// each, the last included). Before the next trial the cluster is whole
// again. Where sys can tell when a new master serves (masterWatcher),
// that time is recorded too.
func (r *runner) runFailover(ctx context.Context, sys System, w Workload) Result {
	res := newResult(w, sys)
	lbl := label(sys.Kind(), sys.Nodes())
	pause := w.Kind == kindFailoverPause
	trials, fault := r.cfg.FailoverTrials, "kill -9"
	if pause {
		trials, fault = r.cfg.PauseTrials, "SIGSTOP"
	}
	newProbe := func() (Client, Locker, error) {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
		defer cancel()
		c, err := sys.NewClient(cctx, 10_000)
		if err != nil {
			return nil, nil, err
		}
		l, err := c.Lock(cctx, "failover")
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return c, l, nil
	}
	c, l, err := newProbe()
	if err != nil {
		res.Error = fmt.Sprintf("probe client: %v", err)
		return res
	}
	defer func() {
		if c != nil { // nil when a new probe could not be opened
			c.Close()
		}
	}()
	for i := range 5 { // the probe works before anything is taken out
		cctx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
		err := l.Cycle(cctx)
		cancel()
		if err != nil {
			res.Error = fmt.Sprintf("probe cycle %d before the %s: %v", i, fault, err)
			return res
		}
	}
	for trial := range trials {
		leader, err := sys.Leader(ctx)
		if err != nil {
			res.Error = fmt.Sprintf("trial %d: %v", trial+1, err)
			break
		}
		r.prog.printf("  %-12s %s trial %d: %s node %d (leader)", lbl, w.Kind, trial+1, fault, leader+1)
		t0 := time.Now()
		if pause {
			err = sys.Pause(leader)
			t0 = time.Now() // from when the process is stopped (Pause waits for it)
		} else {
			err = sys.Kill(leader)
		}
		if err != nil {
			res.Error = fmt.Sprintf("trial %d: %s: %v", trial+1, fault, err)
			break
		}
		// The cell side: when a new master serves, by the servers' own word.
		masterAt := make(chan time.Duration, 1)
		wctx, stopWatch := context.WithTimeout(ctx, failoverBound)
		if mw, ok := sys.(masterWatcher); ok {
			go func() {
				if mw.awaitNewMaster(wctx, leader) == nil {
					masterAt <- time.Since(t0)
				}
				close(masterAt)
			}()
		} else {
			close(masterAt)
		}
		recovered := time.Duration(-1)
		var lastErr error // of the last failed attempt, for the report
		attempts := 0
		for ; time.Since(t0) < failoverBound && ctx.Err() == nil; attempts++ {
			if b, ok := c.(brokenClient); c == nil || (ok && b.broken()) {
				if c != nil {
					c.Close()
				}
				// A client connecting while a server is silent may time
				// out: that is part of the failover, tried again.
				if c, l, err = newProbe(); err != nil {
					c = nil
				}
			}
			if c != nil {
				actx, cancel := context.WithTimeout(ctx, r.cfg.FailoverAttempt)
				err = l.Cycle(actx)
				cancel()
				if err == nil {
					recovered = time.Since(t0)
					break
				}
			} else {
				err = fmt.Errorf("new probe client: %w", err)
			}
			lastErr = err
			select { // a refused call returns at once: do not spin on it
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
		if d, ok := awaitWatch(masterAt, stopWatch, 5*time.Second); ok {
			res.MasterTrialsS = append(res.MasterTrialsS, d.Seconds())
		}
		if recovered >= 0 {
			res.TrialsS = append(res.TrialsS, recovered.Seconds())
			r.prog.printf("  %-12s %s trial %d: next lock cycle after %.3f s", lbl, w.Kind, trial+1, recovered.Seconds())
		} else {
			res.Error = fmt.Sprintf("trial %d: no lock cycle within %v of the %s (%d attempts; the last: %v)", trial+1, failoverBound, fault, attempts, lastErr)
		}
		switch {
		case pause:
			// Always continued, the last trial's too: a stopped process
			// would hold its port and ignore the SIGTERM of the stop.
			if err := sys.Resume(ctx, leader); err != nil {
				res.Note = fmt.Sprintf("SIGCONT of node %d: %v", leader+1, err)
				recovered = -1
			}
		case recovered >= 0 && (trial < trials-1 || w.Avail):
			// After the last trial the comparison stops the cluster; the
			// availability run goes on with failover-pause on it.
			if err := sys.Restart(ctx, leader); err != nil {
				res.Note = fmt.Sprintf("restart of node %d: %v", leader+1, err)
				recovered = -1
			}
		}
		if recovered < 0 {
			break
		}
	}
	if n := len(res.TrialsS); n > 0 {
		ds := make([]time.Duration, n)
		for i, s := range res.TrialsS {
			ds[i] = time.Duration(s * float64(time.Second))
		}
		slices.Sort(ds)
		res.Ops = int64(n)
		res.P50Ms, res.P99Ms, res.MaxMs = ms(percentile(ds, 0.5)), ms(percentile(ds, 0.99)), ms(ds[n-1])
	}
	return res
}

// awaitWatch takes the watcher's figure from at, waiting at most grace
// for it (the client may have found the new master before the watcher's
// next poll), then stops the watcher with stop.
func awaitWatch(at <-chan time.Duration, stop context.CancelFunc, grace time.Duration) (time.Duration, bool) {
	defer stop()
	select {
	case d, ok := <-at:
		return d, ok
	case <-time.After(grace):
		stop()
		d, ok := <-at // closed once the watcher sees its context end
		return d, ok
	}
}

// probeEvery is the period of the reads made while sessions are held.
const probeEvery = 20 * time.Millisecond

// sessionTarget is how many sessions sys holds in w.
func (r *runner) sessionTarget(sys System, w Workload) int {
	if sys.Kind() != sysChubby {
		return r.cfg.PeerSessions
	}
	if w.Variant == variantBatched {
		return r.cfg.Sessions
	}
	return r.cfg.DirectSessions
}

// runHeld starts a fresh sys and measures w on it (measureHeld).
func (r *runner) runHeld(ctx context.Context, sys System, w Workload) Result {
	lbl := label(sys.Kind(), sys.Nodes())
	if p, ok := sys.(variantPreparer); ok {
		p.prepare(w)
	}
	r.prog.printf("%s: starting for %s (%d sessions)", lbl, w.Name(), r.sessionTarget(sys, w))
	defer sys.Stop()
	if err := sys.Start(ctx); err != nil {
		res := newResult(w, sys)
		res.SessionsTarget = r.sessionTarget(sys, w)
		res.Error = fmt.Sprintf("start: %v", err)
		r.report(res)
		return res
	}
	return r.measureHeld(ctx, sys, w)
}

// measureHeld opens the sessions on the running sys and measures the
// master process's CPU and RSS over the hold window, while a probe client
// reads every probeEvery. The sessions are let go at the end.
func (r *runner) measureHeld(ctx context.Context, sys System, w Workload) Result {
	res := newResult(w, sys)
	target := r.sessionTarget(sys, w)
	res.SessionsTarget = target
	leader, err := sys.Leader(ctx)
	pids := sys.ServerPIDs()
	if err != nil || leader >= len(pids) {
		res.Error = fmt.Sprintf("leader: %v (pids %v)", err, pids)
		r.report(res)
		return res
	}
	pid := pids[leader]
	probe, err := sys.NewClient(ctx, 20_000)
	if err != nil {
		res.Error = fmt.Sprintf("probe client: %v", err)
		r.report(res)
		return res
	}
	defer probe.Close()
	pf, err := probe.File(ctx, "probe")
	if err != nil {
		res.Error = fmt.Sprintf("probe file: %v", err)
		r.report(res)
		return res
	}
	defer pf.Close()
	base, err := readProcStats(pid)
	if err != nil {
		res.Error = err.Error()
		r.report(res)
		return res
	}
	res.RSSBaseBytes = base.RSS

	t0 := time.Now()
	held, release, herr := sys.HoldSessions(ctx, w, target)
	setup := time.Since(t0)
	defer release()
	res.Sessions = held
	if held > 0 {
		res.SetupPerS = float64(held) / setup.Seconds()
	}
	if herr != nil {
		if held == 0 {
			res.Error = herr.Error()
			r.report(res)
			return res
		}
		res.Note = fmt.Sprintf("stopped at %d of %d sessions: %v", held, target, herr)
	}
	if ctx.Err() != nil {
		res.Error = "interrupted"
		return res
	}

	before, err1 := readProcStats(pid)
	beforeAll := sumProcStats(pids)
	rec := &recorder{}
	start := time.Now()
	tick := time.NewTicker(probeEvery)
	for time.Since(start) < r.cfg.Hold && ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
		q0 := time.Now()
		if err := pf.Read(pctx); err != nil {
			rec.fail()
		} else {
			rec.add(time.Since(q0))
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	tick.Stop()
	window := time.Since(start)
	after, err2 := readProcStats(pid)
	afterAll := sumProcStats(pids)
	if err := errors.Join(err1, err2); err != nil {
		res.Error = err.Error()
		return res
	}
	s := summarize(rec.samples, rec.ops, rec.errs, window)
	res.P50Ms, res.P99Ms, res.MaxMs = ms(s.P50), ms(s.P99), ms(s.Max)
	res.Ops, res.Errors = s.Ops, s.Errors
	res.HoldSeconds = window.Seconds()
	res.CPUCores = (after.CPU - before.CPU).Seconds() / window.Seconds()
	res.RSSBytes = after.RSS
	res.CPUCoresAll = (afterAll.CPU - beforeAll.CPU).Seconds() / window.Seconds()
	res.RSSAllBytes = afterAll.RSS
	r.report(res)
	return res
}

// sumProcStats adds up the stats of pids (those that can be read).
func sumProcStats(pids []int) procStats {
	var sum procStats
	for _, p := range pids {
		if st, err := readProcStats(p); err == nil {
			sum.CPU += st.CPU
			sum.RSS += st.RSS
		}
	}
	return sum
}
