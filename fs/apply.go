package fs

import (
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// Apply applies one command and returns its Result and Effects.
//
// The command's time_ms first advances the state's clock (never back), which
// ends the lock-delays that are over and grants their queues; then the
// operation is applied. A refused operation returns res.Err (a
// *chubby.ChubbyError) and changes nothing else: it is as if the command had
// been a Tick, except that a sequenced command refused by its operation
// saves its answer and raises its session's floor (see apply). A command
// whose time_ms is outside 0..MaxTimeMs is refused before the clock moves
// and changes nothing at all.
//
// Apply never panics on any input; it panics only when an internal invariant
// is broken, which is a bug.
func (s *State) Apply(cmd *fsm.Command) (res *fsm.Result_, fx Effects) {
	if cmd == nil {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "command is missing")), fx
	}
	if cmd.TimeMs < 0 || cmd.TimeMs > MaxTimeMs {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "time_ms %d is not in 0..%d", cmd.TimeMs, MaxTimeMs)), fx
	}
	s.advance(cmd.TimeMs, &fx)
	res = s.apply(cmd, &fx)
	s.flushNotified(&fx)
	return res, fx
}

// apply applies cmd at the current clock, with exactly-once deduplication.
//
// When cmd names a session and a seq > 0, the session keeps a floor (every
// request below it is finished) and the saved results of the sequenced
// commands it applied at or above the floor. A seq below the floor is
// refused; an answered seq returns its saved result without applying again;
// any other seq is applied and its result is saved, whether it succeeded or
// was refused, and the floor raised to the command's seq_floor (unset: seq),
// forgetting the answers below it. The first application decides the
// request's outcome: a refusal is an answer the client acts on, so a copy
// of the request applied later (a first attempt still queued behind its
// retry) must not succeed where it was refused. Only the refusals checked
// here, before the operation, are not saved: they say nothing about the
// request's effect (see the package documentation, # Exactly-once).
func (s *State) apply(cmd *fsm.Command, fx *Effects) *fsm.Result_ {
	op := cmd.Op
	if op == nil || op.CountSetFieldsOp() != 1 {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "a command carries exactly one operation"))
	}
	if cmd.Principal != nil && op.CreateSession == nil {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "only CreateSession carries a principal: a session's commands act as its principal"))
	}
	var sess *session
	var seq, floor int64 // seq > 0: an exactly-once command
	if cmd.Session != nil {
		if op.CreateSession != nil || op.Tick != nil || op.TrimEvents != nil || op.InitAcl != nil || op.ReserveTimestamps != nil {
			return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "CreateSession, Tick, TrimEvents, InitACL and ReserveTimestamps belong to no session"))
		}
		if sess = s.sessions[*cmd.Session]; sess == nil {
			return errResult(sessionExpired(*cmd.Session))
		}
		if named, ok := opSession(op); ok && named != *cmd.Session {
			return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "command is for session %d but its operation names session %d", *cmd.Session, named))
		}
		if cmd.Seq != nil {
			seq = *cmd.Seq
			floor = seq
			if cmd.SeqFloor != nil {
				floor = *cmd.SeqFloor
			}
			switch {
			case seq <= 0:
				return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "request sequence %d is not positive", seq))
			case floor < 1 || floor > seq:
				return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "request floor %d is not in 1..%d (the request's sequence)", floor, seq))
			case seq < sess.floor:
				return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "request already finished (below the session's floor): request %d, session %d is at floor %d", seq, sess.id, sess.floor))
			}
			if i, ok := sess.findAnswer(seq); ok {
				return cloneResult(sess.answers[i].res)
			}
			if n := sess.answersFrom(max(sess.floor, floor)); n >= s.limits.MaxSavedAnswersPerSession {
				return errResult(Errorf(chubby.ErrorCode_LIMIT_EXCEEDED, "too many requests in flight; raise your floor: session %d keeps %d answers at or above floor %d, the limit is %d",
					sess.id, n, max(sess.floor, floor), s.limits.MaxSavedAnswersPerSession))
			}
		} else if cmd.SeqFloor != nil {
			return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "a request floor needs a request sequence"))
		}
	} else if cmd.Seq != nil || cmd.SeqFloor != nil {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "a request sequence needs a session"))
	}

	res := s.dispatch(cmd, fx)

	// Save every answer of a sequenced command that reached here, refusals
	// included. (An EndSession of its own session leaves nothing to save
	// in: the record ended with it.)
	if seq > 0 && s.sessions[sess.id] == sess {
		sess.saveAnswer(seq, cloneResult(res))
		sess.raiseFloor(floor)
	}
	return res
}

