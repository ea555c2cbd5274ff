//go:build linux

package clustertest

// The harness of the network-namespace tests: a private network of
// namespaces joined by a bridge, real chubbyd processes in them, client
// agents (netns_agent_test.go) in namespaces of their own, and the faults —
// partitions by blackhole routes, kill -9, SIGSTOP/SIGCONT, a file-size
// limit. Nothing in the root namespace is changed: every link is created in
// the hub namespace with its peer end in the host's namespace, and every
// namespace has only its own /24, so no packet can leave the namespaces the
// test made.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// nsPrefix starts the name of every namespace the tests create; the test
// process's pid follows, so that leftovers of a run that was killed can be
// told from those of a run still going.
const nsPrefix = "chubbyct-"

var netSeq atomic.Int64

// lockedBuffer is a bytes.Buffer safe for a writer goroutine and readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runIP runs ip with args, bounded.
func runIP(args ...string) error {
	return runIPInput("", args...)
}

func runIPInput(stdin string, args ...string) error {
	// Generous: on a loaded machine the kernel's teardown of namespaces
	// deleted earlier can hold up creating new ones for seconds.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// requireNetns skips the test unless it can make namespaces: root, and the
// ip command.
func requireNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces (ip netns)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command (iproute2) to create network namespaces")
	}
}

// removeStaleNamespaces deletes namespaces left by earlier runs whose test
// process is gone (a run killed before its cleanup).
func removeStaleNamespaces(t *testing.T) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, nsPrefix)
		if !ok {
			continue
		}
		pidS, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidS)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // that run is still going
		}
		if err := runIP("netns", "del", name); err == nil {
			t.Logf("removed namespace %s left by an earlier run (pid %d is gone)", name, pid)
		}
	}
}

// nsHost is one namespace on the test network, with one address.
type nsHost struct {
	name string // r1..r5, c1, ...
	ns   string
	ip   string
}

// netnsNet is the test network: a hub namespace holding a bridge, and a
// namespace per host with a veth into the bridge.
type netnsNet struct {
	t      *testing.T
	id     string // per-run unique: pid-seq
	hub    string
	subnet string // 10.77.X
	hosts  []*nsHost
}

