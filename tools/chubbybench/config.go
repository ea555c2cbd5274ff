package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// The systems chubbybench knows, in the order it runs them.
const (
	sysChubby    = "chubby"
	sysEtcd      = "etcd"
	sysZooKeeper = "zookeeper"
	sysRedis     = "redis"
)

var allSystems = []string{sysChubby, sysEtcd, sysZooKeeper, sysRedis}

// Config is one benchmark run's configuration: every flag of the command.
// DefaultConfig gives the full run's values; applyQuick shrinks the ones
// the user did not set for --quick.
type Config struct {
	Out   string // results directory
	Quick bool

	Systems     []string // subset of allSystems
	PeerNodes   []int    // cluster sizes for etcd, ZooKeeper, Redis
	ChubbyNodes []int    // cell sizes for chubby (3 and 5 need chubbyd --peers)
	Clients     []int    // client counts of the lock workloads
	Workloads   []string // workload name prefixes to run; empty: all

	Duration      time.Duration // measured window of one workload
	Warmup        time.Duration // unmeasured lead-in of one workload
	ClusterWarmup time.Duration // lock cycles run on each fresh cluster before measuring
	OpTimeout     time.Duration // bound on one operation

	Sessions       int           // sessions held by our cell through batched KeepAlives
	DirectSessions int           // sessions held by our cell with one connection each
	PeerSessions   int           // sessions (leases) held by etcd and ZooKeeper
	Hold           time.Duration // how long held sessions are measured
	FailoverTrials int
	// FailoverAttempt bounds each lock cycle attempted after the kill; a
	// cycle that takes longer is abandoned and tried again (every system
	// the same).
	FailoverAttempt time.Duration

	Profile        bool
	ProfileSeconds time.Duration

	Timeout time.Duration // bound on the whole run

	Chubbyd       string   // chubbyd binary
	ChubbydPprof  string   // chubbyd built with the pprof hook (./build.sh bench builds it)
	ChubbyCell    []string // benchmark this running cell instead of starting chubbyd
	Etcd          string
	RedisServer   string
	Java          string
	ZKClasspath   string
	RedisRetry    time.Duration // Redis lock: delay between SET NX attempts
	WorkDir       string        // parent of data directories; empty: the system's temp dir
	Keep          bool          // keep data directories
	LogLevel      string
	RequirePeers  bool // fail (instead of n/a) when a peer's server is not installed
	ChartWidthCm  float64
	ChartHeightCm float64

	// The availability run (chubbybench avail, availability.go).
	AvailWindow time.Duration // the idle window and the lock-load window
	Hogs        []int         // busy-loop processes beside the cluster: one set of rows per count
	PauseTrials int           // SIGSTOP of the leader per multi-node cluster and hog setting
	LoadClients int           // clients of the lock-load window (distinct locks)
}

// DefaultConfig is a full run.
func DefaultConfig() Config {
	return Config{
		Out:             "bench-results",
		Systems:         slices.Clone(allSystems),
		PeerNodes:       []int{1, 3},
		ChubbyNodes:     []int{1, 3, 5},
		Clients:         []int{1, 16, 64},
		Duration:        5 * time.Second,
		Warmup:          time.Second,
		ClusterWarmup:   2 * time.Second,
		OpTimeout:       10 * time.Second,
		Sessions:        100_000,
		DirectSessions:  18_000,
		PeerSessions:    10_000,
		Hold:            30 * time.Second,
		FailoverTrials:  3,
		FailoverAttempt: time.Second,
		Profile:         true,
		ProfileSeconds:  5 * time.Second,
		Timeout:         60 * time.Minute,
		Etcd:            "etcd",
		RedisServer:     "redis-server",
		Java:            "java",
		ZKClasspath:     "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar",
		RedisRetry:      time.Millisecond,
		LogLevel:        "info",
		ChartWidthCm:    28,
		ChartHeightCm:   20,
		AvailWindow:     5 * time.Minute,
		Hogs:            []int{0, 4},
		PauseTrials:     10,
		LoadClients:     64,
	}
}

