package rpc

import (
	"context"
	"sync"
)

// A Future is the result of an asynchronous call (AMI): a value of type T and
// an error that become available once, when the call completes.
//
// A Future is safe for concurrent use. Its zero value is not usable; make one
// with [Go], [NewPromise], [Resolved] or [Failed].
type Future[T any] struct {
	done chan struct{} // closed when the result is set

	mu       sync.Mutex
	settled  bool
	draining bool // callbacks are running on the completing goroutine
	v        T
	err      error
	pending  []func(T, error)
}

// Go runs fn(ctx) on a new goroutine and returns a future of its result. It
// turns any blocking call, such as a method of a generated Kitex client, into
// an asynchronous one:
//
//	f := rpc.Go(ctx, func(ctx context.Context) (string, error) {
//		return cli.Echo(ctx, "hi")
//	})
//
// fn gets ctx unchanged, so cancelling ctx cancels the call in the way the
// callee honours it. As with a go statement, a panic in fn is not recovered.
func Go[T any](ctx context.Context, fn func(context.Context) (T, error)) *Future[T] {
	f, complete := NewPromise[T]()
	go func() {
		v, err := fn(ctx)
		complete(v, err)
	}()
	return f
}

// NewPromise returns a pending future and the function that completes it.
// The first call of complete sets the result; later calls are ignored, so
// racing completers (a reply and a timeout, say) need no coordination.
func NewPromise[T any]() (f *Future[T], complete func(T, error)) {
	f = &Future[T]{done: make(chan struct{})}
	return f, f.complete
}

// Resolved returns a future that is already done with value v.
func Resolved[T any](v T) *Future[T] {
	f, complete := NewPromise[T]()
	complete(v, nil)
	return f
}

// Failed returns a future that is already done with error err.
func Failed[T any](err error) *Future[T] {
	f, complete := NewPromise[T]()
	var zero T
	complete(zero, err)
	return f
}

// complete sets the result if it is not set yet and runs the callbacks
// registered so far, in registration order, on the calling goroutine.
func (f *Future[T]) complete(v T, err error) {
	f.mu.Lock()
	if f.settled {
		f.mu.Unlock()
		return
	}
	f.settled = true
	f.v, f.err = v, err
	close(f.done)
	f.drainLocked()
}

// drainLocked runs pending callbacks until none are left. It is called with
// f.mu held and returns with it released. Callbacks run without the lock, so
// they may call Then, Result or Wait on f themselves; a Then that arrives
// while draining is queued behind the running callbacks, which keeps the
// registration order.
func (f *Future[T]) drainLocked() {
	f.draining = true
	for len(f.pending) > 0 {
		cbs := f.pending
		f.pending = nil
		f.mu.Unlock()
		for _, cb := range cbs {
			cb(f.v, f.err)
		}
		f.mu.Lock()
	}
	f.draining = false
	f.mu.Unlock()
}

// Wait blocks until the future is done or ctx ends, and returns the result,
// or ctx.Err() if ctx ended first. Giving up waiting does not stop the call
// itself: it goes on, and its result stays available to Wait, Then and Result.
func (f *Future[T]) Wait(ctx context.Context) (T, error) {
	select {
	case <-f.done:
		return f.v, f.err
	default:
	}
	select {
	case <-f.done:
		return f.v, f.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// Then arranges for fn to run once with the result when the future is done.
//
// If the future is already done, fn runs immediately on the caller's
// goroutine (unless earlier callbacks are still running, in which case it
// runs right after them, on their goroutine); otherwise it runs on the
// goroutine that completes the future. Callbacks run in the order they were
// registered. fn should be quick: it delays the callbacks behind it, and
// for a future made by [Go] or completed by a Kitex handler, it runs on that
// goroutine.
func (f *Future[T]) Then(fn func(T, error)) {
	f.mu.Lock()
	if !f.settled || f.draining {
		f.pending = append(f.pending, fn)
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	fn(f.v, f.err)
}

// Done returns a channel that is closed when the future is done, for use in
// select statements.
func (f *Future[T]) Done() <-chan struct{} {
	return f.done
}

// Result returns the result without blocking; ok is false (and v and err are
// zero) while the future is not done.
func (f *Future[T]) Result() (v T, err error, ok bool) {
	select {
	case <-f.done:
		return f.v, f.err, true
	default:
		return v, nil, false
	}
}
