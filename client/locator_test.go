package client

import (
	"context"
	"errors"
	"github.com/cloudwego/kitex/server"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
	"github.com/chubbygo/chubby/rpc"
)

// Master finding. The routing rules are unit-tested on the tracker; the
// client's use of them is tested against a real cell, with a fake replica
// (a Kitex server that is not the master) only where a NOT_MASTER is needed,
// which a one-replica cell never says.

// fakeReplica is a replica that is not the master: every session call is
// refused with NOT_MASTER carrying hint (empty: no hint), and GetMaster
// names master (empty: UNAVAILABLE).
type fakeReplica struct {
	combineservice.CombineService // nil: methods not overridden are never called

	hint   string
	master string
	epoch  int64

	calls     atomic.Int64 // NOT_MASTER answers given
	getMaster atomic.Int64 // GetMaster calls
}

func (f *fakeReplica) notMaster() error {
	f.calls.Add(1)
	e := &chubby.ChubbyError{Code: chubby.ErrorCode_NOT_MASTER, Message: "fake replica is not the master"}
	if f.hint != "" {
		e.MasterAddress = &f.hint
	}
	return e
}

func (f *fakeReplica) CreateSession(context.Context, *chubby.CreateSessionRequest) (*chubby.CreateSessionResponse, error) {
	return nil, f.notMaster()
}

func (f *fakeReplica) KeepAlive(context.Context, *chubby.KeepAliveRequest) (*chubby.KeepAliveResponse, error) {
	return nil, f.notMaster()
}

func (f *fakeReplica) CloseSession(context.Context, *chubby.CloseSessionRequest) error {
	return f.notMaster()
}

func (f *fakeReplica) Open(context.Context, *chubby.OpenRequest) (*chubby.OpenResponse, error) {
	return nil, f.notMaster()
}

func (f *fakeReplica) Mkdir(context.Context, *chubby.MkdirRequest) (*chubby.Stat, error) {
	return nil, f.notMaster()
}

func (f *fakeReplica) GetStat(context.Context, *chubby.HandleRequest) (*chubby.Stat, error) {
	return nil, f.notMaster()
}

func (f *fakeReplica) GetStatus(context.Context) (*chubby.CellStatus, error) {
	return nil, f.notMaster()
}

func (f *fakeReplica) GetMaster(context.Context, *chubby.GetMasterRequest) (*chubby.GetMasterResponse, error) {
	f.getMaster.Add(1)
	if f.master == "" {
		return nil, &chubby.ChubbyError{Code: chubby.ErrorCode_UNAVAILABLE, Message: "fake replica does not know the master"}
	}
	return &chubby.GetMasterResponse{MasterAddress: f.master, Epoch: f.epoch, MasterId: "fake"}, nil
}

// startFake serves f on a loopback port until the test ends.
func startFake(t *testing.T, f *fakeReplica) (addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svr, err := rpc.NewServer(rpc.ServerConfig{Listener: ln, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		func(opts ...server.Option) server.Server { return combineservice.NewServer(f, opts...) })
	if err != nil {
		t.Fatal(err)
	}
	go svr.Run()
	t.Cleanup(func() { svr.Stop() })
	addr = ln.Addr().String()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("fake replica does not accept connections on %s: %v", addr, err)
		}
	}
}

// useSession checks that s works: a write, a read, and its lease renewed
// by the master (the KeepAlive loop found it too).
func useSession(t *testing.T, s *Session, lease time.Duration) {
	t.Helper()
	ctx := testCtx(t)
	must[*chubby.Stat](t, "Mkdir")(s.Mkdir(ctx, "/d", MkdirOptions{}))
	h := must[*Handle](t, "Open")(s.Open(ctx, "/d", OpenOptions{}))
	must[*chubby.Stat](t, "GetStat")(h.GetStat(ctx))
	s.mu.Lock()
	renewals := s.k.Renewals()
	s.mu.Unlock()
	time.Sleep(lease * 3 / 2)
	s.mu.Lock()
	renewed := s.k.Renewals() > renewals
	s.mu.Unlock()
	if !renewed || s.Err() != nil {
		t.Fatalf("a lease and a half later: renewed %v, err %v", renewed, s.Err())
	}
}

