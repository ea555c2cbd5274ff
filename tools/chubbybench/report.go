package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is everything a run produced: results.json is this, results.md
// and results.png are drawn from it.
type Report struct {
	// Mode is "" for the comparison benchmark, modeAvail for chubbybench
	// avail (its own tables: writeAvailMarkdown).
	Mode      string            `json:"mode,omitempty"`
	Started   time.Time         `json:"started"`
	Finished  time.Time         `json:"finished"`
	Command   []string          `json:"command"`
	Quick     bool              `json:"quick"`
	Machine   Machine           `json:"machine"`
	Flags     map[string]string `json:"flags"`
	Workloads []string          `json:"workloads"` // names, in the run's order
	Results   []Result          `json:"results"`
	Ratios    []Ratio           `json:"ratios"`
	Targets   []Target          `json:"targets,omitempty"`
	Profiles  []ProfileSummary  `json:"profiles,omitempty"`
	Notes     []string          `json:"notes,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs      int    `json:"cpus"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	OpenFiles string `json:"open_files_limit"`
}

// Ratio compares our cell with one peer on one workload, both measured in
// the same run with the same node count: ours ÷ peer. Zero means not
// comparable (a figure missing). Throughput above 1 and latency, CPU and
// memory below 1 favour our cell.
type Ratio struct {
	Workload      string  `json:"workload"`
	Ours          string  `json:"ours"`
	Peer          string  `json:"peer"`
	Throughput    float64 `json:"throughput,omitempty"`
	P50           float64 `json:"p50,omitempty"`
	P99           float64 `json:"p99,omitempty"`
	CPUPerSession float64 `json:"cpu_per_session,omitempty"`
	RSSPerSession float64 `json:"rss_per_session,omitempty"`
	// chubbybench avail: CPU of every server process over the window
	// (idle, lock-load), and the worst failover trial.
	CPU float64 `json:"cpu,omitempty"`
	Max float64 `json:"max,omitempty"`
}

// div is a/b, or 0 when either is not a positive number.
func div(a, b float64) float64 {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return 0
	}
	return a / b
}

// computeRatios pairs every measured peer result with our cell's result of
// the same workload at the same node count.
func computeRatios(results []Result) []Ratio {
	ours := map[string]Result{}
	for _, r := range results {
		if r.System == sysChubby && r.measured() {
			ours[fmt.Sprintf("%s@%d", r.Workload, r.Nodes)] = r
		}
	}
	var out []Ratio
	for _, p := range results {
		if p.System == sysChubby || !p.measured() {
			continue
		}
		o, ok := ours[fmt.Sprintf("%s@%d", p.Workload, p.Nodes)]
		if !ok {
			continue
		}
		ra := Ratio{Workload: p.Workload, Ours: o.Label(), Peer: p.Label()}
		switch p.Kind {
		case kindSessionsHeld:
			ra.CPUPerSession = div(o.cpuPerSession(), p.cpuPerSession())
			ra.RSSPerSession = div(o.rssPerSession(), p.rssPerSession())
			ra.P50, ra.P99 = div(o.P50Ms, p.P50Ms), div(o.P99Ms, p.P99Ms)
		case kindFailover, kindFailoverPause:
			ra.P50, ra.P99, ra.Max = div(o.P50Ms, p.P50Ms), div(o.P99Ms, p.P99Ms), div(o.MaxMs, p.MaxMs)
		case kindIdle:
			ra.CPU = div(o.CPUCoresAll, p.CPUCoresAll)
		case kindLockLoad:
			ra.Throughput = div(o.Throughput, p.Throughput)
			ra.P50, ra.P99 = div(o.P50Ms, p.P50Ms), div(o.P99Ms, p.P99Ms)
			ra.CPU = div(o.CPUCoresAll, p.CPUCoresAll)
		default:
			ra.Throughput = div(o.Throughput, p.Throughput)
			ra.P50, ra.P99 = div(o.P50Ms, p.P50Ms), div(o.P99Ms, p.P99Ms)
		}
		out = append(out, ra)
	}
	return out
}