func newNetnsNet(t *testing.T) *netnsNet {
	t.Helper()
	seq := netSeq.Add(1)
	pid := os.Getpid()
	n := &netnsNet{t: t, id: fmt.Sprintf("%d-%d", pid, seq),
		subnet: fmt.Sprintf("10.77.%d", (pid*7+int(seq))%254+1)}
	n.hub = nsPrefix + n.id + "-hub"
	t.Cleanup(n.destroy) // registered first: runs after the processes are killed
	if err := runIP("netns", "add", n.hub); err != nil {
		t.Skipf("cannot create a network namespace: %v", err)
	}
	for _, args := range [][]string{
		{"-n", n.hub, "link", "add", "br0", "type", "bridge"},
		{"-n", n.hub, "link", "set", "br0", "up"},
		{"-n", n.hub, "link", "set", "lo", "up"},
	} {
		if err := runIP(args...); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// destroy deletes every namespace of the network (their veths go with them).
func (n *netnsNet) destroy() {
	for _, h := range n.hosts {
		if err := runIP("netns", "del", h.ns); err != nil {
			n.t.Logf("cleanup: %v", err)
		}
	}
	if err := runIP("netns", "del", n.hub); err != nil {
		n.t.Logf("cleanup: %v", err)
	}
}

// addHost creates a namespace with one address on the network.
func (n *netnsNet) addHost(name string) *nsHost {
	n.t.Helper()
	idx := len(n.hosts)
	h := &nsHost{name: name, ns: n.ns(name), ip: fmt.Sprintf("%s.%d", n.subnet, idx+1)}
	n.hosts = append(n.hosts, h) // first: destroy deletes it even if the add half happened
	if err := runIP("netns", "add", h.ns); err != nil {
		n.t.Fatal(err)
	}
	// The hub end's name must be unique within the hub and at most 15 bytes.
	hubEnd := fmt.Sprintf("v%s-%d", strconv.FormatInt(int64(os.Getpid()), 36), idx)
	for _, args := range [][]string{
		{"-n", n.hub, "link", "add", hubEnd, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
		{"-n", n.hub, "link", "set", hubEnd, "master", "br0"},
		{"-n", n.hub, "link", "set", hubEnd, "up"},
		{"-n", h.ns, "addr", "add", h.ip + "/24", "dev", "eth0"},
		{"-n", h.ns, "link", "set", "eth0", "up"},
		{"-n", h.ns, "link", "set", "lo", "up"},
	} {
		if err := runIP(args...); err != nil {
			n.t.Fatal(err)
		}
	}
	return h
}

func (n *netnsNet) ns(host string) string { return nsPrefix + n.id + "-" + host }

// partition cuts every path between a host of a and a host of b, both
// ways, with blackhole routes (a sender gets EINVAL; nothing arrives).
// Hosts in neither set keep reaching everyone.
func (n *netnsNet) partition(a, b []*nsHost) error {
	routes := map[*nsHost][]string{}
	for _, x := range a {
		for _, y := range b {
			routes[x] = append(routes[x], "route add blackhole "+y.ip+"/32")
			routes[y] = append(routes[y], "route add blackhole "+x.ip+"/32")
		}
	}
	for h, rs := range routes {
		if err := runIPInput(strings.Join(rs, "\n")+"\n", "-n", h.ns, "-batch", "-"); err != nil {
			return err
		}
	}
	return nil
}

// heal removes every blackhole route.
func (n *netnsNet) heal() error {
	for _, h := range n.hosts {
		if err := runIP("-n", h.ns, "route", "flush", "type", "blackhole"); err != nil {
			return err
		}
	}
	return nil
}

// nsProc is a process started in a namespace by the test.
type nsProc struct {
	name string
	cmd  *exec.Cmd
	log  *lockedBuffer
	done chan struct{}
	err  error // the exit status, once done is closed
}

// startInNS starts bin in namespace ns. The process gets its own process
// group and SIGKILL when the test process dies (ip netns exec execs bin in
// place, so the pid is bin's and the death signal stays set). stdin and
// stdout, when not nil, are the child's ends of pipes (the caller closes
// them after the call); the output goes to the process's log otherwise.
func startInNS(name, ns string, env []string, stdin, stdout *os.File, bin string, args ...string) (*nsProc, error) {
	p := &nsProc{name: name, log: &lockedBuffer{}, done: make(chan struct{})}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	cmd.Env = env
	if stdin != nil {
		cmd.Stdin = stdin
	}
	cmd.Stdout = p.log
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.Stderr = p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.cmd = cmd
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *nsProc) pid() int { return p.cmd.Process.Pid }

func (p *nsProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to this one process and waits for it (bounded).
func (p *nsProc) kill() {
	if p == nil || p.exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

func (p *nsProc) signal(sig syscall.Signal) error {
	if p.exited() {
		return fmt.Errorf("%s has exited", p.name)
	}
	return syscall.Kill(p.pid(), sig)
}

// ---- Agents

// agent is a client agent process, driven through its stdin; its events
// accumulate in order.
type agent struct {
	name  string
	host  *nsHost
	proc  *nsProc
	stdin io.WriteCloser

	mu      sync.Mutex
	events  []agentEvent
	changed chan struct{}
	eof     bool
	junk    []string // stdout lines that are not events
}

func (a *agent) reader(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e agentEvent
		ok := len(line) > 0 && line[0] == '{' && json.Unmarshal(line, &e) == nil
		a.mu.Lock()
		if ok {
			a.events = append(a.events, e)
		} else if len(a.junk) < 100 {
			a.junk = append(a.junk, string(line))
		}
		close(a.changed)
		a.changed = make(chan struct{})
		a.mu.Unlock()
	}
	a.mu.Lock()
	a.eof = true
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()
}

// send writes one command line.
func (a *agent) send(format string, args ...any) {
	fmt.Fprintf(a.stdin, format+"\n", args...)
}

// all returns a copy of the events so far.
func (a *agent) all() []agentEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]agentEvent(nil), a.events...)
}

// wait returns the first event (in order, from the start) that pred
// accepts, waiting at most d for it.
func (a *agent) wait(d time.Duration, pred func(agentEvent) bool) (agentEvent, bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	from := 0
	for {
		a.mu.Lock()
		for ; from < len(a.events); from++ {
			if pred(a.events[from]) {
				e := a.events[from]
				a.mu.Unlock()
				return e, true
			}
		}
		ch, eof := a.changed, a.eof
		a.mu.Unlock()
		if eof {
			return agentEvent{}, false
		}
		select {
		case <-ch:
		case <-deadline.C:
			return agentEvent{}, false
		}
	}
}

// mustWait is wait that fails the test.
func (a *agent) mustWait(t *testing.T, d time.Duration, what string, pred func(agentEvent) bool) agentEvent {
	t.Helper()
	e, ok := a.wait(d, pred)
	if !ok {
		t.Fatalf("agent %s: no %s within %v", a.name, what, d)
	}
	return e
}

func isEv(name string) func(agentEvent) bool {
	return func(e agentEvent) bool { return e.Ev == name }
}

// stop asks the agent to end and waits for it (bounded), then kills it.
func (a *agent) stop() {
	a.send("stop")
	a.stdin.Close()
	select {
	case <-a.proc.done:
	case <-time.After(5 * time.Second):
		a.proc.kill()
	}
}

// ---- The cell

// nsReplica is one chubbyd of the cell.
type nsReplica struct {
	id   int // 1..5
	host *nsHost
	dir  string
	addr string // client address
	http string
	proc *nsProc
	// old holds the processes this replica ran before a restart.
	old []*nsProc
}

// nsCell is a cell of chubbyd processes, one per namespace, with agents in
// namespaces of their own.
type nsCell struct {
	t      *testing.T
	net    *netnsNet
	bin    string // chubbyd
	exe    string // this test binary, for agents
	lease  time.Duration
	peers  string
	reps   []*nsReplica
	agents []*agent
	mu     sync.Mutex
	// seeds, if not nil, are the addresses agents are given instead of
	// every replica's (a client that learns the rest from the cell).
	seeds []string
}

func startNsCell(t *testing.T, bin string, n int, lease time.Duration) *nsCell {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &nsCell{t: t, net: newNetnsNet(t), bin: bin, exe: exe, lease: lease}
	var spec []string
	for i := 1; i <= n; i++ {
		h := c.net.addHost(fmt.Sprintf("r%d", i))
		r := &nsReplica{id: i, host: h, dir: t.TempDir(), addr: h.ip + ":7000", http: h.ip + ":7080"}
		spec = append(spec, fmt.Sprintf("%d=%s/%s:7100", i, r.addr, h.ip))
		c.reps = append(c.reps, r)
	}
	c.peers = strings.Join(spec, ",")
	t.Cleanup(c.cleanup) // after the network's: runs before it
	for i := range c.reps {
		c.start(i)
	}
	return c
}

func (c *nsCell) addrs() []string {
	var out []string
	for _, r := range c.reps {
		out = append(out, r.addr)
	}
	return out
}

// start starts replica i (0-based) on its data directory.
func (c *nsCell) start(i int) {
	c.t.Helper()
	r := c.reps[i]
	p, err := startInNS(fmt.Sprintf("r%d", r.id), r.host.ns, os.Environ(), nil, nil, c.bin, "serve",
		"--id", strconv.Itoa(r.id), "--peers", c.peers, "--data", r.dir, "--http", r.http,
		"--lease", c.lease.String(), "--log-level", "info")
	if err != nil {
		c.t.Fatalf("start replica %d: %v", r.id, err)
	}
	c.mu.Lock()
	if r.proc != nil {
		r.old = append(r.old, r.proc)
	}
	r.proc = p
	c.mu.Unlock()
}

// kill9 kills replica i with SIGKILL.
func (c *nsCell) kill9(i int) { c.reps[i].proc.kill() }

func (c *nsCell) sigstop(i int) error { return c.reps[i].proc.signal(syscall.SIGSTOP) }
func (c *nsCell) sigcont(i int) error { return c.reps[i].proc.signal(syscall.SIGCONT) }

// prlimitFsize limits the size of any file replica i writes to n bytes
// (RLIMIT_FSIZE, soft and hard): writing past it, or growing a file past it,
// fails with EFBIG (Go ignores the SIGXFSZ that comes with it).
func (c *nsCell) prlimitFsize(i int, n int64) error {
	out, err := exec.Command("prlimit", fmt.Sprintf("--fsize=%d", n), "--pid", strconv.Itoa(c.reps[i].proc.pid())).CombinedOutput()
	if err != nil {
		return fmt.Errorf("prlimit: %v: %s", err, out)
	}
	return nil
}

// restart kills replica i if it still runs and starts it again on its data.
func (c *nsCell) restart(i int) {
	c.kill9(i)
	c.start(i)
}

// startAgent starts a client agent (probe: no session) in a namespace of
// its own and waits until it is ready.
func (c *nsCell) startAgent(name string, probe bool) *agent {
	c.t.Helper()
	return c.startAgentWith(name, probe, nil)
}

// startAgentWith is startAgent with a hook run on the agent's host before
// the agent starts (to put it on one side of a partition).
func (c *nsCell) startAgentWith(name string, probe bool, before func(*nsHost)) *agent {
	c.t.Helper()
	h := c.net.addHost("cl-" + name) // not r1..r5: the replicas' hosts
	if before != nil {
		before(h)
	}
	addrs := c.addrs()
	if c.seeds != nil {
		addrs = c.seeds
	}
	env := append(os.Environ(), envAgent+"="+name, envCell+"="+strings.Join(addrs, ","))
	if probe {
		env = append(env, envProbe+"=1")
	}
	// Plain OS pipes: no copying goroutine that Wait would wait for.
	inR, inW, err := os.Pipe()
	if err != nil {
		c.t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		c.t.Fatal(err)
	}
	a := &agent{name: name, host: h, stdin: inW, changed: make(chan struct{})}
	p, err := startInNS(name, h.ns, env, inR, outW, c.exe,
		"-test.run=^TestNetnsAgent$", "-test.timeout=10m", "-test.count=1")
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		c.t.Fatalf("start agent %s: %v", name, err)
	}
	a.proc = p
	go func() {
		a.reader(outR)
		outR.Close()
	}()
	c.mu.Lock()
	c.agents = append(c.agents, a)
	c.mu.Unlock()
	e, ok := a.wait(40*time.Second, func(e agentEvent) bool { return e.Ev == "ready" || e.Ev == "session-error" })
	if !ok || e.Ev != "ready" {
		c.t.Fatalf("agent %s did not start: %+v\n%s", name, e, tail(p.log.String(), 3000))
	}
	return a
}

