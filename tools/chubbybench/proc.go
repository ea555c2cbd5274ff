package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Server processes: every process chubbybench starts is registered in a
// procSet, which stops them all when the run ends, fails or is interrupted.
// Each process gets its own process group (so a terminal's Ctrl-C reaches
// chubbybench only, which then stops them in order) and SIGKILL as its
// parent-death signal (so even a chubbybench killed with -9 leaves nothing
// behind).

// stopGrace is how long a process has to exit after SIGTERM before SIGKILL.
// A benchmark cluster's data is thrown away, so there is nothing to wait for
// beyond a prompt exit.
const stopGrace = 2 * time.Second

// nodeSpec is how to start one server process.
type nodeSpec struct {
	name string   // for logs and progress: "etcd×3/n2"
	argv []string // argv[0] is the program
	env  []string // added to the environment
	dir  string   // working directory
	log  string   // file receiving stdout and stderr (appended)
}

// proc is a running (or exited) server process.
type proc struct {
	spec nodeSpec
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and been reaped
	err  error         // Wait's result, once done is closed
}

// spawner starts processes from one OS thread that never exits: Linux sends
// the parent-death signal when the *thread* that forked the child exits, and
// Go may retire threads, so all forks happen on a thread locked for the life
// of the program.
type spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd   *exec.Cmd
	reply chan error
}

var theSpawner spawner

func (s *spawner) start(cmd *exec.Cmd) error {
	s.once.Do(func() {
		s.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: this thread lives as long as the program
			for r := range s.reqs {
				r.reply <- r.cmd.Start()
			}
		}()
	})
	reply := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, reply: reply}
	return <-reply
}

// procSet is every process started and not yet stopped.
type procSet struct {
	mu    sync.Mutex
	procs map[*proc]struct{}
}

func newProcSet() *procSet { return &procSet{procs: make(map[*proc]struct{})} }

// start starts spec's process and registers it.
func (ps *procSet) start(spec nodeSpec) (*proc, error) {
	if len(spec.argv) == 0 {
		return nil, errors.New("start: empty command line")
	}
	logf, err := os.OpenFile(spec.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: log: %w", spec.name, err)
	}
	fmt.Fprintf(logf, "### %s: %s\n", time.Now().Format(time.RFC3339), strings.Join(quoteArgs(spec.argv), " "))
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Dir = spec.dir
	cmd.Env = append(os.Environ(), spec.env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := theSpawner.start(cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", spec.name, err)
	}
	p := &proc{spec: spec, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.procs[p] = struct{}{}
	ps.mu.Unlock()
	return p, nil
}

// stop stops p (SIGTERM to its group, SIGKILL after stopGrace) and
// forgets it. Safe on an exited process.
func (ps *procSet) stop(p *proc) {
	if p == nil {
		return
	}
	p.signal(syscall.SIGTERM)
	t := time.NewTimer(stopGrace)
	select {
	case <-p.done:
	case <-t.C:
		p.signal(syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
		}
	}
	t.Stop()
	ps.mu.Lock()
	delete(ps.procs, p)
	ps.mu.Unlock()
}

// kill9 kills p at once, as `kill -9` does, and waits until it is reaped.
func (ps *procSet) kill9(p *proc) {
	p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
	}
	ps.mu.Lock()
	delete(ps.procs, p)
	ps.mu.Unlock()
}

// stopAll stops every registered process, in parallel.
func (ps *procSet) stopAll() {
	ps.mu.Lock()
	all := make([]*proc, 0, len(ps.procs))
	for p := range ps.procs {
		all = append(all, p)
	}
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Go(func() { ps.stop(p) })
	}
	wg.Wait()
}

// count returns how many processes are registered.
func (ps *procSet) count() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.procs)
}

// signal sends sig to p's process group (p is its leader).
func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	if p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// quoteArgs quotes the arguments that need it, for logs.
func quoteArgs(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\"'$") {
			out[i] = strconv.Quote(a)
		} else {
			out[i] = a
		}
	}
	return out
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago (held open together so that they differ).
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// isLoopback reports whether addr (host:port) names a loopback address:
// the only addresses chubbybench sends traffic to.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// waitFor calls check every interval until it succeeds, ctx ends or
// timeout passes; it returns check's last error on failure.
func waitFor(ctx context.Context, timeout, interval time.Duration, what string, check func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, max(interval*10, time.Second))
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready within %v: %w", what, timeout, last)
		case <-time.After(interval):
		}
	}
}

// procStats is what /proc says of a process.
type procStats struct {
	CPU time.Duration // user + system time so far
	RSS int64         // resident set, bytes
}

// userHZ is the unit of utime/stime in /proc/PID/stat: USER_HZ, 100 on
// every Linux architecture Go runs on.
const userHZ = 100

// readProcStats reads CPU time and RSS of pid from /proc.
func readProcStats(pid int) (procStats, error) {
	var st procStats
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, fmt.Errorf("proc stats: %w", err)
	}
	cpu, err := parseStatCPU(string(b))
	if err != nil {
		return st, fmt.Errorf("proc stats of %d: %w", pid, err)
	}
	st.CPU = cpu
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, fmt.Errorf("proc stats: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return st, fmt.Errorf("proc stats of %d: VmRSS %q: %w", pid, rest, err)
			}
			st.RSS = kb * 1024
			return st, nil
		}
	}
	return st, fmt.Errorf("proc stats of %d: no VmRSS", pid)
}

// procState is the state letter of pid (/proc/PID/stat field 3: R, S, D,
// T for stopped, Z...).
func procState(pid int) (byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("proc state: %w", err)
	}
	return parseStatState(string(b))
}

// parseStatState returns the state letter from the text of /proc/PID/stat
// (the first field after the command name's closing parenthesis).
func parseStatState(stat string) (byte, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(stat[i+1:])
	if len(f) == 0 || len(f[0]) != 1 {
		return 0, errors.New("stat: no state")
	}
	return f[0][0], nil
}

// parseStatCPU returns utime+stime from the text of /proc/PID/stat. The
// command name (field 2) may hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, errors.New("short stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	stt, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+stt) * time.Second / userHZ, nil
}
