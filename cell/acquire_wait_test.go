package cell

import (
	"context"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// lockedByA starts a cell where session a holds the exclusive lock of /l
// and session b has a handle on it.
func lockedByA(t *testing.T) (tc *testCell, ha, hb *chubby.Handle) {
	t.Helper()
	tc = startCell(t, Config{})
	a, b := tc.session("a"), tc.session("b")
	ha = tc.open(a, "/l", chubby.CreateMode_OPEN_OR_CREATE, false)
	hb = tc.open(b, "/l", chubby.CreateMode_OPEN_OR_CREATE, false)
	must[*chubby.Sequencer](t)(tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: ha, Mode: chubby.LockMode_EXCLUSIVE}))
	return tc, ha, hb
}

// leaveWaiting puts a waiting Acquire of h into the state with nobody
// parked on it: what an earlier master leaves, or a timed-out Acquire
// whose withdrawal failed (the master changed while it waited for the
// caching clients).
func leaveWaiting(t *testing.T, tc *testCell, h *chubby.Handle) {
	t.Helper()
	res, err := tc.s.submit(ctx, proposal{op: &fsm.Op{Acquire: &fsm.Acquire{Handle: h, Mode: chubby.LockMode_EXCLUSIVE, Wait: true}}})
	if err != nil || !res.GetWaiting() {
		t.Fatalf("a waiting Acquire: %+v, %v", res, err)
	}
}

// TestAcquireAfterOrphanedWait: a handle whose earlier wait was left in
// the state with nobody parked on it can wait again: its Acquire is not
// refused "already waits", it parks, and the release grants it.
func TestAcquireAfterOrphanedWait(t *testing.T) {
	tc, ha, hb := lockedByA(t)
	leaveWaiting(t, tc, hb)

	// A short wait: told TIMED_OUT (the lock is held), not LOCK_HELD.
	_, err := tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: hb, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 200})
	wantCode(t, err, chubby.ErrorCode_TIMED_OUT)

	leaveWaiting(t, tc, hb)
	got := make(chan error, 1)
	go func() {
		_, err := tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: hb, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 20000},
			callopt.WithRPCTimeout(30*time.Second))
		got <- err
	}()
	// Parked: the state says b waits and the call has not returned.
	for deadline := time.Now().Add(10 * time.Second); tc.s.m.parkedAcquires() == 0; time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-got:
			t.Fatalf("Acquire after an orphaned wait returned at once: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the Acquire never parked")
		}
	}
	if err := tc.cli.Release(ctx, &chubby.HandleRequest{Handle: ha}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Acquire after an orphaned wait, granted by the release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("parked Acquire not granted after the release")
	}
}

// TestStaleWakeSparesNewAcquire: a wake for a handle's older request (its
// withdrawal by a new master's cancelStaleWaits) that lands after a new
// Acquire of the handle parked, but before that Acquire's request applied,
// is not the new call's answer: the new call stays parked and is granted,
// and no request is left waiting with nobody parked on it.
func TestStaleWakeSparesNewAcquire(t *testing.T) {
	tc, ha, hb := lockedByA(t)
	leaveWaiting(t, tc, hb)
	// The order the handler and a withdrawal can interleave in: the new
	// call parks, the old request is withdrawn, the new request applies.
	d, _, perr := tc.s.m.park(hb.Id, 0)
	if perr != nil {
		t.Fatal(perr)
	}
	if _, err := tc.s.submit(ctx, proposal{op: &fsm.Op{CancelWait: &fsm.CancelWait{Handle: hb}}}); err != nil {
		t.Fatal(err)
	}
	res, err := tc.s.submit(ctx, proposal{op: &fsm.Op{Acquire: &fsm.Acquire{Handle: hb, Mode: chubby.LockMode_EXCLUSIVE, Wait: true}}})
	if err != nil || !res.GetWaiting() {
		t.Fatalf("the new Acquire: %+v, %v", res, err)
	}
	if err := tc.cli.Release(ctx, &chubby.HandleRequest{Handle: ha}); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	seq, err := d.Park(pctx, 10*time.Second)
	if err != nil {
		t.Fatalf("the parked call was answered %v; its own request was granted by the release", err)
	}
	if seq.GetPath() != "/l" {
		t.Fatalf("granted %+v", seq)
	}
}

