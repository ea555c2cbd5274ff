//go:build linux

package clustertest

// The client agent of the network-namespace tests (netns_test.go): the test
// binary re-executed inside a client namespace, driven by lines on stdin,
// reporting one JSON line per event on stdout. It uses the real Go client
// library, so what it reports is what an application of the library sees.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
	"github.com/chubbygo/chubby/rpc"
)

// Environment of an agent process.
const (
	envAgent = "CHUBBY_NETNS_AGENT" // the agent's name; unset: TestNetnsAgent skips
	envCell  = "CHUBBY_NETNS_CELL"  // the replicas' client addresses, comma-separated
	envProbe = "CHUBBY_NETNS_PROBE" // "1": no session, only the probe commands
)

// agentPoll is how often an agent samples Session.State and
// Session.LeaseRemaining.
const agentPoll = 5 * time.Millisecond

// agentEvent is one line an agent prints. Times are Unix nanoseconds from
// the agent's wall clock (every process runs on the same machine, so they
// compare across processes). T is when the event happened; for a call, when
// it returned, and Call when it started.
type agentEvent struct {
	Ev      string         `json:"ev"`
	T       int64          `json:"t"`
	Call    int64          `json:"call,omitempty"`
	Path    string         `json:"path,omitempty"`
	Val     string         `json:"val,omitempty"`
	Gen     int64          `json:"gen,omitempty"`
	Cached  bool           `json:"cached,omitempty"`
	State   string         `json:"state,omitempty"`
	End     int64          `json:"end,omitempty"` // "lease": the local lease end
	Kind    string         `json:"kind,omitempty"`
	Epoch   int64          `json:"epoch,omitempty"`
	Seq     string         `json:"seq,omitempty"`
	Valid   bool           `json:"valid,omitempty"`
	Reason  string         `json:"reason,omitempty"`
	Err     string         `json:"err,omitempty"`
	Code    string         `json:"code,omitempty"`
	Addr    string         `json:"addr,omitempty"`
	Master  string         `json:"master,omitempty"`
	HTTP    int            `json:"http,omitempty"`
	Commit  int64          `json:"commit,omitempty"`
	Applied int64          `json:"applied,omitempty"`
	Session int64          `json:"session,omitempty"`
	Answers []masterAnswer `json:"answers,omitempty"`
	Body    string         `json:"body,omitempty"` // "status-json": the page
}

// masterAnswer is one replica's GetMaster answer.
type masterAnswer struct {
	Addr   string `json:"addr"`
	Master string `json:"master,omitempty"`
	Epoch  int64  `json:"epoch,omitempty"`
	Err    string `json:"err,omitempty"`
}

// padSep separates a value from its padding in a file's content.
const padSep = "|"

// fileValue is the value a file's content carries (its padding cut off).
func fileValue(b []byte) string {
	v, _, _ := strings.Cut(string(b), padSep)
	return v
}

type agentProc struct {
	name  string
	addrs []string

	outMu sync.Mutex
	out   *json.Encoder

	c  *client.Client
	s  *client.Session
	kc combineservice.Client // raw calls to one replica (probe commands)

	mu      sync.Mutex
	handles map[string]*client.Handle
	seqs    map[string]*chubby.Sequencer

	loopCtx    context.Context
	stopLoops  context.CancelFunc
	loops      sync.WaitGroup
	commands   sync.WaitGroup
	rootCtx    context.Context
	cancelRoot context.CancelFunc
}

func now() int64 { return time.Now().UnixNano() }

func (a *agentProc) emit(e agentEvent) {
	if e.T == 0 {
		e.T = now()
	}
	a.outMu.Lock()
	defer a.outMu.Unlock()
	a.out.Encode(e)
}

func errInfo(err error) (string, string) {
	if err == nil {
		return "", ""
	}
	code := ""
	if c, ok := client.Code(err); ok {
		code = c.String()
	}
	return client.Describe(err), code
}

