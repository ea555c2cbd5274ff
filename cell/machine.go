package cell

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/replica"
	"github.com/chubbygo/chubby/rpc"
)

// machine is the fs state machine as the log drives it, plus what the master
// does with the effects of each command (dispatch): it wakes parked Acquire
// calls, tells the session and cache tables which sessions ended (onEnded)
// and which got events (onNotify), and schedules the next lock-delay Tick
// (onTimer). Reads take the read lock; the log's apply loop takes the
// write lock per command.
type machine struct {
	limits fs.Limits

	mu sync.RWMutex
	st *fs.State
	sh *shadow // the copy snapshots are encoded from
	// clockAt is the instant (mono) at which this replica's state clock
	// (fs.State.Now) reached its value: after the command that set it was
	// stamped, so a new master's stamps are bounded from it (changes.anchor).
	clockAt int64
	t0      time.Time // the origin of mono

	waitMu  sync.Mutex
	waiters *master.Waiters // the parked Acquire calls; tokens are *rpc.Deferred[*chubby.Sequencer]

	// Called from the apply goroutine, outside mu.
	onEnded  func([]chubby.SessionID)
	onNotify func([]chubby.SessionID) // sessions that got events
	onTimer  func(atMs int64)
}

func newMachine(l fs.Limits, maxWaiters int) *machine {
	return &machine{
		limits:  l,
		st:      fs.New(l),
		sh:      newShadow(l),
		waiters: master.NewWaiters(maxWaiters),
		t0:      time.Now(),
	}
}

// mono is the process's monotonic clock, in nanoseconds: the one the
// master's command stamps are bounded on.
func (m *machine) mono() int64 { return int64(time.Since(m.t0)) }

// clock returns the state clock and the instant (mono) it was reached on
// this replica.
func (m *machine) clock() (ms, at int64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st.Now(), m.clockAt
}

// Apply implements replica.StateMachine.
func (m *machine) Apply(index uint64, entry []byte) any {
	m.mu.Lock()
	before := m.st.Now()
	res, fx, err := m.st.ApplyBytes(entry)
	if m.st.Now() != before {
		m.clockAt = m.mono()
	}
	next, hasTimer := m.st.NextTimer()
	m.mu.Unlock()
	m.sh.apply(entry)
	if err != nil {
		var fe *fs.FormatError
		if errors.As(err, &fe) {
			// Written by a newer release (its master): this replica
			// cannot apply it, and going on without it would diverge
			// from the replicas that did. The state is unchanged.
			return replica.Halt{Err: err}
		}
		// Otherwise only entries this process encoded reach the log, so
		// this is a bug or a corrupt disk; the state is unchanged either
		// way.
		return &fsm.Result_{Err: fs.Errorf(chubby.ErrorCode_INTERNAL, "undecodable log entry %d: %v", index, err)}
	}
	m.dispatch(fx)
	if hasTimer && m.onTimer != nil {
		m.onTimer(next)
	}
	return res
}

// Snapshot implements replica.StateMachine: the shadow encodes the state
// as it is now while the loop goes on. If the shadow was dropped, the
// state is encoded here, once, and the shadow rebuilt from it.
func (m *machine) Snapshot() func() ([]byte, error) {
	if wait, ok := m.sh.snapshot(); ok {
		return wait
	}
	m.mu.RLock()
	b := m.st.Snapshot()
	m.mu.RUnlock()
	m.sh.restore(b)
	return func() ([]byte, error) { return b, nil }
}

// close stops the shadow.
func (m *machine) close() { m.sh.close() }

// Restore implements replica.StateMachine.
func (m *machine) Restore(index uint64, b []byte) error {
	st, err := fs.Restore(b, m.limits)
	if err != nil {
		return fmt.Errorf("restore fs snapshot: %w", err)
	}
	m.mu.Lock()
	m.st, m.clockAt = st, m.mono()
	m.mu.Unlock()
	m.sh.restore(b)
	return nil
}

