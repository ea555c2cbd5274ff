package fs

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
)

// lockHarness has one file and n handles on it, each in its own session.
func lockHarness(t *testing.T, n int) (*harness, []*chubby.Handle) {
	h := newHarness(t)
	sess := h.session()
	h.write(sess, "/l", "")
	hs := make([]*chubby.Handle, n)
	for i := range hs {
		hs[i] = h.open(h.session(), "/l", rd, chubby.CreateMode_OPEN_EXISTING)
	}
	return h, hs
}

// wokenIDs lists the granted (+id) and failed (-id) handles of fx.
func wokenIDs(fx Effects) string {
	var b strings.Builder
	for _, w := range fx.Woken {
		if (w.Sequencer == nil) == (w.Err == nil) {
			return "bad wake"
		}
		if w.Sequencer != nil {
			fmt.Fprintf(&b, "+%d ", w.Handle)
		} else {
			fmt.Fprintf(&b, "-%d:%v ", w.Handle, w.Err.Code)
		}
	}
	return strings.TrimSpace(b.String())
}

func TestLockCompatibility(t *testing.T) {
	for _, tt := range []struct {
		first, second chubby.LockMode
		ok            bool
	}{
		{excl, excl, false},
		{excl, shared, false},
		{shared, excl, false},
		{shared, shared, true},
	} {
		h, hs := lockHarness(t, 2)
		h.ok(opAcquire(hs[0], tt.first, false, 0))
		res, _ := h.op(opAcquire(hs[1], tt.second, false, 0))
		if tt.ok != (res.Err == nil) {
			t.Errorf("%v then %v: %v", tt.first, tt.second, res.Err)
		}
		if !tt.ok && res.Err.Code != chubby.ErrorCode_LOCK_HELD {
			t.Errorf("%v then %v: code %v", tt.first, tt.second, res.Err.Code)
		}
	}
}

func TestLockErrors(t *testing.T) {
	h, hs := lockHarness(t, 2)
	a, b := hs[0], hs[1]
	h.fail(chubby.ErrorCode_INVALID_ARGUMENT, opAcquire(a, 0, false, 0))
	h.fail(chubby.ErrorCode_INVALID_ARGUMENT, opAcquire(a, 3, true, 0))
	h.fail(chubby.ErrorCode_INVALID_ARGUMENT, opAcquire(a, excl, false, -1))
	h.fail(chubby.ErrorCode_INVALID_ARGUMENT, opAcquire(a, excl, false, chubby.MAX_LOCK_DELAY_MS+1))
	h.fail(chubby.ErrorCode_LOCK_NOT_HELD, opRelease(a))
	res, _ := h.ok(opAcquire(a, excl, false, chubby.MAX_LOCK_DELAY_MS))
	if sq := res.Sequencer; sq == nil || sq.Path != "/l" || sq.Mode != excl || sq.LockGeneration != 1 {
		t.Fatalf("sequencer %v", sq)
	}
	h.fail(chubby.ErrorCode_LOCK_HELD, opAcquire(a, excl, false, 0)) // already holds
	h.fail(chubby.ErrorCode_LOCK_HELD, opAcquire(a, shared, true, 0))
	h.ok(opAcquire(b, excl, true, 0))
	h.fail(chubby.ErrorCode_LOCK_HELD, opAcquire(b, excl, true, 0)) // already waits
	h.fail(chubby.ErrorCode_LOCK_NOT_HELD, opRelease(b))            // waiting is not holding
	if _, err := h.s.GetSequencer(b); Code(err) != chubby.ErrorCode_LOCK_NOT_HELD {
		t.Fatalf("GetSequencer of a waiter: %v", err)
	}
	// Locks on directories and on the root work like any other.
	sess := h.session()
	root := h.open(sess, "/", rd, chubby.CreateMode_OPEN_EXISTING)
	h.ok(opAcquire(root, shared, false, 0))
}

