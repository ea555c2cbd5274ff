package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/rpc"
)

// Jeopardy, grace period and failover, against real cells. A one-replica
// cell restarted on the same data directory is a real failover: a new
// master with a higher epoch that gives every recovered session a full
// lease to come back.

// nextEvent returns the session's next event, failing the test if none
// comes within d or the channel is closed.
func nextEvent(t *testing.T, s *Session, d time.Duration) SessionEvent {
	t.Helper()
	select {
	case ev, ok := <-s.Events():
		if !ok {
			t.Fatalf("event channel closed; state %v, err %v", s.State(), s.Err())
		}
		return ev
	case <-time.After(d):
		t.Fatalf("no session event within %v; state %v", d, s.State())
	}
	panic("unreachable")
}

// wantEvents reads the session's next events and checks their kinds.
func wantEvents(t *testing.T, s *Session, d time.Duration, kinds ...SessionEventKind) []SessionEvent {
	t.Helper()
	var got []SessionEvent
	for _, k := range kinds {
		ev := nextEvent(t, s, d)
		if ev.Kind != k {
			t.Fatalf("event %d: %v (%+v), want %v; before it: %v", len(got), ev.Kind, ev, k, got)
		}
		got = append(got, ev)
	}
	return got
}

// waitFor reads the session's events until one of kind comes, within d in
// all, and returns it with the events read before it. Tests use it where a
// loaded machine may add a brief jeopardy (and its safe) of its own: with
// the 1 s leases of these tests, the master answers a KeepAlive 1/6 s
// before the lease would end, and a reply later than that is jeopardy.
func waitFor(t *testing.T, s *Session, kind SessionEventKind, d time.Duration) (SessionEvent, []SessionEvent) {
	t.Helper()
	deadline := time.Now().Add(d)
	var before []SessionEvent
	for range 4 * SessionEventBuffer { // bounded: a few spurious pairs at most
		ev := nextEvent(t, s, max(time.Until(deadline), time.Millisecond))
		if ev.Kind == kind {
			return ev, before
		}
		before = append(before, ev)
	}
	t.Fatalf("no %v event among %v", kind, before)
	panic("unreachable")
}

// drainEvents discards the events already queued.
func drainEvents(s *Session) {
	for range SessionEventBuffer {
		select {
		case <-s.Events():
		default:
			return
		}
	}
}

