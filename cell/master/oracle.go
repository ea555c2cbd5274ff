package master

import (
	"fmt"
	"time"
)

// Bounds of the oracle's glue, the same in the cell and the simulator.
const (
	// MaxOracleRounds bounds the window changes one GetTimestamps call
	// waits through before it is refused (UNAVAILABLE).
	MaxOracleRounds = 8
	// ReserveRetryDelay is how long a failed reservation is held before it
	// is reported (Failed) and the next may be asked for: a full proposal
	// queue or a view change would refuse the next at once too, and every
	// report wakes every waiting call.
	ReserveRetryDelay = 20 * time.Millisecond
)

// Oracle is the master's timestamp oracle, as deterministic code (the
// simulator runs it too): it hands out strictly increasing timestamps from
// a window in memory and says when to reserve the next window through the
// log (fsm.ReserveTimestamps). No I/O, no clock; not safe for concurrent
// use (the cell holds a mutex around it).
//
// Why it never repeats or goes back, across failovers and restarts: a
// master hands out only timestamps at or below a high-water mark that has
// committed (limit), and starts, when it becomes master, above the mark in
// its state (Reset), which holds every committed reservation: every
// timestamp any earlier master handed out is at or below it. A master
// takes timestamps only for calls it received while it held its master
// lease, and a new master's lease begins after the old one's ended; a
// call the old master takes for late (a pause between its lease check
// and Take) began while the old lease held, so it overlaps every call
// the new master serves, and what it gets is below the new master's
// mark. So a call sent after another's answer gets larger timestamps. A reservation of an earlier term that commits
// late raises the mark in the state, which only moves later masters
// higher; its answer is ignored here (Reserved checks the term).
type Oracle struct {
	window int64 // timestamps a reservation adds

	term      uint64 // Reset's count: a reservation belongs to one term
	next      int64  // the next timestamp to hand out
	limit     int64  // the committed mark: next..limit are available
	reserving bool   // a reservation of this term is in flight
	serving   bool   // between Reset and Stop
}

// DefaultOracleWindow is how many timestamps one reservation adds: at a
// million timestamps a second, one log write every second or so; a
// failover skips at most one window of unused timestamps.
const DefaultOracleWindow = 1 << 20

// NewOracle returns a stopped oracle reserving window timestamps at a time
// (default DefaultOracleWindow when window <= 0).
func NewOracle(window int64) *Oracle {
	if window <= 0 {
		window = DefaultOracleWindow
	}
	return &Oracle{window: window}
}

// Reset starts a term: the replica became master and its state's mark is
// reserved. Nothing is handed out until a reservation of this term
// commits. It returns the term.
func (o *Oracle) Reset(reserved int64) uint64 {
	o.term++
	o.next, o.limit = reserved+1, reserved
	o.reserving, o.serving = false, true
	return o.term
}

// Stop ends the term: the replica is no longer master.
func (o *Oracle) Stop() {
	o.serving = false
	o.limit = o.next - 1
}

// Take hands out n (>= 1) timestamps, first..first+n-1, if the window has
// them; ok is false when it has not (reserve, then ask again).
func (o *Oracle) Take(n int64) (first int64, ok bool) {
	if n < 1 {
		panic(fmt.Sprintf("master: Oracle.Take(%d)", n))
	}
	if !o.serving || o.limit-o.next+1 < n {
		return 0, false
	}
	first = o.next
	o.next += n
	return first, true
}

// Want says whether to propose a reservation now, and up to where: when
// fewer than need timestamps (or half a window) are left and none is in
// flight. It marks one in flight; report its end with Reserved or Failed.
func (o *Oracle) Want(need int64) (term uint64, upto int64, ok bool) {
	left := o.limit - o.next + 1
	if !o.serving || o.reserving || (left >= need && left >= o.window/2) {
		return 0, 0, false
	}
	o.reserving = true
	return o.term, max(o.limit, o.next-1) + max(o.window, need), true
}

// Reserved reports that the reservation of term up to upto committed.
func (o *Oracle) Reserved(term uint64, upto int64) {
	if term != o.term {
		return // an earlier term's: the state has it, Reset took it in
	}
	o.reserving = false
	if o.serving {
		o.limit = max(o.limit, upto)
	}
}

// Failed reports that the reservation of term did not commit (or may not
// have: it is not counted on).
func (o *Oracle) Failed(term uint64) {
	if term == o.term {
		o.reserving = false
	}
}

// Available is how many timestamps the window holds now.
func (o *Oracle) Available() int64 {
	if !o.serving {
		return 0
	}
	return o.limit - o.next + 1
}
