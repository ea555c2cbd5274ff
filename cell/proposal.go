package cell

import (
	"context"
	"errors"
	"time"

	"github.com/chubbygo/chubby/cell/master"
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
// returned as the error. The change pipeline (changes, master.Pipeline)
// first takes p through its waits: an EndSession drains its session's
// commands in flight; the command is stamped and its reach computed; the
// caches it reaches drop their copies. Then, with the pipeline's go-ahead:
//
//  1. attach: the command gets p's session, request number and principal;
//  2. propose: the wait for its commit is bounded (boundCommit), the
//     command encoded within one log entry (encodeEntry) and proposed
//     (proposeEntry), in the view its invalidation waited in;
//  3. map the error: a log error becomes a typed *chubby.ChubbyError
//     (logError), or the result is checked and counted (result).
//
// The change is finished as submit returns: what it holds in the pipeline
// (its place among the writes in flight, its nodes' uncachability) is
// released at once, or held on for the pipeline's UncertainHold (twice commitTimeout) when the outcome is
// unknown (the command may still apply).
func (s *Server) submit(ctx context.Context, p proposal) (*fsm.Result_, error) {
	v, err := s.changes.submit(ctx, p.op, p.notBefore)
	if err != nil {
		return nil, err
	}
	var uncertain bool
	defer func() { s.changes.finished(v.ID, uncertain) }()
	if v.Invalidated {
		s.metrics.invalidationWait.Observe(v.Waited.Seconds())
	}
	cmd := v.Cmd
	p.attach(cmd)
	ctx, cancel := boundCommit(ctx)
	defer cancel()
	entry, err := encodeEntry(cmd)
	if err != nil {
		return nil, err // refused before the log saw it: certain
	}
	res, err := s.proposeEntry(ctx, v, entry)
	if err != nil {
		uncertain = !replica.NeverApplies(err)
		return nil, s.logError(err)
	}
	return s.result(p.op, res)
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

// proposeEntry proposes entry to the log, only in the verdict's view if
// it names one (Replicated.ProposeInView), and waits until it has applied
// or ctx is done. Its error is the log's.
func (s *Server) proposeEntry(ctx context.Context, v master.Verdict, entry []byte) (any, error) {
	if v.InView {
		return s.log.ProposeInView(ctx, v.View, entry)
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
