package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chubbygo/chubby/rpc"
)

var errTest = errors.New("test error")

func TestFutureDone(t *testing.T) {
	tests := []struct {
		name    string
		make    func() *rpc.Future[int]
		wantV   int
		wantErr error
	}{
		{"Resolved", func() *rpc.Future[int] { return rpc.Resolved(7) }, 7, nil},
		{"Failed", func() *rpc.Future[int] { return rpc.Failed[int](errTest) }, 0, errTest},
		{"Go", func() *rpc.Future[int] {
			return rpc.Go(context.Background(), func(context.Context) (int, error) { return 7, nil })
		}, 7, nil},
		{"GoFailing", func() *rpc.Future[int] {
			return rpc.Go(context.Background(), func(context.Context) (int, error) { return 0, errTest })
		}, 0, errTest},
		{"Promise", func() *rpc.Future[int] {
			f, complete := rpc.NewPromise[int]()
			complete(7, nil)
			complete(8, errTest) // ignored: first completion wins
			return f
		}, 7, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.make()
			v, err := f.Wait(context.Background())
			if v != tt.wantV || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Wait = %v, %v; want %v, %v", v, err, tt.wantV, tt.wantErr)
			}
			select {
			case <-f.Done():
			default:
				t.Fatal("Done not closed after Wait returned")
			}
			v, err, ok := f.Result()
			if !ok || v != tt.wantV || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Result = %v, %v, %v; want %v, %v, true", v, err, ok, tt.wantV, tt.wantErr)
			}
			var got []string
			f.Then(func(v int, err error) { got = append(got, fmt.Sprint(v, err)) })
			// Done already: Then ran on this goroutine, before returning.
			if want := fmt.Sprint(tt.wantV, tt.wantErr); len(got) != 1 || got[0] != want {
				t.Fatalf("Then on a done future ran %q; want [%q]", got, want)
			}
		})
	}
}

func TestFuturePending(t *testing.T) {
	f, complete := rpc.NewPromise[string]()
	if _, _, ok := f.Result(); ok {
		t.Fatal("Result reports a pending future done")
	}
	select {
	case <-f.Done():
		t.Fatal("Done closed before completion")
	default:
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := f.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with an ending ctx = %v; want DeadlineExceeded", err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if _, err := f.Wait(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled ctx = %v; want Canceled", err)
	}

	// Giving up waiting does not complete the future.
	complete("late", nil)
	if v, err := f.Wait(context.Background()); v != "late" || err != nil {
		t.Fatalf("Wait after completion = %q, %v", v, err)
	}
}

func TestFutureThenOrder(t *testing.T) {
	f, complete := rpc.NewPromise[int]()
	var (
		mu  sync.Mutex
		got []int
	)
	record := func(i int) func(int, error) {
		return func(int, error) {
			mu.Lock()
			got = append(got, i)
			mu.Unlock()
		}
	}
	for i := range 5 {
		f.Then(record(i))
	}
	// A callback that registers another: it runs after all those already
	// registered, on the same goroutine.
	f.Then(func(int, error) { f.Then(record(6)) })
	f.Then(record(5))
	complete(1, nil)
	f.Then(record(7)) // done: runs now

	want := []int{0, 1, 2, 3, 4, 5, 6, 7}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("callbacks ran in order %v; want %v", got, want)
	}
}

func TestFutureThenRunsOnCompletingGoroutine(t *testing.T) {
	f, complete := rpc.NewPromise[int]()
	ran := make(chan int, 1)
	f.Then(func(v int, err error) { ran <- v })
	select {
	case <-ran:
		t.Fatal("Then ran before completion")
	default:
	}
	complete(3, nil)
	// complete runs the callbacks before it returns.
	select {
	case v := <-ran:
		if v != 3 {
			t.Fatalf("callback got %d; want 3", v)
		}
	default:
		t.Fatal("callback did not run during complete")
	}
}

func TestGoPassesContext(t *testing.T) {
	type key struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	f := rpc.Go(ctx, func(ctx context.Context) (string, error) {
		<-ctx.Done()
		return ctx.Value(key{}).(string), ctx.Err()
	})
	cancel()
	v, err := f.Wait(context.Background())
	if v != "v" || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %q, %v; want v, Canceled", v, err)
	}
}

// TestFutureConcurrent completes futures from several goroutines at once
// while others wait, poll and register callbacks, for the race detector:
// every callback runs exactly once and every observer sees the same,
// first, completion.
func TestFutureConcurrent(t *testing.T) {
	const futures, users, completers = 100, 8, 3
	type seen struct {
		mu   sync.Mutex
		vals []int
	}
	var calls atomic.Int64
	var wg sync.WaitGroup
	fs := make([]*rpc.Future[int], futures)
	obs := make([]*seen, futures)
	for i := range futures {
		f, complete := rpc.NewPromise[int]()
		fs[i], obs[i] = f, &seen{}
		add := func(v int) {
			obs[i].mu.Lock()
			obs[i].vals = append(obs[i].vals, v)
			obs[i].mu.Unlock()
		}
		for range users {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f.Then(func(v int, err error) {
					calls.Add(1)
					add(v)
				})
				f.Result()
				v, _ := f.Wait(context.Background())
				add(v)
			}()
		}
		for k := range completers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				complete(k, nil)
			}()
		}
	}
	wg.Wait()
	if got := calls.Load(); got != futures*users {
		t.Fatalf("%d callbacks ran; want %d", got, futures*users)
	}
	for i, f := range fs {
		first, _, _ := f.Result()
		for _, v := range obs[i].vals {
			if v != first {
				t.Fatalf("future %d: an observer saw %d, Result says %d", i, v, first)
			}
		}
	}
}