// DefaultAvailConfig is a full availability run (chubbybench avail): our
// cell at 3 and 5 replicas, etcd and ZooKeeper at 3 and 5 nodes (Redis has
// no failover), each without and beside a 4-process CPU hog; 5-minute
// idle and lock-load windows, 20 kill -9 and 10 SIGSTOP failovers. About
// 12 minutes per cluster and hog setting: some 2½ hours in all.
func DefaultAvailConfig() Config {
	c := DefaultConfig()
	c.Out = filepath.Join("bench-results", "avail")
	c.Systems = []string{sysChubby, sysEtcd, sysZooKeeper}
	c.ChubbyNodes = []int{3, 5}
	c.PeerNodes = []int{3, 5}
	c.FailoverTrials = 20
	c.Timeout = 4 * time.Hour
	return c
}

// quickValues are the --quick replacements, chosen so that the whole run
// (7 clusters, every workload) ends in under 3 minutes on this 2-vCPU
// machine: figures are indicative, not stable.
var quickValues = map[string]string{
	"duration":        "500ms",
	"warmup":          "100ms",
	"cluster-warmup":  "300ms",
	"sessions":        "5000",
	"direct-sessions": "1000",
	"peer-sessions":   "1000",
	"hold":            "2s",
	"failover-trials": "1",
	"profile-seconds": "2s",
	"timeout":         "3m",
}

// availQuickValues are the --quick replacements of chubbybench avail: a
// 20 s window, 3 trials of each failover (about 2 minutes per cluster and
// hog setting).
var availQuickValues = map[string]string{
	"avail-window":    "20s",
	"failover-trials": "3",
	"pause-trials":    "3",
	"timeout":         "40m",
}

// applyQuick sets the values of every flag in values (quickValues,
// availQuickValues) that the user did not set explicitly.
func applyQuick(fs *pflag.FlagSet, values map[string]string) error {
	for name, v := range values {
		f := fs.Lookup(name)
		if f == nil {
			return fmt.Errorf("quick: no flag --%s", name)
		}
		if f.Changed {
			continue
		}
		if err := f.Value.Set(v); err != nil {
			return fmt.Errorf("quick: --%s=%s: %w", name, v, err)
		}
	}
	return nil
}

// Validate reports the first setting out of range.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Out != "", "--out is empty")
	check(len(c.Systems) > 0, "--systems is empty")
	for _, s := range c.Systems {
		check(slices.Contains(allSystems, s), "--systems: unknown system %q (know %s)", s, strings.Join(allSystems, ", "))
	}
	for _, n := range c.PeerNodes {
		check(n == 1 || n == 3 || n == 5, "--nodes: %d (1, 3 or 5)", n)
	}
	for _, n := range c.ChubbyNodes {
		check(n == 1 || n == 3 || n == 5, "--chubby-nodes: %d (1, 3 or 5)", n)
	}
	check(len(c.Clients) > 0, "--clients is empty")
	for _, n := range c.Clients {
		check(n >= 1 && n <= 1024, "--clients: %d outside 1..1024", n)
	}
	check(c.Duration >= 100*time.Millisecond && c.Duration <= 10*time.Minute, "--duration %v outside [100ms, 10m]", c.Duration)
	check(c.Warmup >= 0 && c.Warmup <= time.Minute, "--warmup %v outside [0, 1m]", c.Warmup)
	check(c.ClusterWarmup >= 0 && c.ClusterWarmup <= 5*time.Minute, "--cluster-warmup %v outside [0, 5m]", c.ClusterWarmup)
	check(c.OpTimeout >= 100*time.Millisecond && c.OpTimeout <= 10*time.Minute, "--op-timeout %v outside [100ms, 10m]", c.OpTimeout)
	check(c.Sessions >= 1 && c.Sessions <= 200_000, "--sessions %d outside 1..200000 (the cell's session limit)", c.Sessions)
	check(c.DirectSessions >= 1 && c.DirectSessions <= 19_000, "--direct-sessions %d outside 1..19000 (20,000 open files per process)", c.DirectSessions)
	check(c.PeerSessions >= 1 && c.PeerSessions <= 19_000, "--peer-sessions %d outside 1..19000 (20,000 open files per process)", c.PeerSessions)
	check(c.Hold >= time.Second && c.Hold <= 30*time.Minute, "--hold %v outside [1s, 30m]", c.Hold)
	check(c.FailoverTrials >= 1 && c.FailoverTrials <= 20, "--failover-trials %d outside 1..20", c.FailoverTrials)
	check(c.FailoverAttempt >= 100*time.Millisecond && c.FailoverAttempt <= time.Minute, "--failover-attempt %v outside [100ms, 1m]", c.FailoverAttempt)
	check(c.ProfileSeconds >= time.Second && c.ProfileSeconds <= 5*time.Minute, "--profile-seconds %v outside [1s, 5m]", c.ProfileSeconds)
	check(c.Timeout >= 10*time.Second && c.Timeout <= 24*time.Hour, "--timeout %v outside [10s, 24h]", c.Timeout)
	check(c.RedisRetry >= 0 && c.RedisRetry <= time.Second, "--redis-retry %v outside [0, 1s]", c.RedisRetry)
	for _, a := range c.ChubbyCell {
		check(isLoopback(a), "--chubby-cell %s: only loopback addresses are benchmarked", a)
	}
	check(c.ChartWidthCm >= 5 && c.ChartHeightCm >= 5, "chart size too small")
	check(c.AvailWindow >= time.Second && c.AvailWindow <= time.Hour, "--avail-window %v outside [1s, 1h]", c.AvailWindow)
	check(len(c.Hogs) > 0, "--hog is empty")
	for _, n := range c.Hogs {
		check(n >= 0 && n <= 64, "--hog: %d outside 0..64", n)
	}
	check(c.PauseTrials >= 1 && c.PauseTrials <= 20, "--pause-trials %d outside 1..20", c.PauseTrials)
	check(c.LoadClients >= 1 && c.LoadClients <= 1024, "--load-clients %d outside 1..1024", c.LoadClients)
	return errors.Join(errs...)
}

