// Package rid numbers a session's requests that change the cell, as pure
// code: the Go client (package client) numbers its calls with it, and the
// simulator (cell/sim) numbers its simulated clients' commands with the
// very same code.
//
// The rules, which make a change exactly-once across resends and master
// changes (the cell keeps each numbered request's answer, replicated, and
// applies a resend of it never again):
//
//   - Every call that changes the cell takes the next number of its
//     session (Begin); every resend of it carries that same number.
//   - With it goes the floor: the lowest number of the session's calls not
//     finished yet. The cell may forget the answers of requests below the
//     floor, and refuses a request below it as finished.
//   - A call is finished (End) once it was answered or given up, and will
//     not be sent again.
//   - Taking a number and recording it in flight is one step, so no call
//     can be numbered and not yet counted in another's floor: a floor
//     above a call not yet sent would make the cell refuse that call.
package rid

// Numbers is a session's request numbers: the last one taken and those in
// flight. The zero value is a session that has numbered nothing. It is
// not safe for concurrent use.
type Numbers struct {
	last     uint64
	inflight map[uint64]struct{}
}

// Begin takes the session's next number, records it in flight and returns
// it with the floor to send: the lowest number in flight, itself included.
func (n *Numbers) Begin() (seq, floor uint64) {
	if n.inflight == nil {
		n.inflight = make(map[uint64]struct{})
	}
	n.last++
	seq = n.last
	n.inflight[seq] = struct{}{}
	floor = seq
	for q := range n.inflight {
		floor = min(floor, q)
	}
	return seq, floor
}

// End records that the call numbered seq is finished: answered, or given
// up for good.
func (n *Numbers) End(seq uint64) { delete(n.inflight, seq) }

// InFlight is the number of calls begun and not ended.
func (n *Numbers) InFlight() int { return len(n.inflight) }
