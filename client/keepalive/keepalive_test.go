package keepalive

import (
	"slices"
	"testing"
	"time"
)

const (
	ms     = time.Millisecond
	leaseD = 12 * time.Second
	grace  = 45 * time.Second
)

var t0 = time.Unix(1_000_000, 0)

// loop is a test driver: it ticks the Keeper at a given offset from t0
// and checks the Ready.
type loop struct {
	t   *testing.T
	k   *Keeper
	att uint64 // the attempt in flight
}

func newLoop(t *testing.T) *loop {
	cfg := DefaultConfig(grace)
	cfg.Jitter = func() float64 { return 0 } // backoff = base·2^n / 2
	return &loop{t: t, k: New(cfg, t0, leaseD, 1)}
}

func at(d time.Duration) time.Time { return t0.Add(d) }

// tick ticks at d and returns the Ready.
func (l *loop) tick(d time.Duration) Ready {
	l.k.Tick(at(d))
	return l.k.Ready()
}

// send ticks at d, expects a Send, and sends to addr.
func (l *loop) send(d time.Duration, addr string) {
	l.t.Helper()
	rd := l.tick(d)
	if !rd.Send {
		l.t.Fatalf("at %v: no Send in %+v", d, rd)
	}
	l.att = l.k.Sent(at(d), addr)
}

func kinds(rd Ready) []EventKind {
	var ks []EventKind
	for _, e := range rd.Events {
		ks = append(ks, e.Kind)
	}
	return ks
}

func TestRenewAndResend(t *testing.T) {
	l := newLoop(t)
	l.send(0, "a")
	if rd := l.tick(ms); rd.Send || !rd.Wake.Equal(at(leaseD)) {
		t.Fatalf("with one in flight: %+v, want no Send and Wake at the lease end", rd)
	}
	if !l.k.Answered(at(11*time.Second), l.att, leaseD, 1) {
		t.Fatal("a reply in time did not renew")
	}
	if got := l.k.LeaseEnd(); !got.Equal(at(leaseD)) {
		t.Fatalf("lease end %v, want the send time + lease", got)
	}
	l.send(11*time.Second, "a") // the next one goes at once
	if l.k.Renewals() != 1 {
		t.Fatalf("renewals %d", l.k.Renewals())
	}
}

func TestJeopardyProbeMovesTheKeepAlive(t *testing.T) {
	l := newLoop(t)
	l.send(0, "a")
	rd := l.tick(leaseD)
	if !slices.Equal(kinds(rd), []EventKind{Jeopardy}) || !rd.Locate || rd.Send {
		t.Fatalf("at the lease end: %+v, want Jeopardy and a locate round", rd)
	}
	// The round names the master the KeepAlive went to, which has not
	// answered it for a whole lease: it is lost; send it again.
	l.k.Located(at(leaseD+10*ms), "a", 1, true)
	if rd := l.k.Ready(); !rd.Cancel {
		t.Fatalf("a KeepAlive unanswered for a lease was kept: %+v", rd)
	}
	l.send(leaseD+10*ms, "a")
	// The next probe is ProbeInterval after the first; a round naming the
	// same master sooner than ProbeInterval after the resend keeps it.
	if rd := l.tick(leaseD + 20*ms); rd.Locate || !rd.Wake.Equal(at(leaseD+DefaultProbeInterval)) {
		t.Fatalf("before the next probe: %+v", rd)
	}
	if rd := l.tick(leaseD + DefaultProbeInterval); !rd.Locate {
		t.Fatalf("no second probe: %+v", rd)
	}
	l.k.Located(at(leaseD+DefaultProbeInterval+5*ms), "a", 1, true)
	if rd := l.k.Ready(); rd.Cancel {
		t.Fatal("a KeepAlive sent less than a probe interval ago was abandoned")
	}
	// A round naming another master: abandon and resend there at once.
	l.tick(leaseD + 2*DefaultProbeInterval)
	l.k.Located(at(leaseD+2*DefaultProbeInterval), "b", 2, true)
	if rd := l.k.Ready(); !rd.Cancel {
		t.Fatalf("no Cancel: %+v", rd)
	}
	l.send(leaseD+2*DefaultProbeInterval, "b")
	if l.k.Answered(at(leaseD+1100*ms), l.att-1, leaseD, 2) {
		t.Fatal("the abandoned attempt's reply counted")
	}
	if !l.k.Answered(at(leaseD+1100*ms), l.att, leaseD, 2) {
		t.Fatal("the reply in jeopardy did not renew")
	}
	if rd := l.k.Ready(); !slices.Equal(kinds(rd), []EventKind{MasterChanged, Safe}) {
		t.Fatalf("events %v, want master-changed then safe", kinds(rd))
	}
}

func TestGraceOver(t *testing.T) {
	l := newLoop(t)
	l.send(0, "a")
	l.tick(leaseD)
	if rd := l.tick(leaseD + grace - ms); rd.End != NotEnded {
		t.Fatalf("ended before the grace period: %+v", rd)
	}
	if rd := l.tick(leaseD + grace); rd.End != GraceOver || rd.Send || !rd.Wake.IsZero() {
		t.Fatalf("at the grace end: %+v", rd)
	}
	if l.k.Answered(at(leaseD+grace), l.att, leaseD, 1) {
		t.Fatal("a reply renewed an expired session")
	}
}