// dispatch applies the one operation of cmd.
func (s *State) dispatch(cmd *fsm.Command, fx *Effects) *fsm.Result_ {
	op := cmd.Op
	switch {
	case op.CreateSession != nil:
		return s.createSession(op.CreateSession, cmd.Principal)
	case op.EndSession != nil:
		sess := s.sessions[op.EndSession.Session]
		if sess == nil {
			return errResult(sessionExpired(op.EndSession.Session))
		}
		s.endSession(sess, op.EndSession.Expired, fx)
		return &fsm.Result_{}
	case op.Open != nil:
		return s.open(op.Open)
	case op.Close != nil:
		h, err := s.handleFor(op.Close.Handle, false)
		if err != nil {
			return errResult(err)
		}
		s.closeHandle(h, fx)
		return &fsm.Result_{}
	case op.SetContents != nil:
		if guarded(op.SetContents.Handle) {
			return s.keepAdmin(fx, func() *fsm.Result_ { return s.setContents(op.SetContents) })
		}
		return s.setContents(op.SetContents)
	case op.DeleteNode != nil:
		if guarded(op.DeleteNode.Handle) {
			return s.keepAdmin(fx, func() *fsm.Result_ { return s.deleteNode(op.DeleteNode, fx) })
		}
		return s.deleteNode(op.DeleteNode, fx)
	case op.Mkdir != nil:
		return s.mkdir(op.Mkdir)
	case op.CreateFile != nil:
		return s.createFile(op.CreateFile)
	case op.Acquire != nil:
		res := s.acquire(op.Acquire)
		if res.GetWaiting() {
			fx.Queued = append(fx.Queued, op.Acquire.Handle.Id)
		}
		return res
	case op.Release != nil:
		return s.release(op.Release, fx)
	case op.CancelWait != nil:
		return s.cancelWait(op.CancelWait, fx)
	case op.Tick != nil:
		return &fsm.Result_{}
	case op.TrimEvents != nil:
		return s.trimEventsOp(op.TrimEvents)
	case op.SetAcl != nil:
		if guarded(op.SetAcl.Handle) {
			return s.keepAdmin(fx, func() *fsm.Result_ { return s.setACL(op.SetAcl) })
		}
		return s.setACL(op.SetAcl)
	case op.InitAcl != nil:
		return s.initACL(op.InitAcl)
	case op.ReserveTimestamps != nil:
		return s.reserveTimestamps(op.ReserveTimestamps)
	case op.Multi != nil:
		return s.multi(op.Multi, fx)
	}
	panic("fs: dispatch: CountSetFieldsOp and dispatch disagree")
}

// guarded reports whether an operation through the handle w may change
// who holds change_acl on "/" or /acl, so that keepAdmin must check it.
func guarded(w *chubby.Handle) bool { return w != nil && mayLockOut(w.Path) }

// opSession returns the session an operation names, directly or through its
// handle, when it names one.
func opSession(op *fsm.Op) (chubby.SessionID, bool) {
	var h *chubby.Handle
	switch {
	case op.EndSession != nil:
		return op.EndSession.Session, true
	case op.Open != nil:
		return op.Open.Session, true
	case op.Mkdir != nil:
		return op.Mkdir.Session, true
	case op.CreateFile != nil:
		return op.CreateFile.Session, true
	case op.Multi != nil:
		return op.Multi.Session, true
	case op.Close != nil:
		h = op.Close.Handle
	case op.SetContents != nil:
		h = op.SetContents.Handle
	case op.DeleteNode != nil:
		h = op.DeleteNode.Handle
	case op.Acquire != nil:
		h = op.Acquire.Handle
	case op.Release != nil:
		h = op.Release.Handle
	case op.CancelWait != nil:
		h = op.CancelWait.Handle
	case op.SetAcl != nil:
		h = op.SetAcl.Handle
	}
	if h == nil {
		return 0, false
	}
	return h.Session, true
}
