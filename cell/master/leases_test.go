package master

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
)

const sec = int64(time.Second)

// TestLeaseRuleUnderDrift checks the arithmetic of the lease rule (the
// package documentation, (1)-(4)) against clocks drifting anywhere within
// ±ε: for a grant made under a master lease, the client's belief ends
// before the master's lease end, which ends before any next master may
// end the session.
func TestLeaseRuleUnderDrift(t *testing.T) {
	const eps = 0.02
	rng := rand.New(rand.NewPCG(1, 2))
	rate := func() float64 {
		switch rng.IntN(3) {
		case 0:
			return 1 - eps
		case 1:
			return 1 + eps
		}
		return 1 - eps + 2*eps*rng.Float64()
	}
	for _, lease := range []time.Duration{time.Second, 12 * time.Second, 10 * time.Minute} {
		cfg := LeaseConfig{Lease: lease, MaxDrift: eps}
		cfg.setDefaults()
		for range 100000 {
			rm, rc, rn := rate(), rate(), rate() // master, client, next master
			D := float64(240 * time.Millisecond)
			// The lease round starts at real 0, master clock 0. The master
			// holds its lease until D(1-ε) on its clock.
			at := rng.Float64() * D * (1 - eps) // the grant, master clock
			park := rng.Float64() * float64(lease)
			a := at - park // arrival of the request, master clock
			sentReal := a/rm - rng.Float64()*float64(time.Millisecond)
			E := at + float64(lease)
			held := time.Duration(E - a)
			belief := sentReal + float64(cfg.ClientLease(held))/rc
			endReal := E / rm
			// No replica helps a new view before D of real time after
			// receiving the round, which came after it started.
			nextReal := D
			nextEnd := nextReal + float64(cfg.RecoveredLease())/rn
			if belief > endReal {
				t.Fatalf("lease %v: the client believes until %.0f ns, past the master's end %.0f (rates %v %v)", lease, belief, endReal, rm, rc)
			}
			if endReal > nextEnd {
				t.Fatalf("lease %v: the master's end %.0f is past the next master's earliest end %.0f (rates %v %v)", lease, endReal, nextEnd, rm, rn)
			}
		}
	}
}

func TestLeaseFigures(t *testing.T) {
	cfg := DefaultLeaseConfig()
	if got := cfg.RecoveredLease(); got < 12489*time.Millisecond || got > 12490*time.Millisecond {
		t.Errorf("recovered lease %v, want 12.49 s", got)
	}
	if got := cfg.ClientLease(22 * time.Second); got != 21137*time.Millisecond {
		t.Errorf("client lease of 22 s %v, want 21.137 s", got)
	}
	if got := cfg.ClientLease(-time.Second); got != 0 {
		t.Errorf("client lease of a past end %v", got)
	}
}

func newTestLeases() *Leases {
	return NewLeases(LeaseConfig{Lease: 12 * time.Second, Margin: 3 * time.Second, MaxDrift: 0.02, MaxParked: 4})
}

func TestKeepAliveIsExtendedOnlyUnderTheMasterLease(t *testing.T) {
	l := newTestLeases()
	l.Start(0, 7, nil)
	if _, ok := l.Add(0, sec, 0, 1); !ok {
		t.Fatal("Add under a valid master lease not granted")
	}
	c, wait, err := l.Register(sec, []chubby.SessionID{1}, []int64{0}, "ka")
	if err != nil || wait != 8*time.Second {
		t.Fatalf("Register: wait %v, %v (want 12 s - 3 s margin - 1 s)", wait, err)
	}
	// The answer time comes while the master lease has lapsed: nothing
	// is extended and the call stays parked.
	if _, err := l.Answer(c, 9*sec, 9*sec, 0); !errors.Is(err, ErrLeaseLapsed) {
		t.Fatalf("Answer with a lapsed lease: %v", err)
	}
	if end, _ := l.LeaseEnd(1); end != 12*sec {
		t.Fatalf("lease end moved to %v without a master lease", time.Duration(end))
	}
	if _, parked := l.Count(); parked != 1 {
		t.Fatalf("%d parked after a refused answer, want 1", parked)
	}
	// The lease comes back.
	gs, err := l.Answer(c, 9*sec, 9*sec+1, 0)
	if err != nil || len(gs) != 1 || gs[0].Error != nil {
		t.Fatalf("Answer: %v %v", gs, err)
	}
	if end, _ := l.LeaseEnd(1); end != 21*sec {
		t.Fatalf("lease end %v, want 21 s", time.Duration(end))
	}
	// The client counts from its send (before 1 s): 20 s held, less drift.
	if want := l.cfg.ClientLease(20 * time.Second).Milliseconds(); gs[0].LeaseMs != want {
		t.Fatalf("lease_ms %d, want %d", gs[0].LeaseMs, want)
	}
	if _, parked := l.Count(); parked != 0 {
		t.Fatalf("%d parked after the answer", parked)
	}
}