// wantClosedEvents checks that the event channel is closed (after draining
// nothing: the caller has read every event).
func wantClosedEvents(t *testing.T, s *Session) {
	t.Helper()
	select {
	case ev, ok := <-s.Events():
		if ok {
			t.Fatalf("event %+v after the session ended; want the channel closed", ev)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("event channel not closed after the session ended")
	}
}

// notDone checks that f has not completed (a call waiting in jeopardy).
func notDone[T any](t *testing.T, what string, f *rpc.Future[T]) {
	t.Helper()
	if v, err, ok := f.Result(); ok {
		t.Fatalf("%s completed during jeopardy: %v, %v", what, v, err)
	}
}

// TestJeopardyThenSafe: the cell's one replica stops; the session goes into
// jeopardy and calls wait; a new master on the same data and address comes
// up within the grace period; the session is safe again with its handles,
// its lock (same sequencer, still valid) and its ephemeral file, and the
// calls that waited succeed.
func TestJeopardyThenSafe(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: starts a cell (skipped with -short)")
	}
	dir := t.TempDir()
	lease := time.Second
	cell := celltest.Start(t, celltest.Options{Lease: lease, DataDir: dir})
	addr := cell.Addr
	c := connectCfg(t, Config{Addrs: []string{addr}, GracePeriod: 15 * time.Second})
	s := newSession(t, c)
	ctx := testCtx(t)
	epoch1 := s.Epoch()
	if s.State() != StateSafe || epoch1 <= 0 || epoch1 != cell.Server().Epoch() {
		t.Fatalf("new session: state %v epoch %d, want safe and the cell's epoch %d", s.State(), epoch1, cell.Server().Epoch())
	}

	h := must[*Handle](t, "open")(s.Open(ctx, "/lock", OpenOptions{
		Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE}))
	seq := must[*chubby.Sequencer](t, "TryAcquire")(h.TryAcquire(ctx, chubby.LockMode_EXCLUSIVE, LockOptions{}))
	must[*chubby.Stat](t, "ephemeral")(s.CreateFile(ctx, "/mine", []byte("x"), CreateOptions{Ephemeral: true}))

	drainEvents(s)
	cell.Stop()
	stopped := time.Now()
	// A read sent while the lease is still valid finds no master; it waits
	// for the session to reach one again and is resent.
	earlyF := h.GetStatAsync(ctx)
	ev, _ := waitFor(t, s, EventJeopardy, 3*lease)
	if d := ev.At.Sub(stopped); d > lease+500*time.Millisecond {
		t.Errorf("jeopardy %v after the cell stopped, with a %v lease", d, lease)
	}
	if s.State() != StateJeopardy || s.Err() != nil || s.LeaseRemaining() != 0 {
		t.Fatalf("in jeopardy: state %v err %v lease remaining %v", s.State(), s.Err(), s.LeaseRemaining())
	}
	select {
	case <-s.Done():
		t.Fatal("Done closed in jeopardy")
	default:
	}

	// Calls made now wait for the session to be safe again.
	readF := h.GetSequencerAsync(ctx)
	writeF := h.SetContentsAsync(ctx, []byte("written in jeopardy"))
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := h.GetStat(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("call in jeopardy with a short context: %v, want its deadline", err)
	}
	notDone(t, "read sent before jeopardy", earlyF)
	notDone(t, "read", readF)
	notDone(t, "write", writeF)

	// The new master: same data, same address, higher epoch.
	cell2 := celltest.Start(t, celltest.Options{Lease: lease, DataDir: dir, Addr: addr})
	safe, before := waitFor(t, s, EventSafe, 5*lease)
	epoch2 := cell2.Server().Epoch()
	if epoch2 <= epoch1 {
		t.Fatalf("restarted cell's epoch %d, was %d", epoch2, epoch1)
	}
	if len(before) != 1 || before[0].Kind != EventMasterChanged || before[0].Epoch != epoch2 ||
		safe.Epoch != epoch2 || s.Epoch() != epoch2 {
		t.Errorf("events %+v then %+v, session epoch %d; want master-changed then safe, at epoch %d",
			before, safe, s.Epoch(), epoch2)
	}
	if s.State() != StateSafe || s.Err() != nil || s.LeaseRemaining() <= 0 {
		t.Fatalf("after Safe: state %v err %v lease remaining %v", s.State(), s.Err(), s.LeaseRemaining())
	}

	got := await1(t, "read made in jeopardy", readF)
	if *got != *seq {
		t.Errorf("sequencer after failover %+v, want %+v", got, seq)
	}
	await1(t, "write made in jeopardy", writeF)
	await1(t, "read sent before jeopardy", earlyF)
	if valid, reason, err := c.CheckSequencer(ctx, seq); err != nil || !valid {
		t.Errorf("CheckSequencer after failover: %v %q %v", valid, reason, err)
	}
	data, _, err := h.GetContentsAndStat(ctx)
	if err != nil || string(data) != "written in jeopardy" {
		t.Errorf("content = %q, %v", data, err)
	}
	must[*Handle](t, "open ephemeral")(s.Open(ctx, "/mine", OpenOptions{}))

	// Another session cannot take the lock: it is still ours.
	other := newSession(t, c)
	oh := must[*Handle](t, "open other")(other.Open(ctx, "/lock", OpenOptions{}))
	_, err = oh.TryAcquire(ctx, chubby.LockMode_EXCLUSIVE, LockOptions{})
	wantCode(t, "TryAcquire of the lock held across the failover", err, chubby.ErrorCode_LOCK_HELD)

	// And the session lives on through more leases.
	s.mu.Lock()
	renewals := s.k.Renewals()
	s.mu.Unlock()
	time.Sleep(2 * lease)
	s.mu.Lock()
	renewed := s.k.Renewals() > renewals
	s.mu.Unlock()
	if !renewed || s.Err() != nil {
		t.Fatalf("two leases after the failover: renewed %v, err %v", renewed, s.Err())
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if s.State() != StateClosed {
		t.Errorf("state after Close: %v", s.State())
	}
	wantClosedEvents(t, s)
}

// TestJeopardyThenExpired: the cell does not come back within the grace
// period; the session expires, the call that waited in jeopardy fails with
// SESSION_EXPIRED, and so does every later call.
func TestJeopardyThenExpired(t *testing.T) {
	lease, grace := time.Second, 700*time.Millisecond
	cell := startCellLease(t, lease)
	s := newSession(t, connectCfg(t, Config{Addrs: []string{cell.Addr}, GracePeriod: grace}))
	ctx := testCtx(t)
	h := must[*Handle](t, "open")(s.Open(ctx, "/", OpenOptions{}))

	drainEvents(s)
	cell.Stop()
	jeopardy, _ := waitFor(t, s, EventJeopardy, 3*lease)
	waiting := h.GetStatAsync(ctx)
	ev := wantEvents(t, s, 3*grace, EventExpired)[0]
	// The grace period counts from the end of the local lease; the event
	// for each comes a little after it, more on a loaded machine.
	if d := ev.At.Sub(jeopardy.At); d < grace-250*time.Millisecond || d > grace+time.Second {
		t.Errorf("expired %v after jeopardy, with a %v grace period", d, grace)
	}
	if !errors.Is(ev.Err, ErrSessionExpired) || !errors.Is(s.Err(), ErrSessionExpired) {
		t.Errorf("event err %v, session err %v", ev.Err, s.Err())
	}
	wantClosedEvents(t, s)
	if s.State() != StateExpired {
		t.Errorf("state %v", s.State())
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done not closed after expiry")
	}
	_, err := waiting.Wait(ctx)
	wantCode(t, "call that waited in jeopardy", err, chubby.ErrorCode_SESSION_EXPIRED)
	_, err = h.GetStat(ctx)
	wantCode(t, "call after expiry", err, chubby.ErrorCode_SESSION_EXPIRED)
	_, err = s.Open(ctx, "/", OpenOptions{})
	wantCode(t, "open after expiry", err, chubby.ErrorCode_SESSION_EXPIRED)
}

// TestJeopardyThenCellSaysExpired: the master that comes back does not know
// the session (its state was lost): its SESSION_EXPIRED answer expires the
// session at once, long before the grace period ends.
func TestJeopardyThenCellSaysExpired(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: starts a cell (skipped with -short)")
	}
	lease := time.Second
	cell := celltest.Start(t, celltest.Options{Lease: lease})
	s := newSession(t, connectCfg(t, Config{Addrs: []string{cell.Addr}, GracePeriod: 30 * time.Second}))
	drainEvents(s)
	cell.Stop()
	waitFor(t, s, EventJeopardy, 3*lease)
	celltest.Start(t, celltest.Options{Lease: lease, Addr: cell.Addr}) // fresh data: the session is unknown
	restarted := time.Now()
	ev, before := waitFor(t, s, EventExpired, 5*time.Second)
	for _, b := range before {
		if b.Kind == EventSafe { // (the fresh cell's epoch may or may not be higher: MasterChanged is allowed)
			t.Errorf("safe (%+v) before expired", b)
		}
	}
	if d := ev.At.Sub(restarted); d > 3*time.Second {
		t.Errorf("expired %v after the cell came back", d)
	}
	if !IsCode(s.Err(), chubby.ErrorCode_SESSION_EXPIRED) {
		t.Errorf("Err = %v", s.Err())
	}
	wantClosedEvents(t, s)
}