// ratioFor finds the ratio of peer result p, if any.
func ratioFor(ratios []Ratio, p Result) (Ratio, bool) {
	for _, r := range ratios {
		if r.Workload == p.Workload && r.Peer == p.Label() {
			return r, true
		}
	}
	return Ratio{}, false
}

// Formatting for tables.

func fmtMs(v float64) string {
	switch {
	case v <= 0:
		return "—"
	case v < 0.01:
		return fmt.Sprintf("%.2f µs", v*1000) // cache hits
	case v < 1:
		return fmt.Sprintf("%.3f ms", v)
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	case v < 1000:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.2f s", v/1000)
	}
}

func fmtRate(v float64) string {
	if v <= 0 {
		return "—"
	}
	if v < 10 {
		return fmt.Sprintf("%.1f/s", v)
	}
	return groupThousands(int64(math.Round(v))) + "/s"
}

func groupThousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtAbortRate formats a transfer result's abort rate with its counts:
// "12.5% (100 of 800 attempts)"; "—" when there were no attempts (or the
// result is from a run before transfer existed).
func fmtAbortRate(r Result) string {
	rate, ok := r.abortRate()
	if !ok {
		return "—"
	}
	pct := rate * 100
	var s string
	switch {
	case r.Aborts == 0:
		s = "0%"
	case pct < 0.1:
		s = fmt.Sprintf("%.3f%%", pct)
	case pct < 10:
		s = fmt.Sprintf("%.2f%%", pct)
	default:
		s = fmt.Sprintf("%.1f%%", pct)
	}
	return fmt.Sprintf("%s (%s of %s attempts)", s, groupThousands(r.Aborts), groupThousands(r.Attempts))
}

