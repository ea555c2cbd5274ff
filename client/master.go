package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cloudwego/kitex/client/callopt"
	"github.com/cloudwego/kitex/pkg/kerrors"

	"github.com/chubbygo/chubby/gen/chubby"
)

// master tracks which replica the client believes is the master. Every call
// is sent to that replica (callopt.WithHostPort). When a replica answers
// NOT_MASTER with a hint the hint becomes the guess; when it gives no hint or
// cannot be reached, the next configured address is tried, round-robin.
//
// With one replica (this issue) the guess never changes, but the calls are
// already routed through here so that a multi-replica cell only needs the
// cell to fill in NOT_MASTER's master_address.
type master struct {
	addrs []string // configured replicas, validated; never empty; immutable

	mu   sync.Mutex
	cur  string // current guess
	next int    // index in addrs of the address to try when cur fails
}

func newMaster(addrs []string) *master {
	return &master{addrs: addrs, cur: addrs[0], next: 1 % len(addrs)}
}

// addr returns the address the next call should go to.
func (m *master) addr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur
}

// redirect records that the replica at from is not the master. A valid
// hint (NOT_MASTER's master_address, or GetMaster's answer) that differs from
// from becomes the guess; otherwise the next configured address does.
func (m *master) redirect(from, hint string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != from {
		return // someone else already moved on
	}
	if hint != "" && hint != from && ValidateAddr(hint) == nil {
		m.cur = hint
		return
	}
	m.advanceLocked()
}

// unreachable records that the replica at from could not be reached.
func (m *master) unreachable(from string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == from {
		m.advanceLocked()
	}
}

// learned records the master's address from an authoritative answer (GetMaster).
func (m *master) learned(addr string) {
	if addr == "" || ValidateAddr(addr) != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cur = addr
}

func (m *master) advanceLocked() {
	m.cur = m.addrs[m.next]
	m.next = (m.next + 1) % len(m.addrs)
}

// retryClass says which failures of a call may be answered by sending the
// call again (to the same or another replica).
type retryClass int

const (
	// retrySafe: the call may be sent again whatever became of an earlier
	// attempt. Reads (GetContentsAndStat, GetStat, ReadDir, GetSequencer,
	// CheckSequencer, GetMaster, GetStatus) change nothing; CreateSession is
	// safe too, because a session created by an attempt whose reply was lost
	// is never kept alive and ends after one lease. Retried on NOT_MASTER,
	// UNAVAILABLE and transport errors other than timeouts.
	retrySafe retryClass = iota

	// retryUnsent: the call changes the cell (Open, Close, SetContents,
	// Delete, Mkdir, CreateFile, Acquire, TryAcquire, Release, CloseSession).
	// It is sent again only when the earlier attempt certainly did nothing:
	// the connection could not be made (the request never left), or the
	// replica answered NOT_MASTER (a refused call changes nothing). A reply
	// lost after the request was sent is reported, never retried: the caller
	// decides (e.g. re-reading before writing again).
	retryUnsent
)

// callSpec describes one call for call().
type callSpec struct {
	op      string        // for OpError and logs
	path    string        // for OpError and logs; may be ""
	class   retryClass    // which failures are retried
	timeout time.Duration // per-attempt RPC timeout
}

// call sends fn to the current master guess, retrying as spec.class allows,
// at most maxCallAttempts times with a bounded backoff. It returns the
// result, or an *OpError whose cause is the cell's *chubby.ChubbyError, the
// context's error, an ErrUnreachable wrap, or the transport error.
func call[T any](ctx context.Context, c *Client, spec callSpec,
	fn func(context.Context, ...callopt.Option) (T, error)) (T, error) {
	var zero T
	for attempt := 0; ; attempt++ {
		if c.isClosed() {
			return zero, &OpError{Op: spec.op, Path: spec.path, Err: ErrClientClosed}
		}
		if err := ctx.Err(); err != nil {
			return zero, &OpError{Op: spec.op, Path: spec.path, Err: context.Cause(ctx)}
		}
		addr := c.master.addr()
		v, err := fn(ctx, callopt.WithHostPort(addr), callopt.WithRPCTimeout(spec.timeout))
		if err == nil {
			return v, nil
		}
		retry, cause := c.classify(ctx, err, addr, spec.class)
		if !retry || attempt+1 >= maxCallAttempts {
			return zero, &OpError{Op: spec.op, Path: spec.path, Err: cause}
		}
		d := backoffDelay(callBackoffBase, callBackoffMax, attempt, jitter())
		c.log.Debug("chubby: retrying call", "op", spec.op, "path", spec.path,
			"addr", addr, "attempt", attempt+1, "delay", d, "err", Describe(cause))
		if err := sleepCtx(ctx, d); err != nil {
			return zero, &OpError{Op: spec.op, Path: spec.path, Err: cause}
		}
	}
}

// classify decides whether a failed attempt sent to addr may be retried
// under class, updates the master guess, and returns the error to report.
func (c *Client) classify(ctx context.Context, err error, addr string, class retryClass) (retry bool, cause error) {
	var ce *chubby.ChubbyError
	if errors.As(err, &ce) {
		switch ce.Code {
		case chubby.ErrorCode_NOT_MASTER:
			c.master.redirect(addr, ce.GetMasterAddress())
			return true, err
		case chubby.ErrorCode_UNAVAILABLE:
			return class == retrySafe, err
		}
		return false, err
	}
	if dl, ok := ctx.Deadline(); ok && kerrors.IsTimeoutError(err) && time.Until(dl) < 50*time.Millisecond {
		// Kitex turns the context's deadline into its RPC timeout and may
		// fire a hair before the context itself expires: it was the
		// context's deadline, so report that once it has passed.
		<-ctx.Done()
	}
	if ctx.Err() != nil {
		// Kitex reports a cancelled or expired context as an RPC timeout;
		// the context's own error says what happened.
		return false, context.Cause(ctx)
	}
	switch {
	case errors.Is(err, kerrors.ErrGetConnection):
		c.master.unreachable(addr)
		return true, fmt.Errorf("%w at %s: %w", ErrUnreachable, addr, err)
	case kerrors.IsTimeoutError(err):
		return false, err
	case errors.Is(err, kerrors.ErrRemoteOrNetwork):
		if class == retrySafe {
			c.master.unreachable(addr)
			return true, err
		}
		return false, err
	}
	return false, err
}
