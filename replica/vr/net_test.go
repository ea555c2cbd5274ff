package vr

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// This file is the in-test network of paper_test.go: Nodes built with
// NewNode, whose Ready each replica carries out in the order package
// replica's Driver does (early messages; a PersistAsync write queued, its
// Persisted reported once it is durable; otherwise the queued writes
// first, then snapshot, truncation, entries, hard state; messages;
// Committed; Advance), and a loop that delivers the messages in the order
// they were sent. Time is the network's clock, passed in Tick; nothing
// here reads a real clock.

// disk is what a replica has made durable: what NewNode gets after a
// restart.
type disk struct {
	hs       HardState
	snap     *SnapshotMeta
	snapData []byte
	entries  []Entry // after snap, contiguous
}

func (d *disk) lastIndex() uint64 {
	if len(d.entries) > 0 {
		return d.entries[len(d.entries)-1].Index
	}
	if d.snap != nil {
		return d.snap.Index
	}
	return 0
}

// write carries out steps 1–4 of a Ready (or a queued write) on the disk;
// it fails the test when the entries do not follow the log.
func (d *disk) write(t *testing.T, id uint64, snap *Snapshot, truncFrom uint64, es []Entry, hs *HardState) {
	t.Helper()
	if snap != nil {
		m := snap.Meta.Clone()
		d.snap, d.snapData, d.entries = &m, slices.Clone(snap.Data), nil
	}
	if truncFrom > 0 {
		k := 0
		for k < len(d.entries) && d.entries[k].Index < truncFrom {
			k++
		}
		d.entries = d.entries[:k]
	}
	for _, e := range es {
		if e.Index != d.lastIndex()+1 {
			t.Fatalf("replica %d: disk write of entry %d after %d", id, e.Index, d.lastIndex())
		}
		e.Data = slices.Clone(e.Data)
		d.entries = append(d.entries, e)
	}
	if hs != nil {
		d.hs = *hs
	}
}

func (d *disk) persisted() Persisted {
	p := Persisted{HardState: d.hs, Entries: slices.Clone(d.entries)}
	if d.snap != nil {
		m := d.snap.Clone()
		p.Snapshot = &m
	}
	return p
}

// queuedWrite is a PersistAsync Ready's write not yet durable.
type queuedWrite struct {
	entries    []Entry
	hs         *HardState
	last, view uint64
}

type testReplica struct {
	id   uint64
	cfg  Config
	node *Node
	disk disk
	// holdAsync keeps PersistAsync writes queued (a slow disk) until
	// release; queued holds them, and busy a Ready that must wait for
	// them (the Driver is Busy then: it takes no input).
	holdAsync bool
	queued    []queuedWrite
	busy      *Ready
	// crashed: the process is gone (its peer port refuses: PeerGone);
	// isolated: it runs but no message reaches it or leaves it.
	crashed, isolated bool
	// applied is every entry handed out in Committed since the last
	// restart or snapshot install, by index.
	applied map[uint64]Entry
}

type network struct {
	t    *testing.T
	now  int64
	cfg  Config
	reps map[uint64]*testReplica
	ids  []uint64
	// inflight are the messages sent and not yet delivered, in order.
	inflight []Message
	// sent logs every message sent (delivered or not), for assertions.
	sent []Message
	// drop, when set, loses the messages it returns true for.
	drop func(m *Message) bool
	// committed is every entry any replica applied, by index: two
	// replicas applying different entries at one index fail the test.
	committed map[uint64]Entry
}

// testConfig is the timing of the tests: the defaults, named so that
// waits are derived from them.
func testConfig() Config { return DefaultConfig() }

// newNetwork starts a new cell of voters ids (entry 1 is its
// configuration; the first id is the primary of view 0).
func newNetwork(t *testing.T, ids ...uint64) *network {
	t.Helper()
	members := make(Members, len(ids))
	for i, id := range ids {
		members[i] = Member{ID: id}
	}
	nw := &network{t: t, now: int64(time.Hour), cfg: testConfig(), reps: map[uint64]*testReplica{}, committed: map[uint64]Entry{}}
	for _, id := range ids {
		cfg := nw.cfg
		cfg.ID, cfg.InitialMembers = id, members
		nw.addReplica(cfg, Persisted{})
	}
	nw.flush()
	nw.tick() // the primary's first heartbeat (lease round)
	return nw
}

// addReplica starts a replica from p (empty: a new one).
func (nw *network) addReplica(cfg Config, p Persisted) *testReplica {
	nw.t.Helper()
	node, err := NewNode(cfg, p, nw.now)
	if err != nil {
		nw.t.Fatalf("NewNode(%d): %v", cfg.ID, err)
	}
	r := &testReplica{id: cfg.ID, cfg: cfg, node: node, applied: map[uint64]Entry{}}
	if old := nw.reps[cfg.ID]; old != nil {
		r.disk = old.disk
	}
	nw.reps[cfg.ID] = r
	if !slices.Contains(nw.ids, cfg.ID) {
		nw.ids = append(nw.ids, cfg.ID)
		slices.Sort(nw.ids)
	}
	nw.ready(r)
	return r
}