func fmtBytes(n int64) string {
	switch {
	case n <= 0:
		return "—"
	case n < 10<<20:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	case n < 10<<30:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
}

func fmtRatio(v float64) string {
	switch {
	case v <= 0:
		return "—"
	case v < 0.1:
		return fmt.Sprintf("%.3f×", v)
	case v < 10:
		return fmt.Sprintf("%.2f×", v)
	default:
		return fmt.Sprintf("%.0f×", v)
	}
}

// cell makes text safe inside a markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

// oursMissing says why a peer row has no ratio.
func oursMissing(results []Result, p Result) string {
	for _, r := range results {
		if r.System == sysChubby && r.Workload == p.Workload && r.Nodes == p.Nodes {
			if r.NA != "" {
				return "— (" + label(sysChubby, p.Nodes) + ": n/a)"
			}
			return "— (" + label(sysChubby, p.Nodes) + " failed)"
		}
	}
	return "— (no " + label(sysChubby, p.Nodes) + " in this run)"
}

// orderedWorkloads lists the workloads in the run's order (order), then
// any other workload of results in first-seen order.
func orderedWorkloads(order []string, results []Result) []string {
	out := slices.Clone(order)
	for _, r := range results {
		if !slices.Contains(out, r.Workload) {
			out = append(out, r.Workload)
		}
	}
	return out
}

// sortedRows returns the results of workload wl, ours first, then by
// node count and system order. Systems that could not run at all are left
// out (the report lists them once).
func sortedRows(results []Result, wl string) []Result {
	var rows []Result
	for _, r := range results {
		if r.Workload == wl && !r.Unavailable {
			rows = append(rows, r)
		}
	}
	rank := func(s string) int { return slices.Index(allSystems, s) }
	slices.SortStableFunc(rows, func(a, b Result) int {
		if (a.System == sysChubby) != (b.System == sysChubby) {
			if a.System == sysChubby {
				return -1
			}
			return 1
		}
		if a.Nodes != b.Nodes {
			return a.Nodes - b.Nodes
		}
		return rank(a.System) - rank(b.System)
	})
	return rows
}

// writeMarkdown renders the report as markdown tables.
func writeMarkdown(w io.Writer, rep *Report) error {
	if rep.Mode == modeAvail {
		return writeAvailMarkdown(w, rep)
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	mode := "full run"
	if rep.Quick {
		mode = "--quick run (short windows: indicative figures only)"
	}
	p("# chubbybench: our cell against etcd, ZooKeeper and Redis\n\n")
	p("%s, %s, %s; %d vCPU, Linux %s, %s, open files %s per process. ", rep.Started.Format("2006-01-02 15:04 MST"),
		mode, rep.Finished.Sub(rep.Started).Round(time.Second), rep.Machine.CPUs, rep.Machine.Kernel, rep.Machine.GoVersion, rep.Machine.OpenFiles)
	p("Command: `%s`.\n\n", strings.Join(rep.Command, " "))
	p("Every server and the benchmark clients share this machine; all traffic is on loopback. Every system runs with its default durability " +
		"(our cell, etcd and ZooKeeper fsync before acknowledging a write; Redis does not). " +
		"**ours ÷ peer** compares our cell with the peer at the same node count, measured in this run: " +
		"throughput above 1× and latency below 1× favour our cell. Latencies are per operation (a lock cycle is acquire + release).\n\n")

	p("Workloads: ")
	var descs []string
	seen := map[string]bool{}
	for _, wl := range orderedWorkloads(rep.Workloads, rep.Results) {
		w := workloadByName(wl)
		key := w.Kind + "/" + w.Variant
		if w.Kind == "" || seen[key] {
			continue
		}
		seen[key] = true
		descs = append(descs, fmt.Sprintf("**%s** — %s", strings.TrimSuffix(wl, fmt.Sprintf("/%d", w.Clients)), w.Describe()))
	}
	p("%s.\n\n", strings.Join(descs, "; "))

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

	if len(rep.Targets) > 0 {
		writeTargets(&b, rep.Targets)
		p("\n")
	}

	p("## Locks, writes, reads, session creation\n\n")
	p("| workload | system | throughput | p50 | p99 | ours ÷ peer: throughput | p50 | p99 | note |\n")
	p("|---|---|--:|--:|--:|--:|--:|--:|---|\n")
	for _, wl := range orderedWorkloads(rep.Workloads, rep.Results) {
		rows := sortedRows(rep.Results, wl)
		if len(rows) == 0 || !(Workload{Kind: rows[0].Kind}).isLoad() || (Workload{Kind: rows[0].Kind}).isTxn() {
			continue
		}
		for _, r := range rows {
			writeRow(&b, rep, wl, r, nil)
		}
	}
	writeBounds(&b, rep, func(k string) bool { return (Workload{Kind: k}).isLoad() && !(Workload{Kind: k}).isTxn() })

	writeTransfers(&b, rep)

	p("\n## Sessions held (master process: CPU over the hold window, resident memory)\n\n")
	p("| workload | system | sessions held (target) | set-up rate | master CPU | master RSS (before → held) | RSS per session | probe read p50 / p99 | ours ÷ peer: CPU per session | RSS per session | note |\n")
	p("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, wl := range orderedWorkloads(rep.Workloads, rep.Results) {
		for _, r := range sortedRows(rep.Results, wl) {
			if r.Kind != kindSessionsHeld {
				continue
			}
			p("| %s | %s | ", wl, r.Label())
			switch {
			case r.NA != "":
				p("%s | — | — | — | — | — | — | — |  |\n", cell(r.NA))
				continue
			case !r.measured():
				p("failed: %s | — | — | — | — | — | — | — |  |\n", cell(r.Error))
				continue
			}
			p("%s (%s) | %s | %.3f cores | %s → %s | %s | %s / %s | ", groupThousands(int64(r.Sessions)), groupThousands(int64(r.SessionsTarget)),
				fmtRate(r.SetupPerS), r.CPUCores, fmtBytes(r.RSSBaseBytes), fmtBytes(r.RSSBytes), fmtPerSession(r.rssPerSession()),
				fmtMs(r.P50Ms), fmtMs(r.P99Ms))
			switch ra, ok := ratioFor(rep.Ratios, r); {
			case r.System == sysChubby:
				p("— | — | ")
			case ok:
				p("%s | %s | ", fmtRatio(ra.CPUPerSession), fmtRatio(ra.RSSPerSession))
			default:
				p("%s | — | ", oursMissing(rep.Results, r))
			}
			extra := ""
			if r.Nodes > 1 {
				extra = fmt.Sprintf("all nodes: %.3f cores, %s", r.CPUCoresAll, fmtBytes(r.RSSAllBytes))
			}
			p("%s |\n", cell(joinNonEmpty("; ", extra, r.Note)))
		}
	}
	writeBounds(&b, rep, func(k string) bool { return k == kindSessionsHeld })

	p("\n## Failover (kill -9 of the leader → end of the next successful lock cycle)\n\n")
	p("| system | trials | p50 | p99 (max) | ours ÷ peer: p50 | note |\n")
	p("|---|---|--:|--:|--:|---|\n")
	for _, r := range sortedRows(rep.Results, Workload{Kind: kindFailover}.Name()) {
		p("| %s | ", r.Label())
		switch {
		case r.NA != "":
			p("%s | — | — | — |  |\n", cell(r.NA))
			continue
		case !r.measured():
			p("failed: %s | — | — | — |  |\n", cell(r.Error))
			continue
		}
		trials := make([]string, len(r.TrialsS))
		for i, t := range r.TrialsS {
			trials[i] = fmt.Sprintf("%.3f s", t)
		}
		p("%s | %s | %s | ", strings.Join(trials, ", "), fmtMs(r.P50Ms), fmtMs(r.P99Ms))
		switch ra, ok := ratioFor(rep.Ratios, r); {
		case r.System == sysChubby:
			p("— | ")
		case ok:
			p("%s | ", fmtRatio(ra.P50))
		default:
			p("%s | ", oursMissing(rep.Results, r))
		}
		p("%s |\n", cell(joinNonEmpty("; ", r.Error, r.Note)))
	}
	writeBounds(&b, rep, func(k string) bool { return k == kindFailover })

	if len(rep.Profiles) > 0 {
		p("\n## Where our cell spends its time (pprof, one replica, under the lock workloads)\n\n")
		for _, ps := range rep.Profiles {
			writeProfileMarkdown(&b, ps)
		}
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

// writeTransfers writes the table of the transfer workloads, when the run
// has any: committed transactions per second, the latency of a committed
// transaction (its aborted attempts included) and the abort rate.
func writeTransfers(b *strings.Builder, rep *Report) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	var wls []string
	for _, wl := range orderedWorkloads(rep.Workloads, rep.Results) {
		if rows := sortedRows(rep.Results, wl); len(rows) > 0 && (Workload{Kind: rows[0].Kind}).isTxn() {
			wls = append(wls, wl)
		}
	}
	if len(wls) == 0 {
		return
	}
	p("\n## Transactions (transfer: read two accounts, write both; optimistic, an aborted attempt is retried)\n\n")
	p("Throughput counts committed transactions; a transaction's latency runs from its first attempt to its commit, retries included; " +
		"the abort rate is aborted attempts ÷ all attempts. Every balance is checked after each workload (the sum must not change).\n\n")
	p("| workload | system | txns/s | p50 | p99 | abort rate | ours ÷ peer: txns/s | p50 | p99 | note |\n")
	p("|---|---|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, wl := range wls {
		for _, r := range sortedRows(rep.Results, wl) {
			writeRow(b, rep, wl, r, []string{fmtAbortRate(r)})
		}
	}
	writeBounds(b, rep, func(k string) bool { return (Workload{Kind: k}).isTxn() })
}

// writeRow writes r's row of a throughput table: throughput, p50, p99,
// then the extra columns, the ours ÷ peer ratios and the note (a row not
// run or failed fills the columns with dashes).
func writeRow(b *strings.Builder, rep *Report, wl string, r Result, extra []string) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("| %s | %s | ", wl, r.Label())
	dashes := strings.Repeat("— | ", 5+len(extra))
	switch {
	case r.NA != "":
		p("%s | %s |\n", cell(r.NA), dashes)
		return
	case !r.measured():
		p("failed: %s | %s |\n", cell(r.Error), dashes)
		return
	}
	p("%s | %s | %s | ", fmtRate(r.Throughput), fmtMs(r.P50Ms), fmtMs(r.P99Ms))
	for _, x := range extra {
		p("%s | ", x)
	}
	switch ra, ok := ratioFor(rep.Ratios, r); {
	case r.System == sysChubby:
		p("— | — | — | ")
	case ok:
		p("%s | %s | %s | ", fmtRatio(ra.Throughput), fmtRatio(ra.P50), fmtRatio(ra.P99))
	default:
		p("%s | — | — | ", oursMissing(rep.Results, r))
	}
	p("%s |\n", cell(r.Note))
}

// writeBounds lists, under a table, what bounds the figures of the workload
// kinds keep selects: one line per kind and explanation, naming every
// system it applies to.
func writeBounds(b *strings.Builder, rep *Report, keep func(kind string) bool) {
	type key struct{ kind, bound string }
	var order []key
	labels := map[key][]string{}
	for _, wl := range orderedWorkloads(rep.Workloads, rep.Results) {
		for _, r := range sortedRows(rep.Results, wl) {
			if !keep(r.Kind) || r.Bound == "" || r.NA != "" {
				continue
			}
			kind := r.Kind
			switch {
			case r.Variant != "":
				kind = r.Workload // sessions-held/batched, sessions-held/direct
			case (Workload{Kind: r.Kind}).isTxn():
				kind = "transfer" // -spread and -hot: the same transactions
			}
			k := key{kind, r.Bound}
			if _, ok := labels[k]; !ok {
				order = append(order, k)
			}
			if !slices.Contains(labels[k], r.Label()) {
				labels[k] = append(labels[k], r.Label())
			}
		}
	}
	if len(order) == 0 {
		return
	}
	fmt.Fprintf(b, "\nWhat bounds each figure:\n\n")
	for _, k := range order {
		fmt.Fprintf(b, "- %s, %s: %s\n", k.kind, strings.Join(labels[k], ", "), k.bound)
	}
}

// workloadByName parses a workload name back ("lock-distinct/64",
// "sessions-held/batched", "failover", "lock-load/64/hog4"); the zero
// Workload if unknown.
func workloadByName(name string) Workload {
	if i := strings.LastIndex(name, "/hog"); i >= 0 {
		if h, err := strconv.Atoi(name[i+len("/hog"):]); err == nil && h >= 0 {
			w := workloadByName(name[:i])
			if w.Kind == "" {
				return w
			}
			w.Avail, w.Hog = true, h
			return w
		}
	}
	kind, rest, _ := strings.Cut(name, "/")
	switch kind {
	case kindFailover, kindFailoverPause:
		return Workload{Kind: kind, Clients: 1}
	case kindIdle:
		return Workload{Kind: kind}
	case kindSessionsHeld:
		return Workload{Kind: kind, Variant: rest}
	}
	n, err := strconv.Atoi(rest)
	if err != nil {
		return Workload{}
	}
	return Workload{Kind: kind, Clients: n}
}

func fmtPerSession(bytes float64) string {
	if bytes <= 0 {
		return "—"
	}
	if bytes < 10<<10 {
		return fmt.Sprintf("%.0f B", bytes)
	}
	return fmt.Sprintf("%.1f KiB", bytes/(1<<10))
}

func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, s := range parts {
		if s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, sep)
}

// writeJSON writes the report as indented JSON.
func writeJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// writeOutputs writes results.md, results.json and results.png into dir.
func writeOutputs(dir string, rep *Report, widthCm, heightCm float64) (md string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("results directory: %w", err)
	}
	var b strings.Builder
	if err := writeMarkdown(&b, rep); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(b.String()), 0o644); err != nil {
		return "", fmt.Errorf("results.md: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "results.json"))
	if err != nil {
		return "", fmt.Errorf("results.json: %w", err)
	}
	if err := writeJSON(f, rep); err != nil {
		f.Close()
		return "", fmt.Errorf("results.json: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("results.json: %w", err)
	}
	png := filepath.Join(dir, "results.png")
	if rep.Mode == modeAvail { // no chart: the tables are the figures
		os.Remove(png)
		return b.String(), nil
	}
	if err := writeChart(png, rep, widthCm, heightCm); errors.Is(err, errNoChart) {
		os.Remove(png) // not an older run's chart
	} else if err != nil {
		return b.String(), fmt.Errorf("results.png: %w", err)
	}
	return b.String(), nil
}
