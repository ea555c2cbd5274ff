package vr

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"
)

// A tiny deterministic cluster for unit tests: instant disks, a FIFO
// network that can cut links, and a shared clock. The full simulator with
// faults and the real state machine is in ../sim.

type tdisk struct {
	hs      HardState
	snap    *SnapshotMeta
	snapDat []byte
	entries []Entry
}

type tnode struct {
	id      uint64
	n       *Node
	disk    tdisk
	up      bool
	applied []Entry // everything applied, in order (snapshot installs reset it)
	state   []byte  // "state machine": the concatenation of applied command data
}

type cluster struct {
	t     *testing.T
	cfg   Config
	ids   []uint64
	nodes map[uint64]*tnode
	now   int64
	queue []Message
	cut   map[[2]uint64]bool
}

func newCluster(t *testing.T, size int, tweak func(*Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, nodes: map[uint64]*tnode{}, cut: map[[2]uint64]bool{}, now: 1_000_000_000}
	var members Members
	for i := 1; i <= size; i++ {
		members = append(members, Member{ID: uint64(i), Addr: fmt.Sprintf("r%d", i)})
		c.ids = append(c.ids, uint64(i))
	}
	c.cfg = Config{InitialMembers: members}
	if tweak != nil {
		tweak(&c.cfg)
	}
	for _, id := range c.ids {
		tn := &tnode{id: id}
		c.nodes[id] = tn
		c.start(tn)
	}
	return c
}

func (c *cluster) start(tn *tnode) {
	cfg := c.cfg
	cfg.ID = tn.id
	p := Persisted{HardState: tn.disk.hs, Snapshot: tn.disk.snap, Entries: slices.Clone(tn.disk.entries)}
	n, err := NewNode(cfg, p, c.now)
	if err != nil {
		c.t.Fatalf("start %d: %v", tn.id, err)
	}
	tn.n, tn.up = n, true
	tn.applied = nil
	tn.state = nil
	if tn.disk.snap != nil {
		tn.state = slices.Clone(tn.disk.snapDat)
	}
	c.pump(tn)
}

func (c *cluster) crash(id uint64) { c.nodes[id].up = false; c.nodes[id].n = nil }

func (c *cluster) pump(tn *tnode) {
	for tn.up && tn.n.HasReady() {
		rd := tn.n.Ready()
		d := &tn.disk
		if rd.Snapshot != nil {
			m := rd.Snapshot.Meta
			d.snap, d.snapDat, d.entries = &m, rd.Snapshot.Data, nil
			tn.state = slices.Clone(rd.Snapshot.Data)
		}
		c.queue = append(c.queue, rd.EarlyMessages...)
		if rd.TruncateFrom > 0 {
			for len(d.entries) > 0 && d.entries[len(d.entries)-1].Index >= rd.TruncateFrom {
				d.entries = d.entries[:len(d.entries)-1]
			}
		}
		d.entries = append(d.entries, rd.Entries...)
		if rd.HardState != nil {
			d.hs = *rd.HardState
		}
		for _, m := range rd.Messages {
			if m.Type == MsgSnapshot {
				m.SnapshotData = d.snapDat
			}
			c.queue = append(c.queue, m)
		}
		for _, e := range rd.Committed {
			tn.applied = append(tn.applied, e)
			if e.Type == EntryCommand {
				tn.state = append(tn.state, e.Data...)
				tn.state = append(tn.state, ';')
			}
		}
		view := tn.n.Info().View
		tn.n.Advance()
		if rd.PersistAsync && rd.Last() > 0 {
			// This driver writes synchronously: the entries are durable.
			tn.n.Persisted(rd.Last(), view)
		}
	}
}

// snapshot makes tn store a snapshot at its applied index and compact.
func (c *cluster) snapshot(tn *tnode) {
	a := tn.n.Info().Applied
	meta, err := tn.n.SnapshotMeta(a)
	if err != nil {
		c.t.Fatal(err)
	}
	tn.disk.snap, tn.disk.snapDat = &meta, slices.Clone(tn.state)
	for len(tn.disk.entries) > 0 && tn.disk.entries[0].Index <= a {
		tn.disk.entries = tn.disk.entries[1:]
	}
	if err := tn.n.Compact(meta); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) deliver() {
	for len(c.queue) > 0 {
		q := c.queue
		c.queue = nil
		for _, m := range q {
			tn := c.nodes[m.To]
			if !tn.up || c.cut[[2]uint64{m.From, m.To}] {
				continue
			}
			if err := tn.n.Step(m); err != nil {
				c.t.Fatalf("step %v: %v", m.String(), err)
			}
			c.pump(tn)
		}
	}
}