// restart stops replica id (its queued writes that were not durable are
// lost) and starts it again from its disk.
func (nw *network) restart(id uint64) *testReplica {
	nw.t.Helper()
	r := nw.reps[id]
	r.queued, r.busy = nil, nil
	nw.inflight = slices.DeleteFunc(nw.inflight, func(m Message) bool { return m.To == id })
	return nw.addReplica(r.cfg, r.disk.persisted())
}

func (nw *network) node(id uint64) *Node { return nw.reps[id].node }

func (nw *network) info(id uint64) Info { return nw.reps[id].node.Info() }

// ready carries out every Ready of r, as the Driver does.
func (nw *network) ready(r *testReplica) {
	nw.t.Helper()
	for r.busy == nil && r.node.HasReady() {
		rd := r.node.Ready()
		nw.send(rd.EarlyMessages)
		if rd.PersistAsync {
			w := queuedWrite{entries: rd.Entries, hs: rd.HardState, last: rd.Last(), view: r.node.View()}
			r.apply(nw, rd.Committed)
			r.node.Advance()
			if len(w.entries) > 0 || w.hs != nil {
				r.queued = append(r.queued, w)
				if !r.holdAsync {
					nw.persistQueued(r)
				}
			}
			continue
		}
		if len(r.queued) > 0 && r.holdAsync {
			r.busy = &rd // waits for the queued writes
			return
		}
		nw.finish(r, &rd)
	}
}

// persistQueued makes r's queued writes durable and reports them.
func (nw *network) persistQueued(r *testReplica) {
	ws := r.queued
	r.queued = nil
	for _, w := range ws {
		r.disk.write(nw.t, r.id, nil, 0, w.entries, w.hs)
	}
	for _, w := range ws {
		if w.last > 0 {
			r.node.Persisted(w.last, w.view)
		}
	}
}

// finish carries out a Ready without PersistAsync, after the queued
// writes (whose Persisted come after Advance, as in the Driver).
func (nw *network) finish(r *testReplica, rd *Ready) {
	ws := r.queued
	r.queued = nil
	for _, w := range ws {
		r.disk.write(nw.t, r.id, nil, 0, w.entries, w.hs)
	}
	r.disk.write(nw.t, r.id, rd.Snapshot, rd.TruncateFrom, rd.Entries, rd.HardState)
	if rd.Snapshot != nil {
		r.applied = map[uint64]Entry{}
	}
	for i := range rd.Messages {
		if m := &rd.Messages[i]; m.Type == MsgSnapshot && r.disk.snap != nil && m.Snapshot != nil && m.Snapshot.Index == r.disk.snap.Index {
			m.SnapshotData = slices.Clone(r.disk.snapData)
		}
	}
	nw.send(rd.Messages)
	r.apply(nw, rd.Committed)
	r.node.Advance()
	for _, w := range ws {
		if w.last > 0 {
			r.node.Persisted(w.last, w.view)
		}
	}
}

// release lets r's held disk writes complete, and holds no more.
func (nw *network) release(id uint64) {
	r := nw.reps[id]
	r.holdAsync = false
	if rd := r.busy; rd != nil {
		r.busy = nil
		nw.finish(r, rd)
	} else {
		nw.persistQueued(r)
	}
	nw.ready(r)
	nw.deliver()
}

func (r *testReplica) apply(nw *network, es []Entry) {
	for _, e := range es {
		if c, ok := nw.committed[e.Index]; ok && (c.View != e.View || c.Type != e.Type || string(c.Data) != string(e.Data)) {
			nw.t.Fatalf("replica %d applied entry %d of view %d (%q); another applied view %d (%q)", r.id, e.Index, e.View, e.Data, c.View, c.Data)
		}
		nw.committed[e.Index] = e
		r.applied[e.Index] = e
	}
}

func (nw *network) send(ms []Message) {
	nw.sent = append(nw.sent, ms...)
	nw.inflight = append(nw.inflight, ms...)
}

// lost reports whether m is lost on its way.
func (nw *network) lost(m *Message) bool {
	from, to := nw.reps[m.From], nw.reps[m.To]
	return from == nil || to == nil || from.crashed || from.isolated || to.crashed || to.isolated || (nw.drop != nil && nw.drop(m))
}

