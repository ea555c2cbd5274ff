// Command chubbybench runs the same workloads against our lock cell and
// against etcd, ZooKeeper and Redis on this machine, in one run, and
// reports every figure with ours ÷ peer ratios computed pair by pair.
//
//	./build.sh bench            install the peers if missing, build, run everything
//	./build.sh bench --quick    the same in under 3 minutes
//	chubbybench --help          every flag with its default
//
// Workloads (each on every system where it applies): lock acquire+release
// cycles on distinct locks and on one contended lock with 1, 16 and 64
// clients; small writes; reads (uncached, and cached where the system has a
// comparable read); session creation; holding many sessions alive while the
// master's CPU and RSS are measured from /proc; transfers (2-row optimistic
// transactions over 1,000 or 8 accounts, with their abort rate); and
// failover (kill -9 of the leader, time to the next successful lock cycle).
// Our cell is started as N chubbyd processes from a peer list; the peers are
// started as 1 and 3 nodes on loopback with their default durability and
// driven by their standard Go clients. Results go to --out as results.md,
// results.json and results.png, with server logs in logs/ and pprof profiles
// of our cell in profiles/.
//
// chubbybench avail is the availability run (availability.go): idle CPU and
// view changes with and without a CPU hog, a long lock load, and failover
// after kill -9 and after SIGSTOP of the leader.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/chubbygo/chubby/rpc"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError marks a command-line mistake (exit status 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// run is the whole program: exit status 0 when the run completed (some rows
// may be n/a), 1 when it failed or was cut short, 2 on a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	cfg := DefaultConfig()
	root := &cobra.Command{
		Use:   "chubbybench [flags]",
		Short: "benchmark our lock cell against etcd, ZooKeeper and Redis on this machine",
		Long: `chubbybench runs the same workloads against our lock cell (chubbyd) and
against etcd, ZooKeeper and Redis started on loopback, in one run, and reports
every figure (throughput, p50 and p99 latency) with ours ÷ peer ratios
computed pair by pair at the same node count.

Workloads: lock cycles on distinct locks and on one contended lock (1, 16, 64
clients), 64-byte writes, reads (uncached; cached where the system has it),
session creation, sessions held alive (master CPU and RSS from /proc),
transfers (transactions reading and writing two of 1,000 or of 8 accounts;
committed/s, latency, abort rate), failover (kill -9 of the leader → next
successful lock cycle).

Results: <out>/results.md (tables), results.json, results.png (chart),
logs/ (server logs), profiles/ (pprof of our cell under the lock workloads).
Progress goes to stderr; the table is also printed on stdout.

./build.sh bench installs the peers (Debian's etcd-server, zookeeper,
redis-server) if missing, builds chubbyd, chubbyd-pprof and chubbybench, and
runs this with the flags given. Every process started is stopped at the end,
on failure and on Ctrl-C.

chubbybench avail --help: the availability run (idle CPU, view changes beside
a CPU hog, failover after kill -9 and SIGSTOP).`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Quick {
				if err := applyQuick(cmd.Flags(), quickValues); err != nil {
					return err
				}
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			return bench(cmd.Context(), &cfg, cmd.Flags(), append([]string{"chubbybench"}, args...), "", stdout, stderr)
		},
	}
	bindFlags(root.Flags(), &cfg)
	root.AddCommand(renderCommand(stdout), availCommand(append([]string{"chubbybench"}, args...), stdout, stderr))
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "chubbybench: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) || strings.Contains(err.Error(), "unknown command") {
			return 2
		}
		return 1
	}
	return 0
}