// run advances time by d in 5 ms steps, ticking and delivering.
func (c *cluster) run(d time.Duration) {
	for end := c.now + int64(d); c.now < end; {
		c.now += int64(5 * time.Millisecond)
		for _, id := range c.ids {
			if tn := c.nodes[id]; tn.up {
				tn.n.Tick(c.now)
				c.pump(tn)
			}
		}
		c.deliver()
	}
}

func (c *cluster) primary() *tnode {
	var p *tnode
	for _, id := range c.ids {
		if tn := c.nodes[id]; tn.up && tn.n.Info().IsPrimary {
			if p != nil && p.n.Info().View == tn.n.Info().View {
				c.t.Fatalf("two primaries in view %d", tn.n.Info().View)
			}
			if p == nil || tn.n.Info().View > p.n.Info().View {
				p = tn
			}
		}
	}
	return p
}

func (c *cluster) propose(data string) uint64 {
	c.t.Helper()
	p := c.primary()
	if p == nil {
		c.t.Fatal("no primary")
	}
	i, err := p.n.Propose([]byte(data))
	if err != nil {
		c.t.Fatal(err)
	}
	c.pump(p)
	return i
}

// checkAgree checks that every live replica applied the same prefix.
func (c *cluster) checkAgree() {
	c.t.Helper()
	var ref *tnode
	for _, id := range c.ids {
		tn := c.nodes[id]
		if !tn.up {
			continue
		}
		if ref == nil || tn.n.Info().Applied > ref.n.Info().Applied {
			ref = tn
		}
	}
	for _, id := range c.ids {
		tn := c.nodes[id]
		if tn.up && tn.n.Info().Applied == ref.n.Info().Applied && !bytes.Equal(tn.state, ref.state) {
			c.t.Fatalf("replicas %d and %d applied %d entries with different states:\n%q\n%q", tn.id, ref.id, ref.n.Info().Applied, tn.state, ref.state)
		}
	}
}

func TestReplicateAndCommit(t *testing.T) {
	for _, size := range []int{1, 3, 5} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := newCluster(t, size, nil)
			c.run(100 * time.Millisecond)
			for i := range 50 {
				c.propose(fmt.Sprint("x", i))
				if i%7 == 0 {
					c.run(10 * time.Millisecond)
				}
			}
			c.run(200 * time.Millisecond)
			for _, id := range c.ids {
				if got := c.nodes[id].n.Info().Applied; got != 51 {
					t.Errorf("replica %d applied %d, want 51", id, got)
				}
			}
			c.checkAgree()
			if p := c.primary(); !p.n.CanServeReads(c.now) {
				t.Errorf("primary cannot serve reads: %+v", p.n.Info())
			}
		})
	}
}

func TestFailoverAndRejoin(t *testing.T) {
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := newCluster(t, size, nil)
			c.run(100 * time.Millisecond)
			for i := range 20 {
				c.propose(fmt.Sprint("a", i))
			}
			c.run(50 * time.Millisecond)
			old := c.primary()
			c.crash(old.id)
			killed := c.now
			for c.primary() == nil || !c.primary().n.CanServeReads(c.now) {
				c.run(5 * time.Millisecond)
				if c.now-killed > int64(2*time.Second) {
					t.Fatalf("no new primary 2 s after the crash")
				}
			}
			t.Logf("failover took %v", time.Duration(c.now-killed))
			if d := time.Duration(c.now - killed); d > time.Second {
				t.Errorf("failover took %v", d)
			}
			for i := range 20 {
				c.propose(fmt.Sprint("b", i))
			}
			c.run(100 * time.Millisecond)
			c.start(old)
			c.run(time.Second)
			for _, id := range c.ids {
				if got := c.nodes[id].n.Info().Applied; got != 41 {
					t.Errorf("replica %d applied %d, want 41 (%+v)", id, got, c.nodes[id].n.Info())
				}
			}
			c.checkAgree()
		})
	}
}

