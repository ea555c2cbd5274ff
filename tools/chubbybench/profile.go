package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"
)

// Profiles of our cell: a one-replica cell run from bin/chubbyd-pprof
// (chubbyd plus net/http/pprof, see chubbyd_pprof.go.in) under the lock
// workloads, a CPU profile per workload, then the heap, allocations and
// mutex contention of the whole pass. The raw profiles go to
// <out>/profiles/ for `go tool pprof`; a summary goes into the report.

// FuncShare is one function's (or package's) share of a profile's total.
type FuncShare struct {
	Name  string  `json:"name"`
	Share float64 `json:"share"` // fraction of the profile's total, 0..1
}

// ProfileSummary is the gist of one profile.
type ProfileSummary struct {
	Workload   string      `json:"workload"`      // what ran while it was taken
	Type       string      `json:"type"`          // cpu, alloc_space, inuse_space, delay
	File       string      `json:"file"`          // under <out>/profiles/
	Seconds    float64     `json:"seconds"`       // CPU profiles: length
	Throughput float64     `json:"throughput"`    // cycles/s while profiling (profiling on)
	CoresBusy  float64     `json:"cores_busy"`    // CPU profiles: sampled CPU time / length
	Total      string      `json:"total"`         // the profile's total, human-readable
	Flat       []FuncShare `json:"flat"`          // functions by self time/bytes
	Cum        []FuncShare `json:"cum_ours"`      // our module's functions by cumulative share
	Packages   []FuncShare `json:"packages"`      // packages by self share
	Categories []FuncShare `json:"categories"`    // CPU profiles: what the time is spent on (see categorize)
	Log        *logStats   `json:"log,omitempty"` // the cell's log while profiling (from its /metrics)
	Command    string      `json:"pprof_command,omitempty"`
	Error      string      `json:"error,omitempty"`
}

// profiledWorkloads are the lock workloads profiled, in order.
var profiledWorkloads = []Workload{
	{Kind: kindLockDistinct, Clients: 1},
	{Kind: kindLockDistinct, Clients: 64},
	{Kind: kindLockContended, Clients: 64},
}

