package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestLoopMeasuresOnlyTheWindow(t *testing.T) {
	var calls atomic.Int64
	l := loop{Workers: 4, Warmup: 50 * time.Millisecond, Duration: 200 * time.Millisecond, OpTimeout: time.Second}
	s, err := l.run(context.Background(), timed(func(ctx context.Context, w int) error {
		calls.Add(1)
		time.Sleep(2 * time.Millisecond)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if s.Ops == 0 || s.Ops >= calls.Load() {
		t.Errorf("measured %d of %d calls: the warm-up must not count", s.Ops, calls.Load())
	}
	if s.P50 < 2*time.Millisecond || s.P99 < s.P50 {
		t.Errorf("p50 %v p99 %v: latencies below the op's own sleep", s.P50, s.P99)
	}
	if s.Elapsed != 200*time.Millisecond || s.Throughput <= 0 {
		t.Errorf("window %v throughput %v", s.Elapsed, s.Throughput)
	}
}

func TestLoopReportsFailures(t *testing.T) {
	boom := errors.New("boom")
	l := loop{Workers: 2, Duration: 50 * time.Millisecond, OpTimeout: time.Second, MaxErrorsInRow: 5}
	s, err := l.run(context.Background(), timed(func(context.Context, int) error { return boom }))
	if !errors.Is(err, errNoSuccess) || !errors.Is(err, boom) {
		t.Fatalf("err = %v, want errNoSuccess wrapping boom", err)
	}
	if s.Ops != 0 {
		t.Errorf("ops %d, want 0", s.Ops)
	}
	if _, err := (loop{}).run(context.Background(), nil); err == nil {
		t.Error("a zero loop must be refused")
	}
}

// A system slower than the window still yields figures: the window grows
// (up to MaxDuration) until MinOps operations completed in it.
func TestLoopExtendsTheWindowForSlowOperations(t *testing.T) {
	l := loop{Workers: 2, Duration: 50 * time.Millisecond, OpTimeout: time.Second, MinOps: 4, MaxDuration: 2 * time.Second}
	s, err := l.run(context.Background(), timed(func(context.Context, int) error {
		time.Sleep(120 * time.Millisecond)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if s.Ops < 4 {
		t.Errorf("ops %d, want at least MinOps 4", s.Ops)
	}
	if s.Elapsed <= 50*time.Millisecond || s.Elapsed > 2*time.Second {
		t.Errorf("window %v, want extended beyond 50ms and within 2s", s.Elapsed)
	}
}

func TestLoopStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	l := loop{Workers: 2, Duration: 10 * time.Second, OpTimeout: time.Second}
	_, _ = l.run(ctx, timed(func(ctx context.Context, _ int) error {
		time.Sleep(time.Millisecond)
		return nil
	}))
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("run took %v after its context ended", d)
	}
}

// Counted sees exactly the operations the Summary counts: those that
// started and ended in the measured window, failed or not.
func TestLoopCountedMatchesTheSummary(t *testing.T) {
	var calls, counted, failed [3]int64
	boom := errors.New("boom")
	l := loop{Workers: 3, Warmup: 20 * time.Millisecond, Duration: 100 * time.Millisecond, OpTimeout: time.Second}
	l.Counted = func(w int, err error) {
		counted[w]++ // only worker w's goroutine touches index w
		if err != nil {
			failed[w]++
		}
	}
	s, err := l.run(context.Background(), timed(func(ctx context.Context, w int) error {
		calls[w]++
		time.Sleep(time.Millisecond)
		if calls[w]%5 == 0 {
			return boom
		}
		return nil
	}))
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	var all, errs, made int64
	for w := range 3 {
		all, errs, made = all+counted[w], errs+failed[w], made+calls[w]
	}
	if all != s.Ops+s.Errors || errs != s.Errors {
		t.Errorf("Counted saw %d operations (%d failed); the Summary counts %d ops and %d errors", all, errs, s.Ops, s.Errors)
	}
	if all == 0 || all >= made {
		t.Errorf("Counted saw %d of %d operations: the warm-up must not count", all, made)
	}
}