func TestLockFIFO(t *testing.T) {
	h, hs := lockHarness(t, 7)
	id := func(i int) int64 { return hs[i].Id }
	// 0 holds shared; 1 wants exclusive; 2,3 shared queue behind 1 (no
	// writer starvation) even though the lock is held shared; 4 exclusive;
	// 5,6 shared.
	h.ok(opAcquire(hs[0], shared, false, 0))
	for i, m := range []chubby.LockMode{excl, shared, shared, excl, shared, shared} {
		res, _ := h.ok(opAcquire(hs[i+1], m, true, 0))
		if !res.GetWaiting() {
			t.Fatalf("request %d granted past the queue", i+1)
		}
	}
	h.fail(chubby.ErrorCode_LOCK_HELD, opAcquire(h.open(h.session(), "/l", rd, chubby.CreateMode_OPEN_EXISTING), shared, false, 0))
	_, fx := h.ok(opRelease(hs[0]))
	if got := wokenIDs(fx); got != fmt.Sprintf("+%d", id(1)) {
		t.Fatalf("release 0 woke %q", got)
	}
	_, fx = h.ok(opRelease(hs[1]))
	if got := wokenIDs(fx); got != fmt.Sprintf("+%d +%d", id(2), id(3)) {
		t.Fatalf("release 1 woke %q (want both shared, and only them)", got)
	}
	_, fx = h.ok(opRelease(hs[2]))
	if len(fx.Woken) != 0 {
		t.Fatalf("release of one of two shared woke %v", fx.Woken)
	}
	_, fx = h.ok(opClose(hs[3]))
	if got := wokenIDs(fx); got != fmt.Sprintf("+%d", id(4)) {
		t.Fatalf("close 3 woke %q", got)
	}
	// A cancel in the middle of the queue changes nothing for the others; a
	// cancel at the head can let the next ones in.
	_, fx = h.ok(opCancel(hs[6]))
	if got := wokenIDs(fx); got != fmt.Sprintf("-%d:TIMED_OUT", id(6)) {
		t.Fatalf("cancel 6 woke %q", got)
	}
	_, fx = h.ok(opRelease(hs[4]))
	if got := wokenIDs(fx); got != fmt.Sprintf("+%d", id(5)) {
		t.Fatalf("release 4 woke %q", got)
	}
	st := h.stat(hs[5])
	if st.Lock.GetMode() != shared || st.Lock.Holders != 1 || st.Lock.Waiters != 0 || st.LockGeneration != 5 {
		t.Fatalf("final lock %v (generation: one per free->held: 0, 1, 2+3, 4, 5)", st.Lock)
	}
}

func TestLockGenerations(t *testing.T) {
	h, hs := lockHarness(t, 3)
	gen := func() int64 { return h.stat(hs[0]).LockGeneration }
	h.ok(opAcquire(hs[0], shared, false, 0))
	h.ok(opAcquire(hs[1], shared, false, 0)) // joins: same generation
	if gen() != 1 {
		t.Fatalf("gen %d", gen())
	}
	s0, _ := h.s.GetSequencer(hs[0])
	s1, _ := h.s.GetSequencer(hs[1])
	if *s0 != *s1 {
		t.Fatalf("shared holders' sequencers differ: %v %v", s0, s1)
	}
	h.ok(opRelease(hs[0]))
	if ok, why, _ := h.s.CheckSequencer(Anonymous, s0); !ok {
		t.Fatalf("shared sequencer invalid while the period lasts: %s", why)
	}
	h.ok(opRelease(hs[1]))
	if ok, _, _ := h.s.CheckSequencer(Anonymous, s0); ok {
		t.Fatal("sequencer of a released lock valid")
	}
	h.ok(opAcquire(hs[2], excl, false, 0))
	if gen() != 2 {
		t.Fatalf("gen %d", gen())
	}
}