// runProfiles runs the profiling pass with the pprof build bin.
func (r *runner) runProfiles(ctx context.Context, bin, dir string) []ProfileSummary {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return []ProfileSummary{{Error: err.Error()}}
	}
	var (
		ports []int
		err   error
	)
	ports, err = freePorts(1)
	if err != nil {
		return []ProfileSummary{{Error: err.Error()}}
	}
	base := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", ports[0])
	sys := newChubbySystem(r.env, 1, bin, false, nil)
	sys.pprofEnv = []string{fmt.Sprintf("CHUBBYBENCH_PPROF=127.0.0.1:%d", ports[0])}
	r.prog.printf("profiles: starting chubby×1 from %s", bin)
	defer sys.Stop()
	if err := sys.Start(ctx); err != nil {
		return []ProfileSummary{{Error: fmt.Sprintf("start: %v", err)}}
	}
	metricsURL := "http://" + sys.reps[0].HTTP + "/metrics"
	clients, err := r.openClients(ctx, sys, 64)
	if err != nil {
		return []ProfileSummary{{Error: fmt.Sprintf("clients: %v", err)}}
	}
	defer closeClients(clients)
	r.warmUp(ctx, sys, clients)

	var out []ProfileSummary
	for _, w := range profiledWorkloads {
		if ctx.Err() != nil {
			break
		}
		ps := ProfileSummary{Workload: w.Name(), Type: "cpu", File: strings.ReplaceAll(w.Name(), "/", "-") + ".cpu.pb.gz"}
		var (
			wg     sync.WaitGroup
			getErr error
		)
		path := filepath.Join(dir, ps.File)
		m0, merr := scrapeMetrics(ctx, metricsURL)
		t0 := time.Now()
		wg.Go(func() {
			getErr = fetch(ctx, fmt.Sprintf("%sprofile?seconds=%d", base, int(r.cfg.ProfileSeconds.Seconds())), path, r.cfg.ProfileSeconds+30*time.Second)
		})
		// No warm-up: the CPU profile is already running.
		res := r.runLoad(ctx, sys, clients[:w.Clients], w, 0, r.cfg.ProfileSeconds)
		wg.Wait()
		if m1, err := scrapeMetrics(ctx, metricsURL); err == nil && merr == nil {
			st := logDelta(m0, m1, time.Since(t0).Seconds())
			ps.Log = &st
		}
		ps.Throughput = res.Throughput
		if getErr != nil {
			ps.Error = getErr.Error()
			out = append(out, ps)
			continue
		}
		summarizeFile(&ps, path, "cpu")
		r.prog.printf("profiles: %-22s %6.0f cycles/s while profiled, %.2f cores busy in the cell", w.Name(), ps.Throughput, ps.CoresBusy)
		if ps.Log != nil {
			r.prog.printf("profiles: %-22s log: %.0f fsyncs/s, %.1f entries per fsync, %.3f ms per write+fsync", w.Name(), ps.Log.FsyncsPerS, ps.Log.EntriesPerFsync, ps.Log.AppendMeanMs)
		}
		out = append(out, ps)
	}
	for _, p := range []struct{ name, typ string }{{"allocs", "alloc_space"}, {"heap", "inuse_space"}, {"mutex", "delay"}} {
		ps := ProfileSummary{Workload: "whole pass", Type: p.typ, File: p.name + ".pb.gz"}
		path := filepath.Join(dir, ps.File)
		if err := fetch(ctx, base+p.name, path, 30*time.Second); err != nil {
			ps.Error = err.Error()
		} else {
			summarizeFile(&ps, path, p.typ)
		}
		out = append(out, ps)
	}
	return out
}

// fetch GETs url (loopback only) into path.
func fetch(ctx context.Context, url, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if !isLoopback(req.URL.Host) {
		return fmt.Errorf("fetch %s: not a loopback address", url)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("fetch %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, io.LimitReader(resp.Body, 256<<20)); err != nil {
		f.Close()
		return fmt.Errorf("fetch %s: %w", url, err)
	}
	return f.Close()
}

// summarizeFile parses the profile at path into ps.
func summarizeFile(ps *ProfileSummary, path, sampleType string) {
	f, err := os.Open(path)
	if err != nil {
		ps.Error = err.Error()
		return
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		ps.Error = fmt.Sprintf("parse %s: %v", path, err)
		return
	}
	sum, err := summarizeProfile(p, sampleType, 15)
	if err != nil {
		ps.Error = err.Error()
		return
	}
	ps.Flat, ps.Cum, ps.Packages, ps.Categories = sum.flat, sum.cum, sum.pkgs, sum.cats
	ps.Command = fmt.Sprintf("go tool pprof -top bin/chubbyd-pprof %s", path)
	switch sampleType {
	case "cpu":
		ps.Seconds = float64(p.DurationNanos) / 1e9
		if ps.Seconds > 0 {
			ps.CoresBusy = float64(sum.total) / 1e9 / ps.Seconds
		}
		ps.Total = fmt.Sprintf("%.2f s CPU", float64(sum.total)/1e9)
	case "delay":
		ps.Total = fmt.Sprintf("%.3f s of sampled contention", float64(sum.total)/1e9)
	default:
		ps.Total = fmtBytes(sum.total)
	}
}

// profileSums is summarizeProfile's answer.
type profileSums struct {
	total                 int64
	flat, cum, pkgs, cats []FuncShare
}

// ourModule prefixes our packages' function names.
const ourModule = "github.com/chubbygo/chubby/"

// summarizeProfile totals the sample values of sampleType by function:
// flat (the leaf frame), cumulative (every distinct function on the stack,
// once per sample, for our module only) and by package of the leaf. It
// keeps the top n of each.
func summarizeProfile(p *profile.Profile, sampleType string, n int) (profileSums, error) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == sampleType {
			idx = i
		}
	}
	if idx < 0 {
		return profileSums{}, fmt.Errorf("profile has no %q samples", sampleType)
	}
	flat, cum, pkgs, cats := map[string]int64{}, map[string]int64{}, map[string]int64{}, map[string]int64{}
	var total int64
	for _, s := range p.Sample {
		v := s.Value[idx]
		if v == 0 {
			continue
		}
		total += v
		leaf := ""
		seen := map[string]bool{}
		var stack []string
		for _, loc := range s.Location {
			for _, ln := range loc.Line {
				if ln.Function == nil {
					continue
				}
				name := ln.Function.Name
				stack = append(stack, name)
				if leaf == "" {
					leaf = name
				}
				if !seen[name] {
					seen[name] = true
					if strings.HasPrefix(name, ourModule) {
						cum[name] += v
					}
				}
			}
		}
		if leaf == "" {
			leaf = "(unknown)"
		}
		flat[leaf] += v
		pkgs[pkgOf(leaf)] += v
		cats[categorize(stack)] += v
	}
	return profileSums{total: total, flat: topShares(flat, total, n), cum: topShares(cum, total, n),
		pkgs: topShares(pkgs, total, n), cats: topShares(cats, total, len(cats))}, nil
}