// TestAcquireResendTakesItsPlace: an Acquire sent again with the same
// request number while the first is still parked — its client gave up on
// this replica, thinking the master had moved — parks in the first call's
// place (which is answered UNAVAILABLE) and keeps its request's place in
// the queue: granted once, by the release, ahead of a later waiter. A
// different call of the same handle is still refused "already has an
// Acquire waiting".
func TestAcquireResendTakesItsPlace(t *testing.T) {
	tc, ha, hb := lockedByA(t)
	c := tc.session("c")
	hc := tc.open(c, "/l", chubby.CreateMode_OPEN_OR_CREATE, false)
	rid := &chubby.RequestID{Seq: 7, Floor: 7}
	acquire := func(h *chubby.Handle, rid *chubby.RequestID) <-chan error {
		got := make(chan error, 1)
		go func() {
			_, err := tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: h, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 20000, Rid: rid},
				callopt.WithRPCTimeout(30*time.Second))
			got <- err
		}()
		return got
	}
	parked := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); tc.s.m.parkedAcquires() < n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d Acquires parked, want %d", tc.s.m.parkedAcquires(), n)
			}
		}
	}
	first := acquire(hb, rid)
	parked(1)
	// Queued for real before the resend (park reattaches only to a
	// request applied as waiting).
	for deadline := time.Now().Add(10 * time.Second); !tc.s.m.waiting(hb.Id); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first Acquire's request never applied as waiting")
		}
	}
	later := acquire(hc, nil) // queued behind b
	parked(2)
	other := &chubby.RequestID{Seq: 8, Floor: 7}
	_, err := tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: hb, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 20000, Rid: other})
	wantCode(t, err, chubby.ErrorCode_LOCK_HELD)
	resend := acquire(hb, rid)
	select {
	case err := <-first:
		wantCode(t, err, chubby.ErrorCode_UNAVAILABLE)
	case <-time.After(10 * time.Second):
		t.Fatal("the first call was not answered when its resend took its place")
	}
	parked(2)
	if err := tc.cli.Release(ctx, &chubby.HandleRequest{Handle: ha}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-resend:
		if err != nil {
			t.Fatalf("the resent Acquire: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the resent Acquire was not granted by the release")
	}
	select {
	case err := <-later:
		t.Fatalf("the later waiter was answered (%v) while b holds the lock", err)
	default:
	}
	var waits int
	tc.s.m.read(func(st *fs.State) {
		for _, h := range st.PendingWaits() {
			if h.Id == hb.Id {
				waits++
			}
		}
	})
	if waits != 0 {
		t.Fatalf("b still has %d requests waiting after its grant", waits)
	}
	if err := tc.cli.Release(ctx, &chubby.HandleRequest{Handle: hb}); err != nil {
		t.Fatal(err)
	}
	if err := <-later; err != nil {
		t.Fatalf("the later waiter, after b released: %v", err)
	}
}

// TestAcquireBelowTheFloorIsNotQueued: an attempt of a blocking Acquire
// whose client has since finished it (its number is below the session's
// floor, raised by a later call) is answered from the state, not queued
// again: on a free lock it would otherwise be granted to a client that
// gave up on it. This holds on a new master too, which never saw the
// request answered: the floor is in the replicated state.
func TestAcquireBelowTheFloorIsNotQueued(t *testing.T) {
	tc := startCell(t, Config{})
	s := tc.session("a")
	h := tc.open(s, "/l", chubby.CreateMode_OPEN_OR_CREATE, false)
	// Request 7 (a write) says every request below 7 is finished.
	if _, err := tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: h, Content: []byte("x"),
		Rid: &chubby.RequestID{Seq: 7, Floor: 7}}); err != nil {
		t.Fatal(err)
	}
	// A late attempt of request 3, a blocking Acquire, on the free lock.
	_, err := tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: h, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 200,
		Rid: &chubby.RequestID{Seq: 3, Floor: 3}})
	wantCode(t, err, chubby.ErrorCode_TIMED_OUT)
	if _, err := tc.cli.GetSequencer(ctx, &chubby.HandleRequest{Handle: h}); fs.Code(err) != chubby.ErrorCode_LOCK_NOT_HELD {
		t.Fatalf("the handle holds the lock after a finished request's late attempt: %v", err)
	}
	var waits bool
	tc.s.m.read(func(st *fs.State) { waits = st.Waits(h.Id) })
	if waits {
		t.Fatal("the finished request is queued again")
	}
	// A request still in flight (at or above the floor) is served.
	if _, err := tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: h, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 200,
		Rid: &chubby.RequestID{Seq: 8, Floor: 7}}); err != nil {
		t.Fatalf("request 8: %v", err)
	}
}