func TestCheckSequencer(t *testing.T) {
	h, hs := lockHarness(t, 2)
	res, _ := h.ok(opAcquire(hs[0], excl, false, 0))
	sq := res.Sequencer
	if ok, why, _ := h.s.CheckSequencer(Anonymous, sq); !ok {
		t.Fatalf("valid sequencer refused: %s", why)
	}
	mod := func(f func(s *chubby.Sequencer)) *chubby.Sequencer { c := *sq; f(&c); return &c }
	for name, bad := range map[string]*chubby.Sequencer{
		"nil":        nil,
		"bad mode":   mod(func(s *chubby.Sequencer) { s.Mode = 7 }),
		"bad path":   mod(func(s *chubby.Sequencer) { s.Path = "l" }),
		"missing":    mod(func(s *chubby.Sequencer) { s.Path = "/nope" }),
		"instance":   mod(func(s *chubby.Sequencer) { s.Instance++ }),
		"generation": mod(func(s *chubby.Sequencer) { s.LockGeneration++ }),
		"mode":       mod(func(s *chubby.Sequencer) { s.Mode = shared }),
	} {
		if ok, why, _ := h.s.CheckSequencer(Anonymous, bad); ok || why == "" {
			t.Errorf("%s: valid=%v reason=%q", name, ok, why)
		}
	}
	// Deleted and re-created: the old sequencer fails.
	sess := h.session()
	h.ok(opDelete(h.rw(sess, "/l"), false))
	h.write(sess, "/l", "")
	if ok, why, _ := h.s.CheckSequencer(Anonymous, sq); ok || !strings.Contains(why, "instance") {
		t.Fatalf("re-created: %v %q", ok, why)
	}
}

func TestLockDelay(t *testing.T) {
	h, hs := lockHarness(t, 4)
	holder, tryer, waiter := hs[0], hs[1], hs[2]
	res, _ := h.ok(opAcquire(holder, excl, false, 5000))
	oldSeq := res.Sequencer
	if _, ok := h.s.NextTimer(); ok {
		t.Fatal("timer without a delay")
	}
	h.now = 10_000
	_, fx := h.ok(opEnd(holder.Session, true))
	if len(fx.EndedSessions) != 1 || len(fx.Woken) != 0 {
		t.Fatalf("end: %+v", fx)
	}
	if ok, _, _ := h.s.CheckSequencer(Anonymous, oldSeq); ok {
		t.Fatal("expired holder's sequencer still valid")
	}
	at, ok := h.s.NextTimer()
	if !ok || at != 15_000 {
		t.Fatalf("NextTimer %d %v, want 15000", at, ok)
	}
	st := h.stat(tryer)
	if st.Lock.DelayRemainingMs != 5000 || st.Lock.IsSetMode() {
		t.Fatalf("lock during delay %v", st.Lock)
	}
	h.fail(chubby.ErrorCode_LOCK_HELD, opAcquire(tryer, shared, false, 0))
	if res, _ := h.ok(opAcquire(waiter, excl, true, 0)); !res.GetWaiting() {
		t.Fatal("Acquire during lock-delay granted")
	}
	h.now = 14_999
	if _, fx := h.ok(opTick()); len(fx.Woken) != 0 {
		t.Fatal("granted before the delay ended")
	}
	if st := h.stat(tryer); st.Lock.DelayRemainingMs != 1 {
		t.Fatalf("delay remaining %d", st.Lock.DelayRemainingMs)
	}
	h.now = 15_000
	_, fx = h.ok(opTick())
	if got := wokenIDs(fx); got != fmt.Sprintf("+%d", waiter.Id) {
		t.Fatalf("tick woke %q", got)
	}
	if _, ok := h.s.NextTimer(); ok {
		t.Fatal("timer after the delay ended")
	}
	newSeq := fx.Woken[0].Sequencer
	if ok, why, _ := h.s.CheckSequencer(Anonymous, newSeq); !ok {
		t.Fatalf("new holder's sequencer: %s", why)
	}
	if ok, _, _ := h.s.CheckSequencer(Anonymous, oldSeq); ok || newSeq.LockGeneration != oldSeq.LockGeneration+1 {
		t.Fatal("old sequencer valid after re-grant")
	}
}

