package clustertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/client/callopt"
	"github.com/cloudwego/kitex/pkg/klog"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
)

func TestMain(m *testing.M) {
	klog.SetLevel(klog.LevelFatal) // kills make Kitex complain about every dial
	os.Exit(m.Run())
}

// cell is a cell of real chubbyd processes on loopback.
type cell struct {
	t       *testing.T
	bin     string
	peers   string
	clients []string
	dirs    []string
	procs   []*exec.Cmd
	logs    []*bytes.Buffer
	mu      sync.Mutex
}

func freePorts(t *testing.T, n int) []string {
	var lns []net.Listener
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// buildChubbyd builds bin/chubbyd into a temporary directory of t.
func buildChubbyd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "chubbyd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/chubbygo/chubby/tools/chubbyd").CombinedOutput(); err != nil {
		t.Fatalf("go build chubbyd: %v\n%s", err, out)
	}
	return bin
}

func startCell(t *testing.T, n int, lease time.Duration) *cell {
	bin := buildChubbyd(t)
	ports := freePorts(t, 2*n)
	c := &cell{t: t, bin: bin}
	var spec []string
	for i := range n {
		c.clients = append(c.clients, ports[i])
		spec = append(spec, fmt.Sprintf("%d=%s/%s", i+1, ports[i], ports[n+i]))
		c.dirs = append(c.dirs, t.TempDir())
	}
	c.peers = strings.Join(spec, ",")
	c.procs = make([]*exec.Cmd, n)
	c.logs = make([]*bytes.Buffer, n)
	for i := range n {
		c.start(i, lease)
	}
	t.Cleanup(func() {
		for i := range c.procs {
			c.kill(i)
		}
		if t.Failed() {
			for i, l := range c.logs {
				t.Logf("replica %d log (tail):\n%s", i+1, tail(l.String(), 3000))
			}
		}
	})
	return c
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (c *cell) start(i int, lease time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cmd := exec.Command(c.bin, "serve", "--id", strconv.Itoa(i+1), "--peers", c.peers, "--data", c.dirs[i],
		"--http", "", "--log-level", "info", "--lease", lease.String())
	if c.logs[i] == nil {
		c.logs[i] = &bytes.Buffer{}
	}
	cmd.Stdout, cmd.Stderr = c.logs[i], c.logs[i]
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.procs[i] = cmd
}

func (c *cell) kill(i int) {
	c.mu.Lock()
	cmd := c.procs[i]
	c.procs[i] = nil
	c.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}
}

// conn is a client of the cell that follows the master: NOT_MASTER hints,
// then every address in turn.
type conn struct {
	cli   combineservice.Client
	addrs []string
	mu    sync.Mutex
	cur   string
}

