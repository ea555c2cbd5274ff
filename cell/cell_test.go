package cell

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/client/callopt"
	"github.com/cloudwego/kitex/pkg/klog"

	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
	"github.com/chubbygo/chubby/replica/vr"
)

// These tests drive a real cell through real Kitex on loopback with the
// generated client, so they exercise the wire format and the AMD parking
// exactly as any Thrift client would.

type testCell struct {
	t    testing.TB
	s    *Server
	cli  combineservice.Client
	dir  string
	done chan error
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startCell(t testing.TB, cfg Config) *testCell {
	t.Helper()
	if cfg.DataDir == "" && !cfg.InMemory {
		cfg.DataDir = t.TempDir()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listener = ln
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCell{t: t, s: s, dir: cfg.DataDir, done: make(chan error, 1)}
	go func() { tc.done <- s.Serve(context.Background()) }()
	tc.cli = newRawClient(t, s.Addr())
	t.Cleanup(tc.stop)
	return tc
}

func (tc *testCell) stop() {
	if tc.s == nil {
		return
	}
	tc.s.Stop()
	select {
	case <-tc.done:
	case <-time.After(10 * time.Second):
		tc.t.Error("cell did not stop within 10s")
	}
	tc.s = nil
}

func newRawClient(t testing.TB, addr string) combineservice.Client {
	t.Helper()
	c, err := combineservice.NewClient("chubby", client.WithHostPorts(addr),
		client.WithRPCTimeout(5*time.Second), client.WithConnectTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Wait (bounded) until the server answers.
	for i := 0; ; i++ {
		_, err := c.GetMaster(context.Background(), nil)
		if err == nil {
			return c
		}
		if i == 100 {
			t.Fatalf("cell at %s never answered: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func codeOf(err error) chubby.ErrorCode {
	var ce *chubby.ChubbyError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return 0
}

func wantCode(t *testing.T, err error, code chubby.ErrorCode) {
	t.Helper()
	if got := codeOf(err); got != code {
		t.Fatalf("got error %v (code %v), want code %v", err, got, code)
	}
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

var ctx = context.Background()

func TestMain(m *testing.M) {
	klog.SetLevel(klog.LevelWarn) // Kitex's per-server info lines drown the test output
	if os.Getenv(childCellEnv) != "" {
		os.Exit(serveChildCell())
	}
	os.Exit(m.Run())
}

// childCellEnv makes the test binary serve a cell for its parent instead
// of running tests (startChildCell).
const childCellEnv = "CHUBBY_CELL_TEST_CHILD"

// childCellLife bounds how long a child cell serves if its parent never
// says stop.
const childCellLife = 3 * time.Minute

// serveChildCell serves an in-memory cell on a loopback port, writes
// "ADDR host:port" on stdout, and stops when stdin closes (the parent is
// done or gone) or after childCellLife.
func serveChildCell() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := New(Config{InMemory: true, Listener: ln, Logger: quietLogger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background()) }()
	fmt.Printf("ADDR %s\n", s.Addr())
	stdin := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdin)
	}()
	select {
	case <-stdin:
	case <-time.After(childCellLife):
	case err := <-done:
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 1
	}
	s.Stop()
	return 0
}

// startChildCell runs a cell in a child process (this test binary) and
// returns its address; the child stops when the test ends.
func startChildCell(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childCellEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		waited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-waited
		}
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
				line <- a
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case a := <-line:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("the child cell did not report its address within 30 s")
		return ""
	}
}

func (tc *testCell) session(name string) chubby.SessionID {
	tc.t.Helper()
	r, err := tc.cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: name})
	if err != nil {
		tc.t.Fatal(err)
	}
	return r.Session
}

// keepAlive runs a KeepAlive loop for a session until stop is closed.
func (tc *testCell) keepAlive(id chubby.SessionID, stop <-chan struct{}) {
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err := tc.cli.KeepAlive(ctx, &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{{Session: id}}},
				callopt.WithRPCTimeout(time.Minute))
			if err != nil {
				return
			}
		}
	}()
}