func TestLockDelayEndsWithAnyCommand(t *testing.T) {
	h, hs := lockHarness(t, 2)
	h.ok(opAcquire(hs[0], excl, false, 100))
	h.ok(opEnd(hs[0].Session, true))
	h.ok(opAcquire(hs[1], excl, true, 0))
	h.now += 1000
	// Any command, even a refused one, advances time: the grant comes first.
	res, fx := h.op(opRelease(&chubby.Handle{Id: 999, Session: hs[1].Session, Instance: 1, Path: "/l"}))
	if res.Err == nil || wokenIDs(fx) != fmt.Sprintf("+%d", hs[1].Id) {
		t.Fatalf("refused command at a later time: %v %q", res.Err, wokenIDs(fx))
	}
}

func TestLockDelayCases(t *testing.T) {
	t.Run("clean release no delay", func(t *testing.T) {
		h, hs := lockHarness(t, 2)
		h.ok(opAcquire(hs[0], excl, false, 60_000))
		h.ok(opEnd(hs[0].Session, false))
		if _, ok := h.s.NextTimer(); ok {
			t.Fatal("clean session end started a lock-delay")
		}
		h.ok(opAcquire(hs[1], excl, false, 0))
	})
	t.Run("close no delay", func(t *testing.T) {
		h, hs := lockHarness(t, 2)
		h.ok(opAcquire(hs[0], excl, false, 60_000))
		h.ok(opClose(hs[0]))
		h.ok(opAcquire(hs[1], excl, false, 0))
	})
	t.Run("zero delay", func(t *testing.T) {
		h, hs := lockHarness(t, 2)
		h.ok(opAcquire(hs[0], excl, false, 0))
		h.ok(opAcquire(hs[1], excl, true, 0))
		_, fx := h.ok(opEnd(hs[0].Session, true))
		if got := wokenIDs(fx); got != fmt.Sprintf("+%d", hs[1].Id) {
			t.Fatalf("woke %q", got)
		}
	})
	t.Run("shared expiry", func(t *testing.T) {
		h, hs := lockHarness(t, 4)
		h.ok(opAcquire(hs[0], shared, false, 1000))
		h.ok(opAcquire(hs[1], shared, false, 3000))
		h.ok(opAcquire(hs[2], shared, false, 2000))
		h.ok(opEnd(hs[0].Session, true))
		h.ok(opEnd(hs[1].Session, true))
		// hs[2] still holds; no new grants until the longest delay ends.
		if at, _ := h.s.NextTimer(); at != h.now+3000 {
			t.Fatalf("NextTimer %d", at)
		}
		h.fail(chubby.ErrorCode_LOCK_HELD, opAcquire(hs[3], shared, false, 0))
		h.ok(opAcquire(hs[3], shared, true, 0))
		h.now += 3000
		_, fx := h.ok(opTick())
		if got := wokenIDs(fx); got != fmt.Sprintf("+%d", hs[3].Id) {
			t.Fatalf("woke %q", got)
		}
		if st := h.stat(hs[2]); st.Lock.Holders != 2 || st.LockGeneration != 1 {
			t.Fatalf("lock %v gen %d", st.Lock, st.LockGeneration)
		}
	})
	t.Run("delete during delay", func(t *testing.T) {
		h, hs := lockHarness(t, 2)
		h.ok(opAcquire(hs[0], excl, false, 1000))
		h.ok(opEnd(hs[0].Session, true))
		h.ok(opAcquire(hs[1], excl, true, 0))
		_, fx := h.ok(opDelete(h.rw(h.session(), "/l"), false))
		if got := wokenIDs(fx); got != fmt.Sprintf("-%d:HANDLE_INVALID", hs[1].Id) {
			t.Fatalf("woke %q", got)
		}
		if _, ok := h.s.NextTimer(); ok {
			t.Fatal("delay of a deleted node pending")
		}
	})
	t.Run("several delays in order", func(t *testing.T) {
		h := newHarness(t)
		sess := h.session()
		var waiters []*chubby.Handle
		for i, d := range []int64{300, 100, 200, 100} {
			p := fmt.Sprintf("/n%d", i)
			h.write(sess, p, "")
			hold := h.open(h.session(), p, rd, chubby.CreateMode_OPEN_EXISTING)
			h.ok(opAcquire(hold, excl, false, d))
			h.ok(opEnd(hold.Session, true))
			w := h.open(sess, p, rd, chubby.CreateMode_OPEN_EXISTING)
			h.ok(opAcquire(w, excl, true, 0))
			waiters = append(waiters, w)
		}
		h.now += 1000
		_, fx := h.ok(opTick())
		want := fmt.Sprintf("+%d +%d +%d +%d", waiters[1].Id, waiters[3].Id, waiters[2].Id, waiters[0].Id)
		if got := wokenIDs(fx); got != want {
			t.Fatalf("woke %q, want %q (by delay end, then node instance)", got, want)
		}
	})
}

