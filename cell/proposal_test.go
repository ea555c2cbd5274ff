package cell

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/replica"
)

// TestLogErrorMapping checks the last stage of Server.submit: each error
// the log can return becomes the typed error a client hears (its code,
// message, and where the master is), and refused says which ones the log
// certainly never took (nothing is held on for them).
func TestLogErrorMapping(t *testing.T) {
	s := &Server{cfg: Config{ID: 3}}
	known := &replica.NotMasterError{View: 6, Primary: 2, Addr: "127.0.0.1:7000", Known: true}
	deadline := fmt.Sprintf("no commit before the call's deadline (at most %v); the command may or may not have been applied", commitTimeout)
	cases := []struct {
		name    string
		err     error
		code    chubby.ErrorCode
		msg     string
		refused bool
		master  string // the master address the error names, if any
		epoch   int64
	}{
		{"overloaded", replica.ErrOverloaded, chubby.ErrorCode_UNAVAILABLE, "the cell is overloaded; retry later", true, "", 0},
		{"overloaded, wrapped", fmt.Errorf("queue: %w", replica.ErrOverloaded), chubby.ErrorCode_UNAVAILABLE, "the cell is overloaded; retry later", true, "", 0},
		{"not master, master known", known, chubby.ErrorCode_NOT_MASTER, "replica 3 is not the master; replica 2 at 127.0.0.1:7000 is", true, "127.0.0.1:7000", 7},
		{"not master, wrapped", fmt.Errorf("propose: %w", known), chubby.ErrorCode_NOT_MASTER, "replica 3 is not the master; replica 2 at 127.0.0.1:7000 is", true, "127.0.0.1:7000", 7},
		{"not master, none known", &replica.NotMasterError{View: 6}, chubby.ErrorCode_NOT_MASTER, "replica 3 is not the master", true, "", 0},
		{"unknown outcome", replica.ErrUnknownOutcome, chubby.ErrorCode_UNAVAILABLE, "the master changed before the command committed; it may or may not have been applied", false, "", 0},
		{"stopped", replica.ErrStopped, chubby.ErrorCode_UNAVAILABLE, "the replica is shutting down or its disk failed", false, "", 0},
		{"stopped by a halt", fmt.Errorf("%w: %w", replica.ErrStopped, replica.ErrHalted), chubby.ErrorCode_UNAVAILABLE, "the replica is shutting down or its disk failed", false, "", 0},
		{"deadline", context.DeadlineExceeded, chubby.ErrorCode_UNAVAILABLE, deadline, false, "", 0},
		{"canceled", context.Canceled, chubby.ErrorCode_UNAVAILABLE, deadline, false, "", 0},
		{"other", errors.New("disk on fire"), chubby.ErrorCode_INTERNAL, "propose: disk on fire", false, "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ce := s.logError(c.err)
			if ce == nil {
				t.Fatalf("logError(%v) = nil", c.err)
			}
			if ce.Code != c.code || ce.Message != c.msg {
				t.Errorf("logError(%v) = %v %q, want %v %q", c.err, ce.Code, ce.Message, c.code, c.msg)
			}
			if got := ce.GetMasterAddress(); got != c.master {
				t.Errorf("master address %q, want %q", got, c.master)
			}
			if got := ce.GetEpoch(); got != c.epoch {
				t.Errorf("epoch %d, want %d", got, c.epoch)
			}
			if got := replica.NeverApplies(c.err); got != c.refused {
				t.Errorf("NeverApplies(%v) = %v, want %v", c.err, got, c.refused)
			}
		})
	}
}

// TestProposalAttach checks that a command carries a proposal's session
// and request number only with a request id, and a principal only when set.
func TestProposalAttach(t *testing.T) {
	rid := &chubby.RequestID{Seq: 9, Floor: 4}
	cases := []struct {
		name      string
		p         proposal
		session   *chubby.SessionID
		seq       *int64
		floor     *int64
		principal *string
	}{
		{"nothing", proposal{op: &fsm.Op{}}, nil, nil, nil, nil},
		{"session without rid", proposal{op: &fsm.Op{}, session: 5}, nil, nil, nil, nil},
		{"rid", proposal{op: &fsm.Op{}, session: 5, rid: rid}, ptr(chubby.SessionID(5)), ptr(int64(9)), ptr(int64(4)), nil},
		{"principal", proposal{op: &fsm.Op{}, principal: "alice"}, nil, nil, nil, ptr("alice")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := &fsm.Command{TimeMs: 1, Op: c.p.op}
			c.p.attach(cmd)
			if !samePtr(cmd.Session, c.session) || !samePtr(cmd.Seq, c.seq) || !samePtr(cmd.SeqFloor, c.floor) || !samePtr(cmd.Principal, c.principal) {
				t.Errorf("command session %v seq %v floor %v principal %v; want %v %v %v %v",
					show(cmd.Session), show(cmd.Seq), show(cmd.SeqFloor), show(cmd.Principal),
					show(c.session), show(c.seq), show(c.floor), show(c.principal))
			}
		})
	}
}

// TestBoundCommit checks that a context with no deadline, or a later one
// than commitTimeout, is bounded by commitTimeout, and a sooner deadline is
// kept as it is.
func TestBoundCommit(t *testing.T) {
	ctx, cancel := boundCommit(context.Background())
	dl, ok := ctx.Deadline()
	cancel()
	if !ok || time.Until(dl) > commitTimeout {
		t.Errorf("no deadline: bounded to %v (set %v), want within %v", time.Until(dl), ok, commitTimeout)
	}
	soon, cancelSoon := context.WithTimeout(context.Background(), commitTimeout/2)
	defer cancelSoon()
	ctx, cancel = boundCommit(soon)
	cancel()
	if ctx != soon {
		t.Errorf("a deadline sooner than commitTimeout got a context of its own")
	}
	if soon.Err() != nil {
		t.Errorf("cancel of an unbounded context canceled the caller's: %v", soon.Err())
	}
}

func samePtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func show[T any](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}