func TestNewMasterGivesTheRecoveredLeaseAndGreets(t *testing.T) {
	l := newTestLeases()
	l.Start(100*sec, 3, []chubby.SessionID{5})
	end, ok := l.LeaseEnd(5)
	if !ok || end != 100*sec+int64(l.cfg.RecoveredLease()) {
		t.Fatalf("recovered lease end %v", time.Duration(end))
	}
	at := 100*sec + 300*int64(time.Millisecond)
	c, wait, err := l.Register(at, []chubby.SessionID{5}, []int64{0}, nil)
	if err != nil || wait != 0 {
		t.Fatalf("first KeepAlive of a recovered session parked %v (%v), want at once", wait, err)
	}
	gs, err := l.Answer(c, at, at+sec, 42)
	if err != nil || len(gs[0].Events) != 1 || gs[0].Events[0].Kind != chubby.EventKind_MASTER_FAILED_OVER || gs[0].Events[0].GetEpoch() != 3 {
		t.Fatalf("first answer %+v %v", gs, err)
	}
	// The recovered lease (12.49 s from 100 s) is longer than a new one
	// from 100.3 s would be: it is kept.
	if e, _ := l.LeaseEnd(5); e != end {
		t.Fatalf("lease end moved from %v to %v", time.Duration(end), time.Duration(e))
	}
	c, wait, _ = l.Register(at, []chubby.SessionID{5}, []int64{0}, nil)
	if wait == 0 {
		t.Fatal("second KeepAlive answered at once")
	}
	gs, _ = l.Answer(c, 110*sec, 111*sec, 0)
	if len(gs[0].Events) != 0 {
		t.Fatalf("MASTER_FAILED_OVER sent twice: %+v", gs)
	}
}

func TestExpiryAndEnd(t *testing.T) {
	l := newTestLeases()
	l.Start(0, 1, nil)
	l.Add(0, sec, 0, 1)
	l.Add(2*sec, 3*sec, 2*sec, 2)
	if next, ok := l.NextDue(); !ok || next != 12*sec {
		t.Fatalf("next due %v %v", time.Duration(next), ok)
	}
	if due, _ := l.Due(11*sec, 0); len(due) != 0 {
		t.Fatalf("due early: %v", due)
	}
	if due, _ := l.Due(12*sec, 0); len(due) != 1 || due[0] != 1 {
		t.Fatalf("due at 12 s: %v", due)
	}
	if l.Alive(1) {
		t.Fatal("a due session is still alive")
	}
	// A KeepAlive for it is answered at once, SESSION_EXPIRED.
	c, wait, _ := l.Register(12*sec, []chubby.SessionID{1}, []int64{0}, nil)
	gs, _ := l.Answer(c, 12*sec, 13*sec, 0)
	if wait != 0 || gs[0].Error.GetCode() != chubby.ErrorCode_SESSION_EXPIRED {
		t.Fatalf("KeepAlive of an ending session: wait %v, %+v", wait, gs)
	}
	// Its EndSession did not commit: it lives on, and is due again.
	l.Unmark(1)
	if due, _ := l.Due(12*sec, 0); len(due) != 1 {
		t.Fatalf("unmarked session not due again: %v", due)
	}
	toks := l.Ended([]chubby.SessionID{1})
	if len(toks) != 0 || l.Alive(1) {
		t.Fatalf("ended: %v", toks)
	}
	if due, _ := l.Due(100*sec, 0); len(due) != 1 || due[0] != 2 {
		t.Fatalf("due at 100 s: %v", due)
	}
}