// TestDeadReplicaFirst: a client configured with [dead, live] works: calls
// move on from the dead address, and so does the KeepAlive loop.
func TestDeadReplicaFirst(t *testing.T) {
	lease := time.Second
	cell := startCellLease(t, lease)
	dead := celltest.FreeAddr(t)
	c := connectCfg(t, Config{Addrs: []string{dead, cell.Addr}})
	s := newSession(t, c)
	useSession(t, s, lease)
	if got := c.locator.addr(); got != cell.Addr {
		t.Errorf("master guess %s, want %s", got, cell.Addr)
	}
}

// TestNotMasterHintFollowed: a replica that answers NOT_MASTER with the
// master's address sends every call, and the KeepAlive loop, there.
func TestNotMasterHintFollowed(t *testing.T) {
	t.Parallel()
	lease := time.Second
	cell := startCellLease(t, lease)
	fake := &fakeReplica{hint: cell.Addr}
	c := connectCfg(t, Config{Addrs: []string{startFake(t, fake)}})
	s := newSession(t, c)
	useSession(t, s, lease)
	// (More than one NOT_MASTER is possible while the new cell is still
	// becoming master and refuses without a hint.)
	if n := fake.calls.Load(); n < 1 || n > maxCallAttempts {
		t.Errorf("the fake was asked %d times", n)
	}
	if got := c.locator.addr(); got != cell.Addr {
		t.Errorf("master guess %s, want %s", got, cell.Addr)
	}
}

// TestMasterLocatedByGetMaster: replicas that refuse without a hint but
// answer GetMaster lead the client to a master it was not configured with.
func TestMasterLocatedByGetMaster(t *testing.T) {
	t.Parallel()
	lease := time.Second
	cell := startCellLease(t, lease)
	f1 := &fakeReplica{}                                                // knows nothing
	f2 := &fakeReplica{master: cell.Addr, epoch: cell.Server().Epoch()} // knows the master
	c := connectCfg(t, Config{Addrs: []string{startFake(t, f1), startFake(t, f2)}})
	s := newSession(t, c)
	useSession(t, s, lease)
	if f1.getMaster.Load() == 0 || f2.getMaster.Load() == 0 {
		t.Errorf("GetMaster asked %d and %d times; want every replica asked", f1.getMaster.Load(), f2.getMaster.Load())
	}
	if got := c.locator.addr(); got != cell.Addr {
		t.Errorf("master guess %s, want %s", got, cell.Addr)
	}
}

// TestNoMasterAnywhere: when every replica refuses and none names the
// master, a call gives up after its bounded attempts with NOT_MASTER.
func TestNoMasterAnywhere(t *testing.T) {
	t.Parallel()
	f1, f2 := &fakeReplica{}, &fakeReplica{}
	c := connectCfg(t, Config{Addrs: []string{startFake(t, f1), startFake(t, f2)}})
	start := time.Now()
	_, err := c.NewSession(testCtx(t))
	wantCode(t, "NewSession with no master", err, chubby.ErrorCode_NOT_MASTER)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %v", d)
	}
	if n := f1.calls.Load() + f2.calls.Load(); n != maxCallAttempts {
		t.Errorf("%d attempts, want %d", n, maxCallAttempts)
	}
}

