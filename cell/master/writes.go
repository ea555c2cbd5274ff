package master

import (
	"slices"

	"github.com/chubbygo/chubby/gen/chubby"
)

// Writes is the master's table of its commands in flight: from the moment
// a command's reach is computed (fs.State.Reach, the paths the cache must
// invalidate before it commits) until it has applied or can no longer
// apply. Commands ahead of it in the log apply in between, so the reach
// is computed against a state that is not the one the command applies to;
// Writes keeps the two conditions under which fs says the reach is a
// superset all the same:
//
//  1. Stamps never decrease in the order reaches are computed (Begin; nor
//     do they run ahead of the monotonic clock, see Begin), and
//     every reach adds the paths that in-flight expired EndSessions may put
//     into lock-delay (Delays): a lock-delay an EndSession begins ends
//     after its own stamp, so the clock of a command stamped earlier does
//     not reach it, and one stamped later sees it in the state or here.
//  2. An EndSession's reach is computed only once no command of its
//     session is in flight (Ending, then Running is 0), and Begin refuses
//     the session's commands until the EndSession is done (Unending).
//
// The caller computes a command's reach between Begin and Delays with
// nothing else begun in between (the cell holds a mutex across both; the
// simulator is single-threaded). It is not safe for concurrent use.
type Writes struct {
	last int64 // the latest stamp (time_ms)
	// off bounds every stamp: a stamp at monotonic instant x is at most
	// (off + x) / 1e6. It is t·1e6 − a for the tightest command time t
	// known stamped by instant a (Anchor, and this table's own stamps);
	// anchored is false until there is one.
	off      int64
	anchored bool
	running  map[chubby.SessionID]int // commands in flight, by the session they act for
	ending   map[chubby.SessionID]int // EndSessions being prepared or in flight
	delayed  map[string]int           // paths in-flight EndSessions may put into lock-delay
	sorted   []string                 // delayed's keys, sorted; nil when stale
}

// NewWrites returns an empty table.
func NewWrites() *Writes {
	return &Writes{running: map[chubby.SessionID]int{}, ending: map[chubby.SessionID]int{}, delayed: map[string]int{}}
}

// Write is one command's part in the table.
type Write struct {
	// TimeMs is the command's time_ms: stamp it with this.
	TimeMs  int64
	session chubby.SessionID
	delayed []string
	done    bool
}

// Anchor records that a command stamped timeMs had been stamped by the
// monotonic instant at (nanoseconds on the clock Begin is given): a new
// master anchors at the state's clock (fs.State.Now) and the instant this
// replica applied the command that set it, which came after its stamping.
// No later stamp runs ahead of timeMs plus the monotonic time elapsed
// since at. The tightest anchor wins; a looser one changes nothing. A
// timeMs of 0 or less (the clock of a state no command has set) anchors
// nothing: the first stamp then anchors the table at the wall clock.
func (w *Writes) Anchor(timeMs int64, at Time) {
	if timeMs <= 0 {
		return
	}
	off := timeMs*1e6 - at
	if !w.anchored || off < w.off {
		w.off, w.anchored = off, true
	}
	w.last = max(w.last, timeMs)
}

// Stamp is the time_ms a command begun at monotonic instant mono with the
// wall clock at wallMs would get, without beginning one (the master times
// its Ticks with it).
func (w *Writes) Stamp(wallMs int64, mono Time) int64 {
	t, _ := w.stamp(wallMs, mono, 0)
	return t
}

// stamp is the clamp Begin stamps with: the wall clock (or notBefore, when
// later) but no more than the anchor plus the monotonic time elapsed since
// it, and never below the latest stamp. tight reports whether the stamp is
// below that bound (it then makes a tighter anchor).
func (w *Writes) stamp(wallMs int64, mono Time, notBefore int64) (t int64, tight bool) {
	t = max(wallMs, notBefore)
	if w.anchored {
		upper := floorDiv(w.off+mono, 1e6)
		tight = t < upper
		t = min(t, upper)
	}
	return max(t, w.last), tight
}

