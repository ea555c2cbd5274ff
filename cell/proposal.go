package cell

import (
	"context"
	"errors"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/replica"
	"github.com/chubbygo/chubby/replica/vr"
)

// proposal is one change to the cell, as Server.submit proposes it: an
// operation and what its command carries beside it. With only op set, the
// command is stamped with the master's clock and carries nothing else: a
// retry proposes (and may apply) it again.
type proposal struct {
	op *fsm.Op

	// rid, when set, makes the command exactly-once: it names session and
	// the request's number, and the state machine applies it at most once
	// however often it is retried (across failovers too: the answers are
	// replicated state). session is ignored without rid.
	session chubby.SessionID
	rid     *chubby.RequestID

	// notBefore, when set (Unix ms on the commands' clock), is the least
	// time_ms the command may be stamped with.
	notBefore int64

	// principal, set for a CreateSession only, is the caller's principal,
	// which the session then acts as.
	principal string
}

// submit proposes p and waits until its command is durable and applied,
// and returns its result; a refused command's *chubby.ChubbyError is
// returned as the error. It runs p through these stages, in this order:
//
//  1. forget: an EndSession's session leaves the cache table;
//  2. stamp and reach: the command is stamped and fs says what it may
//     change of what clients cache (writeOrder.begin);
//  3. invalidate: the caches it reaches drop their copies, and the view
//     it must go into is learnt (invalidateCaches);
//  4. attach: the command gets p's session, request number and principal;
//  5. propose: the wait for its commit is bounded (boundCommit), the
//     command encoded within one log entry (encodeEntry) and proposed
//     (proposeEntry); then the cache hold is released;
//  6. map the error: a log error becomes a typed *chubby.ChubbyError
//     (logError), or the result is checked and counted (result).
//
// The command's place in the write order is released as submit returns.
// Both it and the cache hold are held on for uncertainHold when the
// outcome is unknown (the command may still apply), and released at once
// otherwise.
func (s *Server) submit(ctx context.Context, p proposal) (*fsm.Result_, error) {
	if p.op.EndSession != nil {
		// Its client no longer serves its cache, and its commands in
		// flight, which the EndSession waits for, must not wait for it.
		s.cache.forget(p.op.EndSession.Session)
	}
	// The reach is computed from the state and with what is in flight
	// ahead of the command (writeOrder: it stays a superset whatever
	// applies first).
	cmd, reach, writeDone, err := s.writes.begin(ctx, p.op, p.notBefore)
	if err != nil {
		return nil, err
	}
	var uncertain bool
	defer func() { writeDone(uncertain) }()
	hold, err := s.invalidateCaches(ctx, reach)
	if err != nil {
		return nil, err
	}
	p.attach(cmd)
	ctx, cancel := boundCommit(ctx)
	defer cancel()
	entry, err := encodeEntry(cmd)
	if err != nil {
		// Refused before the log saw it: certain, nothing to hold.
		hold.release(false)
		return nil, err
	}
	v, err := s.proposeEntry(ctx, hold, entry)
	uncertain = err != nil && !refused(err)
	hold.release(uncertain)
	if err != nil {
		return nil, s.logError(err)
	}
	return s.result(p.op, v)
}

// cacheHold is what a command's cache invalidation holds until the command
// has applied: the nodes it reaches stay uncachable meanwhile. The zero
// value holds nothing and asks for no particular view.
type cacheHold struct {
	done   func(uncertain bool) // nil when the command reaches nothing cached
	view   uint64               // the view the command must go into, when inView
	inView bool
}

// release lets the nodes be cached again: at once, or after uncertainHold
// when uncertain (the command's outcome is unknown: it may still apply).
func (h cacheHold) release(uncertain bool) {
	if h.done != nil {
		h.done(uncertain)
	}
}

// reachesCache reports whether a reach names anything a client may cache.
func reachesCache(r fs.Reach) bool {
	return r.All || len(r.Paths) > 0 || len(r.Trees) > 0 || len(r.ACLs) > 0 || r.AllACLs
}