// TestLocateRound: a locate round asks every replica once, prefers the
// highest epoch, ignores failures and bad answers, and is shared by
// concurrent callers.
func TestLocateRound(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	release := make(chan struct{})
	ask := func(ctx context.Context, addr, _ string) (string, int64, []string, error) {
		mu.Lock()
		asked[addr]++
		mu.Unlock()
		<-release
		switch addr {
		case "a:1":
			return "old:1", 3, nil, nil // a deposed master's view
		case "b:1":
			return "new:1", 4, nil, nil
		case "c:1":
			return "", 0, nil, errors.New("unreachable")
		case "d:1":
			return "not an address", 9, nil, nil
		}
		return "", 0, nil, errors.New("unexpected")
	}
	m := newLocator([]string{"a:1", "b:1", "c:1", "d:1"}, ask, time.Second)
	done1, done2 := m.locate(), m.locate()
	if done1 != done2 {
		t.Fatal("concurrent locate calls started two rounds")
	}
	close(release)
	select {
	case <-done1:
	case <-time.After(5 * time.Second):
		t.Fatal("locate round did not finish")
	}
	if got := m.lastLocated(); got.addr != "new:1" || got.epoch != 4 {
		t.Errorf("located %+v, want new:1 at epoch 4", got)
	}
	if got := m.addr(); got != "new:1" {
		t.Errorf("guess %s", got)
	}
	mu.Lock()
	for _, a := range m.replicas() {
		if asked[a] != 1 {
			t.Errorf("%s asked %d times", a, asked[a])
		}
	}
	mu.Unlock()

	// A round where nobody knows leaves the guess alone.
	none := newLocator([]string{"a:1", "b:1"}, func(context.Context, string, string) (string, int64, []string, error) {
		return "", 0, nil, errors.New("down")
	}, time.Second)
	none.learned("b:1")
	<-none.locate()
	if got := none.lastLocated(); got.addr != "" || none.addr() != "b:1" {
		t.Errorf("after a round with no answer: located %+v, guess %s", got, none.addr())
	}

	// A round is bounded by the timeout even if a replica never answers.
	hung := newLocator([]string{"a:1"}, func(ctx context.Context, _, _ string) (string, int64, []string, error) {
		<-ctx.Done()
		return "", 0, nil, ctx.Err()
	}, 50*time.Millisecond)
	select {
	case <-hung.locate():
	case <-time.After(5 * time.Second):
		t.Fatal("locate round with a hung replica did not end")
	}
}

// TestLocateNamesTheUnreachableMasterOnce: after the master could not be
// reached, the next locate round names it to the replicas (which hold
// their answer until they detect its failure); once a round is over the
// suspicion is dropped, so that a master that was only briefly unreachable
// does not make every later round wait out the replicas' hold.
func TestLocateNamesTheUnreachableMasterOnce(t *testing.T) {
	var mu sync.Mutex
	var suspects []string
	ask := func(ctx context.Context, addr, suspect string) (string, int64, []string, error) {
		mu.Lock()
		suspects = append(suspects, suspect)
		mu.Unlock()
		return "a:1", 5, nil, nil // the replicas still name a:1: it is alive
	}
	m := newLocator([]string{"a:1"}, ask, time.Second)
	m.unreachable("a:1")
	for round := range 2 {
		select {
		case <-m.locate():
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d did not finish", round)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(suspects) != 2 || suspects[0] != "a:1" || suspects[1] != "" {
		t.Fatalf("rounds named %q as unreachable, want [a:1 \"\"]", suspects)
	}
}

// TestPauseEndsWhenARoundFindsTheMaster: a call waiting out its back-off
// after failing at one replica goes on as soon as a locate round — anyone's
// — names another master; a round that names the same unreachable replica
// again does not end the pause early, one that names a replica that
// refused the call does, and so does one that names the same replica in
// a newer epoch.
func TestPauseEndsWhenARoundFindsTheMaster(t *testing.T) {
	var mu sync.Mutex
	answer := "a:1"
	ask := func(context.Context, string, string) (string, int64, []string, error) {
		mu.Lock()
		defer mu.Unlock()
		return answer, 7, nil, nil
	}
	m := newLocator([]string{"a:1", "b:1"}, ask, time.Second)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- m.pause(context.Background(), start.Add(time.Minute), "a:1", false, 7) }()
	<-m.locate() // names a:1 of epoch 7, where the call failed: the pause goes on
	select {
	case err := <-done:
		t.Fatalf("pause ended (%v) after a round named the replica the call failed at", err)
	case <-time.After(50 * time.Millisecond):
	}
	mu.Lock()
	answer = "b:1"
	mu.Unlock()
	<-m.locate()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("pause: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pause did not end when a round named another master")
	}
	if m.addr() != "b:1" {
		t.Errorf("guess %s, want b:1", m.addr())
	}

	// A replica that refused the call (NOT_MASTER) and that a round then
	// names has become the master: the pause ends.
	go func() { done <- m.pause(context.Background(), time.Now().Add(time.Minute), "b:1", true, 0) }()
	time.Sleep(10 * time.Millisecond)
	<-m.locate()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("pause: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pause after a refusal did not end when a round named the replica that refused")
	}

	// A round naming the replica the call failed at, in a newer epoch
	// (it is master again, in a later view), ends the pause.
	mu.Lock()
	answer = "a:1"
	mu.Unlock()
	go func() { done <- m.pause(context.Background(), time.Now().Add(time.Minute), "a:1", false, 6) }()
	time.Sleep(10 * time.Millisecond)
	<-m.locate()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("pause: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pause did not end when a round named the same replica in a newer epoch")
	}

	// The context ends a pause; a pause already over returns at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.pause(ctx, time.Now().Add(time.Minute), "b:1", false, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("pause under a cancelled context: %v", err)
	}
	if err := m.pause(context.Background(), time.Now().Add(-time.Second), "b:1", false, 0); err != nil {
		t.Errorf("pause in the past: %v", err)
	}
}