func (m *machine) dispatch(fx fs.Effects) {
	if len(fx.Woken) > 0 || len(fx.Queued) > 0 {
		m.waitMu.Lock()
		wakes := m.waiters.Applied(fx)
		m.waitMu.Unlock()
		for _, w := range wakes {
			d := w.Token.(*rpc.Deferred[*chubby.Sequencer])
			if w.Err != nil {
				d.Reject(w.Err)
			} else {
				d.Resolve(w.Sequencer)
			}
		}
	}
	if len(fx.EndedSessions) > 0 && m.onEnded != nil {
		m.onEnded(fx.EndedSessions)
	}
	if len(fx.Notified) > 0 && m.onNotify != nil {
		m.onNotify(fx.Notified)
	}
}

// park registers a parked Acquire for a handle (master.Waiters.Park):
// it fails when the handle already has one (the fs would refuse the
// second anyway) or when too many calls are parked — except that a call
// with the request number rid (> 0) of the one parked, whose request is
// applied as waiting, takes its place: the earlier call is answered
// master.ErrSuperseded, and reattached says the request waits already (nothing
// is to be proposed).
func (m *machine) park(handle, rid int64) (d *rpc.Deferred[*chubby.Sequencer], reattached bool, err *chubby.ChubbyError) {
	d = rpc.NewDeferred[*chubby.Sequencer]()
	m.waitMu.Lock()
	old, reattached, cerr := m.waiters.Park(handle, rid, d)
	m.waitMu.Unlock()
	if cerr != nil {
		return nil, false, cerr
	}
	if old != nil {
		old.(*rpc.Deferred[*chubby.Sequencer]).Reject(master.ErrSuperseded)
	}
	return d, reattached, nil
}

// unpark forgets a handle's parked Acquire if it is still d.
func (m *machine) unpark(handle int64, d *rpc.Deferred[*chubby.Sequencer]) {
	m.waitMu.Lock()
	defer m.waitMu.Unlock()
	m.waiters.Unpark(handle, d)
}

// waiting reports whether the handle's parked Acquire has had its request
// applied as waiting.
func (m *machine) waiting(handle int64) bool {
	m.waitMu.Lock()
	defer m.waitMu.Unlock()
	return m.waiters.Queued(handle)
}

// finishing marks a parked Acquire whose wait is over
// (master.Waiters.Finishing).
func (m *machine) finishing(handle int64, d *rpc.Deferred[*chubby.Sequencer]) {
	m.waitMu.Lock()
	defer m.waitMu.Unlock()
	m.waiters.Finishing(handle, d)
}

// settle ends a finishing Acquire: its answer is recorded if definite
// (master.Waiters.Answered) before the call leaves the table, so that a
// resend is never proposed in between.
func (m *machine) settle(handle, rid int64, d *rpc.Deferred[*chubby.Sequencer], definite bool) {
	m.waitMu.Lock()
	defer m.waitMu.Unlock()
	if definite {
		m.waiters.Answered(handle, rid)
	}
	m.waiters.Unpark(handle, d)
}

// answered records a definite answer to handle's Acquire request rid
// (master.Waiters.Answered).
func (m *machine) answered(handle, rid int64) {
	m.waitMu.Lock()
	defer m.waitMu.Unlock()
	m.waiters.Answered(handle, rid)
}

// stale reports whether an Acquire attempt belongs to a request already
// answered for certain (master.Waiters.Stale).
func (m *machine) stale(handle, rid int64) bool {
	m.waitMu.Lock()
	defer m.waitMu.Unlock()
	return m.waiters.Stale(handle, rid)
}

func (m *machine) parkedAcquires() int {
	m.waitMu.Lock()
	defer m.waitMu.Unlock()
	return m.waiters.Len()
}

// read runs f with the state under the read lock.
func (m *machine) read(f func(st *fs.State)) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	f(m.st)
}

// failParked answers every parked Acquire with err (shutdown, lost
// mastership). Their requests stay queued in fs until withdrawn.
func (m *machine) failParked(err error) {
	m.waitMu.Lock()
	toks := m.waiters.Fail()
	m.waitMu.Unlock()
	for _, t := range toks {
		t.(*rpc.Deferred[*chubby.Sequencer]).Reject(err)
	}
}