func TestCatchUpBySnapshot(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.run(100 * time.Millisecond)
	c.crash(3)
	for i := range 30 {
		c.propose(fmt.Sprint("s", i))
	}
	c.run(100 * time.Millisecond)
	for _, id := range []uint64{1, 2} {
		c.snapshot(c.nodes[id])
	}
	for i := range 5 {
		c.propose(fmt.Sprint("t", i))
	}
	c.run(50 * time.Millisecond)
	c.start(c.nodes[3])
	c.run(time.Second) // a lost snapshot is resent after 2 view-change timeouts
	if got := c.nodes[3].n.Info(); got.Applied != 36 || got.SnapshotIndex != 31 || got.Status != StatusNormal {
		t.Fatalf("replica 3 after catch-up: %+v", got)
	}
	c.checkAgree()
}

func TestNoSpuriousViewChangeWithOneDeafBackup(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.run(100 * time.Millisecond)
	// Replica 3 stops hearing the primary (one-way): it probes, but
	// replica 2 still hears the primary and says no.
	c.cut[[2]uint64{1, 3}] = true
	c.run(2 * time.Second)
	if v := c.nodes[1].n.Info().View; v != 0 || !c.nodes[1].n.Info().IsPrimary {
		t.Fatalf("view changed to %d", v)
	}
	delete(c.cut, [2]uint64{1, 3})
	c.propose("after")
	c.run(200 * time.Millisecond)
	if got := c.nodes[3].n.Info(); got.Applied != 2 || got.Status != StatusNormal {
		t.Fatalf("replica 3 did not rejoin: %+v", got)
	}
}

func TestIsolatedPrimaryLosesLeaseBeforeNewView(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.run(200 * time.Millisecond)
	for _, id := range []uint64{2, 3} {
		c.cut[[2]uint64{1, id}] = true
		c.cut[[2]uint64{id, 1}] = true
	}
	leaseEnd := int64(-1)
	newView := int64(-1)
	for range 400 {
		c.run(5 * time.Millisecond)
		if leaseEnd < 0 && !c.nodes[1].n.LeaseValid(c.now) {
			leaseEnd = c.now
		}
		for _, id := range []uint64{2, 3} {
			if newView < 0 && c.nodes[id].n.Info().IsPrimary {
				newView = c.now
			}
		}
	}
	if leaseEnd < 0 || newView < 0 || leaseEnd > newView {
		t.Fatalf("old lease ended at %d, new view at %d", leaseEnd, newView)
	}
}

func TestProposeErrors(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.MaxUncommittedEntries = 4 })
	c.run(50 * time.Millisecond)
	_, err := c.nodes[2].n.Propose([]byte("x"))
	if np, ok := err.(*NotPrimaryError); !ok || np.Primary != 1 || !np.Known {
		t.Fatalf("backup Propose: %v", err)
	}
	p := c.nodes[1].n
	if _, err := p.Propose(make([]byte, MaxEntryBytes+1)); err != ErrTooLarge {
		t.Fatalf("large: %v", err)
	}
	if _, err := p.Propose([]byte("1"), []byte("2"), []byte("3"), []byte("4")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Propose([]byte("5")); err != ErrOverloaded {
		t.Fatalf("overload: %v", err)
	}
}

// A replica that joins a view change at once (here: one left behind in
// view-change status rejoins a healthy view) must still not let the new
// view form before the old primary's lease is over.
func TestLeaseHoldsAgainstImmediateViewChange(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.run(200 * time.Millisecond)
	p := c.nodes[1].n
	if !p.LeaseValid(c.now) {
		t.Fatal("primary has no lease")
	}
	// Replica 3 hears nothing more; replica 2 is pushed into view 1 as if
	// replica 3 had asked, while the primary still holds its lease.
	for _, id := range []uint64{2, 3} {
		c.cut[[2]uint64{1, id}] = true
		c.cut[[2]uint64{id, 1}] = true
	}
	if err := c.nodes[2].n.Step(Message{Type: MsgStartViewChange, From: 3, To: 2, View: 1}); err != nil {
		t.Fatal(err)
	}
	c.pump(c.nodes[2])
	c.deliver()
	var leaseEnd, formed int64
	for range 200 {
		c.run(2 * time.Millisecond)
		if leaseEnd == 0 && !p.LeaseValid(c.now) {
			leaseEnd = c.now
		}
		if formed == 0 && (c.nodes[2].n.Info().IsPrimary || c.nodes[3].n.Info().IsPrimary) {
			formed = c.now
		}
	}
	if formed == 0 || leaseEnd == 0 || formed < leaseEnd {
		t.Fatalf("new view formed at %d, old lease ended at %d", formed, leaseEnd)
	}
	t.Logf("lease ended %v before the new view formed", time.Duration(formed-leaseEnd))
}