// step gives r one message (or none) as the Driver does: Step, then Tick
// with the clock, the Suspect check, and every Ready.
func (nw *network) step(r *testReplica, m *Message) {
	nw.t.Helper()
	if m != nil {
		_ = r.node.Step(*m)
	}
	r.node.Tick(nw.now)
	if id, ok := r.node.Suspect(); ok {
		if p := nw.reps[id]; p != nil && p.crashed {
			r.node.PeerGone(id)
		}
	}
	nw.ready(r)
}

// deliver delivers messages until none is left that can be delivered
// (a busy replica's wait).
func (nw *network) deliver() {
	nw.t.Helper()
	for steps := 0; ; steps++ {
		if steps > 1_000_000 {
			nw.t.Fatal("the network does not settle")
		}
		i := slices.IndexFunc(nw.inflight, func(m Message) bool { r := nw.reps[m.To]; return r == nil || r.busy == nil })
		if i < 0 {
			return
		}
		m := nw.inflight[i]
		nw.inflight = slices.Delete(nw.inflight, i, i+1)
		if nw.lost(&m) {
			continue
		}
		nw.step(nw.reps[m.To], &m)
	}
}

// flush carries out every replica's Ready and delivers what follows.
func (nw *network) flush() {
	for _, id := range nw.ids {
		nw.ready(nw.reps[id])
	}
	nw.deliver()
}

// tickStep is how far the clock moves per tick: half a heartbeat, as
// replica.Replicated ticks.
func (nw *network) tickStep() int64 { return int64(nw.cfg.HeartbeatInterval) / 2 }

// tick moves the clock by one tick step and ticks every running replica.
func (nw *network) tick() {
	nw.now += nw.tickStep()
	for _, id := range nw.ids {
		if r := nw.reps[id]; !r.crashed && r.busy == nil {
			nw.step(r, nil)
		}
	}
	nw.deliver()
}

// run ticks for d.
func (nw *network) run(d time.Duration) {
	for end := nw.now + int64(d); nw.now < end; {
		nw.tick()
	}
}

// runUntil ticks until cond holds, for at most limit.
func (nw *network) runUntil(limit time.Duration, what string, cond func() bool) {
	nw.t.Helper()
	for end := nw.now + int64(limit); !cond(); nw.tick() {
		if nw.now >= end {
			nw.t.Fatalf("not within %v: %s", limit, what)
		}
	}
}

// propose proposes cmds on replica id and delivers what follows.
func (nw *network) propose(id uint64, cmds ...string) uint64 {
	nw.t.Helper()
	bs := make([][]byte, len(cmds))
	for i, c := range cmds {
		bs[i] = []byte(c)
	}
	first, err := nw.node(id).Propose(bs...)
	if err != nil {
		nw.t.Fatalf("Propose on %d: %v", id, err)
	}
	nw.ready(nw.reps[id])
	nw.deliver()
	return first
}

// primary returns the normal primary of the highest view among the
// running replicas, or 0.
func (nw *network) primary() uint64 {
	var best, bestView uint64
	for _, id := range nw.ids {
		r := nw.reps[id]
		if !r.crashed && r.node.IsPrimary() && (best == 0 || r.node.View() > bestView) {
			best, bestView = id, r.node.View()
		}
	}
	return best
}

// waitPrimary runs until some replica other than the excluded ones is the
// normal primary and every running voter is normal in its view.
func (nw *network) waitPrimary(limit time.Duration, except ...uint64) uint64 {
	nw.t.Helper()
	nw.runUntil(limit, "a new primary that every running replica follows", func() bool {
		p := nw.primary()
		if p == 0 || slices.Contains(except, p) {
			return false
		}
		for _, id := range nw.ids {
			r := nw.reps[id]
			if !r.crashed && !r.isolated && (r.node.View() != nw.node(p).View() || r.node.Info().Status != StatusNormal) {
				return false
			}
		}
		return true
	})
	return nw.primary()
}

// sentOf returns the messages of type typ sent since sent was last reset
// (from: 0 for any sender).
func (nw *network) sentOf(typ MsgType, from uint64) []Message {
	var out []Message
	for _, m := range nw.sent {
		if m.Type == typ && (from == 0 || m.From == from) {
			out = append(out, m)
		}
	}
	return out
}

// logOf returns the entries of replica id's disk as "index/view" strings
// after index from, for comparing logs.
func (nw *network) logOf(id uint64) []string {
	var out []string
	for _, e := range nw.reps[id].disk.entries {
		out = append(out, fmt.Sprintf("%d/%d:%s", e.Index, e.View, e.Data))
	}
	return out
}

// viewChangeLimit bounds a failover on silence in the tests: the
// view-change timeout, two more for a view whose primary is also gone,
// and a lease, with room for the heartbeats in between.
func (nw *network) viewChangeLimit() time.Duration {
	return 4*nw.cfg.ViewChangeTimeout + 2*nw.cfg.LeaseDuration
}