func (tc *testCell) open(s chubby.SessionID, path string, create chubby.CreateMode, ephemeral bool) *chubby.Handle {
	tc.t.Helper()
	req := &chubby.OpenRequest{Session: s, Path: path, Mode: chubby.OpenMode_READ_WRITE, Create: create}
	if ephemeral {
		req.Ephemeral = &ephemeral
	}
	r, err := tc.cli.Open(ctx, req)
	if err != nil {
		tc.t.Fatalf("open %s: %v", path, err)
	}
	return r.Handle
}

func TestExclusiveLockContention(t *testing.T) {
	tc := startCell(t, Config{})
	a, b := tc.session("a"), tc.session("b")
	ha := tc.open(a, "/lock", chubby.CreateMode_OPEN_OR_CREATE, false)
	hb := tc.open(b, "/lock", chubby.CreateMode_OPEN_OR_CREATE, false)

	seqA := must[*chubby.Sequencer](t)(tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: ha, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 1000}))
	type res struct {
		seq *chubby.Sequencer
		err error
	}
	got := make(chan res, 1)
	go func() {
		s, err := tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: hb, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 20000},
			callopt.WithRPCTimeout(30*time.Second))
		got <- res{s, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("second Acquire returned while the lock was held: %+v", r)
	case <-time.After(300 * time.Millisecond): // parked, as it should be
	}
	_, err := tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: hb, Mode: chubby.LockMode_EXCLUSIVE})
	wantCode(t, err, chubby.ErrorCode_LOCK_HELD) // it is already waiting
	if err := tc.cli.Release(ctx, &chubby.HandleRequest{Handle: ha}); err != nil {
		t.Fatal(err)
	}
	var r res
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("parked Acquire not granted after release")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.seq.LockGeneration != seqA.LockGeneration+1 {
		t.Fatalf("lock generation %d after %d", r.seq.LockGeneration, seqA.LockGeneration)
	}
	chk := must[*chubby.CheckSequencerResponse](t)(tc.cli.CheckSequencer(ctx, &chubby.CheckSequencerRequest{Sequencer: seqA}))
	if chk.Valid {
		t.Fatal("the released holder's sequencer is still valid")
	}
	chk = must[*chubby.CheckSequencerResponse](t)(tc.cli.CheckSequencer(ctx, &chubby.CheckSequencerRequest{Sequencer: r.seq}))
	if !chk.Valid {
		t.Fatalf("the holder's sequencer is invalid: %s", chk.Reason)
	}
}

func TestAcquireTimesOut(t *testing.T) {
	tc := startCell(t, Config{})
	a, b := tc.session("a"), tc.session("b")
	ha := tc.open(a, "/l", chubby.CreateMode_OPEN_OR_CREATE, false)
	hb := tc.open(b, "/l", chubby.CreateMode_OPEN_OR_CREATE, false)
	must[*chubby.Sequencer](t)(tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: ha, Mode: chubby.LockMode_EXCLUSIVE}))
	_, err := tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: hb, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 200})
	wantCode(t, err, chubby.ErrorCode_TIMED_OUT)
	// The timed-out request is withdrawn: after the release, b can try again
	// and nobody holds the lock on b's behalf.
	if err := tc.cli.Release(ctx, &chubby.HandleRequest{Handle: ha}); err != nil {
		t.Fatal(err)
	}
	st := must[*chubby.Stat](t)(tc.cli.GetStat(ctx, &chubby.HandleRequest{Handle: hb}))
	if st.Lock.Holders != 0 || st.Lock.Waiters != 0 {
		t.Fatalf("lock after timeout and release: %+v", st.Lock)
	}
	must[*chubby.Sequencer](t)(tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: hb, Mode: chubby.LockMode_EXCLUSIVE}))
}

