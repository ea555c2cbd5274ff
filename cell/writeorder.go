package cell

import (
	"context"
	"sync"
	"time"

	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// writeOrder is the master's table of its commands in flight
// (master.Writes, where the ordering is argued) with what the process
// adds: a mutex held while a command is stamped and its reach computed,
// and EndSessions that wait, bounded, until their session's commands in
// flight are done.
type writeOrder struct {
	m        *machine
	now      func() int64  // the commands' clock: Unix ms
	maxDrain time.Duration // bounds an EndSession's wait for its session's commands

	mu      sync.Mutex
	t       *master.Writes
	changed chan struct{} // closed and replaced whenever a write is done
}

func newWriteOrder(m *machine, now func() int64, maxDrain time.Duration) *writeOrder {
	return &writeOrder{m: m, now: now, maxDrain: maxDrain, t: master.NewWrites(), changed: make(chan struct{})}
}

// begin stamps op as a command (time_ms: master.Writes.Begin's clamp of
// the wall clock, or of notBefore when later) and returns it
// with its reach: what it may change of what clients cache, computed
// against the state now (fs.State.Reach) with the paths that expired
// EndSessions in flight may put into lock-delay. An EndSession first makes
// its session's new commands refused and waits until those in flight are
// done. The returned done must be called once the command has applied
// (uncertain: its outcome is unknown; the write then stays in the table
// for uncertainHold, as its invalidation does).
func (o *writeOrder) begin(ctx context.Context, op *fsm.Op, notBefore int64) (*fsm.Command, fs.Reach, func(uncertain bool), error) {
	session, _ := fs.OpSession(op)
	var ending chubby.SessionID
	if op.EndSession != nil {
		ending, session = op.EndSession.Session, 0
		o.mu.Lock()
		o.t.Ending(ending)
		o.mu.Unlock()
		if err := o.drain(ctx, ending); err != nil {
			o.mu.Lock()
			o.t.Unending(ending)
			o.mu.Unlock()
			return nil, fs.Reach{}, nil, err
		}
	}
	o.mu.Lock()
	wr, delayed := o.t.Begin(session, o.now(), o.m.mono(), notBefore)
	if wr == nil {
		o.mu.Unlock()
		return nil, fs.Reach{}, nil, fs.Errorf(chubby.ErrorCode_SESSION_EXPIRED, "session %d is being ended", session)
	}
	cmd := &fsm.Command{TimeMs: wr.TimeMs, Op: op}
	var r fs.Reach
	o.m.read(func(st *fs.State) { r = st.Reach(cmd) })
	o.t.Delays(wr, r.Delayed)
	o.mu.Unlock()
	if !r.All {
		r.Paths = append(r.Paths, delayed...)
	}
	done := func(uncertain bool) {
		release := func() {
			o.mu.Lock()
			defer o.mu.Unlock()
			o.t.Done(wr)
			if ending != 0 {
				o.t.Unending(ending)
			}
			close(o.changed)
			o.changed = make(chan struct{})
		}
		if uncertain {
			time.AfterFunc(uncertainHold, release)
			return
		}
		release()
	}
	return cmd, r, done, nil
}

// anchor bounds the stamps of a new term of mastership by the state's
// clock and the instant this replica reached it (master.Writes.Anchor).
func (o *writeOrder) anchor() {
	ms, at := o.m.clock()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.t.Anchor(ms, at)
}

// stampNow is the time_ms a command begun now would get (master.Writes.Stamp).
func (o *writeOrder) stampNow() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.t.Stamp(o.now(), o.m.mono())
}

// drain waits until no command of session id is in flight.
func (o *writeOrder) drain(ctx context.Context, id chubby.SessionID) error {
	timer := time.NewTimer(o.maxDrain)
	defer timer.Stop()
	for {
		o.mu.Lock()
		n, changed := o.t.Running(id), o.changed
		o.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "session %d still has %d commands in flight after %v; retry", id, n, o.maxDrain)
		case <-ctx.Done():
			return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "waiting for session %d's %d commands in flight: %v", id, n, ctx.Err())
		}
	}
}
