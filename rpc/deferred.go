package rpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Reasons a parked call ends without a reply from the logic that parked it.
var (
	// ErrBoundExceeded is returned by [Deferred.Park] when the call reached
	// the server-side bound given to Park.
	ErrBoundExceeded = errors.New("rpc: parked call reached its server-side bound")

	// ErrCallerGone is returned by [Deferred.Park] when the caller's
	// connection closed while the call was parked. It is also the cause
	// ([context.Cause]) of a handler context that a server built with
	// [ServerOptions] cancels when the connection closes.
	ErrCallerGone = errors.New("rpc: caller went away")

	// ErrNoBound is returned by [Deferred.Park] when called with a bound that
	// is not positive: every parked call must have one.
	ErrNoBound = errors.New("rpc: Park needs a positive bound")

	// errNilRejection stands in for a nil error given to Reject, so that a
	// rejected call never looks like a successful one with a zero value.
	errNilRejection = errors.New("rpc: deferred rejected with a nil error")
)

type deferredState uint8

const (
	pending deferredState = iota
	resolved
	rejected
	abandoned
)

// A Deferred is a reply that is not known yet (AMD): a Kitex handler creates
// one, hands it to the logic that will produce the reply (for example a
// table of parked KeepAlives), and parks on it with [Deferred.Park]. That
// logic later settles it from any goroutine with [Deferred.Resolve] or
// [Deferred.Reject]. If the call ends first (bound reached, handler context
// ended, caller gone), Park abandons the deferred: later settlements return
// false and the [Deferred.OnAbandon] callbacks run, so the logic can forget
// it.
//
// Exactly one outcome wins: a Resolve or Reject that returns true is the
// reply Park returns, and a Park that returns an abandonment reason made
// every later Resolve and Reject return false.
//
// A Deferred is safe for concurrent use. It holds no goroutine of its own;
// parked, its cost is the handler goroutine blocked in Park, one timer and
// this struct (see the package documentation for measured numbers).
type Deferred[T any] struct {
	done chan struct{} // closed once settled in any way

	mu        sync.Mutex
	state     deferredState
	v         T
	err       error // rejection error or abandonment reason
	onAbandon []func(reason error)
}

// NewDeferred returns a pending deferred reply.
func NewDeferred[T any]() *Deferred[T] {
	return &Deferred[T]{done: make(chan struct{})}
}

// Resolve sets the reply to v. It reports whether it did: false means the
// deferred was already resolved, rejected or abandoned, and v is dropped.
func (d *Deferred[T]) Resolve(v T) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state != pending {
		return false
	}
	d.state, d.v = resolved, v
	d.onAbandon = nil
	close(d.done)
	return true
}

// Reject sets the reply to the error err (typically a declared Thrift
// exception). It reports whether it did, as [Deferred.Resolve] does. A nil
// err is replaced by a non-nil error, so a rejection is never mistaken for a
// success.
func (d *Deferred[T]) Reject(err error) bool {
	if err == nil {
		err = errNilRejection
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state != pending {
		return false
	}
	d.state, d.err = rejected, err
	d.onAbandon = nil
	close(d.done)
	return true
}

// OnAbandon registers fn to run once with the reason if the deferred is
// abandoned. If it is abandoned already, fn runs now, on the caller's
// goroutine; if it was resolved or rejected, fn never runs. Otherwise fn runs
// on the goroutine that abandons it (the handler's, inside Park), after the
// callbacks registered before it. fn must not block: the handler's reply
// waits for it.
func (d *Deferred[T]) OnAbandon(fn func(reason error)) {
	d.mu.Lock()
	switch d.state {
	case pending:
		d.onAbandon = append(d.onAbandon, fn)
		d.mu.Unlock()
	case abandoned:
		reason := d.err
		d.mu.Unlock()
		fn(reason)
	default:
		d.mu.Unlock()
	}
}

// Done returns a channel that is closed once the deferred is resolved,
// rejected or abandoned.
func (d *Deferred[T]) Done() <-chan struct{} {
	return d.done
}

// Park blocks until the deferred is settled and returns its value or
// rejection error. It returns early, abandoning the deferred, when
//
//   - bound elapses: [ErrBoundExceeded];
//   - the caller's connection closes, on a server built with
//     [ServerOptions] and the default netpoll transport: [ErrCallerGone];
//   - ctx ends otherwise (for example the caller's deadline, which reaches
//     the handler when the client sends TTHeader): ctx.Err().
//
// bound is mandatory and must be positive; otherwise Park abandons the
// deferred and returns an error wrapping [ErrNoBound]. It exists because
// Kitex does not cancel a handler's context when a plain client gives up
// and keeps its connection open: without a bound such a call would be
// parked for ever.
//
// If the deferred was settled before Park is called, Park returns at once.
// A deferred is meant to be parked on by one handler; concurrent Parks all
// see the same outcome, and the first to give up abandons it for all.
//
// If ctx comes from a server built with [ServerOptions] with a Registerer,
// the server's gauge of parked calls counts the call while Park blocks.
func (d *Deferred[T]) Park(ctx context.Context, bound time.Duration) (T, error) {
	if bound <= 0 {
		err := fmt.Errorf("%w (got %v)", ErrNoBound, bound)
		if d.abandon(err) {
			var zero T
			return zero, err
		}
		return d.outcome()
	}
	select {
	case <-d.done:
		return d.outcome()
	default:
	}

	if g := parkedGauge(ctx); g != nil {
		g.Inc()
		defer g.Dec()
	}
	t := time.NewTimer(bound)
	defer t.Stop()

	var reason error
	select {
	case <-d.done:
		return d.outcome()
	case <-t.C:
		reason = ErrBoundExceeded
	case <-ctx.Done():
		reason = ctx.Err()
		if cause := context.Cause(ctx); errors.Is(cause, ErrCallerGone) {
			reason = ErrCallerGone
		}
	}
	if !d.abandon(reason) {
		// A settlement won the race against the bound or ctx.
		return d.outcome()
	}
	var zero T
	return zero, reason
}

// abandon marks a pending deferred abandoned with reason and runs the
// OnAbandon callbacks. It reports whether it did.
func (d *Deferred[T]) abandon(reason error) bool {
	d.mu.Lock()
	if d.state != pending {
		d.mu.Unlock()
		return false
	}
	d.state, d.err = abandoned, reason
	cbs := d.onAbandon
	d.onAbandon = nil
	close(d.done)
	d.mu.Unlock()
	for _, fn := range cbs {
		fn(reason)
	}
	return true
}

// outcome returns the settled result; d.done must be closed.
func (d *Deferred[T]) outcome() (T, error) {
	<-d.done
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == resolved {
		return d.v, nil
	}
	var zero T
	return zero, d.err
}