func newConn(t *testing.T, addrs []string) *conn {
	cli, err := combineservice.NewClient("chubby", client.WithHostPorts(addrs...),
		client.WithConnectTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return &conn{cli: cli, addrs: addrs, cur: addrs[0]}
}

func (c *conn) addr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// failed moves to the hinted master, or to the next address.
func (c *conn) failed(from string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != from {
		return
	}
	var ce *chubby.ChubbyError
	if errors.As(err, &ce) && ce.Code == chubby.ErrorCode_NOT_MASTER && ce.GetMasterAddress() != "" && ce.GetMasterAddress() != from {
		c.cur = ce.GetMasterAddress()
		return
	}
	i := slices.Index(c.addrs, from)
	c.cur = c.addrs[(i+1)%len(c.addrs)]
}

// retryable: the call certainly did not take effect, or is safe to retry
// (every call the workload makes is idempotent in its effect on the
// history: see the workload).
func retryable(err error) bool {
	var ce *chubby.ChubbyError
	if errors.As(err, &ce) {
		return ce.Code == chubby.ErrorCode_NOT_MASTER || ce.Code == chubby.ErrorCode_UNAVAILABLE
	}
	return true // transport error: the replica is down or the call timed out
}

// do runs f against the master until it succeeds, fails for good, or the
// deadline passes. unknown is true when some attempt may have taken effect
// and the last one did not succeed.
func do[T any](ctx context.Context, c *conn, f func(ctx context.Context, opt callopt.Option) (T, error)) (v T, err error) {
	for {
		a := c.addr()
		v, err = f(ctx, callopt.WithHostPort(a))
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return v, err
		}
		c.failed(a, err)
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// mustDo is do with a 20 s budget that fails the test.
func mustDo[T any](t *testing.T, c *conn, f func(ctx context.Context, opt callopt.Option) (T, error)) T {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := do(ctx, c, f)
	if err != nil {
		t.Fatalf("call failed for 20 s across failover: %v", err)
	}
	return v
}

// ---- The model: every file is a register; a read returns the last write.

type kvInput struct {
	write bool
	key   string
	value string
}

type kvOutput struct {
	value   string
	unknown bool // a write whose outcome is not known
}

var kvModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(kvInput).key
			by[k] = append(by[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in, out := input.(kvInput), output.(kvOutput)
		if in.write {
			return true, in.value
		}
		return out.value == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(kvInput), output.(kvOutput)
		if in.write {
			return fmt.Sprintf("write(%s, %q)", in.key, in.value)
		}
		return fmt.Sprintf("read(%s) -> %q", in.key, out.value)
	},
}

type history struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
	holds map[string][][2]int64 // lock path → [granted, released] intervals
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(op porcupine.Operation) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

func (h *history) hold(path string, from, to int64) {
	h.mu.Lock()
	h.holds[path] = append(h.holds[path], [2]int64{from, to})
	h.mu.Unlock()
}

// worker: one session; writes, reads and exclusive lock cycles, all
// retried across failovers.
func worker(ctx context.Context, t *testing.T, id int, c *conn, h *history, keys []string, stats *atomic.Int64) {
	rng := rand.New(rand.NewPCG(uint64(id), 7))
	opCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 15*time.Second)
	}
	cctx, cancel := opCtx()
	sess, err := do(cctx, c, func(ctx context.Context, o callopt.Option) (*chubby.CreateSessionResponse, error) {
		return c.cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: fmt.Sprint("worker", id)}, o)
	})
	cancel()
	if err != nil {
		t.Errorf("worker %d: CreateSession: %v", id, err)
		return
	}
	s := sess.Session
	// KeepAlive loop for the session, riding through failovers.
	kaDone := make(chan struct{})
	go func() {
		defer close(kaDone)
		epoch := sess.Epoch
		for ctx.Err() == nil {
			a := c.addr()
			kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			r, err := c.cli.KeepAlive(kctx, &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{{Session: s}}, Epoch: &epoch},
				callopt.WithHostPort(a), callopt.WithRPCTimeout(10*time.Second))
			cancel()
			var ce *chubby.ChubbyError
			switch {
			case err == nil:
				epoch = r.Epoch
				if r.Results[0].Error != nil {
					t.Errorf("worker %d: session %d expired across failover: %v", id, s, r.Results[0].Error)
					return
				}
			case errors.As(err, &ce) && ce.Code == chubby.ErrorCode_STALE_EPOCH:
				epoch = ce.GetEpoch()
			default:
				c.failed(a, err)
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	defer func() { <-kaDone }()

	open := func(path string) *chubby.Handle {
		cctx, cancel := opCtx()
		defer cancel()
		r, err := do(cctx, c, func(ctx context.Context, o callopt.Option) (*chubby.OpenResponse, error) {
			return c.cli.Open(ctx, &chubby.OpenRequest{Session: s, Path: path, Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE}, o)
		})
		if err != nil {
			t.Errorf("worker %d: open %s: %v", id, path, err)
			return nil
		}
		return r.Handle
	}
	handles := map[string]*chubby.Handle{}
	for _, k := range keys {
		if handles[k] = open(k); handles[k] == nil {
			return
		}
	}
	lock := open("/lock")
	if lock == nil {
		return
	}
	// Every state-changing request carries a RequestID, the same on every
	// resend, so a write resent after a lost reply or a failover applies
	// once (without it a resent write can apply twice, around another
	// client's write, and the history is not linearizable). The worker has
	// one request in flight, so the floor is the request itself.
	var reqs int64
	rid := func() *chubby.RequestID {
		reqs++
		return &chubby.RequestID{Seq: reqs, Floor: reqs}
	}
	for n := 0; ctx.Err() == nil; n++ {
		k := keys[rng.IntN(len(keys))]
		switch rng.IntN(3) {
		case 0: // write a unique value
			val := fmt.Sprintf("w%d-%d", id, n)
			call := h.now()
			cctx, cancel := opCtx()
			req := &chubby.SetContentsRequest{Handle: handles[k], Content: []byte(val), Rid: rid()}
			_, err := do(cctx, c, func(ctx context.Context, o callopt.Option) (*chubby.Stat, error) {
				return c.cli.SetContents(ctx, req, o)
			})
			cancel()
			op := porcupine.Operation{ClientId: id, Input: kvInput{write: true, key: k, value: val}, Output: kvOutput{}, Call: call, Return: h.now()}
			if err != nil {
				op.Output, op.Return = kvOutput{unknown: true}, math.MaxInt64
			}
			h.add(op)
		case 1: // read
			call := h.now()
			cctx, cancel := opCtx()
			r, err := do(cctx, c, func(ctx context.Context, o callopt.Option) (*chubby.GetContentsAndStatResponse, error) {
				return c.cli.GetContentsAndStat(ctx, &chubby.HandleRequest{Handle: handles[k]}, o)
			})
			cancel()
			if err == nil {
				h.add(porcupine.Operation{ClientId: id, Input: kvInput{key: k}, Output: kvOutput{value: string(r.Content)}, Call: call, Return: h.now()})
			}
		case 2: // an exclusive lock cycle
			cctx, cancel := opCtx()
			try := &chubby.TryAcquireRequest{Handle: lock, Mode: chubby.LockMode_EXCLUSIVE, Rid: rid()}
			_, err := do(cctx, c, func(ctx context.Context, o callopt.Option) (*chubby.Sequencer, error) {
				seq, err := c.cli.TryAcquire(ctx, try, o)
				var ce *chubby.ChubbyError
				if errors.As(err, &ce) && ce.Code == chubby.ErrorCode_LOCK_HELD {
					// A retry after an unknown outcome: do we hold it?
					if s2, err2 := c.cli.GetSequencer(ctx, &chubby.HandleRequest{Handle: lock}, o); err2 == nil {
						return s2, nil
					}
				}
				return seq, err
			})
			cancel()
			if err != nil {
				continue // not granted (held by someone else, or unknown: released below if we hold it)
			}
			granted := h.now()
			time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			released := h.now()
			cctx, cancel = opCtx()
			rel := &chubby.HandleRequest{Handle: lock, Rid: rid()}
			_, err = do(cctx, c, func(ctx context.Context, o callopt.Option) (struct{}, error) {
				err := c.cli.Release(ctx, rel, o)
				var ce *chubby.ChubbyError
				if errors.As(err, &ce) && ce.Code == chubby.ErrorCode_LOCK_NOT_HELD {
					err = nil // a retry of a release that took effect
				}
				return struct{}{}, err
			})
			cancel()
			if err != nil {
				t.Errorf("worker %d: release: %v", id, err)
				return
			}
			h.hold("/lock", granted, released)
		}
		stats.Add(1)
	}
}

// TestFiveReplicasKill9: five chubbyd processes on loopback, eight clients
// doing writes, reads and lock cycles; the primary is killed with SIGKILL
// three times (and restarted on its data). The whole history must be
// linearizable (porcupine), no exclusive lock may be held by two clients at
// once, and every session must survive.
func TestFiveReplicasKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five processes")
	}
	const lease = 4 * time.Second
	c := startCell(t, 5, lease)
	h := &history{start: time.Now(), holds: map[string][][2]int64{}}
	keys := []string{"/k0", "/k1", "/k2"}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ops atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker(ctx, t, w, newConn(t, c.clients), h, keys, &ops)
		}()
	}
	probe := newConn(t, c.clients)
	master := func() int {
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			r, err := do(cctx, probe, func(ctx context.Context, o callopt.Option) (*chubby.GetMasterResponse, error) {
				return probe.cli.GetMaster(ctx, nil, o)
			})
			cancel()
			if err == nil {
				if i := slices.Index(c.clients, r.MasterAddress); i >= 0 {
					return i
				}
			}
		}
		t.Fatal("no master within 20s")
		return -1
	}
	// The probe measures failover as a user sees it: from the kill to the
	// next lock cycle (TryAcquire + Release of its own lock) that succeeds.
	probeSess := mustDo(t, probe, func(ctx context.Context, o callopt.Option) (*chubby.CreateSessionResponse, error) {
		return probe.cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: "probe"}, o)
	})
	probeLock := mustDo(t, probe, func(ctx context.Context, o callopt.Option) (*chubby.OpenResponse, error) {
		return probe.cli.Open(ctx, &chubby.OpenRequest{Session: probeSess.Session, Path: "/probe", Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_OR_CREATE}, o)
	}).Handle
	cycle := func() {
		mustDo(t, probe, func(ctx context.Context, o callopt.Option) (*chubby.Sequencer, error) {
			seq, err := probe.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: probeLock, Mode: chubby.LockMode_EXCLUSIVE}, o)
			var ce *chubby.ChubbyError
			if errors.As(err, &ce) && ce.Code == chubby.ErrorCode_LOCK_HELD {
				return probe.cli.GetSequencer(ctx, &chubby.HandleRequest{Handle: probeLock}, o)
			}
			return seq, err
		})
		mustDo(t, probe, func(ctx context.Context, o callopt.Option) (struct{}, error) {
			err := probe.cli.Release(ctx, &chubby.HandleRequest{Handle: probeLock}, o)
			var ce *chubby.ChubbyError
			if errors.As(err, &ce) && ce.Code == chubby.ErrorCode_LOCK_NOT_HELD {
				err = nil
			}
			return struct{}{}, err
		})
	}
	// The probe session is kept alive by its own calls plus this loop.
	go func() {
		epoch := probeSess.Epoch
		for ctx.Err() == nil {
			a := probe.addr()
			r, err := probe.cli.KeepAlive(ctx, &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{{Session: probeSess.Session}}, Epoch: &epoch},
				callopt.WithHostPort(a), callopt.WithRPCTimeout(10*time.Second))
			var ce *chubby.ChubbyError
			switch {
			case err == nil:
				epoch = r.Epoch
			case errors.As(err, &ce) && ce.Code == chubby.ErrorCode_STALE_EPOCH:
				epoch = ce.GetEpoch()
			default:
				probe.failed(a, err)
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	time.Sleep(time.Second)
	const rounds = 5
	var failovers []time.Duration
	for round := range rounds {
		m := master()
		cycle() // the cell works before the kill
		killed := time.Now()
		c.kill(m)
		cycle()
		d := time.Since(killed)
		failovers = append(failovers, d)
		t.Logf("round %d: killed master replica %d with SIGKILL; next lock cycle after %v", round, m+1, d.Round(time.Millisecond))
		time.Sleep(500 * time.Millisecond)
		c.start(m, lease) // back on its data; it catches up as a backup
		time.Sleep(1500 * time.Millisecond)
	}
	slices.Sort(failovers)
	t.Logf("failover (kill -9 of the master → next lock cycle), %d rounds: median %v, max %v",
		rounds, failovers[rounds/2].Round(time.Millisecond), failovers[rounds-1].Round(time.Millisecond))
	stop()
	wg.Wait()
	t.Logf("%d client operations, %d in the history", ops.Load(), len(h.ops))
	if ops.Load() < 100 {
		t.Fatalf("only %d operations completed", ops.Load())
	}
	res, info := porcupine.CheckOperationsVerbose(kvModel, h.ops, 60*time.Second)
	if res != porcupine.Ok {
		path := filepath.Join(os.TempDir(), "chubby-kill9-history.html")
		porcupine.VisualizePath(kvModel, info, path)
		t.Fatalf("history is %s (visualization: %s)", res, path)
	}
	for path, iv := range h.holds {
		slices.SortFunc(iv, func(a, b [2]int64) int { return int(a[0] - b[0]) })
		for i := 1; i < len(iv); i++ {
			if iv[i][0] < iv[i-1][1] {
				t.Fatalf("lock %s held twice: [%d,%d] and [%d,%d]", path, iv[i-1][0], iv[i-1][1], iv[i][0], iv[i][1])
			}
		}
		t.Logf("lock %s: %d exclusive holds, none overlapping", path, len(iv))
	}
}