// invalidateCaches guarantees, when it returns no error, that before the
// change can commit every session caching a node it touches, or a node
// whose read right an ACL file it rewrites governs, has dropped its copy
// (or its lease has ended); the nodes are uncachable until the returned
// hold is released. The wait is bounded by a lease (a cacher's lease ends
// within one) and a second. A change that waited across a new master
// epoch is refused; the hold names the view of the epoch it waited in,
// into which alone the command may be proposed.
func (s *Server) invalidateCaches(ctx context.Context, r fs.Reach) (cacheHold, error) {
	if !reachesCache(r) {
		return cacheHold{}, nil
	}
	start := time.Now()
	ictx, icancel := context.WithTimeout(ctx, s.cfg.Lease+time.Second)
	done, epoch, err := s.cache.invalidate(ictx, r)
	icancel()
	if err != nil {
		return cacheHold{}, err
	}
	s.metrics.invalidationWait.Observe(time.Since(start).Seconds())
	h := cacheHold{done: done}
	if epoch > 0 {
		h.view, h.inView = uint64(epoch-1), true // master.Epoch's inverse
	}
	return h, nil
}

// attach sets what cmd carries of p beside its operation: the session and
// request number of an exactly-once request, and a CreateSession's
// principal.
func (p proposal) attach(cmd *fsm.Command) {
	if p.rid != nil {
		session := p.session
		cmd.Session, cmd.Seq, cmd.SeqFloor = &session, &p.rid.Seq, &p.rid.Floor
	}
	if p.principal != "" {
		principal := p.principal
		cmd.Principal = &principal
	}
}

// boundCommit bounds ctx by commitTimeout, unless its deadline is sooner.
// Most callers' deadlines (TTHeader's RPC timeout) are sooner: then no
// context and timer of our own per command, and cancel does nothing.
func boundCommit(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= commitTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, commitTimeout)
}

// encodeEntry encodes cmd as a log entry, or refuses it (TOO_LARGE) if the
// encoding is over vr.MaxEntryBytes, before the log sees it.
func encodeEntry(cmd *fsm.Command) ([]byte, error) {
	entry := fs.EncodeCommand(cmd)
	if len(entry) > vr.MaxEntryBytes {
		return nil, fs.Errorf(chubby.ErrorCode_TOO_LARGE, "the command is %d bytes, over the %d-byte limit of one log entry", len(entry), vr.MaxEntryBytes)
	}
	return entry, nil
}

// proposeEntry proposes entry to the log, only in the hold's view if it
// names one (Replicated.ProposeInView), and waits until it has applied or
// ctx is done. Its error is the log's.
func (s *Server) proposeEntry(ctx context.Context, h cacheHold, entry []byte) (any, error) {
	if h.inView {
		return s.log.ProposeInView(ctx, h.view, entry)
	}
	return s.log.Propose(ctx, entry)
}

// logError maps a proposal's error from the log to the *chubby.ChubbyError
// a client hears: UNAVAILABLE when the cell may serve a retry (saying
// whether the command may still have applied), NOT_MASTER naming the
// master if known, INTERNAL for anything else.
func (s *Server) logError(err error) *chubby.ChubbyError {
	var nm *replica.NotMasterError
	switch {
	case errors.Is(err, replica.ErrOverloaded):
		return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the cell is overloaded; retry later")
	case errors.As(err, &nm):
		return s.notMasterError(nm)
	case errors.Is(err, replica.ErrUnknownOutcome):
		return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the master changed before the command committed; it may or may not have been applied")
	case errors.Is(err, replica.ErrStopped):
		return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the replica is shutting down or its disk failed")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "no commit before the call's deadline (at most %v); the command may or may not have been applied", commitTimeout)
	default:
		return fs.Errorf(chubby.ErrorCode_INTERNAL, "propose: %v", err)
	}
}

// refused reports whether a proposal's error says the log never took the
// command (so it cannot apply later, and nothing need be held for it): the
// replica was not the primary in the view asked for, or its queue was full.
func refused(err error) bool {
	var nm *replica.NotMasterError
	return errors.As(err, &nm) || errors.Is(err, replica.ErrOverloaded)
}

// result checks that the log applied op into an *fsm.Result_ and counts
// the command by its outcome. A command the state machine refused returns
// its *chubby.ChubbyError as the error, beside the result.
func (s *Server) result(op *fsm.Op, v any) (*fsm.Result_, error) {
	res, ok := v.(*fsm.Result_)
	if !ok || res == nil {
		return nil, fs.Errorf(chubby.ErrorCode_INTERNAL, "log returned %T", v)
	}
	s.metrics.command(op, res.Err)
	if res.Err != nil {
		return res, res.Err
	}
	return res, nil
}