// categories attribute a sample to what the cell was doing, by the first
// rule (in this order) matching any frame of its stack: leaf first, so
// that e.g. a netpoll syscall made for Kitex counts as network I/O.
var categories = []struct {
	name     string
	patterns []string
}{
	// Badger syncs its write-ahead log, a memory-mapped file, with msync.
	{"log sync (fsync/msync)", []string{"os.(*File).Sync", "syscall.Fdatasync", "syscall.Fsync", "unix.Msync", "unix.Fdatasync", "z.Msync", "(*MmapFile).Sync"}},
	{"garbage collection", []string{"runtime.gcBgMarkWorker", "runtime.gcDrain", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcAssistAlloc", "runtime.markroot"}},
	{"network I/O (netpoll syscalls)", []string{"github.com/cloudwego/netpoll.(*defaultPoll)", "github.com/cloudwego/netpoll.sendmsg", "github.com/cloudwego/netpoll.readv", "github.com/cloudwego/netpoll.writev", "github.com/cloudwego/netpoll.(*netFD)", "github.com/cloudwego/netpoll.EpollWait", "github.com/cloudwego/netpoll.(*connection).flush", "github.com/cloudwego/netpoll.(*connection).inputs"}},
	{"Thrift encode/decode", []string{"FastRead", "FastWrite", "BLength", "github.com/cloudwego/gopkg/protocol/thrift", "github.com/cloudwego/frugal"}},
	{"fs state machine", []string{"github.com/chubbygo/chubby/fs."}},
	{"log append (Badger, besides fsync)", []string{"github.com/dgraph-io/badger", "github.com/chubbygo/chubby/replica."}},
	{"Kitex (RPC framework)", []string{"github.com/cloudwego/"}},
	{"cell and rpc (ours)", []string{"github.com/chubbygo/chubby/"}},
	{"Go scheduler", []string{"runtime.schedule", "runtime.findRunnable", "runtime.mcall", "runtime.park_m", "runtime.goexit0", "runtime.mstart"}},
	{"allocation", []string{"runtime.mallocgc"}},
}

// categorize names what a stack (leaf first) was doing.
func categorize(stack []string) string {
	for _, c := range categories {
		for _, f := range stack {
			for _, pat := range c.patterns {
				if strings.Contains(f, pat) {
					return c.name
				}
			}
		}
	}
	return "other"
}

// topShares returns the n largest entries of m as shares of total.
func topShares(m map[string]int64, total int64, n int) []FuncShare {
	out := make([]FuncShare, 0, len(m))
	for k, v := range m {
		out = append(out, FuncShare{Name: k, Share: float64(v) / float64(max(total, 1))})
	}
	slices.SortFunc(out, func(a, b FuncShare) int {
		switch {
		case a.Share > b.Share:
			return -1
		case a.Share < b.Share:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// pkgOf returns the package path of a function name as pprof prints it:
// "github.com/dgraph-io/badger/v4.(*DB).Update" → "github.com/dgraph-io/badger/v4",
// "runtime.mallocgc" → "runtime". Type parameters ([...]) are ignored.
func pkgOf(fn string) string {
	if i := strings.IndexByte(fn, '['); i >= 0 {
		fn = fn[:i]
	}
	slash := strings.LastIndexByte(fn, '/')
	if dot := strings.IndexByte(fn[slash+1:], '.'); dot >= 0 {
		return fn[:slash+1+dot]
	}
	return fn
}

// writeProfileMarkdown renders one profile summary.
func writeProfileMarkdown(b *strings.Builder, ps ProfileSummary) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("**%s — %s** (`%s`)", ps.Workload, ps.Type, ps.File)
	if ps.Error != "" {
		p(": %s\n\n", ps.Error)
		return
	}
	if ps.Type == "cpu" {
		p(": %s over %.1f s (%.2f cores busy in the cell) at %s while profiled.\n\n", ps.Total, ps.Seconds, ps.CoresBusy, fmtRate(ps.Throughput))
	} else {
		p(": %s.\n\n", ps.Total)
	}
	list := func(title string, xs []FuncShare, k int, short func(string) string) {
		if len(xs) == 0 {
			return
		}
		parts := make([]string, 0, k)
		for i, x := range xs {
			if i == k {
				break
			}
			parts = append(parts, fmt.Sprintf("%s %.1f%%", short(x.Name), 100*x.Share))
		}
		p("- %s: %s\n", title, strings.Join(parts, ", "))
	}
	if ps.Log != nil {
		p("- the cell's log meanwhile: %.0f commands/s, %.0f fsyncs/s, %.1f entries per fsync, %.3f ms per batch write+fsync\n",
			ps.Log.CommandsPerS, ps.Log.FsyncsPerS, ps.Log.EntriesPerFsync, ps.Log.AppendMeanMs)
	}
	same := func(s string) string { return s }
	list("by activity", ps.Categories, 12, same)
	list("by package (self)", ps.Packages, 8, shortPkg)
	list("top functions (self)", ps.Flat, 8, shortFunc)
	list("our code (cumulative)", ps.Cum, 8, shortFunc)
	p("\n")
}

// shortPkg trims a package path to its last element, keeping a major
// version's or syscall's parent: "github.com/dgraph-io/badger/v4" →
// "badger/v4", "internal/runtime/syscall/linux" → "syscall/linux".
func shortPkg(pkg string) string {
	parts := strings.Split(pkg, "/")
	last := parts[len(parts)-1]
	if len(parts) > 1 && (parts[len(parts)-2] == "syscall" ||
		len(last) > 1 && last[0] == 'v' && strings.Trim(last[1:], "0123456789") == "") {
		return parts[len(parts)-2] + "/" + last
	}
	return last
}

// shortFunc trims a function name's module path for tables:
// "github.com/chubbygo/chubby/cell.(*Server).Acquire" → "cell.(*Server).Acquire".
func shortFunc(fn string) string {
	if i := strings.IndexByte(fn, '['); i >= 0 {
		fn = fn[:i] + "[…]"
	}
	head := fn
	if i := strings.IndexByte(fn, '('); i >= 0 {
		head = fn[:i]
	}
	if slash := strings.LastIndexByte(head, '/'); slash >= 0 {
		return fn[slash+1:]
	}
	return fn
}
