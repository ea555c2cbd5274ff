package clustertest

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
)

// TestFailoverTimeline measures failover as the Go client sees it, with a
// timeline per trial: five `chubbyd serve` processes on loopback with the
// default timers (heartbeat 100 ms, view-change timeout 1.2 s — a killed
// master's refused port starts the view change after 200 ms of silence —,
// master lease 240 ms, session lease 12 s); a session made before the kill runs lock
// cycles (Acquire + Release on an open handle, each cycle bounded by 1 s and
// tried again 5 ms after a failure, as chubbybench's failover workload
// does); the master is killed with SIGKILL; the time to the end of the next
// completed cycle is the trial's figure. Each trial prints when GetMaster
// from outside first named the new master, when the new master started
// serving (its "master" log line), when the client's first KeepAlive
// reached it, and every attempt of the cycle's calls (address, error, time)
// from the client's debug log.
//
// It runs only when CHUBBY_FAILOVER_TRIALS is set (the number of trials;
// each takes about 4 s):
//
//	CHUBBY_FAILOVER_TRIALS=10 go test ./tools/clustertest -run TestFailoverTimeline -v
//
// CHUBBY_FAILOVER_CACHE=1 gives the probe's session a cache (the default
// Config); without it the probe runs with DisableCache, as chubbybench's
// clients do. CHUBBY_FAILOVER_BYSTANDERS=n adds n idle caching sessions
// (other clients of the cell, each with its own KeepAlive loop): a new
// master holds every change until each recovered caching session has
// flushed. CHUBBY_FAILOVER_QUIET=1 prints only the summary lines and the
// timelines of slow trials (the cycle done more than 50 ms after the new
// master served). CHUBBY_FAILOVER_CHUBBYD names a chubbyd binary to run
// instead of building one (to compare server builds).
func TestFailoverTimeline(t *testing.T) {
	trials, _ := strconv.Atoi(os.Getenv("CHUBBY_FAILOVER_TRIALS"))
	if trials <= 0 {
		t.Skip("set CHUBBY_FAILOVER_TRIALS=n to run n failover trials (about 4 s each)")
	}
	caching := os.Getenv("CHUBBY_FAILOVER_CACHE") == "1"
	bystanders, _ := strconv.Atoi(os.Getenv("CHUBBY_FAILOVER_BYSTANDERS"))
	quiet := os.Getenv("CHUBBY_FAILOVER_QUIET") == "1"

	pc := startProcCell(t, 5)
	rec := &recorder{}
	logger := slog.New(rec)
	ctx := context.Background()
	cli, err := client.Connect(ctx, client.Config{
		Addrs: pc.clients, ClientName: "failover-probe", DisableCache: !caching, Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	sess := pc.newSession(t, cli)
	defer sess.Close(context.Background())
	h, err := sess.Open(ctx, "/failover-lock", client.OpenOptions{
		Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE})
	if err != nil {
		t.Fatal(err)
	}
	for i := range bystanders {
		bc, err := client.Connect(ctx, client.Config{Addrs: pc.clients, ClientName: fmt.Sprint("bystander", i)})
		if err != nil {
			t.Fatal(err)
		}
		defer bc.Close()
		bs := pc.newSession(t, bc)
		defer bs.Close(context.Background())
		bh, err := bs.Open(ctx, fmt.Sprintf("/bystander%d", i), client.OpenOptions{
			Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := bh.GetContentsAndStat(ctx); err != nil { // something cached
			t.Fatal(err)
		}
	}
	cycle := func(ctx context.Context) error {
		wait := time.Second
		if dl, ok := ctx.Deadline(); ok {
			wait = max(time.Until(dl), time.Millisecond)
		}
		if _, err := h.Acquire(ctx, chubby.LockMode_EXCLUSIVE, wait, client.LockOptions{}); err != nil {
			if ctx.Err() != nil {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				_ = h.Release(rctx)
				cancel()
			}
			return fmt.Errorf("acquire: %w", err)
		}
		if err := h.Release(ctx); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		return nil
	}

	var results []trialResult
	for trial := range trials {
		m := pc.steadyMaster(t, cli, sess)
		for i := range 5 { // the probe works before the kill
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := cycle(cctx)
			cancel()
			if err != nil {
				t.Fatalf("trial %d: cycle %d before the kill: %v", trial+1, i, err)
			}
		}
		time.Sleep(200 * time.Millisecond) // the KeepAlive is parked at the master again
		rec.reset()
		obs := pc.watchMaster(m)
		killed := time.Now()
		pc.kill(m)
		var attempts []event
		recovered := time.Duration(-1)
		for time.Since(killed) < 30*time.Second {
			start := time.Now()
			actx, cancel := context.WithTimeout(ctx, time.Second)
			err := cycle(actx)
			cancel()
			if err == nil {
				recovered = time.Since(killed)
				break
			}
			attempts = append(attempts, event{at: time.Now(), what: fmt.Sprintf("cycle attempt (started %+dms) failed: %v",
				start.Sub(killed).Milliseconds(), err)})
			time.Sleep(5 * time.Millisecond)
		}
		named, firstNamer := obs.stop()
		if recovered < 0 {
			t.Fatalf("trial %d: no lock cycle within 30 s of the kill", trial+1)
		}
		serving := pc.servingSince(killed)
		r := trialResult{recovered: recovered, named: sinceOr(named, killed), serving: sinceOr(serving, killed), kaNew: -1}
		evs := append(attempts, rec.events()...)
		for _, e := range evs {
			if r.kaNew < 0 && strings.HasPrefix(e.what, "chubby: KeepAlive answered") {
				r.kaNew = e.at.Sub(killed)
			}
		}
		results = append(results, r)
		t.Logf("trial %d: killed replica %d; GetMaster named the new master after %s (replica %d asked), it served after %s; "+
			"first KeepAlive renewed by it after %s; lock cycle done after %v",
			trial+1, m+1, fmtD(r.named), firstNamer+1, fmtD(r.serving), fmtD(r.kaNew), recovered.Round(time.Millisecond))
		if slow := r.serving < 0 || recovered-r.serving > 50*time.Millisecond; !quiet || slow {
			evs = append(evs, event{at: killed.Add(recovered), what: "lock cycle completed"})
			if !named.IsZero() {
				evs = append(evs, event{at: named, what: fmt.Sprintf("outside GetMaster (replica %d) names the new master", firstNamer+1)})
			}
			if !serving.IsZero() {
				evs = append(evs, event{at: serving, what: "new master serving (its log, ms precision)"})
			}
			slices.SortStableFunc(evs, func(a, b event) int { return a.at.Compare(b.at) })
			var b strings.Builder
			for _, e := range evs {
				fmt.Fprintf(&b, "  %+6.1fms  %s\n", float64(e.at.Sub(killed).Microseconds())/1000, e.what)
			}
			t.Logf("trial %d timeline (from the kill):\n%s", trial+1, b.String())
		}
		pc.restart(t, m)
	}
	ds := make([]time.Duration, len(results))
	for i, r := range results {
		ds[i] = r.recovered
	}
	slices.Sort(ds)
	var all []string
	for _, d := range ds {
		all = append(all, strconv.FormatInt(d.Milliseconds(), 10))
	}
	t.Logf("failover (kill -9 of the master → next lock cycle), %d trials, cache=%v bystanders=%d: median %v, min %v, max %v; all (ms): %s",
		len(ds), caching, bystanders, ds[len(ds)/2].Round(time.Millisecond), ds[0].Round(time.Millisecond),
		ds[len(ds)-1].Round(time.Millisecond), strings.Join(all, " "))
}

type trialResult struct {
	recovered, named, serving, kaNew time.Duration
}

func sinceOr(t, from time.Time) time.Duration {
	if t.IsZero() {
		return -1
	}
	return t.Sub(from)
}

func fmtD(d time.Duration) string {
	if d < 0 {
		return "?"
	}
	return d.Round(time.Millisecond).String()
}

type event struct {
	at   time.Time
	what string
}

// recorder is a slog.Handler that keeps every record (debug level up).
type recorder struct {
	mu    sync.Mutex
	evs   []event
	attrs []slog.Attr
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	for _, a := range r.attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	r.mu.Lock()
	r.evs = append(r.evs, event{at: rec.Time, what: b.String()})
	r.mu.Unlock()
	return nil
}

func (r *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &recorderView{r: r, attrs: as}
}

func (r *recorder) WithGroup(string) slog.Handler { return r }

func (r *recorder) reset() {
	r.mu.Lock()
	r.evs = nil
	r.mu.Unlock()
}

func (r *recorder) events() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.evs)
}

// recorderView is the recorder with attributes (the session's logger);
// session ids are left out of the timeline.
type recorderView struct {
	r     *recorder
	attrs []slog.Attr
}

func (v *recorderView) Enabled(ctx context.Context, l slog.Level) bool { return true }
func (v *recorderView) Handle(ctx context.Context, rec slog.Record) error {
	return v.r.Handle(ctx, rec)
}
func (v *recorderView) WithAttrs(as []slog.Attr) slog.Handler {
	return &recorderView{r: v.r, attrs: append(slices.Clone(v.attrs), as...)}
}
func (v *recorderView) WithGroup(string) slog.Handler { return v }

// procCell is a cell of chubbyd processes with the default timers (and
// procOptions' flags), started in their own process groups and killed with
// the test (Pdeathsig). Each logs to a file of its own.
type procCell struct {
	t       *testing.T
	bin     string
	opts    procOptions
	peers   string
	clients []string
	https   []string // each replica's --http, when opts.HTTP
	dirs    []string
	logs    []string
	raw     combineservice.Client

	mu    sync.Mutex
	procs []*exec.Cmd
	spawn chan spawnReq
}

type spawnReq struct {
	cmd   *exec.Cmd
	reply chan error
}

// procOptions adds to a procCell's replicas: an HTTP port each (/metrics,
// /status) and more serve flags.
type procOptions struct {
	HTTP bool
	Args []string
}

func startProcCell(t *testing.T, n int) *procCell { return startProcCellWith(t, n, procOptions{}) }

func startProcCellWith(t *testing.T, n int, opts procOptions) *procCell {
	bin := os.Getenv("CHUBBY_FAILOVER_CHUBBYD") // a prebuilt chubbyd, to compare server builds
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "chubbyd")
		if out, err := exec.Command("go", "build", "-o", bin, "github.com/chubbygo/chubby/tools/chubbyd").CombinedOutput(); err != nil {
			t.Fatalf("go build chubbyd: %v\n%s", err, out)
		}
	}
	ports := freePorts(t, 3*n)
	pc := &procCell{t: t, bin: bin, opts: opts, procs: make([]*exec.Cmd, n), spawn: make(chan spawnReq)}
	var spec []string
	for i := range n {
		pc.clients = append(pc.clients, ports[i])
		if opts.HTTP {
			pc.https = append(pc.https, ports[2*n+i])
		}
		spec = append(spec, fmt.Sprintf("%d=%s/%s", i+1, ports[i], ports[n+i]))
		pc.dirs = append(pc.dirs, t.TempDir())
		pc.logs = append(pc.logs, filepath.Join(t.TempDir(), "chubbyd.log"))
	}
	pc.peers = strings.Join(spec, ",")
	// Pdeathsig is sent when the thread that started the child ends: start
	// every child from one thread that lives as long as the test.
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		for r := range pc.spawn {
			r.reply <- r.cmd.Start()
		}
	}()
	t.Cleanup(func() {
		for i := range pc.procs {
			pc.kill(i)
		}
		close(pc.spawn)
		if t.Failed() {
			for i, l := range pc.logs {
				b, _ := os.ReadFile(l)
				t.Logf("replica %d log (tail):\n%s", i+1, tail(string(b), 3000))
			}
		}
	})
	for i := range n {
		pc.start(i)
	}
	raw, err := combineservice.NewClient("chubby", kclient.WithHostPorts(pc.clients...),
		kclient.WithConnectTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	pc.raw = raw
	return pc
}