func TestSharedHoldersCoexist(t *testing.T) {
	tc := startCell(t, Config{})
	var hs []*chubby.Handle
	for _, n := range []string{"r1", "r2", "r3"} {
		s := tc.session(n)
		hs = append(hs, tc.open(s, "/shared", chubby.CreateMode_OPEN_OR_CREATE, false))
	}
	s1 := must[*chubby.Sequencer](t)(tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: hs[0], Mode: chubby.LockMode_SHARED, WaitMs: 1000}))
	s2 := must[*chubby.Sequencer](t)(tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: hs[1], Mode: chubby.LockMode_SHARED}))
	if s1.LockGeneration != s2.LockGeneration {
		t.Fatalf("shared holders got generations %d and %d", s1.LockGeneration, s2.LockGeneration)
	}
	_, err := tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: hs[2], Mode: chubby.LockMode_EXCLUSIVE})
	wantCode(t, err, chubby.ErrorCode_LOCK_HELD)
	st := must[*chubby.Stat](t)(tc.cli.GetStat(ctx, &chubby.HandleRequest{Handle: hs[0]}))
	if st.Lock.Holders != 2 || st.Lock.GetMode() != chubby.LockMode_SHARED {
		t.Fatalf("lock info %+v, want 2 shared holders", st.Lock)
	}
	for _, s := range []*chubby.Sequencer{s1, s2} {
		if r := must[*chubby.CheckSequencerResponse](t)(tc.cli.CheckSequencer(ctx, &chubby.CheckSequencerRequest{Sequencer: s})); !r.Valid {
			t.Fatalf("shared sequencer invalid: %s", r.Reason)
		}
	}
}

// TestSessionExpiry: a session whose client stops sending KeepAlives ends
// after its lease: its ephemeral files are gone, its lock is free only after
// lock-delay, and its old sequencer fails CheckSequencer while the new
// holder's passes.
func TestSessionExpiry(t *testing.T) {
	const lease = 800 * time.Millisecond
	const delay = 1500 // ms
	tc := startCell(t, Config{Lease: lease})
	dead, live := tc.session("dead"), tc.session("live")
	stopLive := make(chan struct{})
	defer close(stopLive)
	tc.keepAlive(live, stopLive)

	// The doomed session: an ephemeral file and an exclusive lock.
	eph := tc.open(dead, "/eph", chubby.CreateMode_CREATE_NEW, true)
	_ = eph
	hd := tc.open(dead, "/master", chubby.CreateMode_OPEN_OR_CREATE, false)
	d := int64(delay)
	oldSeq := must[*chubby.Sequencer](t)(tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: hd, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 1000, LockDelayMs: &d}))
	hl := tc.open(live, "/master", chubby.CreateMode_OPEN_EXISTING, false)

	// No KeepAlive is ever sent for dead: wait (bounded) for its end.
	deadline := time.Now().Add(10 * lease)
	for {
		_, err := tc.cli.Open(ctx, &chubby.OpenRequest{Session: live, Path: "/eph", Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_EXISTING})
		if codeOf(err) == chubby.ErrorCode_NOT_FOUND {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ephemeral file still there %v after the lease: %v", 10*lease, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ended := time.Now()
	_, err := tc.cli.Open(ctx, &chubby.OpenRequest{Session: dead, Path: "/x", Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_OR_CREATE})
	wantCode(t, err, chubby.ErrorCode_SESSION_EXPIRED)

	// Lock-delay: the lock is not available yet...
	_, err = tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: hl, Mode: chubby.LockMode_EXCLUSIVE})
	wantCode(t, err, chubby.ErrorCode_LOCK_HELD)
	if r := must[*chubby.CheckSequencerResponse](t)(tc.cli.CheckSequencer(ctx, &chubby.CheckSequencerRequest{Sequencer: oldSeq})); r.Valid {
		t.Fatal("a dead session's sequencer is still valid")
	}
	// ...and a waiting Acquire gets it once the delay is over.
	newSeq, err := tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: hl, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 20000},
		callopt.WithRPCTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(ended); waited < time.Duration(delay)*time.Millisecond-lease-200*time.Millisecond {
		t.Fatalf("lock granted %v after the session ended, lock-delay is %dms", waited, delay)
	}
	if r := must[*chubby.CheckSequencerResponse](t)(tc.cli.CheckSequencer(ctx, &chubby.CheckSequencerRequest{Sequencer: oldSeq})); r.Valid {
		t.Fatal("old sequencer valid after the lock moved")
	}
	if r := must[*chubby.CheckSequencerResponse](t)(tc.cli.CheckSequencer(ctx, &chubby.CheckSequencerRequest{Sequencer: newSeq})); !r.Valid {
		t.Fatalf("new holder's sequencer invalid: %s", r.Reason)
	}
	// The live session, kept alive all along, is still there.
	if _, err := tc.cli.GetStat(ctx, &chubby.HandleRequest{Handle: hl}); err != nil {
		t.Fatalf("kept-alive session lost: %v", err)
	}
}

