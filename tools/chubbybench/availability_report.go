package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The report of chubbybench avail: a table per measurement (idle, lock
// load, failover after kill -9, failover after SIGSTOP), a row per system,
// size and hog setting, with ours ÷ peer at the same node count and hog
// setting; then the goals of issue 22 checked on this run's figures.

// computeTargetsFor computes the goals of rep's mode: the comparison's
// targets, or the availability goals.
func computeTargetsFor(rep *Report) []Target {
	if rep.Mode == modeAvail {
		return computeAvailGoals(rep.Results)
	}
	return computeTargets(rep.Results)
}

// The availability goals of issue 22.
const (
	goalKillMedianS  = 0.5 // failover after kill -9, median
	goalPauseMedianS = 2.0 // failover after a silent master, median
)

// computeAvailGoals checks, for every hog setting of the run, our cell at
// 3 and 5 replicas against the goals of issue 22: no view change while
// idle or under the lock load, failover after kill -9 at most 0.5 s and
// after SIGSTOP at most 2 s (medians), and our 5-replica cell's idle CPU
// at most etcd×5's.
func computeAvailGoals(results []Result) []Target {
	find := func(system string, nodes int, kind string, hog int) (Result, bool) {
		for _, r := range results {
			if r.System == system && r.Nodes == nodes && r.Kind == kind && r.Hog == hog && r.measured() {
				return r, true
			}
		}
		return Result{}, false
	}
	var hogs, sizes []int
	for _, r := range results {
		if r.System != sysChubby || r.Unavailable {
			continue
		}
		if !slices.Contains(hogs, r.Hog) {
			hogs = append(hogs, r.Hog)
		}
		if !slices.Contains(sizes, r.Nodes) && r.Nodes > 1 {
			sizes = append(sizes, r.Nodes)
		}
	}
	slices.Sort(hogs)
	slices.Sort(sizes)
	slices.Reverse(sizes) // 5 first
	var out []Target
	for _, hog := range hogs {
		beside := "no hog"
		if hog > 0 {
			beside = fmt.Sprintf("hog %d", hog)
		}
		for _, n := range sizes {
			lbl := label(sysChubby, n)
			missing := func(t Target, what string) Target {
				t.NA = "not measured in this run: " + lbl + " " + what
				return t
			}
			for _, kind := range []string{kindIdle, kindLockLoad} {
				t := Target{Name: fmt.Sprintf("view changes, %s, %s", kind, beside), Goal: "0"}
				o, ok := find(sysChubby, n, kind, hog)
				switch {
				case !ok:
					t = missing(t, kind)
				case o.ViewChanges == nil:
					t.Ours, t.NA = lbl, "no view count (see the note of its row)"
				default:
					t.Ours = fmt.Sprintf("%s: %d in %s", lbl, *o.ViewChanges, fmtSeconds(o.CPUWindowS))
					t.Met = *o.ViewChanges == 0
				}
				out = append(out, t)
			}
			for _, f := range []struct {
				kind, what string
				goal       float64
			}{
				{kindFailover, "failover after kill -9, median", goalKillMedianS},
				{kindFailoverPause, "failover after SIGSTOP of the master, median", goalPauseMedianS},
			} {
				t := Target{Name: fmt.Sprintf("%s, %s", f.what, beside), Goal: fmt.Sprintf("≤ %g s", f.goal)}
				o, ok := find(sysChubby, n, f.kind, hog)
				if !ok {
					out = append(out, missing(t, f.kind))
					continue
				}
				t.Ours = fmt.Sprintf("%s: %s (worst %s of %d)", lbl, fmtMs(o.P50Ms), fmtMs(o.MaxMs), len(o.TrialsS))
				t.Ratio = o.P50Ms / 1000
				t.Met = o.P50Ms > 0 && o.P50Ms <= f.goal*1000
				out = append(out, t)
				if f.kind != kindFailoverPause {
					continue
				}
				// The goal on silence is the cell's: a serving new master.
				t = Target{Name: "new master serving after SIGSTOP of the master (cell side), median, " + beside, Goal: fmt.Sprintf("≤ %g s", f.goal)}
				if med, worst, ok := medianWorst(o.MasterTrialsS); ok {
					t.Ours = fmt.Sprintf("%s: %s (worst %s of %d)", lbl, fmtMs(med*1000), fmtMs(worst*1000), len(o.MasterTrialsS))
					t.Ratio = med
					t.Met = med <= f.goal
				} else {
					t.Ours, t.NA = lbl, "no new master seen in /metrics"
				}
				out = append(out, t)
			}
		}
		if !slices.Contains(sizes, 5) {
			continue
		}
		t := Target{Name: "idle CPU, 5 nodes, " + beside, Goal: "≤ etcd×5's"}
		o, ok1 := find(sysChubby, 5, kindIdle, hog)
		p, ok2 := find(sysEtcd, 5, kindIdle, hog)
		switch {
		case !ok1:
			t.NA = "not measured in this run: chubby×5 idle"
		case !ok2:
			t.Ours = fmt.Sprintf("chubby×5: %.3f cores", o.CPUCoresAll)
			t.NA = "not measured in this run: etcd×5 idle"
		default:
			t.Ours = fmt.Sprintf("chubby×5: %.3f cores", o.CPUCoresAll)
			t.Peer = fmt.Sprintf("etcd×5: %.3f cores", p.CPUCoresAll)
			t.Ratio = div(o.CPUCoresAll, p.CPUCoresAll)
			t.Met = o.CPUCoresAll <= p.CPUCoresAll
		}
		out = append(out, t)
	}
	return out
}

// availRows returns the rows of kind, by hog setting, then ours first, by
// node count and system order (systems that could not run left out).
func availRows(rep *Report, kind string) []Result {
	var rows []Result
	for _, wl := range orderedWorkloads(rep.Workloads, rep.Results) {
		for _, r := range sortedRows(rep.Results, wl) {
			if r.Kind == kind {
				rows = append(rows, r)
			}
		}
	}
	slices.SortStableFunc(rows, func(a, b Result) int { return a.Hog - b.Hog })
	return rows
}

// writeAvailMarkdown renders an availability report.
func writeAvailMarkdown(w io.Writer, rep *Report) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	mode := "full run"
	if rep.Quick {
		mode = "--quick run (short windows, few trials: indicative figures only)"
	}
	p("# chubbybench avail: does the cell stay up?\n\n")
	p("%s, %s, %s; %d vCPU, Linux %s, %s. ", rep.Started.Format("2006-01-02 15:04 MST"),
		mode, rep.Finished.Sub(rep.Started).Round(time.Second), rep.Machine.CPUs, rep.Machine.Kernel, rep.Machine.GoVersion)
	p("Command: `%s`.\n\n", strings.Join(rep.Command, " "))
	p("Each system, size and hog setting runs on a fresh cluster. **hog** is the number of busy-loop processes " +
		"(`sh -c 'while :; do :; done'`) run beside the cluster for its whole measurement. **ours ÷ peer** compares our " +
		"cell with the peer at the same node count and hog setting: below 1× favours our cell for CPU and failover time, " +
		"above 1× for cycles/s. The load average is /proc/loadavg at the end of each measurement.\n\n")

	var unavailable []string
	for _, r := range rep.Results {
		if r.Unavailable {
			line := fmt.Sprintf("**%s**: %s", r.Label(), r.NA)
			if !slices.Contains(unavailable, line) {
				unavailable = append(unavailable, line)
			}
		}
	}
	if len(unavailable) > 0 {
		p("Not run: %s.\n\n", strings.Join(unavailable, "; "))
	}
	writeAvailGoals(&b, rep.Targets)

	p("\n## Idle (nothing connected)\n\n")
	p("CPU is utime+stime of every server process over the window, from /proc, in cores. View changes: views the cell moved "+
		"through (the highest view any replica's /status reports, at the start and the end). Slow loop inputs: replica-loop inputs "+
		"longer than %.1f s (chubby_replica_loop_input_seconds, summed over the replicas). Lease refusals: calls refused because "+
		"the master lease had lapsed (chubby_master_lease_refusals_total).\n\n", slowInputSeconds)
	p("| system | hog | window | CPU, all servers | ours ÷ peer: CPU | view changes | slow loop inputs | lease refusals | load avg | note |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|---|---|\n")
	for _, r := range availRows(rep, kindIdle) {
		p("| %s | %d | ", r.Label(), r.Hog)
		if !availMeasured(&b, r, 7) {
			continue
		}
		p("%s | %.3f cores | %s | %s | %s | %s | %s | %s |\n", fmtSeconds(r.CPUWindowS), r.CPUCoresAll,
			availRatio(rep, r, func(ra Ratio) float64 { return ra.CPU }), fmtCount(r.ViewChanges), fmtCount(r.SlowInputs),
			fmtCount(r.LeaseRefusals), orDash(r.LoadAvg), cell(joinNonEmpty("; ", r.Error, r.Note)))
	}

	p("\n## Lock load (each client cycles its own lock for the window)\n\n")
	p("| system | hog | clients | window | cycles/s | p50 | p99 | max | errors | view changes | slow loop inputs | lease refusals | CPU, all servers | ours ÷ peer: cycles/s | p99 | CPU | load avg | note |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n")
	for _, r := range availRows(rep, kindLockLoad) {
		p("| %s | %d | %d | ", r.Label(), r.Hog, r.Clients)
		if r.NA == "" && r.Ops == 0 && r.Error == "" {
			r.Error = "no cycle completed"
		}
		if r.Ops == 0 {
			r.CPUWindowS = 0 // a load that never ran is failed, whatever the CPU did
		}
		if !availMeasured(&b, r, 14) {
			continue
		}
		p("%s | %s | %s | %s | %s | %s | %s | %s | %s | %.3f cores | %s | %s | %s | %s | %s |\n",
			fmtSeconds(r.Seconds), fmtRate(r.Throughput), fmtMs(r.P50Ms), fmtMs(r.P99Ms), fmtMs(r.MaxMs), groupThousands(r.Errors),
			fmtCount(r.ViewChanges), fmtCount(r.SlowInputs), fmtCount(r.LeaseRefusals), r.CPUCoresAll,
			availRatio(rep, r, func(ra Ratio) float64 { return ra.Throughput }), availRatio(rep, r, func(ra Ratio) float64 { return ra.P99 }),
			availRatio(rep, r, func(ra Ratio) float64 { return ra.CPU }), orDash(r.LoadAvg), cell(joinNonEmpty("; ", r.Error, r.Note)))
	}
	writeBounds(&b, rep, func(k string) bool { return k == kindLockLoad })

	for _, f := range []struct{ kind, title string }{
		{kindFailover, "Failover after kill -9 of the leader (→ end of the next successful lock cycle)"},
		{kindFailoverPause, "Failover after SIGSTOP of the leader (alive but silent; → the next successful lock cycle; then SIGCONT)"},
	} {
		p("\n## %s\n\n", f.title)
		p("The time runs from the fault to the end of the first successful lock cycle of a client connected before it. "+
			"**New master serving** is the cell side (ours only): from the fault until another replica's /metrics says it serves as master "+
			"(chubby_is_master, polled every %v); the difference is the client finding it.\n\n", masterPoll)
		p("| system | hog | trials | median | worst | every trial | new master serving: median | worst | ours ÷ peer: median | worst | load avg | note |\n")
		p("|---|--:|--:|--:|--:|---|--:|--:|--:|--:|---|---|\n")
		for _, r := range availRows(rep, f.kind) {
			p("| %s | %d | ", r.Label(), r.Hog)
			if !availMeasured(&b, r, 9) {
				continue
			}
			trials := make([]string, len(r.TrialsS))
			for i, t := range r.TrialsS {
				trials[i] = fmt.Sprintf("%.3f", t)
			}
			mMed, mMax := "—", "—"
			if med, worst, ok := medianWorst(r.MasterTrialsS); ok {
				mMed, mMax = fmtMs(med*1000), fmtMs(worst*1000)
			}
			p("%d | %s | %s | %s s | %s | %s | %s | %s | %s | %s |\n", len(r.TrialsS), fmtMs(r.P50Ms), fmtMs(r.MaxMs), strings.Join(trials, ", "),
				mMed, mMax, availRatio(rep, r, func(ra Ratio) float64 { return ra.P50 }), availRatio(rep, r, func(ra Ratio) float64 { return ra.Max }),
				orDash(r.LoadAvg), cell(joinNonEmpty("; ", r.Error, r.Note)))
		}
		writeBounds(&b, rep, func(k string) bool { return k == f.kind })
	}

	if len(rep.Notes) > 0 {
		p("\n## Notes\n\n")
		for _, n := range rep.Notes {
			p("- %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// medianWorst is the nearest-rank median and the largest of ts (seconds).
func medianWorst(ts []float64) (med, worst float64, ok bool) {
	if len(ts) == 0 {
		return 0, 0, false
	}
	ds := make([]time.Duration, len(ts))
	for i, t := range ts {
		ds[i] = time.Duration(t * float64(time.Second))
	}
	slices.Sort(ds)
	return percentile(ds, 0.5).Seconds(), ds[len(ds)-1].Seconds(), true
}

// availMeasured writes the rest of r's row when it has no figures: why (n/a
// or failed) in the first column, dashes in the cols after it. It reports
// whether r has figures.
func availMeasured(b *strings.Builder, r Result, cols int) bool {
	dashes := strings.TrimSuffix(strings.Repeat("— | ", cols), " | ")
	switch {
	case r.NA != "":
		fmt.Fprintf(b, "%s | %s |\n", cell(r.NA), dashes)
		return false
	case !r.measured():
		fmt.Fprintf(b, "failed: %s | %s |\n", cell(r.Error), dashes)
		return false
	}
	return true
}

// availRatio is the ratio pick chooses of peer row r ("—" for ours, and
// why when there is none).
func availRatio(rep *Report, r Result, pick func(Ratio) float64) string {
	if r.System == sysChubby {
		return "—"
	}
	if ra, ok := ratioFor(rep.Ratios, r); ok {
		return fmtRatio(pick(ra))
	}
	return oursMissing(rep.Results, r)
}

// writeAvailGoals writes the goals table of an availability report.
func writeAvailGoals(b *strings.Builder, ts []Target) {
	if len(ts) == 0 {
		return
	}
	b.WriteString("## Goals (issue 22), this run\n\n| goal | target | ours | peer | met |\n|---|---|--:|--:|---|\n")
	for _, t := range ts {
		met := "no"
		switch {
		case t.NA != "":
			met = "n/a: " + cell(t.NA)
		case t.Met:
			met = "**yes**"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", t.Name, t.Goal, orDash(t.Ours), orDash(t.Peer), met)
	}
}

// fmtCount formats a counter that only some systems have ("—": not known).
func fmtCount(p *int64) string {
	if p == nil {
		return "—"
	}
	return groupThousands(*p)
}

func fmtSeconds(s float64) string {
	if s <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f s", s)
}

// availNotes are the caveats of an availability run's figures.
func availNotes(cfg *Config) []string {
	notes := []string{
		fmt.Sprintf("%d vCPU shared by every server, the hog and the benchmark's own clients; other work on the machine shows in the load average of each row: compare rows of one run, not runs.", runtime.NumCPU()),
		fmt.Sprintf("Each cluster settles for %v (the hog already running) before its idle window; nothing is connected during it, and our cell's counters are read once at each end (HTTP /status and /metrics of every replica).", availSettle),
		fmt.Sprintf("failover: after the fault a lock cycle that takes longer than %v is abandoned and tried again at once (--failover-attempt), every system alike; median is the nearest-rank median of the trials.", cfg.FailoverAttempt),
		"failover-pause stops the leader's process group with SIGSTOP: its sockets stay open and its port accepts, as with a paused VM; it is not a network partition (tools/clustertest's netns harness is not used here). After each trial the leader is continued with SIGCONT and the next trial waits until it has rejoined.",
		"View changes count views, not masters: a view change that a competing candidate overtakes counts each view it went through. A view change still under way when the window ends is counted in no window.",
	}
	if cfg.Quick {
		notes = append(notes, "--quick: short windows and few trials; figures are indicative (the full run: chubbybench avail).")
	}
	return notes
}
