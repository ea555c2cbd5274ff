package replica

import "errors"

// StateMachine is what a log drives: entries are applied in log order, from
// one goroutine, and the state can be captured and restored whole.
type StateMachine interface {
	// Apply applies the entry at index and returns its result for the
	// proposer. It must be deterministic and must not fail: a command the
	// state machine refuses is a result, not an error. The one exception
	// is an entry it cannot read at all (one of a newer format, written by
	// a newer release): it returns Halt, changing nothing, and the replica
	// stops (fail-stop, as on a failed disk) rather than go on without the
	// entry and diverge from the replicas that applied it.
	Apply(index uint64, entry []byte) any
	// Snapshot captures the state after the last applied entry and
	// returns a function that encodes it. The driver calls Snapshot on its
	// goroutine between two Applies and the function on another goroutine
	// while it applies more, so that serializing a large state does not
	// stall the replica: Snapshot must be quick, and the function must
	// encode the state as it was when Snapshot was called.
	Snapshot() func() ([]byte, error)
	// Restore replaces the state with a snapshot taken at index.
	Restore(index uint64, snapshot []byte) error
}

// Halt is what StateMachine.Apply returns for an entry it cannot apply at
// all; the replica stops with an error wrapping ErrHalted and Err.
type Halt struct{ Err error }

var (
	// ErrHalted: the state machine could not apply a committed entry
	// (Halt); the replica stopped.
	ErrHalted = errors.New("replica: stopped: the state machine cannot apply a committed entry")
	// ErrOverloaded: the proposal queue is full; the caller should retry later.
	ErrOverloaded = errors.New("replica: proposal queue full")
	// ErrStopped: the log is closed or failed; nothing more is accepted.
	ErrStopped = errors.New("replica: log stopped")
)