// TestNetnsAgent is not a test: it is the agent process the netns tests
// start inside a client namespace. It skips unless CHUBBY_NETNS_AGENT is set.
func TestNetnsAgent(t *testing.T) {
	name := os.Getenv(envAgent)
	if name == "" {
		t.Skip("an agent process of TestNetns (runs only when started by it)")
	}
	if err := runAgent(name, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "agent %s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0) // skip the testing framework's own output on stdout
}

func runAgent(name string, in io.Reader, out io.Writer) error {
	addrs := strings.Split(os.Getenv(envCell), ",")
	a := &agentProc{name: name, addrs: addrs, out: json.NewEncoder(out),
		handles: map[string]*client.Handle{}, seqs: map[string]*chubby.Sequencer{}}
	a.rootCtx, a.cancelRoot = context.WithCancel(context.Background())
	defer a.cancelRoot()
	a.loopCtx, a.stopLoops = context.WithCancel(a.rootCtx)
	opts, err := rpc.ClientOptions(rpc.ClientConfig{Addrs: addrs, ConnectTimeout: 300 * time.Millisecond, RPCTimeout: time.Second})
	if err != nil {
		return err
	}
	if a.kc, err = combineservice.NewClient("chubby", opts...); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if os.Getenv(envProbe) != "1" {
		// A short call timeout: a call stuck on a replica that cannot
		// answer (stopped, cut off) is retried elsewhere after 5 s rather
		// than the default 10 s. It is longer than the 3 s lease the tests
		// use, so a write that waits for a caching session's lease is not
		// timed out by it.
		a.c, err = client.Connect(a.rootCtx, client.Config{Addrs: addrs, ClientName: "agent-" + name,
			CallTimeout: 5 * time.Second, Logger: logger})
		if err != nil {
			return err
		}
		defer a.c.Close()
		ctx, cancel := context.WithTimeout(a.rootCtx, 30*time.Second)
		a.s, err = a.c.NewSession(ctx)
		cancel()
		if err != nil {
			a.emit(agentEvent{Ev: "session-error", Err: client.Describe(err)})
			return err
		}
		a.emit(agentEvent{Ev: "session", Session: int64(a.s.ID()), Epoch: a.s.Epoch()})
		go a.watchSession()
	}
	a.emit(agentEvent{Ev: "ready"})
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if line == "stop" {
			break
		}
		a.commands.Add(1)
		go func() {
			defer a.commands.Done()
			a.run(strings.Fields(line))
		}()
	}
	// stdin closed or "stop": end the loops and calls, close the session.
	a.mu.Lock()
	a.stopLoops()
	a.mu.Unlock()
	a.loops.Wait()
	a.cancelRoot()
	a.commands.Wait()
	if a.s != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		a.s.Close(ctx)
		cancel()
	}
	a.emit(agentEvent{Ev: "bye"})
	return nil
}

// watchSession reports every change of the session's state and local lease
// end (sampled every agentPoll) and every session event.
func (a *agentProc) watchSession() {
	go func() {
		for ev := range a.s.Events() {
			e := agentEvent{Ev: "sevent", T: ev.At.UnixNano(), Kind: ev.Kind.String(), Epoch: ev.Epoch}
			e.Err, e.Code = errInfo(ev.Err)
			a.emit(e)
		}
	}()
	var last client.SessionState
	var lastEnd int64
	tick := time.NewTicker(agentPoll)
	defer tick.Stop()
	for {
		// The epoch read on both sides of the lease: a sample is labelled
		// with the epoch of the reply that granted it, or skipped.
		ep := a.s.Epoch()
		t0 := time.Now()
		rem := a.s.LeaseRemaining()
		st := a.s.State()
		// The local lease end, exact to the microsecond: LeaseRemaining is
		// leaseEnd - now under the session's lock, and it only grows.
		if rem > 0 && a.s.Epoch() == ep {
			if end := t0.Add(rem).UnixNano(); end > lastEnd+int64(time.Millisecond) {
				lastEnd = end
				a.emit(agentEvent{Ev: "lease", T: t0.UnixNano(), End: end, Epoch: ep})
			}
		}
		if st != last {
			last = st
			a.emit(agentEvent{Ev: "state", T: t0.UnixNano(), State: st.String(), End: lastEnd, Epoch: a.s.Epoch()})
		}
		if st == client.StateExpired || st == client.StateClosed {
			return
		}
		select {
		case <-tick.C:
		case <-a.rootCtx.Done():
			return
		}
	}
}

func (a *agentProc) handle(ctx context.Context, path string) (*client.Handle, error) {
	a.mu.Lock()
	h := a.handles[path]
	a.mu.Unlock()
	if h != nil {
		return h, nil
	}
	h, err := a.s.Open(ctx, path, client.OpenOptions{Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE})
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if old := a.handles[path]; old != nil {
		go h.Close(context.Background())
		return old, nil
	}
	a.handles[path] = h
	return h, nil
}

func atoi(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return def
}

func arg(f []string, i int) string {
	if i < len(f) {
		return f[i]
	}
	return ""
}