// floorDiv is a/b rounded down (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Begin starts a command that acts for session (0 for none, and for an
// EndSession, which Ending covers) and stamps it, wallMs being the wall
// clock and mono the monotonic clock now: TimeMs is the later of wallMs
// and notBefore, but never more than the anchor's time plus the
// monotonic time elapsed since it (see Anchor; a table's first stamp
// anchors it), and never below an earlier stamp. So a command's time
// never runs ahead of an earlier command's time by more than the
// monotonic time between them: lock-delay, which fs measures on command
// times, is not shortened by a wall clock set forward, on this master or
// on a new one whose clock is ahead (its anchor is the state's clock);
// and a wall clock set back cannot make times go back (they stand still
// until it catches up). A Tick's notBefore (the lock-delay end it is for)
// obeys the same bound: it is stamped earlier if the monotonic clock has
// not got there yet, and ends nothing early.
//
// It also returns the paths in-flight EndSessions may put into lock-delay,
// which the command's reach must include (the caller must not modify
// them). A command of a session being ended is refused (nil): it would
// apply before its session's EndSession, whose reach does not cover it, or
// after it, where it is refused anyway.
func (w *Writes) Begin(session chubby.SessionID, wallMs int64, mono Time, notBefore int64) (*Write, []string) {
	if session != 0 && w.ending[session] > 0 {
		return nil, nil
	}
	t, tight := w.stamp(wallMs, mono, notBefore)
	if tight || !w.anchored {
		w.Anchor(t, mono)
	}
	w.last = t
	if session != 0 {
		w.running[session]++
	}
	if w.sorted == nil && len(w.delayed) > 0 {
		w.sorted = make([]string, 0, len(w.delayed))
		for p := range w.delayed {
			w.sorted = append(w.sorted, p)
		}
		slices.Sort(w.sorted)
	}
	return &Write{TimeMs: w.last, session: session}, w.sorted
}

// Reset forgets every write in flight and keeps the latest stamp and the
// anchor: a new term of mastership, when none of an earlier term's
// commands can apply any more (they applied before the new master serves,
// or never will). The new term then anchors at the state's clock
// (Anchor).
func (w *Writes) Reset() {
	clear(w.running)
	clear(w.ending)
	clear(w.delayed)
	w.sorted = nil
}

// Delays records the paths wr, an expired EndSession, may put into
// lock-delay (its reach's Delayed): until wr is Done, every Begin returns
// them.
func (w *Writes) Delays(wr *Write, paths []string) {
	if wr.done || len(paths) == 0 {
		return
	}
	wr.delayed = append(wr.delayed, paths...)
	for _, p := range paths {
		if w.delayed[p]++; w.delayed[p] == 1 {
			w.sorted = nil
		}
	}
}

// Done ends wr: its command has applied, or can no longer apply. Done twice
// changes nothing.
func (w *Writes) Done(wr *Write) {
	if wr.done {
		return
	}
	wr.done = true
	if wr.session != 0 {
		if w.running[wr.session]--; w.running[wr.session] <= 0 {
			delete(w.running, wr.session)
		}
	}
	for _, p := range wr.delayed {
		if w.delayed[p]--; w.delayed[p] <= 0 {
			delete(w.delayed, p)
			w.sorted = nil
		}
	}
}

// Ending marks session as being ended: Begin refuses its commands from now
// on. Its EndSession begins (as a command of no session) once Running says
// none of its commands is in flight; Unending undoes Ending once the
// EndSession is done.
func (w *Writes) Ending(session chubby.SessionID) { w.ending[session]++ }

// Unending undoes one Ending.
func (w *Writes) Unending(session chubby.SessionID) {
	if w.ending[session]--; w.ending[session] <= 0 {
		delete(w.ending, session)
	}
}

// Running is the number of commands in flight that act for session.
func (w *Writes) Running(session chubby.SessionID) int { return w.running[session] }
