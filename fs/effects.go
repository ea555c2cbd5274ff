package fs

import (
	"github.com/chubbygo/chubby/gen/chubby"
)

// Effects are what a command did to others besides its own Result: the
// master acts on them (answers parked Acquires, drops ended sessions from its
// lease table). They are derived, not replicated: every replica computes the
// same Effects, but only the master uses them.
type Effects struct {
	// Woken lists, in order, the pending Acquires this command decided:
	// granted (Sequencer) or failed (Err: TIMED_OUT after CancelWait,
	// HANDLE_INVALID when the handle was closed or its node deleted,
	// SESSION_EXPIRED when its session ended).
	Woken []Wake
	// Queued lists the handles whose Acquire this command queued (it
	// answered waiting): the Woken of later commands are about these
	// requests, and a Wake for a handle before its Acquire was queued is
	// about an older request of the handle.
	Queued []int64
	// EndedSessions lists the sessions this command ended.
	EndedSessions []chubby.SessionID
	// Notified lists the live sessions this command queued events for, in
	// the order of their first new event: their parked KeepAlives should
	// be answered.
	Notified []chubby.SessionID
}

// Wake is the outcome of one pending Acquire: exactly one of Sequencer and
// Err is set.
type Wake struct {
	Handle    int64
	Session   chubby.SessionID
	Sequencer *chubby.Sequencer
	Err       *chubby.ChubbyError
}