// bench runs the benchmark with cfg and writes the outputs: the comparison
// (mode "") or the availability run (modeAvail).
func bench(ctx context.Context, cfg *Config, flags *pflag.FlagSet, command []string, mode string, stdout, stderr io.Writer) (err error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return usageError{fmt.Errorf("--log-level: %w", err)}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	prog := newProgress(stderr)
	started := time.Now()

	logs := filepath.Join(cfg.Out, "logs")
	profiles := filepath.Join(cfg.Out, "profiles")
	dirs := []string{logs, profiles}
	if mode == modeAvail {
		dirs = dirs[:1] // no profiles
	}
	for _, d := range dirs { // this run's, not an older run's
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("clean %s: %w", d, err)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("results directory: %w", err)
		}
	}
	// Kitex and netpoll log process-wide (a KeepAlive cut by a kill -9 logs
	// a line per call): to a file, not over the progress.
	clientLog, err := os.Create(filepath.Join(logs, "clients.log"))
	if err != nil {
		return fmt.Errorf("client log: %w", err)
	}
	defer clientLog.Close()
	if err := rpc.InstallProcessLoggers(slog.New(slog.NewTextHandler(clientLog, nil))); err != nil {
		return err
	}
	work, err := os.MkdirTemp(cfg.WorkDir, "chubbybench-")
	if err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	procs := newProcSet()
	defer func() {
		procs.stopAll()
		if cfg.Keep {
			prog.printf("data kept in %s", work)
		} else if rerr := os.RemoveAll(work); rerr != nil {
			log.Warn("remove work directory", "dir", work, "err", rerr)
		}
	}()

	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	e := &env{cfg: cfg, log: log, procs: procs, work: work, logs: logs, prog: prog}
	systems, notes := buildSystems(rctx, e)
	if cfg.RequirePeers {
		for _, s := range systems {
			if s.Kind() != sysChubby && s.Unavailable() != "" {
				return fmt.Errorf("%s: %s", label(s.Kind(), s.Nodes()), s.Unavailable())
			}
		}
	}
	all := workloads(cfg.Clients)
	if mode == modeAvail {
		all = availWorkloads(cfg.Hogs, cfg.LoadClients)
	}
	wls := selectWorkloads(all, cfg.Quick, cfg.Workloads)
	if len(wls) == 0 {
		return usageError{fmt.Errorf("--workloads %v selects no workload", cfg.Workloads)}
	}
	prog.printf("chubbybench: %d systems × %d workloads, results in %s (Ctrl-C stops it cleanly)", len(systems), len(wls), cfg.Out)
	r := &runner{cfg: cfg, env: e, prog: prog}
	if mode == modeAvail {
		r.runAvailAll(rctx, systems, wls)
	} else {
		r.runAll(rctx, systems, wls)
	}

	var profs []ProfileSummary
	switch {
	case mode == modeAvail || !cfg.Profile || !contains(cfg.Systems, sysChubby) || len(cfg.ChubbyCell) > 0:
	case rctx.Err() != nil:
		notes = append(notes, "profiles not recorded: "+stopReason(rctx))
	case cfg.ChubbydPprof == "":
		notes = append(notes, "profiles not recorded: no --chubbyd-pprof binary (./build.sh bench builds bin/chubbyd-pprof)")
	default:
		profs = r.runProfiles(rctx, absPath(cfg.ChubbydPprof), profiles)
		for _, p := range profs {
			if p.Error != "" {
				prog.printf("profiles: %s %s: %s", p.Workload, p.Type, p.Error)
			}
		}
	}
	procs.stopAll()

	rep := &Report{
		Mode: mode, Started: started, Finished: time.Now(), Command: command, Quick: cfg.Quick,
		Machine: machine(), Flags: map[string]string{}, Results: r.results, Profiles: profs,
	}
	flags.VisitAll(func(f *pflag.Flag) { rep.Flags[f.Name] = f.Value.String() })
	for _, w := range wls {
		rep.Workloads = append(rep.Workloads, w.Name())
	}
	rep.Ratios = computeRatios(rep.Results)
	rep.Targets = computeTargetsFor(rep)
	if mode == modeAvail {
		rep.Notes = append(notes, availNotes(cfg)...)
	} else {
		rep.Notes = append(notes, runNotes(cfg, rep.Results)...)
	}
	rep.Notes = append(rep.Notes, r.notes...)
	md, werr := writeOutputs(cfg.Out, rep, cfg.ChartWidthCm, cfg.ChartHeightCm)
	if md != "" {
		fmt.Fprint(stdout, md)
	}
	if werr != nil {
		return werr
	}
	wrote := []string{"results.md", "results.json"}
	if _, err := os.Stat(filepath.Join(cfg.Out, "results.png")); err == nil {
		wrote = append(wrote, "results.png")
	}
	prog.printf("wrote %s in %s (%s)", strings.Join(wrote, ", "), cfg.Out, time.Since(started).Round(time.Second))
	if n := procs.count(); n != 0 {
		return fmt.Errorf("%d server processes could not be stopped", n)
	}
	if contains(cfg.Systems, sysChubby) && !anyChubbyFigure(rep.Results) && rctx.Err() == nil {
		return errors.New("our cell produced no figure (see the results and logs/)")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted: results are partial: %w", err)
	}
	if err := rctx.Err(); err != nil {
		return fmt.Errorf("--timeout %v reached: results are partial", cfg.Timeout)
	}
	return nil
}

