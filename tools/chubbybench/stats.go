package main

import (
	"math"
	"slices"
	"time"
)

// maxSamplesPerWorker bounds the latencies one worker keeps (8 bytes each):
// a worker that completes more operations in one measurement window still
// counts them for throughput but records no more latencies. At 1 s windows
// and the cell's speed it is never reached; it keeps a long run's memory
// bounded.
const maxSamplesPerWorker = 1 << 20

// recorder collects one worker's measurements. It is not safe for concurrent
// use: every worker has its own, merged at the end with merge.
type recorder struct {
	samples []time.Duration
	ops     int64 // successful operations in the window (recorded or not)
	errs    int64 // failed operations in the window
	limit   int   // samples kept at most; 0 means maxSamplesPerWorker
}

// add records one successful operation of latency d.
func (r *recorder) add(d time.Duration) {
	r.ops++
	limit := r.limit
	if limit == 0 {
		limit = maxSamplesPerWorker
	}
	if len(r.samples) < limit {
		r.samples = append(r.samples, d)
	}
}

// fail records one failed operation.
func (r *recorder) fail() { r.errs++ }

// merge returns the union of the recorders' measurements.
func merge(rs []*recorder) *recorder {
	out := &recorder{}
	n := 0
	for _, r := range rs {
		n += len(r.samples)
	}
	out.samples = make([]time.Duration, 0, n)
	for _, r := range rs {
		out.samples = append(out.samples, r.samples...)
		out.ops += r.ops
		out.errs += r.errs
	}
	return out
}

// Summary is what a measurement window yields: throughput and latency
// percentiles of the successful operations.
type Summary struct {
	Ops        int64         // successful operations in the window
	Errors     int64         // failed operations in the window
	Elapsed    time.Duration // length of the window
	Throughput float64       // Ops per second of Elapsed
	P50, P99   time.Duration // latency percentiles (nearest rank)
	Max        time.Duration
}

// summarize computes the Summary of samples over a window of length
// elapsed. ops may exceed len(samples) (see maxSamplesPerWorker). samples
// is sorted in place.
func summarize(samples []time.Duration, ops, errs int64, elapsed time.Duration) Summary {
	s := Summary{Ops: ops, Errors: errs, Elapsed: elapsed}
	if elapsed > 0 {
		s.Throughput = float64(ops) / elapsed.Seconds()
	}
	if len(samples) == 0 {
		return s
	}
	slices.Sort(samples)
	s.P50 = percentile(samples, 0.50)
	s.P99 = percentile(samples, 0.99)
	s.Max = samples[len(samples)-1]
	return s
}

// percentile returns the q-quantile (0 < q <= 1) of sorted by the nearest
// rank method: the smallest sample such that at least q of all samples are
// at or below it. It is an observed value, never an interpolation, so a
// p99 of 100 samples is the 99th smallest. Zero for no samples.
func percentile(sorted []time.Duration, q float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if q <= 0 {
		return sorted[0]
	}
	if q >= 1 {
		return sorted[n-1]
	}
	rank := int(math.Ceil(q*float64(n))) - 1
	return sorted[max(0, min(rank, n-1))]
}

// ms converts a duration to milliseconds as a float (JSON and tables).
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