// intList is a pflag.Value for a comma-separated list of integers.
type intList struct{ p *[]int }

func (l intList) String() string {
	if l.p == nil {
		return ""
	}
	s := make([]string, len(*l.p))
	for i, v := range *l.p {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l intList) Set(v string) error {
	out, err := parseIntList(v)
	if err != nil {
		return err
	}
	*l.p = out
	return nil
}

func (l intList) Type() string { return "ints" }

// parseIntList parses "1,3, 5" into [1 3 5]; duplicates are dropped, order kept.
func parseIntList(v string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", f)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

// bindFlags registers the benchmark's flags on fs, with c's values as the
// defaults shown by --help.
func bindFlags(fs *pflag.FlagSet, c *Config) {
	fs.StringVar(&c.Out, "out", c.Out, "directory for results.md, results.json, results.png, profiles/ and logs/")
	fs.BoolVar(&c.Quick, "quick", c.Quick, "short run (under 3 minutes): "+quickSummary(quickValues))
	fs.StringSliceVar(&c.Systems, "systems", c.Systems, "systems to run: chubby, etcd, zookeeper, redis")
	fs.Var(intList{&c.Clients}, "clients", "client counts of the lock workloads")
	fs.StringSliceVar(&c.Workloads, "workloads", c.Workloads, "run only workloads whose name starts with one of these (e.g. lock-distinct,failover); default all")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "measured window of each workload")
	fs.DurationVar(&c.Warmup, "warmup", c.Warmup, "unmeasured lead-in of each workload")
	fs.DurationVar(&c.ClusterWarmup, "cluster-warmup", c.ClusterWarmup, "lock cycles (16 clients) run on each freshly started cluster before measuring")
	fs.IntVar(&c.Sessions, "sessions", c.Sessions, "sessions our cell holds through batched KeepAlives (10,000 sessions per call)")
	fs.IntVar(&c.DirectSessions, "direct-sessions", c.DirectSessions, "sessions our cell holds with the Go client, one connection each (at most 19,000: 20,000 open files per process)")
	fs.IntVar(&c.PeerSessions, "peer-sessions", c.PeerSessions, "leases etcd holds and sessions ZooKeeper holds")
	fs.DurationVar(&c.Hold, "hold", c.Hold, "how long held sessions are measured (CPU, RSS, probe reads); the full run covers more than one 12 s lease")
	fs.IntVar(&c.FailoverTrials, "failover-trials", c.FailoverTrials, "kill -9 of the leader per multi-node cluster")
	fs.BoolVar(&c.Profile, "profile", c.Profile, "record pprof profiles of our cell under the lock workloads (needs --chubbyd-pprof)")
	fs.DurationVar(&c.ProfileSeconds, "profile-seconds", c.ProfileSeconds, "CPU profile length per profiled workload")
	fs.StringVar(&c.ChubbydPprof, "chubbyd-pprof", c.ChubbydPprof, "chubbyd built with the pprof hook, for --profile (./build.sh bench builds bin/chubbyd-pprof)")
	fs.StringSliceVar(&c.ChubbyCell, "chubby-cell", c.ChubbyCell, "benchmark this running cell (loopback host:port list) instead of starting chubbyd; no CPU/RSS, no failover")
	fs.DurationVar(&c.RedisRetry, "redis-retry", c.RedisRetry, "Redis lock: delay between SET NX attempts while the lock is held")
	bindServerFlags(fs, c)
}

// bindAvailFlags registers the flags of chubbybench avail on fs, with c's
// values (DefaultAvailConfig) as the defaults shown by --help.
func bindAvailFlags(fs *pflag.FlagSet, c *Config) {
	fs.StringVar(&c.Out, "out", c.Out, "directory for results.md, results.json and logs/")
	fs.BoolVar(&c.Quick, "quick", c.Quick, "short run: "+quickSummary(availQuickValues))
	fs.StringSliceVar(&c.Systems, "systems", c.Systems, "systems to run: chubby, etcd, zookeeper, redis (Redis: idle and lock-load only, no failover)")
	fs.StringSliceVar(&c.Workloads, "workloads", c.Workloads, "run only workloads whose name starts with one of these (idle, lock-load, failover/, failover-pause; failover alone selects both failovers); default all")
	fs.DurationVar(&c.AvailWindow, "avail-window", c.AvailWindow, "length of the idle window and of the lock-load window")
	fs.Var(intList{&c.Hogs}, "hog", "busy-loop processes run beside the cluster for its whole measurement, one set of rows per count (0: none)")
	fs.IntVar(&c.LoadClients, "load-clients", c.LoadClients, "clients of the lock-load window, each cycling its own lock")
	fs.IntVar(&c.FailoverTrials, "failover-trials", c.FailoverTrials, "kill -9 of the leader per multi-node cluster and hog setting")
	fs.IntVar(&c.PauseTrials, "pause-trials", c.PauseTrials, "SIGSTOP of the leader (then SIGCONT) per multi-node cluster and hog setting")
	bindServerFlags(fs, c)
}

// bindServerFlags registers the flags both commands share: the clusters,
// the server binaries, bounds and logging.
func bindServerFlags(fs *pflag.FlagSet, c *Config) {
	fs.Var(intList{&c.PeerNodes}, "nodes", "cluster sizes of etcd, ZooKeeper and Redis")
	fs.Var(intList{&c.ChubbyNodes}, "chubby-nodes", "replica counts of our cell; 3 and 5 need chubbyd serve --peers")
	fs.DurationVar(&c.OpTimeout, "op-timeout", c.OpTimeout, "bound on one operation")
	fs.DurationVar(&c.FailoverAttempt, "failover-attempt", c.FailoverAttempt, "after the kill, a lock cycle taking longer than this is abandoned and tried again (every system alike)")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "bound on the whole run; what is left is reported as not run")
	fs.StringVar(&c.Chubbyd, "chubbyd", c.Chubbyd, "chubbyd binary (default: next to this program, else bin/chubbyd, else on PATH)")
	fs.StringVar(&c.Etcd, "etcd", c.Etcd, "etcd server binary (Debian's etcd-server)")
	fs.StringVar(&c.RedisServer, "redis-server", c.RedisServer, "redis-server binary (Debian's redis-server)")
	fs.StringVar(&c.Java, "java", c.Java, "java binary for ZooKeeper")
	fs.StringVar(&c.ZKClasspath, "zookeeper-classpath", c.ZKClasspath, "classpath of ZooKeeper's QuorumPeerMain (Debian's zookeeper, with slf4j-simple for its logs)")
	fs.StringVar(&c.WorkDir, "work-dir", c.WorkDir, "parent of the servers' data directories (default: the system temp dir)")
	fs.BoolVar(&c.Keep, "keep", c.Keep, "keep the servers' data directories")
	fs.BoolVar(&c.RequirePeers, "require-peers", c.RequirePeers, "fail when a peer's server is not installed (default: report it n/a)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error (stderr)")
}

// quickSummary describes the --quick values for --help.
func quickSummary(values map[string]string) string {
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = "--" + k + "=" + values[k]
	}
	return strings.Join(parts, " ") + " unless set"
}