// TestKeepAliveFollowsALocatedMaster: a session whose master went away
// keeps failing its KeepAlives with a growing back-off; once a locate round
// (here started by hand, as a call would) finds the master at another
// address, the next KeepAlive goes there at once instead of waiting out
// the back-off (up to 0.5 s): a new master holds every change until each
// caching session has flushed on a KeepAlive.
func TestKeepAliveFollowsALocatedMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: starts a cell (skipped with -short)")
	}
	dir := t.TempDir()
	lease := 6 * time.Second
	cell := celltest.Start(t, celltest.Options{Lease: lease, DataDir: dir})
	next := celltest.FreeAddr(t)
	c := connectCfg(t, Config{Addrs: []string{cell.Addr, next}})
	s := newSession(t, c)
	s.mu.Lock()
	renewals := s.k.Renewals()
	s.mu.Unlock()

	cell.Stop()
	// Let the KeepAlive loop fail a few times, so that its back-off is
	// near its 0.5 s cap (0.05, 0.1, 0.2, 0.4, 0.5 s: about 1.25 s).
	time.Sleep(1500 * time.Millisecond)
	if st := s.State(); st != StateSafe {
		t.Fatalf("session %v before the new master is up, want safe", st)
	}
	cell2 := celltest.Start(t, celltest.Options{Lease: lease, DataDir: dir, Addr: next})
	located := time.Now()
	<-c.locator.locate()
	if got := c.locator.lastLocated(); got.addr != next {
		t.Fatalf("round located %+v, want %s", got, next)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		r := s.k.Renewals()
		s.mu.Unlock()
		if r > renewals {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no KeepAlive reply from the new master within 5 s")
		}
		time.Sleep(time.Millisecond)
	}
	// The back-off left was up to 0.5 s; following the round takes a few
	// round trips (a STALE_EPOCH, then the renewal).
	if took := time.Since(located); took > 150*time.Millisecond {
		t.Errorf("KeepAlive renewed by the new master %v after the round found it, want < 150ms", took)
	}
	if s.Epoch() != cell2.Server().Epoch() {
		t.Errorf("session epoch %d, cell's %d", s.Epoch(), cell2.Server().Epoch())
	}
}

// TestHintNamingTheSuspectIsNotFollowed: after the master could not be
// reached, a replica that has not noticed its failure yet still names it
// in NOT_MASTER; that hint is not followed (a locate round, which the
// replicas hold until they know the new master, is the way on) until a
// round has ended with the replicas still naming it.
func TestHintNamingTheSuspectIsNotFollowed(t *testing.T) {
	m := newLocator([]string{"a:1", "b:1", "c:1"}, func(context.Context, string, string) (string, int64, []string, error) {
		return "a:1", 3, nil, nil
	}, time.Second)
	m.unreachable("a:1") // the master: the guess moves to b:1
	if m.redirect("b:1", "a:1") {
		t.Error("followed a hint naming the replica just found unreachable")
	}
	if got := m.addr(); got != "c:1" {
		t.Errorf("guess %s after a stale hint, want the next address c:1", got)
	}
	<-m.locate() // the replicas still name a:1 after their hold: it is alive
	if !m.redirect("c:1", "a:1") || m.addr() != "a:1" {
		t.Errorf("hint to a:1 not followed once the suspicion is over (guess %s)", m.addr())
	}
}
