package master

import (
	"slices"
	"testing"
)

func TestWritesStamps(t *testing.T) {
	w := NewWrites()
	tests := []struct {
		name          string
		nowMs, monoMs int64
		notBefore     int64
		want          int64
	}{
		{"the clock (the first stamp anchors)", 100, 0, 0, 100},
		{"a clock set back: never below an earlier stamp", 90, 5, 0, 100},
		{"a Tick's lock-delay end ahead of the clock: only as far as the monotonic clock from the last stamp", 101, 40, 150, 135},
		{"the Tick again, when the monotonic clock is there", 101, 60, 150, 150},
		{"the clock again", 120, 61, 0, 150},
		{"the clock past it", 200, 150, 0, 200},
		{"the clock set forward an hour: the monotonic clock's 10 ms", 200 + hour, 160, 0, 210},
		{"and on from there", 300 + hour, 260, 0, 310},
	}
	for _, tt := range tests {
		wr, _ := w.Begin(0, tt.nowMs, tt.monoMs*1e6, tt.notBefore)
		if wr.TimeMs != tt.want {
			t.Errorf("%s: stamped %d, want %d", tt.name, wr.TimeMs, tt.want)
		}
		w.Done(wr)
	}
}

const hour = int64(3600_000)

// TestWritesDelays: the paths an expired EndSession in flight may put into
// lock-delay go into every reach begun until it is done.
func TestWritesDelays(t *testing.T) {
	w := NewWrites()
	e1, _ := w.Begin(0, 1, 1*1e6, 0)
	w.Delays(e1, []string{"/", "/l"})
	e2, _ := w.Begin(0, 2, 2*1e6, 0)
	w.Delays(e2, []string{"/", "/m"})
	steps := []struct {
		name string
		done *Write
		want []string
	}{
		{"both in flight", nil, []string{"/", "/l", "/m"}},
		{"the first done", e1, []string{"/", "/m"}},
		{"the first done twice", e1, []string{"/", "/m"}},
		{"both done", e2, nil},
	}
	for _, st := range steps {
		if st.done != nil {
			w.Done(st.done)
		}
		wr, got := w.Begin(0, 3, 3*1e6, 0)
		if !slices.Equal(got, st.want) {
			t.Errorf("%s: delayed %v, want %v", st.name, got, st.want)
		}
		w.Done(wr)
	}
}

// TestWritesEnding: once a session is being ended its commands are
// refused, and the EndSession waits for those in flight.
func TestWritesEnding(t *testing.T) {
	w := NewWrites()
	a, _ := w.Begin(7, 1, 1*1e6, 0)
	b, _ := w.Begin(7, 1, 1*1e6, 0)
	other, _ := w.Begin(8, 1, 1*1e6, 0)
	w.Ending(7)
	if wr, _ := w.Begin(7, 2, 2*1e6, 0); wr != nil {
		t.Fatal("a command of a session being ended began")
	}
	if wr, _ := w.Begin(8, 2, 2*1e6, 0); wr == nil {
		t.Fatal("another session's command was refused")
	} else {
		w.Done(wr)
	}
	for i, wr := range []*Write{a, b} {
		if got := w.Running(7); got != 2-i {
			t.Fatalf("running %d, want %d", got, 2-i)
		}
		w.Done(wr)
	}
	if got := w.Running(7); got != 0 {
		t.Fatalf("running %d after both are done", got)
	}
	w.Done(other)
	w.Unending(7)
	if wr, _ := w.Begin(7, 3, 3*1e6, 0); wr == nil {
		t.Fatal("refused after Unending (the EndSession failed: the session lives on)")
	}
}

// TestWritesAnchorEmptyState: a new master of a state no command has
// stamped (clock 0) stamps the wall clock, not the time since it started.
func TestWritesAnchorEmptyState(t *testing.T) {
	w := NewWrites()
	w.Anchor(0, 5e6)
	wr, _ := w.Begin(0, 1_700_000_000_000, 10e6, 0)
	if wr.TimeMs != 1_700_000_000_000 {
		t.Fatalf("stamped %d, want the wall clock", wr.TimeMs)
	}
}