// TestFailures is the table of what each failure does next.
func TestFailures(t *testing.T) {
	for _, tc := range []struct {
		f        Failure
		epoch    int64
		now      bool // resent at once
		locate   bool
		events   []EventKind
		wantsEnd End
	}{
		{f: Other, now: false},
		{f: Lost, locate: true},
		{f: Refused, locate: true},
		{f: Refused, epoch: 2, locate: true, events: []EventKind{MasterChanged}},
		{f: Redirected, now: true},
		{f: Redirected, epoch: 3, now: true, events: []EventKind{MasterChanged}},
		{f: Stale, epoch: 2, now: true, events: []EventKind{MasterChanged}},
		{f: Stale, epoch: 1, locate: true},
		{f: Stale, locate: true},
		{f: Expired, wantsEnd: CellEnded},
	} {
		l := newLoop(t)
		l.send(0, "a")
		l.k.Failed(at(ms), l.att, tc.f, tc.epoch)
		rd := l.k.Ready()
		if rd.End != tc.wantsEnd || rd.Locate != tc.locate || !slices.Equal(kinds(rd), tc.events) {
			t.Errorf("%v (epoch %d): %+v", tc.f, tc.epoch, rd)
			continue
		}
		if tc.wantsEnd != NotEnded {
			continue
		}
		if rd := l.tick(ms); rd.Send != tc.now {
			t.Errorf("%v (epoch %d): resent at once = %v, want %v", tc.f, tc.epoch, rd.Send, tc.now)
		}
	}
}

func TestClosedNotExpired(t *testing.T) {
	l := newLoop(t)
	l.send(0, "a")
	l.k.Closing()
	l.k.Failed(at(ms), l.att, Expired, 0)
	if rd := l.k.Ready(); rd.End != Closed {
		t.Fatalf("end %v, want closed", rd.End)
	}
}

// TestQuickResendsAreBounded: replicas that point at each other get
// MaxQuick immediate resends, then the backoff.
func TestQuickResendsAreBounded(t *testing.T) {
	l := newLoop(t)
	l.send(0, "a")
	for i := range DefaultMaxQuick {
		l.k.Failed(at(ms), l.att, Redirected, 0)
		l.send(ms, []string{"b", "a"}[i%2])
	}
	l.k.Failed(at(ms), l.att, Redirected, 0)
	if rd := l.tick(ms); rd.Send || !rd.Wake.Equal(at(ms+DefaultBackoffBase/2)) {
		t.Fatalf("after %d quick resends: %+v, want a backoff", DefaultMaxQuick, rd)
	}
}

// TestBackoffWaitsForTheRound: after a failure that says nothing of
// where the master is, the next KeepAlive waits for the backoff and the
// locate round; a round naming another master ends the backoff early.
func TestBackoffWaitsForTheRound(t *testing.T) {
	l := newLoop(t)
	l.send(0, "a")
	l.k.Failed(at(ms), l.att, Lost, 0)
	if rd := l.k.Ready(); !rd.Locate {
		t.Fatal("no locate round")
	}
	if rd := l.tick(time.Second); rd.Send {
		t.Fatal("sent while its locate round runs")
	}
	l.k.Located(at(time.Second), "a", 1, true) // the same replica, no newer epoch
	l.send(time.Second, "a")

	l.k.Failed(at(time.Second+ms), l.att, Lost, 0) // second failure: backoff 50 ms
	l.k.Ready()
	l.k.Located(at(time.Second+2*ms), "b", 1, true)
	l.send(time.Second+2*ms, "b") // the round found it: no waiting out the backoff
}

// TestSomebodyElsesRound: a round this loop did not ask for moves the
// KeepAlive in flight only if it names a newer epoch.
func TestSomebodyElsesRound(t *testing.T) {
	l := newLoop(t)
	l.send(0, "a")
	l.k.Located(at(ms), "b", 1, false)
	if rd := l.k.Ready(); rd.Cancel {
		t.Fatal("moved by an old-epoch round")
	}
	l.k.Located(at(ms), "b", 2, false)
	if rd := l.k.Ready(); !rd.Cancel {
		t.Fatal("not moved by a newer master")
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		attempt int
		jitter  float64
		want    time.Duration
	}{
		{0, 0, 25 * ms}, {1, 0, 50 * ms}, {3, 0, 200 * ms}, {10, 0, 250 * ms},
		{0, 0.5, 37500 * time.Microsecond}, {0, 2, 25*ms + 24975*time.Microsecond}, {0, -1, 25 * ms},
	} {
		if got := Backoff(50*ms, 500*ms, tc.attempt, tc.jitter); got != tc.want {
			t.Errorf("Backoff(attempt %d, jitter %v) = %v, want %v", tc.attempt, tc.jitter, got, tc.want)
		}
	}
}
