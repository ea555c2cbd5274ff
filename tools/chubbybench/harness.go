package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// op is one benchmark operation run by worker w. It returns the latency to
// record: most operations return the time they took (see timed); an
// operation with an untimed part (session creation followed by its close)
// returns only the timed part.
type op func(ctx context.Context, w int) (time.Duration, error)

// timed makes an op whose latency is the whole call of f.
func timed(f func(ctx context.Context, w int) error) op {
	return func(ctx context.Context, w int) (time.Duration, error) {
		t0 := time.Now()
		err := f(ctx, w)
		return time.Since(t0), err
	}
}

// loop configures a closed-loop run: Workers goroutines each run the op
// back to back, for Warmup (not measured) and then Duration (measured).
type loop struct {
	Workers  int
	Warmup   time.Duration
	Duration time.Duration
	// OpTimeout bounds one operation (its context's deadline).
	OpTimeout time.Duration
	// MaxErrorsInRow stops a worker after this many failures in a row (the
	// system is not answering; spinning on it measures nothing). Default 50.
	MaxErrorsInRow int
	// MinOps extends the measured window, Duration at a time, until this
	// many operations have completed in it or the window reaches
	// MaxDuration: a slow system (a contended lock on a loaded machine)
	// still yields percentiles instead of an empty window. 0: no extension.
	MinOps      int
	MaxDuration time.Duration
	// Counted, if set, is called by worker w after each of its operations
	// that counts in the measured window, failed (err) or not, before its
	// next operation: a workload with a figure of its own per operation
	// (transfer's aborted attempts) adds it up there, for exactly the
	// operations the Summary counts.
	Counted func(w int, err error)
}

// errNoSuccess is reported when a run completed no operation at all.
var errNoSuccess = errors.New("no operation succeeded")

// run runs the closed loop and summarises the measured window. Operations
// that complete after the window are not counted. It returns the first
// error any operation hit alongside the Summary (nil when every operation
// succeeded), and errNoSuccess wrapped when none did. ctx ending stops the
// run early.
func (l loop) run(ctx context.Context, f op) (Summary, error) {
	if l.Workers < 1 || l.Duration <= 0 || l.OpTimeout <= 0 {
		return Summary{}, fmt.Errorf("loop: workers %d, duration %v, op timeout %v must be positive", l.Workers, l.Duration, l.OpTimeout)
	}
	maxInRow := l.MaxErrorsInRow
	if maxInRow <= 0 {
		maxInRow = 50
	}
	start := time.Now()
	measureFrom := start.Add(l.Warmup)
	var (
		wg        sync.WaitGroup
		errOnce   sync.Once
		firstErr  error
		end       atomic.Int64 // UnixNano of the window's end; only grows
		completed atomic.Int64 // operations completed in the window so far
	)
	end.Store(measureFrom.Add(l.Duration).UnixNano())
	stopMonitor := make(chan struct{})
	defer close(stopMonitor)
	if l.MinOps > 0 && l.MaxDuration > l.Duration {
		go func() {
			limit := measureFrom.Add(l.MaxDuration)
			for {
				t := time.NewTimer(time.Until(time.Unix(0, end.Load())))
				select {
				case <-stopMonitor:
					t.Stop()
					return
				case <-t.C:
				}
				e := time.Unix(0, end.Load())
				if completed.Load() >= int64(l.MinOps) || !e.Before(limit) {
					return
				}
				end.Store(min(e.Add(l.Duration).UnixNano(), limit.UnixNano()))
			}
		}()
	}
	recs := make([]*recorder, l.Workers)
	for w := range l.Workers {
		recs[w] = &recorder{}
		wg.Add(1)
		go func(w int, rec *recorder) {
			defer wg.Done()
			inRow := 0
			for ctx.Err() == nil {
				t0 := time.Now()
				if t0.UnixNano() >= end.Load() {
					// The monitor may still extend the window: only
					// it decides when the window is over.
					if l.MinOps > 0 && completed.Load() < int64(l.MinOps) && t0.Before(measureFrom.Add(l.MaxDuration)) {
						time.Sleep(time.Millisecond)
						continue
					}
					return
				}
				octx, cancel := context.WithTimeout(ctx, l.OpTimeout)
				lat, err := f(octx, w)
				cancel()
				done := time.Now()
				measured := !t0.Before(measureFrom) && done.UnixNano() <= end.Load()
				if measured && err == nil {
					completed.Add(1)
				}
				if measured && l.Counted != nil {
					l.Counted(w, err)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					if measured {
						rec.fail()
					}
					inRow++
					if inRow >= maxInRow {
						return
					}
					continue
				}
				inRow = 0
				if measured {
					rec.add(lat)
				}
			}
		}(w, recs[w])
	}
	wg.Wait()
	endAt := time.Unix(0, end.Load())
	window := endAt.Sub(measureFrom)
	if now := time.Now(); now.Before(endAt) { // stopped early (ctx ended)
		window = max(0, now.Sub(measureFrom))
	}
	all := merge(recs)
	s := summarize(all.samples, all.ops, all.errs, window)
	if s.Ops == 0 {
		cause := firstErr
		if cause == nil {
			cause = ctx.Err()
		}
		if cause == nil {
			return s, fmt.Errorf("%w within the %v window", errNoSuccess, window)
		}
		return s, fmt.Errorf("%w: %w", errNoSuccess, cause)
	}
	return s, firstErr
}
