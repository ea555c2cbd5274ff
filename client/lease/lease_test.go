package lease

import (
	"testing"
	"time"
)

func TestRules(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	l := New(t0, 10*time.Second, 1, 30*time.Second)
	steps := []struct {
		at    time.Duration
		do    func() string
		state State
	}{
		{9 * time.Second, nil, Safe},
		{10 * time.Second, func() string {
			if tr := l.Step(at(10 * time.Second)); tr != EnteredJeopardy {
				return "no EnteredJeopardy at the lease end"
			}
			if tr := l.Step(at(11 * time.Second)); tr != NoChange {
				return "EnteredJeopardy twice"
			}
			return ""
		}, Jeopardy},
		// A reply whose lease is already over renews nothing.
		{12 * time.Second, func() string {
			if renewed, _ := l.Renew(at(time.Second), 10*time.Second, at(12*time.Second)); renewed {
				return "a late reply renewed the session"
			}
			return ""
		}, Jeopardy},
		{13 * time.Second, func() string {
			if renewed, again := l.Renew(at(12*time.Second), 10*time.Second, at(13*time.Second)); !renewed || !again {
				return "a reply in jeopardy did not make it safe again"
			}
			return ""
		}, Safe},
		// A shorter lease never moves the end back.
		{14 * time.Second, func() string {
			l.Renew(at(13*time.Second), time.Second, at(14*time.Second))
			if !l.LeaseEnd().Equal(at(22 * time.Second)) {
				return "the lease end moved back to " + l.LeaseEnd().Sub(t0).String()
			}
			return ""
		}, Safe},
		{52 * time.Second, func() string {
			if tr := l.Step(at(52 * time.Second)); tr != GraceOver {
				return "no GraceOver after lease end + grace"
			}
			if renewed, _ := l.Renew(at(51*time.Second), 10*time.Second, at(52*time.Second)); renewed {
				return "an expired session was renewed"
			}
			return ""
		}, Expired},
	}
	for _, st := range steps {
		if st.do != nil {
			if msg := st.do(); msg != "" {
				t.Fatalf("at %v: %s", st.at, msg)
			}
		}
		if got := l.State(at(st.at)); got != st.state {
			t.Fatalf("at %v: %v, want %v", st.at, got, st.state)
		}
	}
	if !l.NoteEpoch(2) || l.NoteEpoch(2) || l.Epoch() != 2 {
		t.Fatal("NoteEpoch")
	}
}
