package fs

import (
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// The lock commands: Acquire, Release, CancelWait.

func (s *State) acquire(req *fsm.Acquire) *fsm.Result_ {
	if !validMode(req.Mode) {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "lock mode %d is not EXCLUSIVE or SHARED", req.Mode))
	}
	if req.LockDelayMs < 0 || req.LockDelayMs > chubby.MAX_LOCK_DELAY_MS {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "lock_delay_ms %d is not in 0..%d", req.LockDelayMs, chubby.MAX_LOCK_DELAY_MS))
	}
	h, err := s.handleFor(req.Handle, true)
	if err != nil {
		return errResult(err)
	}
	if err := s.allowed(h.session.principal, h.node, WriteRight); err != nil {
		return errResult(err)
	}
	if h.held != 0 {
		return errResult(Errorf(chubby.ErrorCode_LOCK_HELD, "handle %d already holds the lock of %s (%s)", h.id, h.path, modeName(h.held)))
	}
	if h.wait != 0 {
		return errResult(Errorf(chubby.ErrorCode_LOCK_HELD, "handle %d already waits for the lock of %s (%s)", h.id, h.path, modeName(h.wait)))
	}
	n := h.node
	if s.grantableNow(n, req.Mode) {
		s.grant(n, h, req.Mode, req.LockDelayMs)
		return &fsm.Result_{Sequencer: s.sequencer(n, req.Mode)}
	}
	if !req.Wait {
		// The one change a refused command makes: the holders learn that
		// their lock is wanted (that is what the event is for).
		s.notifyConflict(n, req.Mode)
		return errResult(Errorf(chubby.ErrorCode_LOCK_HELD, "%s", s.unavailableReason(n)))
	}
	if n.lock.nwait >= s.limits.MaxWaitersPerLock {
		return errResult(Errorf(chubby.ErrorCode_LIMIT_EXCEEDED, "the lock of %s has %d waiters, the limit is %d", n.path, n.lock.nwait, s.limits.MaxWaitersPerLock))
	}
	s.enqueue(n, h, req.Mode, req.LockDelayMs)
	s.notifyConflict(n, req.Mode)
	waiting := true
	return &fsm.Result_{Waiting: &waiting}
}

func (s *State) release(req *chubby.HandleRequest, fx *Effects) *fsm.Result_ {
	h, err := s.handleFor(req.Handle, true)
	if err != nil {
		return errResult(err)
	}
	if h.held == 0 {
		return errResult(Errorf(chubby.ErrorCode_LOCK_NOT_HELD, "handle %d does not hold the lock of %s", h.id, h.path))
	}
	n := h.node
	s.releaseHold(h, false)
	s.promote(n, fx)
	return &fsm.Result_{}
}

// cancelWait withdraws a pending Acquire. The master proposes it when the
// Acquire's wait deadline passes, which races with a grant: so a handle that
// is no longer waiting is not an error. The Result carries the sequencer
// when the handle holds the lock (the grant won); otherwise it is empty, and
// a withdrawn request is reported in Effects.Woken with TIMED_OUT.
func (s *State) cancelWait(req *fsm.CancelWait, fx *Effects) *fsm.Result_ {
	h, err := s.handleFor(req.Handle, true)
	if err != nil {
		return errResult(err)
	}
	n := h.node
	switch {
	case h.wait != 0:
		s.dequeue(n, h)
		fx.Woken = append(fx.Woken, Wake{Handle: h.id, Session: h.session.id,
			Err: Errorf(chubby.ErrorCode_TIMED_OUT, "the wait for the lock of %s timed out", n.path)})
		s.promote(n, fx)
		return &fsm.Result_{}
	case h.held != 0:
		return &fsm.Result_{Sequencer: s.sequencer(n, h.held)}
	}
	return &fsm.Result_{}
}