// replicaOf returns the index of the replica with client address addr, or -1.
func (c *nsCell) replicaOf(addr string) int {
	for i, r := range c.reps {
		if r.addr == addr {
			return i
		}
	}
	return -1
}

// findMaster asks every replica (through probe) until a replica other than
// those in not names itself master with the highest epoch any answer names
// and a majority of the answers agree; it returns the replica and epoch.
func (c *nsCell) findMaster(probe *agent, d time.Duration, not ...int) (int, int64, bool) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		since := now()
		probe.send("master")
		e, ok := probe.wait(5*time.Second, func(e agentEvent) bool { return e.Ev == "master" && e.T >= since })
		if ok {
			if m, ep := masterOf(e.Answers, len(c.reps)); m != "" {
				i := c.replicaOf(m)
				excluded := false
				for _, x := range not {
					excluded = excluded || x == i
				}
				if i >= 0 && !excluded {
					return i, ep, true
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1, 0, false
}

// masterOf returns the master a majority of n replicas agree on, if the
// master itself names itself in the same answer set with that epoch.
func masterOf(answers []masterAnswer, n int) (string, int64) {
	votes := map[string]int{}
	var best int64
	for _, a := range answers {
		if a.Err == "" && a.Master != "" {
			if a.Epoch > best {
				best = a.Epoch
			}
		}
	}
	self := map[string]bool{}
	for _, a := range answers {
		if a.Err == "" && a.Master != "" && a.Epoch == best {
			votes[a.Master]++
			if a.Master == a.Addr {
				self[a.Master] = true
			}
		}
	}
	for m, v := range votes {
		if v > n/2 && self[m] {
			return m, best
		}
	}
	return "", 0
}

// replicaLogTime returns the time of the first line of replica i's logs
// (every process it ran) that contains every substr, from slog's time= field.
func (c *nsCell) replicaLogTime(i int, substr ...string) (time.Time, bool) {
	c.mu.Lock()
	procs := append(append([]*nsProc(nil), c.reps[i].old...), c.reps[i].proc)
	c.mu.Unlock()
	for _, p := range procs {
	lines:
		for _, line := range strings.Split(p.log.String(), "\n") {
			for _, s := range substr {
				if !strings.Contains(line, s) {
					continue lines
				}
			}
			f, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
			if ts, err := time.Parse(time.RFC3339Nano, f); err == nil {
				return ts, true
			}
		}
	}
	return time.Time{}, false
}

// cleanup kills every process the cell started (by pid) and, when the test
// failed, writes every log to a directory it names and prints their tails.
func (c *nsCell) cleanup() {
	c.mu.Lock()
	agents := append([]*agent(nil), c.agents...)
	c.mu.Unlock()
	for _, a := range agents {
		a.stdin.Close()
	}
	for _, a := range agents {
		select {
		case <-a.proc.done:
		case <-time.After(3 * time.Second):
			a.proc.kill()
		}
	}
	var procs []*nsProc
	for _, r := range c.reps {
		for _, p := range append(append([]*nsProc(nil), r.old...), r.proc) {
			p.signal(syscall.SIGCONT) // a stopped process dies of SIGKILL too, but be plain
			p.kill()
			procs = append(procs, p)
		}
	}
	if !c.t.Failed() {
		return
	}
	dir, err := os.MkdirTemp("", "chubby-netns-logs-")
	if err != nil {
		c.t.Logf("no log directory: %v", err)
		return
	}
	for k, p := range procs {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s.%d.log", p.name, k)), []byte(p.log.String()), 0o644)
	}
	for _, a := range agents {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		for _, e := range a.all() {
			enc.Encode(e)
		}
		os.WriteFile(filepath.Join(dir, a.name+".events.jsonl"), b.Bytes(), 0o644)
		os.WriteFile(filepath.Join(dir, a.name+".stderr.log"), []byte(a.proc.log.String()), 0o644)
	}
	c.t.Logf("full logs and agent events in %s", dir)
	for _, r := range c.reps {
		c.t.Logf("replica %d log (tail):\n%s", r.id, tail(r.proc.log.String(), 2500))
	}
}
