package rpc_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chubbygo/chubby/rpc"
)

// parkResult is what a Park returned.
type parkResult struct {
	v   string
	err error
}

func parkAsync(ctx context.Context, d *rpc.Deferred[string], bound time.Duration) <-chan parkResult {
	ch := make(chan parkResult, 1)
	go func() {
		v, err := d.Park(ctx, bound)
		ch <- parkResult{v, err}
	}()
	return ch
}

func TestDeferredSettled(t *testing.T) {
	tests := []struct {
		name    string
		settle  func(d *rpc.Deferred[string]) bool
		before  bool // settle before Park is called (else while parked)
		wantV   string
		wantErr error
	}{
		{"ResolveBeforePark", func(d *rpc.Deferred[string]) bool { return d.Resolve("v") }, true, "v", nil},
		{"ResolveWhileParked", func(d *rpc.Deferred[string]) bool { return d.Resolve("v") }, false, "v", nil},
		{"RejectBeforePark", func(d *rpc.Deferred[string]) bool { return d.Reject(errTest) }, true, "", errTest},
		{"RejectWhileParked", func(d *rpc.Deferred[string]) bool { return d.Reject(errTest) }, false, "", errTest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := rpc.NewDeferred[string]()
			var abandoned atomic.Bool
			d.OnAbandon(func(error) { abandoned.Store(true) })
			if tt.before && !tt.settle(d) {
				t.Fatal("first settlement returned false")
			}
			res := parkAsync(context.Background(), d, time.Minute)
			if !tt.before {
				time.Sleep(10 * time.Millisecond) // let Park block (either way the outcome is the same)
				if !tt.settle(d) {
					t.Fatal("first settlement returned false")
				}
			}
			r := <-res
			if r.v != tt.wantV || !errors.Is(r.err, tt.wantErr) {
				t.Fatalf("Park = %q, %v; want %q, %v", r.v, r.err, tt.wantV, tt.wantErr)
			}
			// Settled once: every later settlement is refused.
			if d.Resolve("again") || d.Reject(errTest) {
				t.Fatal("a second settlement returned true")
			}
			// Parking again returns the same outcome at once.
			if v, err := d.Park(context.Background(), time.Minute); v != tt.wantV || !errors.Is(err, tt.wantErr) {
				t.Fatalf("second Park = %q, %v; want %q, %v", v, err, tt.wantV, tt.wantErr)
			}
			if abandoned.Load() {
				t.Fatal("OnAbandon ran for a settled deferred")
			}
			d.OnAbandon(func(error) { t.Error("OnAbandon registered after settlement ran") })
		})
	}
}

func TestDeferredRejectNil(t *testing.T) {
	d := rpc.NewDeferred[int]()
	d.Reject(nil)
	if _, err := d.Park(context.Background(), time.Second); err == nil {
		t.Fatal("Park after Reject(nil) returned no error")
	}
}

func TestDeferredAbandoned(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	goneCtx, gone := context.WithCancelCause(context.Background())
	gone(rpc.ErrCallerGone)
	deadline, cancelDeadline := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancelDeadline()

	tests := []struct {
		name  string
		ctx   context.Context
		bound time.Duration
		want  error
	}{
		{"BoundExceeded", context.Background(), 30 * time.Millisecond, rpc.ErrBoundExceeded},
		{"CtxCancelled", cancelled, time.Minute, context.Canceled},
		{"CtxDeadline", deadline, time.Minute, context.DeadlineExceeded},
		{"CallerGone", goneCtx, time.Minute, rpc.ErrCallerGone},
		{"ZeroBound", context.Background(), 0, rpc.ErrNoBound},
		{"NegativeBound", context.Background(), -time.Second, rpc.ErrNoBound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := rpc.NewDeferred[string]()
			var reasons []error
			var mu sync.Mutex
			for range 2 {
				d.OnAbandon(func(reason error) {
					mu.Lock()
					reasons = append(reasons, reason)
					mu.Unlock()
				})
			}
			start := time.Now()
			_, err := d.Park(tt.ctx, tt.bound)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Park = %v; want %v", err, tt.want)
			}
			if tt.want == rpc.ErrBoundExceeded && time.Since(start) < tt.bound {
				t.Fatalf("Park returned after %v, before its bound %v", time.Since(start), tt.bound)
			}
			mu.Lock()
			if len(reasons) != 2 || !errors.Is(reasons[0], tt.want) || !errors.Is(reasons[1], tt.want) {
				t.Fatalf("OnAbandon callbacks got %v; want %v twice", reasons, tt.want)
			}
			mu.Unlock()
			if d.Resolve("late") || d.Reject(errTest) {
				t.Fatal("settling an abandoned deferred returned true")
			}
			select {
			case <-d.Done():
			default:
				t.Fatal("Done not closed after abandonment")
			}
			// A callback registered now runs at once with the reason.
			var late error
			d.OnAbandon(func(reason error) { late = reason })
			if !errors.Is(late, tt.want) {
				t.Fatalf("late OnAbandon got %v; want %v", late, tt.want)
			}
		})
	}
}

// TestDeferredResolveRacesBound resolves deferreds right when their bound
// expires: exactly one side must win, and both must agree on which.
func TestDeferredResolveRacesBound(t *testing.T) {
	const n = 2000
	var resolvedWins, boundWins atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := rpc.NewDeferred[int]()
			var abandonRan atomic.Bool
			d.OnAbandon(func(error) { abandonRan.Store(true) })
			bound := time.Duration(i%5) * 200 * time.Microsecond
			bound += time.Microsecond
			resolved := make(chan bool, 1)
			go func() {
				time.Sleep(bound)
				resolved <- d.Resolve(i)
			}()
			v, err := d.Park(context.Background(), bound)
			ok := <-resolved
			switch {
			case ok && err == nil && v == i && !abandonRan.Load():
				resolvedWins.Add(1)
			case !ok && errors.Is(err, rpc.ErrBoundExceeded) && abandonRan.Load():
				boundWins.Add(1)
			default:
				t.Errorf("inconsistent outcome: Resolve=%v, Park=%v, %v, OnAbandon ran=%v", ok, v, err, abandonRan.Load())
			}
		}()
	}
	wg.Wait()
	t.Logf("of %d races, Resolve won %d and the bound %d", n, resolvedWins.Load(), boundWins.Load())
}

// TestDeferredConcurrentSettle settles one deferred from many goroutines:
// exactly one wins.
func TestDeferredConcurrentSettle(t *testing.T) {
	for range 200 {
		d := rpc.NewDeferred[int]()
		res := parkAsync2(d)
		var wins atomic.Int64
		var wg sync.WaitGroup
		for k := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var ok bool
				if k%2 == 0 {
					ok = d.Resolve(k)
				} else {
					ok = d.Reject(errTest)
				}
				if ok {
					wins.Add(1)
				}
			}()
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d settlements won; want 1", wins.Load())
		}
		<-res
	}
}

func parkAsync2(d *rpc.Deferred[int]) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := d.Park(context.Background(), time.Minute)
		ch <- err
	}()
	return ch
}
