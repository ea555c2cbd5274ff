package vr

import (
	"testing"
	"time"
)

// BenchmarkCommit measures the core alone (no disk, no network): a
// 3-replica cluster committing batches of 100 64-byte commands.
func BenchmarkCommit(b *testing.B) {
	t := &testing.T{}
	c := newCluster(t, 3, nil)
	c.run(100 * time.Millisecond)
	p := c.primary()
	cmd := make([]byte, 64)
	batch := make([][]byte, 100)
	for i := range batch {
		batch[i] = cmd
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := p.n.Propose(batch...); err != nil {
			b.Fatal(err)
		}
		c.pump(p)
		c.deliver()
		if len(p.applied) > 10_000 {
			for _, tn := range c.nodes {
				tn.applied, tn.state = tn.applied[:0], tn.state[:0]
				if a := tn.n.Info().Applied; a > 0 {
					tn.disk.entries = tn.disk.entries[:0]
					if meta, err := tn.n.SnapshotMeta(a); err == nil {
						_ = tn.n.Compact(meta)
					}
				}
			}
		}
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "entries/s")
}