// TestSessionEndedByCellEvents: a session the cell ends while it is safe
// (here another client closes it) expires with EventExpired at once.
func TestSessionEndedByCellEvents(t *testing.T) {
	addr := startCell(t)
	ctx := testCtx(t)
	s := newSession(t, connect(t, addr))
	if err := connect(t, addr).kc.CloseSession(ctx, &chubby.CloseSessionRequest{Session: s.ID()}); err != nil {
		t.Fatal(err)
	}
	ev := wantEvents(t, s, 5*time.Second, EventExpired)[0]
	if !IsCode(ev.Err, chubby.ErrorCode_SESSION_EXPIRED) || s.State() != StateExpired {
		t.Errorf("event %+v, state %v", ev, s.State())
	}
	wantClosedEvents(t, s)
}

// TestFailoverToAnotherAddress: the master moves to another configured
// address (the cell's data restarted behind a new port). The session in
// jeopardy finds it and is safe again; its lock is still held.
func TestFailoverToAnotherAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: starts a cell (skipped with -short)")
	}
	dir := t.TempDir()
	lease := time.Second
	cell := celltest.Start(t, celltest.Options{Lease: lease, DataDir: dir})
	next := celltest.FreeAddr(t)
	c := connectCfg(t, Config{Addrs: []string{cell.Addr, next}, GracePeriod: 15 * time.Second})
	s := newSession(t, c)
	ctx := testCtx(t)
	h := must[*Handle](t, "open")(s.Open(ctx, "/l", OpenOptions{Create: chubby.CreateMode_OPEN_OR_CREATE}))
	seq := must[*chubby.Sequencer](t, "TryAcquire")(h.TryAcquire(ctx, chubby.LockMode_EXCLUSIVE, LockOptions{}))

	drainEvents(s)
	cell.Stop()
	waitFor(t, s, EventJeopardy, 3*lease)
	cell2 := celltest.Start(t, celltest.Options{Lease: lease, DataDir: dir, Addr: next})
	if _, before := waitFor(t, s, EventSafe, 5*lease); len(before) != 1 || before[0].Kind != EventMasterChanged {
		t.Errorf("before safe: %+v, want one master-changed", before)
	}
	if s.Epoch() != cell2.Server().Epoch() {
		t.Errorf("session epoch %d, cell's %d", s.Epoch(), cell2.Server().Epoch())
	}
	if got := c.locator.addr(); got != next {
		t.Errorf("master guess %s, want %s", got, next)
	}
	if got := must[*chubby.Sequencer](t, "GetSequencer")(h.GetSequencer(ctx)); *got != *seq {
		t.Errorf("sequencer %+v, want %+v", got, seq)
	}
	if err := s.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}
