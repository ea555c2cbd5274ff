package master

import (
	"testing"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
)

// TestWaiters walks the parked-Acquire table through the cases its rules
// are for, each step a table row: what happens, and what must hold after.
func TestWaiters(t *testing.T) {
	w := NewWaiters(2)
	seq := &chubby.Sequencer{Path: "/l"}
	expired := fs.Errorf(chubby.ErrorCode_SESSION_EXPIRED, "ended")
	steps := []struct {
		name string
		do   func(t *testing.T)
	}{
		{"a call parks", func(t *testing.T) {
			if old, re, err := w.Park(1, 7, "a"); old != nil || re || err != nil {
				t.Fatalf("Park: %v %v %v", old, re, err)
			}
		}},
		{"a second call of the handle is refused", func(t *testing.T) {
			if _, _, err := w.Park(1, 8, "b"); err == nil || err.Code != chubby.ErrorCode_LOCK_HELD {
				t.Fatalf("Park: %v", err)
			}
		}},
		{"a resend before its request is queued is told to send again", func(t *testing.T) {
			if _, _, err := w.Park(1, 7, "a2"); err == nil || err.Code != chubby.ErrorCode_UNAVAILABLE {
				t.Fatalf("Park: %v", err)
			}
		}},
		{"a wake before the request is queued is an older request's", func(t *testing.T) {
			if wakes := w.Applied(fs.Effects{Woken: []fs.Wake{{Handle: 1, Err: expired}}}); len(wakes) != 0 {
				t.Fatalf("woke %v", wakes)
			}
		}},
		{"the request is queued", func(t *testing.T) {
			w.Applied(fs.Effects{Queued: []int64{1}})
			if !w.Queued(1) {
				t.Fatal("not queued")
			}
		}},
		{"a resend takes the queued call's place", func(t *testing.T) {
			old, re, err := w.Park(1, 7, "a2")
			if old != "a" || !re || err != nil || !w.Queued(1) {
				t.Fatalf("Park: %v %v %v", old, re, err)
			}
		}},
		{"unpark by the superseded call changes nothing", func(t *testing.T) {
			w.Unpark(1, "a")
			if !w.Queued(1) {
				t.Fatal("the resend was unparked")
			}
		}},
		{"the table is full", func(t *testing.T) {
			if _, _, err := w.Park(2, 0, "c"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := w.Park(3, 0, "d"); err == nil || err.Code != chubby.ErrorCode_UNAVAILABLE {
				t.Fatalf("Park past the limit: %v", err)
			}
		}},
		{"the grant answers the resend", func(t *testing.T) {
			wakes := w.Applied(fs.Effects{Woken: []fs.Wake{{Handle: 1, Sequencer: seq}, {Handle: 9, Sequencer: seq}}})
			if len(wakes) != 1 || wakes[0].Token != "a2" || wakes[0].Sequencer != seq || w.Len() != 1 {
				t.Fatalf("woke %+v, %d left", wakes, w.Len())
			}
		}},
		{"a resend while the call's request is withdrawn is told to come again", func(t *testing.T) {
			if _, _, err := w.Park(4, 3, "f"); err != nil {
				t.Fatal(err)
			}
			w.Applied(fs.Effects{Queued: []int64{4}})
			w.Finishing(4, "f")
			if _, _, err := w.Park(4, 3, "f2"); err == nil || err.Code != chubby.ErrorCode_UNAVAILABLE {
				t.Fatalf("Park: %v", err)
			}
			w.Unpark(4, "f")
		}},
		{"losing mastership answers the rest", func(t *testing.T) {
			w.Park(5, 0, "e")
			if toks := w.Fail(); len(toks) != 2 || toks[0] != "c" || toks[1] != "e" || w.Len() != 0 {
				t.Fatalf("Fail: %v, %d left", toks, w.Len())
			}
		}},
	}
	for _, s := range steps {
		t.Run(s.name, s.do)
	}
}

// TestWaitersStale: an attempt of a request answered for certain is
// stale; one of another request of the handle (older or newer: a handle's
// requests need not be answered in order) or of another handle is not,
// and the table forgets the oldest requests past maxAnswered.
func TestWaitersStale(t *testing.T) {
	w := NewWaiters(1)
	w.Answered(1, 7)
	w.Answered(1, 7)
	for _, c := range []struct {
		handle, rid int64
		stale       bool
	}{{1, 7, true}, {1, 6, false}, {1, 8, false}, {2, 7, false}, {1, 0, false}} {
		if got := w.Stale(c.handle, c.rid); got != c.stale {
			t.Errorf("Stale(%d, %d) = %v, want %v", c.handle, c.rid, got, c.stale)
		}
	}
	for h := int64(2); h <= maxAnswered+1; h++ {
		w.Answered(h, 1)
	}
	if w.Stale(1, 7) || !w.Stale(maxAnswered+1, 1) || len(w.answered) != maxAnswered {
		t.Fatalf("after %d more requests: the first stale %v, %d remembered", maxAnswered, w.Stale(1, 7), len(w.answered))
	}
}

func TestDefinite(t *testing.T) {
	for _, c := range []struct {
		err  *chubby.ChubbyError
		want bool
	}{
		{nil, true},
		{fs.Errorf(chubby.ErrorCode_TIMED_OUT, "t"), true},
		{fs.Errorf(chubby.ErrorCode_LOCK_HELD, "h"), true},
		{fs.Errorf(chubby.ErrorCode_SESSION_EXPIRED, "s"), true},
		{fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "u"), false},
		{fs.Errorf(chubby.ErrorCode_NOT_MASTER, "n"), false},
		{fs.Errorf(chubby.ErrorCode_INTERNAL, "i"), false},
	} {
		if got := Definite(c.err); got != c.want {
			t.Errorf("Definite(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
