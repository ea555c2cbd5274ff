package sicheck

import (
	"container/heap"
	"fmt"
	"sort"
)

// collector keeps the first limit anomalies in output order, in a heap
// whose top is the last one kept, so that memory stays bounded however
// many anomalies a history has and details are formatted only for
// anomalies that may be kept.
type collector struct {
	limit int
	h     anomalyHeap
}

// add keeps a, with Detail formatted from format and args, if it is among
// the first limit anomalies so far.
func (c *collector) add(a Anomaly, format string, args ...any) {
	if c.limit <= 0 {
		return
	}
	if len(c.h) < c.limit {
		a.Detail = fmt.Sprintf(format, args...)
		heap.Push(&c.h, a)
		return
	}
	if !less(a, c.h[0]) {
		return
	}
	a.Detail = fmt.Sprintf(format, args...)
	c.h[0] = a
	heap.Fix(&c.h, 0)
}

// result returns the anomalies kept, in output order; nil if none.
func (c *collector) result() []Anomaly {
	if len(c.h) == 0 {
		return nil
	}
	out := []Anomaly(c.h)
	sort.Slice(out, func(i, j int) bool { return less(out[i], out[j]) })
	return out
}

// less is the output order: by Txn, Kind, Key, then Other.
func less(a, b Anomaly) bool {
	switch {
	case a.Txn != b.Txn:
		return a.Txn < b.Txn
	case a.Kind != b.Kind:
		return a.Kind < b.Kind
	case a.Key != b.Key:
		return a.Key < b.Key
	}
	return a.Other < b.Other
}

// anomalyHeap is a max-heap in output order (container/heap).
type anomalyHeap []Anomaly

func (h anomalyHeap) Len() int           { return len(h) }
func (h anomalyHeap) Less(i, j int) bool { return less(h[j], h[i]) }
func (h anomalyHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *anomalyHeap) Push(x any)        { *h = append(*h, x.(Anomaly)) }
func (h *anomalyHeap) Pop() any {
	old := *h
	a := old[len(old)-1]
	*h = old[:len(old)-1]
	return a
}

// report adds an anomaly of kind about txn, other and key.
func (c *checker) report(kind Kind, txn, other int64, key, format string, args ...any) {
	c.out.add(Anomaly{Kind: kind, Txn: txn, Other: other, Key: key}, format, args...)
}