// renderCommand re-renders results.md and results.png from a results.json
// (after a change of the report's layout, or for an older run).
func renderCommand(stdout io.Writer) *cobra.Command {
	var in, out string
	var w, h float64
	c := &cobra.Command{
		Use:   "render",
		Short: "re-render results.md and results.png from a results.json",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := os.ReadFile(in)
			if err != nil {
				return err
			}
			var rep Report
			if err := json.Unmarshal(b, &rep); err != nil {
				return fmt.Errorf("%s: %w", in, err)
			}
			if out == "" {
				out = filepath.Dir(in)
			}
			rep.Targets = computeTargetsFor(&rep)
			md, err := writeOutputs(out, &rep, w, h)
			fmt.Fprint(stdout, md)
			return err
		},
	}
	c.Flags().StringVar(&in, "in", "bench-results/results.json", "results.json to render")
	c.Flags().StringVar(&out, "out", "", "directory for results.md, results.json and results.png (default: the directory of --in)")
	c.Flags().Float64Var(&w, "width-cm", DefaultConfig().ChartWidthCm, "chart width, cm")
	c.Flags().Float64Var(&h, "height-cm", DefaultConfig().ChartHeightCm, "chart height, cm")
	return c
}

// anyChubbyFigure reports whether our cell was measured at all.
func anyChubbyFigure(results []Result) bool {
	for _, r := range results {
		if r.System == sysChubby && r.measured() {
			return true
		}
	}
	return false
}

// buildSystems lists the systems of the run in order (ours first), and
// notes what it found out on the way.
func buildSystems(ctx context.Context, e *env) ([]System, []string) {
	cfg := e.cfg
	var (
		systems []System
		notes   []string
	)
	for _, name := range cfg.Systems {
		switch name {
		case sysChubby:
			if len(cfg.ChubbyCell) > 0 {
				systems = append(systems, newChubbySystem(e, 0, "", false, cfg.ChubbyCell))
				notes = append(notes, fmt.Sprintf("our cell: the running cell at %s (not started by chubbybench)", strings.Join(cfg.ChubbyCell, ",")))
				continue
			}
			bin := findChubbyd(cfg.Chubbyd)
			peers := false
			if bin != "" {
				var err error
				if peers, err = detectPeers(ctx, bin); err != nil {
					e.log.Warn("chubbyd", "err", err)
					bin = ""
				}
			}
			switch {
			case bin == "":
				notes = append(notes, "our cell: no chubbyd binary found (--chubbyd; ./build.sh builds bin/chubbyd)")
			case peers:
				notes = append(notes, fmt.Sprintf("our cell: %s with --peers (replicated cells of 3 and 5 replicas run)", bin))
			default:
				notes = append(notes, fmt.Sprintf("our cell: %s has no --peers yet: cells of 3 and 5 replicas are reported not available yet", bin))
			}
			for _, n := range cfg.ChubbyNodes {
				systems = append(systems, newChubbySystem(e, n, bin, peers, nil))
			}
		case sysEtcd:
			for _, n := range cfg.PeerNodes {
				systems = append(systems, newEtcdSystem(e, n))
			}
		case sysZooKeeper:
			for _, n := range cfg.PeerNodes {
				systems = append(systems, newZKSystem(e, n))
			}
		case sysRedis:
			for _, n := range cfg.PeerNodes {
				systems = append(systems, newRedisSystem(e, n))
			}
		}
	}
	if v := peerVersions(ctx, cfg); v != "" {
		notes = append(notes, "peers: "+v+"; clients: etcd client/v3 v3.6.16 (concurrency.Mutex), go-zookeeper v1.0.4 (zk.Lock), go-redis v9.23.0")
	}
	return systems, notes
}