func (pc *procCell) start(i int) {
	f, err := os.OpenFile(pc.logs[i], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		pc.t.Fatal(err)
	}
	defer f.Close()
	http := ""
	if pc.opts.HTTP {
		http = pc.https[i]
	}
	args := append([]string{"serve", "--id", strconv.Itoa(i + 1), "--peers", pc.peers, "--data", pc.dirs[i],
		"--http", http, "--log-level", "info"}, pc.opts.Args...)
	cmd := exec.Command(pc.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	reply := make(chan error, 1)
	pc.spawn <- spawnReq{cmd: cmd, reply: reply}
	if err := <-reply; err != nil {
		pc.t.Fatal(err)
	}
	pc.mu.Lock()
	pc.procs[i] = cmd
	pc.mu.Unlock()
}

// pid is replica i's process id (0 when it is not running).
func (pc *procCell) pid(i int) int {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.procs[i] == nil {
		return 0
	}
	return pc.procs[i].Process.Pid
}

// kill sends SIGKILL to replica i's process group (only what we started)
// and reaps it.
func (pc *procCell) kill(i int) {
	pc.mu.Lock()
	cmd := pc.procs[i]
	pc.procs[i] = nil
	pc.mu.Unlock()
	if cmd != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	}
}

func (pc *procCell) newSession(t *testing.T, c *client.Client) *client.Session {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		s, err := c.NewSession(ctx)
		if err == nil {
			return s
		}
		if ctx.Err() != nil {
			t.Fatalf("no session within 30 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// getMaster asks replica i alone (no retries).
func (pc *procCell) getMaster(ctx context.Context, i int) (*chubby.GetMasterResponse, error) {
	return pc.raw.GetMaster(ctx, &chubby.GetMasterRequest{}, callopt.WithHostPort(pc.clients[i]),
		callopt.WithRPCTimeout(time.Second))
}

// steadyMaster waits until every replica names the same master and the
// session has a KeepAlive answer from it (its epoch), and returns it.
func (pc *procCell) steadyMaster(t *testing.T, c *client.Client, s *client.Session) int {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var addr string
		var epoch int64
		agree := true
		for i := range pc.clients {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			r, err := pc.getMaster(ctx, i)
			cancel()
			if err != nil || (addr != "" && (r.MasterAddress != addr || r.Epoch != epoch)) {
				agree = false
				break
			}
			addr, epoch = r.MasterAddress, r.Epoch
		}
		if m := slices.Index(pc.clients, addr); agree && m >= 0 && s.Epoch() == epoch && s.State() == client.StateSafe {
			return m
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("no steady master within 30 s")
	return -1
}

// restart starts replica i again on its data and waits until it is a
// normal member again (its status names a master and it is not recovering).
func (pc *procCell) restart(t *testing.T, i int) {
	time.Sleep(300 * time.Millisecond)
	pc.start(i)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := pc.raw.GetStatus(ctx, callopt.WithHostPort(pc.clients[i]), callopt.WithRPCTimeout(time.Second))
		cancel()
		if err == nil && st.MasterAddress != "" {
			ok := true
			for _, r := range st.Replicas {
				if r.Address == pc.clients[i] && r.Role == chubby.ReplicaRole_RECOVERING {
					ok = false
				}
			}
			if ok {
				time.Sleep(time.Second)
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("replica %d did not rejoin within 30 s", i+1)
}

// servingSince returns when a replica last logged that it became master
// after from (zero if none did).
func (pc *procCell) servingSince(from time.Time) time.Time {
	var out time.Time
	for _, l := range pc.logs {
		f, err := os.Open(l)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, " msg=master ") {
				continue
			}
			ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
			at, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil || at.Before(from.Add(-time.Millisecond)) {
				continue
			}
			if out.IsZero() || at.Before(out) {
				out = at
			}
		}
		f.Close()
	}
	return out
}

// masterWatch asks every replica but the killed one GetMaster, over and
// over, and records when one first names another master.
type masterWatch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	first  time.Time
	who    int
}

func (pc *procCell) watchMaster(killed int) *masterWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &masterWatch{cancel: cancel, who: -1}
	old := pc.clients[killed]
	for i := range pc.clients {
		if i == killed {
			continue
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for ctx.Err() == nil {
				r, err := pc.getMaster(ctx, i)
				if err == nil && r.MasterAddress != "" && r.MasterAddress != old {
					now := time.Now()
					w.mu.Lock()
					if w.first.IsZero() || now.Before(w.first) {
						w.first, w.who = now, i
					}
					w.mu.Unlock()
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	return w
}

func (w *masterWatch) stop() (time.Time, int) {
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first, w.who
}
