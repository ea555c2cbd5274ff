package main

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	cases := []struct {
		q    float64
		want time.Duration
	}{
		{0.50, 50 * time.Millisecond},
		{0.99, 99 * time.Millisecond},
		{1.00, 100 * time.Millisecond},
		{0.001, 1 * time.Millisecond},
		{0, 1 * time.Millisecond},
	}
	for _, c := range cases {
		if got := percentile(ds, c.q); got != c.want {
			t.Errorf("percentile(1..100 ms, %v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
	one := []time.Duration{7 * time.Millisecond}
	if p50, p99 := percentile(one, 0.5), percentile(one, 0.99); p50 != one[0] || p99 != one[0] {
		t.Errorf("one sample: p50 %v p99 %v, want both %v", p50, p99, one[0])
	}
	// Ten samples: p99 is the largest (rank ceil(9.9) = 10), p50 the 5th.
	ten := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p50, p99 := percentile(ten, 0.5), percentile(ten, 0.99); p50 != 5 || p99 != 10 {
		t.Errorf("ten samples: p50 %v p99 %v, want 5 and 10", p50, p99)
	}
}

func TestSummarizeSortsAndComputesThroughput(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 1000; i++ {
		ds = append(ds, time.Duration(i)*time.Microsecond)
	}
	rand.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	s := summarize(ds, 1000, 3, 2*time.Second)
	if s.Throughput != 500 {
		t.Errorf("throughput %v, want 500/s", s.Throughput)
	}
	if s.P50 != 500*time.Microsecond || s.P99 != 990*time.Microsecond || s.Max != time.Millisecond {
		t.Errorf("p50 %v p99 %v max %v, want 500µs 990µs 1ms", s.P50, s.P99, s.Max)
	}
	if s.Errors != 3 || s.Ops != 1000 {
		t.Errorf("ops %d errors %d", s.Ops, s.Errors)
	}
	if z := summarize(nil, 0, 0, 0); z.Throughput != 0 || z.P50 != 0 {
		t.Errorf("empty summary %+v", z)
	}
}

func TestRecorderLimitAndMerge(t *testing.T) {
	a := &recorder{limit: 2}
	for range 5 {
		a.add(time.Millisecond)
	}
	a.fail()
	b := &recorder{}
	b.add(3 * time.Millisecond)
	m := merge([]*recorder{a, b})
	if m.ops != 6 || m.errs != 1 || len(m.samples) != 3 {
		t.Errorf("merged ops %d errs %d samples %d, want 6, 1, 3 (the limit keeps 2 of a's 5)", m.ops, m.errs, len(m.samples))
	}
}