// opTimeout bounds one read or write of an agent (the library retries
// within it across failovers).
const opTimeout = 20 * time.Second

// run carries out one command. Commands:
//
//	acquire PATH WAIT_MS LOCKDELAY_MS   exclusive Acquire
//	release PATH
//	checkseq PATH                       GetSequencer and CheckSequencer of the held lock
//	write PATH VALUE [SIZE]             SetContents (padded to SIZE bytes)
//	read PATH
//	read-loop PATH INTERVAL_MS          reads until stop-loops
//	write-loop PREFIX NFILES SIZE [MS]  writes NAME-n to PREFIXk, k = n mod NFILES (every MS)
//	lock-loop PATH HOLD_MS LOCKDELAY_MS exclusive lock cycles: Acquire, hold, Release
//	stop-loops
//	master                              GetMaster on every replica
//	getmaster ADDR TIMEOUT_MS           GetMaster on one replica
//	master-loop INTERVAL_MS             master, repeated until stop-loops
//	status ADDR                         GetStatus on one replica
//	healthz HTTPADDR                    GET /healthz
//	status-json HTTPADDR TIMEOUT_MS     GET /status?format=json
//	remove-member ADDR ID               RemoveMember on one replica
func (a *agentProc) run(f []string) {
	ctx := a.rootCtx
	switch f[0] {
	case "acquire":
		path := arg(f, 1)
		wait := time.Duration(atoi(arg(f, 2), 30000)) * time.Millisecond
		delay := time.Duration(atoi(arg(f, 3), 1000)) * time.Millisecond
		call := now()
		a.emit(agentEvent{Ev: "acquire-call", T: call, Path: path})
		actx, cancel := context.WithTimeout(ctx, wait+opTimeout)
		defer cancel()
		h, err := a.handle(actx, path)
		var seq *chubby.Sequencer
		if err == nil {
			seq, err = h.Acquire(actx, chubby.LockMode_EXCLUSIVE, wait, client.LockOptions{LockDelay: delay})
		}
		if err != nil {
			e := agentEvent{Ev: "acquire-error", Call: call, Path: path}
			e.Err, e.Code = errInfo(err)
			a.emit(e)
			return
		}
		a.mu.Lock()
		a.seqs[path] = seq
		a.mu.Unlock()
		a.emit(agentEvent{Ev: "acquired", Call: call, Path: path, Seq: client.FormatSequencer(seq)})
	case "release":
		path := arg(f, 1)
		call := now()
		a.emit(agentEvent{Ev: "release-call", T: call, Path: path})
		rctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		h, err := a.handle(rctx, path)
		if err == nil {
			err = h.Release(rctx)
		}
		if err != nil {
			e := agentEvent{Ev: "release-error", Call: call, Path: path}
			e.Err, e.Code = errInfo(err)
			a.emit(e)
			return
		}
		a.emit(agentEvent{Ev: "released", Call: call, Path: path})
	case "checkseq":
		path := arg(f, 1)
		call := now()
		e := agentEvent{Ev: "checkseq", Call: call, Path: path}
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		a.mu.Lock()
		seq := a.seqs[path]
		a.mu.Unlock()
		if seq == nil {
			e.Err = "no sequencer held"
			a.emit(e)
			return
		}
		valid, reason, err := a.c.CheckSequencer(cctx, seq)
		e.Valid, e.Reason = valid, reason
		e.Err, e.Code = errInfo(err)
		e.Seq = client.FormatSequencer(seq)
		if h, herr := a.handle(cctx, path); herr == nil {
			if held, gerr := h.GetSequencer(cctx); gerr == nil && held != nil {
				e.Master = client.FormatSequencer(held) // what the handle holds now, per the cell
			} else if gerr != nil {
				e.Reason += "; GetSequencer: " + client.Describe(gerr)
			}
		}
		a.emit(e)
	case "write":
		size := atoi(arg(f, 3), 0)
		a.write(ctx, arg(f, 1), arg(f, 2), size)
	case "read":
		a.read(ctx, arg(f, 1))
	case "read-loop":
		path, every := arg(f, 1), time.Duration(atoi(arg(f, 2), 10))*time.Millisecond
		a.loop(every, func(ctx context.Context, _ int) { a.read(ctx, path) })
	case "write-loop":
		prefix, files, size := arg(f, 1), atoi(arg(f, 2), 1), atoi(arg(f, 3), 0)
		every := time.Duration(atoi(arg(f, 4), 0)) * time.Millisecond
		a.loop(every, func(ctx context.Context, n int) {
			a.write(ctx, fmt.Sprintf("%s%d", prefix, n%files), fmt.Sprintf("%s-%d", a.name, n), size)
		})
	case "lock-loop":
		path := arg(f, 1)
		hold := time.Duration(atoi(arg(f, 2), 20)) * time.Millisecond
		delay := time.Duration(atoi(arg(f, 3), 1000)) * time.Millisecond
		a.loop(0, func(ctx context.Context, _ int) { a.lockCycle(ctx, path, hold, delay) })
	case "stop-loops":
		a.mu.Lock()
		stop := a.stopLoops
		a.mu.Unlock()
		stop()
		a.loops.Wait()
		a.mu.Lock()
		a.loopCtx, a.stopLoops = context.WithCancel(a.rootCtx)
		a.mu.Unlock()
		a.emit(agentEvent{Ev: "loops-stopped"})
	case "master":
		a.emit(agentEvent{Ev: "master", Answers: a.masters(ctx)})
	case "getmaster":
		addr, d := arg(f, 1), time.Duration(atoi(arg(f, 2), 500))*time.Millisecond
		a.emit(agentEvent{Ev: "master", Answers: []masterAnswer{a.askMaster(ctx, addr, d)}})
	case "master-loop":
		every := time.Duration(atoi(arg(f, 1), 50)) * time.Millisecond
		a.loop(every, func(ctx context.Context, _ int) {
			a.emit(agentEvent{Ev: "master", Answers: a.masters(ctx)})
		})
	case "status":
		addr := arg(f, 1)
		e := agentEvent{Ev: "status", Call: now(), Addr: addr}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := a.kc.GetStatus(sctx, callopt.WithHostPort(addr), callopt.WithRPCTimeout(time.Second))
		cancel()
		if err != nil {
			e.Err = err.Error()
		} else {
			e.Master, e.Epoch, e.Commit = st.MasterAddress, st.Epoch, st.CommittedOp
			for _, r := range st.Replicas {
				if r.CommittedOp >= 0 { // the replica asked reports its own applied index
					e.Applied = r.CommittedOp
				}
			}
		}
		a.emit(e)
	case "healthz":
		addr := arg(f, 1)
		e := agentEvent{Ev: "healthz", Call: now(), Addr: addr}
		hc := &http.Client{Timeout: time.Second}
		resp, err := hc.Get("http://" + addr + "/healthz")
		if err != nil {
			e.Err = err.Error()
		} else {
			e.HTTP = resp.StatusCode
			resp.Body.Close()
		}
		a.emit(e)
	case "status-json":
		addr, d := arg(f, 1), time.Duration(atoi(arg(f, 2), 1000))*time.Millisecond
		e := agentEvent{Ev: "status-json", Call: now(), Addr: addr}
		hc := &http.Client{Timeout: d}
		if resp, err := hc.Get("http://" + addr + "/status?format=json"); err != nil {
			e.Err = err.Error()
		} else {
			b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			e.HTTP, e.Body = resp.StatusCode, string(b)
			if err != nil {
				e.Err = err.Error()
			}
		}
		a.emit(e)
	case "remove-member":
		addr, id := arg(f, 1), arg(f, 2)
		e := agentEvent{Ev: "remove-member", Call: now(), Addr: addr, Val: id}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := a.kc.RemoveMember(rctx, &chubby.RemoveMemberRequest{Id: id}, callopt.WithHostPort(addr), callopt.WithRPCTimeout(5*time.Second))
		cancel()
		e.Err, e.Code = errInfo(err)
		if err == nil {
			e.Commit = r.Index
		}
		a.emit(e)
	default:
		a.emit(agentEvent{Ev: "bad-command", Err: strings.Join(f, " ")})
	}
}