func TestCancelWaitAndClose(t *testing.T) {
	h, hs := lockHarness(t, 4)
	h.ok(opAcquire(hs[0], excl, false, 0))
	h.ok(opAcquire(hs[1], excl, true, 0))
	h.ok(opAcquire(hs[2], shared, true, 0))
	h.ok(opAcquire(hs[3], shared, true, 0))
	// Closing a waiter fails its Acquire.
	_, fx := h.ok(opClose(hs[2]))
	if got := wokenIDs(fx); got != fmt.Sprintf("-%d:HANDLE_INVALID", hs[2].Id) {
		t.Fatalf("close woke %q", got)
	}
	// Cancelling a waiter fails it with TIMED_OUT.
	res, fx := h.ok(opCancel(hs[1]))
	if res.Sequencer != nil || wokenIDs(fx) != fmt.Sprintf("-%d:TIMED_OUT", hs[1].Id) {
		t.Fatalf("cancel: %v %q", res, wokenIDs(fx))
	}
	// Closing the holder grants the head.
	_, fx = h.ok(opClose(hs[0]))
	if got := wokenIDs(fx); got != fmt.Sprintf("+%d", hs[3].Id) {
		t.Fatalf("close of holder woke %q", got)
	}
	// Cancel after the grant won: no error, the Result carries the sequencer.
	res, fx = h.ok(opCancel(hs[3]))
	if res.Sequencer == nil || res.Sequencer.Mode != shared || len(fx.Woken) != 0 {
		t.Fatalf("cancel after grant: %v %v", res, fx)
	}
	// Cancel with nothing pending: nothing.
	res, fx = h.ok(opCancel(hs[1]))
	if res.Sequencer != nil || len(fx.Woken) != 0 {
		t.Fatalf("cancel of nothing: %v %v", res, fx)
	}
}

func TestSessionEndWithLocks(t *testing.T) {
	h := newHarness(t)
	s0 := h.session()
	h.write(s0, "/a", "")
	h.write(s0, "/b", "")
	victim := h.session()
	va := h.open(victim, "/a", rd, chubby.CreateMode_OPEN_EXISTING)
	vb := h.open(victim, "/b", rd, chubby.CreateMode_OPEN_EXISTING)
	va2 := h.open(victim, "/a", rd, chubby.CreateMode_OPEN_EXISTING)
	other := h.session()
	oa := h.open(other, "/a", rd, chubby.CreateMode_OPEN_EXISTING)
	ob := h.open(other, "/b", rd, chubby.CreateMode_OPEN_EXISTING)
	h.ok(opAcquire(va, excl, false, 0))
	h.ok(opAcquire(ob, excl, false, 0))
	h.ok(opAcquire(oa, shared, true, 0))
	h.ok(opAcquire(va2, shared, true, 0)) // same session waits behind: must not be granted
	h.ok(opAcquire(vb, excl, true, 0))
	_, fx := h.ok(opEnd(victim, false))
	want := fmt.Sprintf("-%d:SESSION_EXPIRED -%d:SESSION_EXPIRED +%d", vb.Id, va2.Id, oa.Id)
	if got := wokenIDs(fx); got != want {
		t.Fatalf("woke %q, want %q", got, want)
	}
	if c := h.s.Counts(); c.Handles != 2 || c.Waiters != 0 || c.LocksHeld != 2 {
		t.Fatalf("counts %+v", c)
	}
}