// TestKeepAliveParked: the master holds a KeepAlive until shortly before the
// lease would end, then extends it.
func TestKeepAliveParked(t *testing.T) {
	const lease = 1200 * time.Millisecond
	tc := startCell(t, Config{Lease: lease})
	id := tc.session("ka")
	start := time.Now()
	r, err := tc.cli.KeepAlive(ctx, &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{{Session: id}}},
		callopt.WithRPCTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	held := time.Since(start)
	if held < lease/2 || held > lease {
		t.Fatalf("KeepAlive answered after %v; lease %v", held, lease)
	}
	// lease_ms counts from when the request was sent: the time it was
	// parked plus a whole new lease, less the clock-drift bound (the lease
	// rule, package cell/master).
	want := master.LeaseConfig{Lease: lease, MaxDrift: vr.MaxClockDrift}.ClientLease(held + lease)
	if len(r.Results) != 1 || r.Results[0].Error != nil || r.Results[0].LeaseMs < want.Milliseconds()-50 ||
		r.Results[0].LeaseMs > (held+lease).Milliseconds() {
		t.Fatalf("KeepAlive results %+v", r.Results)
	}
	// One call for many sessions; an unknown one comes back expired at once
	// without disturbing the others.
	id2 := tc.session("ka2")
	start = time.Now()
	r, err = tc.cli.KeepAlive(ctx, &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{{Session: id}, {Session: id2}, {Session: 999999}}},
		callopt.WithRPCTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > lease/2 {
		t.Fatalf("KeepAlive naming an ended session was parked %v", time.Since(start))
	}
	if r.Results[0].Error != nil || r.Results[1].Error != nil || codeOf(r.Results[2].Error) != chubby.ErrorCode_SESSION_EXPIRED {
		t.Fatalf("results %+v", r.Results)
	}
}

// TestRestartKeepsState: a clean stop and restart on the same data gives the
// same namespace, and sessions get a fresh lease.
func TestRestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	tc := startCell(t, Config{DataDir: dir})
	s := tc.session("w")
	for i, p := range []string{"/a", "/b", "/c"} {
		h := tc.open(s, p, chubby.CreateMode_CREATE_NEW, false)
		if _, err := tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: h, Content: []byte{byte(i), 'x'}}); err != nil {
			t.Fatal(err)
		}
	}
	before := stateBytes(tc.s.m)
	epoch := tc.s.Epoch()
	tc.stop()

	tc2 := startCell(t, Config{DataDir: dir})
	if tc2.s.Epoch() != epoch+1 {
		t.Fatalf("epoch %d after restart, was %d", tc2.s.Epoch(), epoch)
	}
	if string(stateBytes(tc2.s.m)) != string(before) {
		t.Fatal("state after restart differs from the state before")
	}
	h := tc2.open(s, "/b", chubby.CreateMode_OPEN_EXISTING, false)
	r := must[*chubby.GetContentsAndStatResponse](t)(tc2.cli.GetContentsAndStat(ctx, &chubby.HandleRequest{Handle: h}))
	if string(r.Content) != "\x01x" {
		t.Fatalf("content after restart %q", r.Content)
	}
}