// loop runs f every interval (back to back when 0) until stop-loops.
func (a *agentProc) loop(every time.Duration, f func(ctx context.Context, n int)) {
	a.mu.Lock()
	ctx := a.loopCtx
	a.mu.Unlock()
	a.loops.Add(1)
	defer a.loops.Done()
	for n := 0; ctx.Err() == nil; n++ {
		if a.s != nil && a.s.Err() != nil {
			a.emit(agentEvent{Ev: "loop-ended", Err: client.Describe(a.s.Err())})
			<-ctx.Done() // the session is over: nothing more to do until stop-loops
			return
		}
		f(ctx, n)
		if every > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}
}

// lockCycle is one exclusive lock cycle on path: Acquire (waiting up to
// 10 s), hold, Release. Its events are those of acquire and release; a
// failed Acquire (whose outcome may be a grant) is followed by a Release to
// be sure (LOCK_NOT_HELD is harmless), reported as release-error only when
// it fails otherwise. The Release runs to its end even after stop-loops.
func (a *agentProc) lockCycle(ctx context.Context, path string, hold, delay time.Duration) {
	const wait = 10 * time.Second
	call := now()
	a.emit(agentEvent{Ev: "acquire-call", T: call, Path: path})
	actx, cancel := context.WithTimeout(ctx, wait+opTimeout)
	defer cancel()
	h, err := a.handle(actx, path)
	if err == nil {
		var seq *chubby.Sequencer
		if seq, err = h.Acquire(actx, chubby.LockMode_EXCLUSIVE, wait, client.LockOptions{LockDelay: delay}); err == nil {
			a.emit(agentEvent{Ev: "acquired", Call: call, Path: path, Seq: client.FormatSequencer(seq)})
			select {
			case <-ctx.Done():
			case <-time.After(hold):
			}
		}
	}
	if err != nil {
		e := agentEvent{Ev: "acquire-error", Call: call, Path: path}
		e.Err, e.Code = errInfo(err)
		a.emit(e)
		if h == nil {
			return
		}
		defer func() { // not in a tight loop while the cell refuses
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}()
	}
	rcall := now()
	if err == nil {
		a.emit(agentEvent{Ev: "release-call", T: rcall, Path: path})
	}
	rctx, rcancel := context.WithTimeout(a.rootCtx, opTimeout)
	defer rcancel()
	rerr := h.Release(rctx)
	if c, _ := client.Code(rerr); rerr != nil && (err == nil || c != chubby.ErrorCode_LOCK_NOT_HELD) {
		e := agentEvent{Ev: "release-error", Call: rcall, Path: path}
		e.Err, e.Code = errInfo(rerr)
		a.emit(e)
		return
	}
	if err == nil {
		a.emit(agentEvent{Ev: "released", Call: rcall, Path: path})
	}
}