// TestExpiryRetry: an expired session whose EndSession failed stays
// ending (no KeepAlive extends it) and is due again after pauses that
// double from ExpiryRetryFirst up to ExpiryRetryMax; a session extended or
// ended meanwhile is not.
func TestExpiryRetry(t *testing.T) {
	l := newTestLeases()
	l.Start(0, 1, nil)
	l.Add(0, sec, 0, 1)
	now := 12 * sec
	if due, _ := l.Due(now, 0); len(due) != 1 {
		t.Fatalf("due at 12 s: %v", due)
	}
	want := ExpiryRetryFirst
	for try := range 10 {
		pause := l.Retry(1, now)
		if pause != want {
			t.Fatalf("try %d: pause %v, want %v", try, pause, want)
		}
		if l.Alive(1) {
			t.Fatal("alive while its EndSession is retried")
		}
		if next, ok := l.NextDue(); !ok || next != now+Time(pause) {
			t.Fatalf("try %d: next due %v %v, want %v", try, time.Duration(next), ok, time.Duration(now)+pause)
		}
		if due, _ := l.Due(now+Time(pause)-1, 0); len(due) != 0 {
			t.Fatalf("try %d: due before the pause ended: %v", try, due)
		}
		now += Time(pause)
		if due, _ := l.Due(now, 0); len(due) != 1 || due[0] != 1 {
			t.Fatalf("try %d: not due after the pause: %v", try, due)
		}
		want = min(2*want, ExpiryRetryMax)
	}
	l.Retry(1, now)
	l.Ended([]chubby.SessionID{1})
	if due, _ := l.Due(now+Time(time.Hour), 0); len(due) != 0 {
		t.Fatalf("an ended session is due: %v", due)
	}
	if pause := l.Retry(1, now); pause != 0 {
		t.Fatalf("Retry of an ended session: %v", pause)
	}
}

// TestExpiredOutcome: an expired session's EndSession that applied, or
// that the state refused because the session had ended already, ends it
// (the table forgets it); any other outcome puts it off (Retry).
func TestExpiredOutcome(t *testing.T) {
	for _, tc := range []struct {
		err   error
		ended bool
	}{
		{nil, true},
		{fs.Errorf(chubby.ErrorCode_SESSION_EXPIRED, "over"), true},
		{fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "overloaded"), false},
		{fs.Errorf(chubby.ErrorCode_NOT_MASTER, "moved"), false},
		{errors.New("context deadline exceeded"), false},
	} {
		l := newTestLeases()
		l.Start(0, 1, nil)
		l.Add(0, sec, 0, 1)
		if due, _ := l.Due(12*sec, 0); len(due) != 1 {
			t.Fatalf("due at 12 s: %v", due)
		}
		ended, _, pause := l.Expired(1, 12*sec, tc.err)
		if ended != tc.ended {
			t.Errorf("%v: ended %v, want %v", tc.err, ended, tc.ended)
			continue
		}
		if sessions, _ := l.Count(); ended && (sessions != 0 || pause != 0) {
			t.Errorf("%v: ended, but %d sessions known, pause %v", tc.err, sessions, pause)
		}
		if next, ok := l.NextDue(); !ended && (pause != ExpiryRetryFirst || !ok || next != 12*sec+Time(pause)) {
			t.Errorf("%v: put off %v, next due %v %v", tc.err, pause, time.Duration(next), ok)
		}
		if l.Alive(1) {
			t.Errorf("%v: alive", tc.err)
		}
	}
}