// peerVersions asks the peer servers their versions (best effort).
func peerVersions(ctx context.Context, cfg *Config) string {
	ask := func(name string, args ...string) string {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, name, args...).Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	var parts []string
	if v := ask(cfg.Etcd, "--version"); v != "" {
		parts = append(parts, v)
	}
	for _, jar := range filepath.SplitList(cfg.ZKClasspath) {
		if real, err := filepath.EvalSymlinks(jar); err == nil && strings.Contains(filepath.Base(real), "zookeeper-") {
			parts = append(parts, "ZooKeeper "+strings.TrimSuffix(strings.TrimPrefix(filepath.Base(real), "zookeeper-"), ".jar"))
			break
		}
	}
	if v := ask(cfg.RedisServer, "--version"); v != "" {
		parts = append(parts, v)
	}
	return strings.Join(parts, "; ")
}

// runNotes are the caveats a reader needs for this run's figures.
func runNotes(cfg *Config, results []Result) []string {
	notes := []string{
		fmt.Sprintf("%d vCPU shared by every server and the benchmark's own clients (a 64-client workload runs 64 client goroutines here too): compare ratios within one run, not figures across runs.", runtime.NumCPU()),
		fmt.Sprintf("Peers' sessions use a %d s timeout, our cell's default lease, so every system renews at its own natural rate for the same timeout.", peerTTLSeconds),
		"session-create: latency is the creation alone; each session is then closed inside the measured window, so the throughput counts create+close pairs.",
		fmt.Sprintf("failover: after the kill a lock cycle that takes longer than %v is abandoned and tried again at once (--failover-attempt), every system alike; the time runs from the kill to the end of the first successful cycle started after it.", cfg.FailoverAttempt),
		"sessions-held: CPU is the master's (leader's, primary's) process over the hold window, from /proc; RSS per session is (RSS held − RSS before) ÷ sessions; probe reads run every 20 ms during the hold.",
	}
	if cfg.Quick {
		notes = append(notes, "--quick: short windows and fewer sessions; figures are indicative (the full run: ./build.sh bench). Sessions are held on the cluster the other workloads ran on (the full run starts a fresh one), so the RSS before them includes what those workloads left.")
	}
	if cfg.Hold < time.Duration(peerTTLSeconds)*time.Second {
		notes = append(notes, fmt.Sprintf("The hold window (%v) is shorter than one %d s lease: our cell answers a parked KeepAlive ~2 s before the lease ends, so its renewals are not in the CPU figure (the full run holds for %v).",
			cfg.Hold, peerTTLSeconds, DefaultConfig().Hold))
	}
	var direct []string
	for _, r := range results {
		if r.Kind == kindSessionsHeld && r.System == sysChubby && r.Variant == variantDirect && r.measured() {
			direct = append(direct, fmt.Sprintf("%s held %s of %s", r.Label(), groupThousands(int64(r.Sessions)), groupThousands(int64(r.SessionsTarget))))
		}
	}
	if len(direct) > 0 {
		notes = append(notes, fmt.Sprintf("One connection per session (Go client): %s sessions; this machine allows 20,000 open files per process, on the cell's side and on the clients' (the full run asks for %s; chubbyd then runs with --max-connections %d).",
			strings.Join(direct, ", "), groupThousands(int64(DefaultConfig().DirectSessions)), directMaxConnections))
	}
	return notes
}

// machine describes this machine.
func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		m.OpenFiles = groupThousands(int64(lim.Cur))
	}
	return m
}