func (a *agentProc) write(ctx context.Context, path, val string, size int) {
	content := []byte(val)
	if size > len(val)+len(padSep) {
		content = []byte(val + padSep + strings.Repeat(".", size-len(val)-len(padSep)))
	}
	call := now()
	wctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	h, err := a.handle(wctx, path)
	var st *chubby.Stat
	if err == nil {
		st, err = h.SetContents(wctx, content)
	}
	if err != nil {
		e := agentEvent{Ev: "write-error", Call: call, Path: path, Val: val}
		e.Err, e.Code = errInfo(err)
		a.emit(e)
		return
	}
	a.emit(agentEvent{Ev: "write", Call: call, Path: path, Val: val, Gen: st.GetContentGeneration()})
}

func (a *agentProc) read(ctx context.Context, path string) {
	call := now()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	h, err := a.handle(rctx, path)
	var (
		b      []byte
		st     *chubby.Stat
		before = a.s.CacheStats().Hits
	)
	if err == nil {
		b, st, err = h.GetContentsAndStat(rctx)
	}
	// Only one goroutine of an agent reads, so a hit counted meanwhile is
	// this read's.
	cached := a.s.CacheStats().Hits > before
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return // stop-loops
		}
		e := agentEvent{Ev: "read-error", Call: call, Path: path}
		e.Err, e.Code = errInfo(err)
		a.emit(e)
		return
	}
	a.emit(agentEvent{Ev: "read", Call: call, Path: path, Val: fileValue(b), Gen: st.GetContentGeneration(), Cached: cached})
}

// masters asks every replica at once where the master is.
func (a *agentProc) masters(ctx context.Context) []masterAnswer {
	out := make([]masterAnswer, len(a.addrs))
	var wg sync.WaitGroup
	for i, addr := range a.addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = a.askMaster(ctx, addr, 500*time.Millisecond)
		}()
	}
	wg.Wait()
	return out
}

// askMaster asks one replica where the master is, waiting at most d.
func (a *agentProc) askMaster(ctx context.Context, addr string, d time.Duration) masterAnswer {
	mctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	r, err := a.kc.GetMaster(mctx, &chubby.GetMasterRequest{}, callopt.WithHostPort(addr), callopt.WithRPCTimeout(d))
	out := masterAnswer{Addr: addr}
	if err != nil {
		out.Err = err.Error()
		return out
	}
	out.Master, out.Epoch = r.MasterAddress, r.Epoch
	return out
}