// TestLateMasterSparesClientsThatAsked: a master that looks at lease ends
// late (its process was starved) ends no session whose client had a
// KeepAlive parked — it answers the call instead — and puts off the end of
// the others by up to the lateness, so that KeepAlives waiting unread
// reach it first; on time, or a lease past the end, it ends them.
func TestLateMasterSparesClientsThatAsked(t *testing.T) {
	l := newTestLeases() // L 12 s, Margin 3 s
	l.Start(0, 1, nil)
	for id := chubby.SessionID(1); id <= 3; id++ {
		l.Add(0, sec, 0, id)
	}
	// Session 1's client asked: its KeepAlive is parked until 9 s.
	c, wait, _ := l.Register(sec, []chubby.SessionID{1}, []int64{0}, "ka1")
	if wait != time.Duration(8*sec) {
		t.Fatalf("parked for %v", wait)
	}
	// The master comes to look only at 14 s (2 s late).
	due, wake := l.Due(14*sec, 2*sec)
	if len(due) != 0 || len(wake) != 1 || wake[0] != "ka1" {
		t.Fatalf("late look: due %v, wake %v (want none due, ka1 woken)", due, wake)
	}
	if !l.Alive(1) || !l.Alive(2) || !l.Alive(3) {
		t.Fatal("a late look ended a session")
	}
	// Session 1's call is answered (the master lease is held): extended.
	if gs, err := l.Answer(c, 14*sec, 15*sec, 0); err != nil || gs[0].GetLeaseMs() <= 0 {
		t.Fatalf("answer after the late look: %+v, %v", gs, err)
	}
	// Sessions 2 and 3 were put off by min(lag, Margin) = 2 s. Session 2's
	// KeepAlive, unread during the stall, arrives now: answered at once.
	if next, ok := l.NextDue(); !ok || next != 16*sec {
		t.Fatalf("next look %v %v, want 16 s", time.Duration(next), ok)
	}
	c2, wait, _ := l.Register(15*sec, []chubby.SessionID{2}, []int64{0}, "ka2")
	if wait != 0 {
		t.Fatalf("a KeepAlive past its lease end parked for %v", wait)
	}
	l.Answer(c2, 15*sec, 16*sec, 0)
	// On time at 16 s: session 3, whose client did not ask, ends.
	due, wake = l.Due(16*sec, 0)
	if len(due) != 1 || due[0] != 3 || len(wake) != 0 {
		t.Fatalf("look on time: due %v, wake %v (want 3)", due, wake)
	}
	// Session 1 at 26 s (its end) with a call parked but abandoned: looked
	// at again after Margin/4, then ended.
	c, _, _ = l.Register(25*sec, []chubby.SessionID{1}, []int64{0}, "ka1b")
	if due, wake = l.Due(26*sec, 0); len(due) != 0 || len(wake) != 1 {
		t.Fatalf("at its end with a call parked: due %v, wake %v", due, wake)
	}
	l.Abandon(c)
	if due, _ = l.Due(26*sec+int64(750*time.Millisecond), 0); len(due) != 1 || due[0] != 1 {
		t.Fatalf("after the call was abandoned: due %v, want 1", due)
	}
	// However late the look, a session a lease past its end is ended.
	if due, _ = l.Due(40*sec, 10*sec); len(due) != 1 || due[0] != 2 {
		t.Fatalf("a lease past the end: due %v, want 2", due)
	}
}

func TestStopAnswersParkedCallsInOrder(t *testing.T) {
	l := newTestLeases()
	l.Start(0, 1, nil)
	for id := chubby.SessionID(1); id <= 3; id++ {
		l.Add(0, sec, 0, id)
	}
	l.Register(0, []chubby.SessionID{3}, []int64{0}, "c")
	l.Register(0, []chubby.SessionID{1, 2}, []int64{0, 0}, "a")
	l.Register(0, []chubby.SessionID{2}, []int64{0}, "b")
	if _, _, err := l.Register(0, []chubby.SessionID{1}, []int64{0}, "d"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Register(0, []chubby.SessionID{1}, []int64{0}, "e"); !errors.Is(err, ErrTooManyParked) {
		t.Fatalf("fifth parked call: %v", err)
	}
	if got := l.Wake([]chubby.SessionID{2, 1}); len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "d" {
		t.Fatalf("Wake: %v", got)
	}
	got := l.Stop()
	if len(got) != 4 || got[0] != "c" || got[1] != "a" || got[2] != "b" || got[3] != "d" {
		t.Fatalf("Stop: %v", got)
	}
	if l.Open() || l.Alive(1) {
		t.Fatal("the table is open after Stop")
	}
	if _, _, err := l.Register(0, []chubby.SessionID{1}, []int64{0}, nil); !errors.Is(err, ErrNotServing) {
		t.Fatalf("Register after Stop: %v", err)
	}
}
