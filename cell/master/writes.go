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
//  1. Stamps never decrease in the order reaches are computed (Begin), and
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
	last    int64                    // the latest stamp (time_ms)
	running map[chubby.SessionID]int // commands in flight, by the session they act for
	ending  map[chubby.SessionID]int // EndSessions being prepared or in flight
	delayed map[string]int           // paths in-flight EndSessions may put into lock-delay
	sorted  []string                 // delayed's keys, sorted; nil when stale
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

// Begin starts a command that acts for session (0 for none, and for an
// EndSession, which Ending covers) and stamps it: TimeMs is at least nowMs
// and notBefore, and at least every earlier stamp. It also returns the
// paths in-flight EndSessions may put into lock-delay, which the
// command's reach must include (the caller must not modify them). A command of a session being ended is
// refused (nil): it would apply before its session's EndSession, whose
// reach does not cover it, or after it, where it is refused anyway.
func (w *Writes) Begin(session chubby.SessionID, nowMs, notBefore int64) (*Write, []string) {
	if session != 0 && w.ending[session] > 0 {
		return nil, nil
	}
	w.last = max(w.last, nowMs, notBefore)
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

// Reset forgets every write in flight and keeps the latest stamp: a new
// term of mastership, when none of an earlier term's commands can apply
// any more (they applied before the new master serves, or never will).
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
