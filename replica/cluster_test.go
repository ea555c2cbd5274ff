package replica

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"slices"
	"testing"
	"time"

	"github.com/chubbygo/chubby/replica/vr"
)

// A tiny deterministic cluster for unit tests of the protocol through the
// driver that ships: instant disks (memDisk), a FIFO network that can cut
// links, and a shared clock. The full simulator with faults and the real
// state machine is cell/sim.

// memDisk is an instant Disk: every write is done when Write returns; a
// snapshot save lands at once and is reported by the cluster after the
// call that started it.
type memDisk struct {
	hs      vr.HardState
	snap    *vr.SnapshotMeta
	snapDat []byte
	entries []vr.Entry
	saved   *SnapshotResult

	chunk     int // snapshot chunk size; default memChunk
	stageInfo ChunkInfo
	stageMeta vr.SnapshotMeta
	staged    [][]byte
}

// memChunk is memDisk's default snapshot chunk: small, so that transfers
// in these tests take many chunks.
const memChunk = 8

func (d *memDisk) Write(w *Write) (bool, error) {
	if w.Snapshot != nil {
		m := w.Snapshot.Meta
		data := slices.Clone(w.Snapshot.Data)
		if data == nil {
			if d.stageInfo.Index != m.Index || len(d.staged) != int(d.stageInfo.Chunks) {
				return true, fmt.Errorf("install of snapshot %d, which is not staged", m.Index)
			}
			data, d.staged, d.stageInfo = slices.Concat(d.staged...), nil, ChunkInfo{}
		}
		d.snap, d.snapDat, d.entries = &m, data, nil
	}
	if w.TruncateFrom > 0 {
		for len(d.entries) > 0 && d.entries[len(d.entries)-1].Index >= w.TruncateFrom {
			d.entries = d.entries[:len(d.entries)-1]
		}
	}
	d.entries = append(d.entries, w.Entries...)
	if w.HardState != nil {
		d.hs = *w.HardState
	}
	return true, nil
}

func (d *memDisk) SaveSnapshot(meta vr.SnapshotMeta, encode func() ([]byte, error)) {
	data, err := encode()
	if err != nil {
		d.saved = &SnapshotResult{Meta: meta, Err: err}
		return
	}
	d.snap, d.snapDat = &meta, slices.Clone(data)
	for len(d.entries) > 0 && d.entries[0].Index <= meta.Index {
		d.entries = d.entries[1:]
	}
	d.saved = &SnapshotResult{Meta: meta, Bytes: len(data)}
}

func (d *memDisk) FinishSnapshot() SnapshotResult {
	r := *d.saved
	d.saved = nil
	return r
}

func (d *memDisk) LoadSnapshot(index uint64) ([]byte, error) {
	if d.snap == nil || d.snap.Index != index {
		return nil, fmt.Errorf("no snapshot at %d", index)
	}
	return d.snapDat, nil
}

func (d *memDisk) chunkSize() int {
	if d.chunk > 0 {
		return d.chunk
	}
	return memChunk
}

func (d *memDisk) ReadSnapshotChunk(index uint64, n uint32) ([]byte, ChunkInfo, error) {
	if d.snap == nil || d.snap.Index != index {
		return nil, ChunkInfo{}, fmt.Errorf("no snapshot at %d", index)
	}
	cs := d.chunkSize()
	info := ChunkInfo{Index: index, Chunks: uint32(max(1, (len(d.snapDat)+cs-1)/cs)),
		Length: uint64(len(d.snapDat)), Sum: crc32.Checksum(d.snapDat, castagnoli)}
	if n >= info.Chunks {
		return nil, info, fmt.Errorf("snapshot %d has %d chunks", index, info.Chunks)
	}
	off := int(n) * cs
	return slices.Clone(d.snapDat[off:min(off+cs, len(d.snapDat))]), info, nil
}

func (d *memDisk) StageSnapshotChunk(meta vr.SnapshotMeta, info ChunkInfo, n uint32, data []byte) (uint32, error) {
	if n == 0 {
		d.stageInfo, d.stageMeta, d.staged = info, meta, nil
	}
	if d.stageInfo != info || len(d.staged) != int(n) {
		return 0, fmt.Errorf("%w: chunk %d does not follow what is staged", ErrCorrupt, n)
	}
	d.staged = append(d.staged, slices.Clone(data))
	if len(d.staged) == int(info.Chunks) {
		all := slices.Concat(d.staged...)
		if uint64(len(all)) != info.Length || crc32.Checksum(all, castagnoli) != info.Sum || d.stageMeta.View != meta.View {
			d.staged, d.stageInfo = nil, ChunkInfo{}
			return 0, fmt.Errorf("%w: staged snapshot fails its checks", ErrCorrupt)
		}
	}
	return uint32(len(d.staged)), nil
}

func (d *memDisk) Staged() (ChunkInfo, uint32, error) { return d.stageInfo, uint32(len(d.staged)), nil }

// catSM is a state machine whose state is the concatenation of the
// commands applied, each followed by ';'.
type catSM struct{ state []byte }

func (s *catSM) Apply(index uint64, e []byte) any {
	s.state = append(append(s.state, e...), ';')
	return index
}
func (s *catSM) Snapshot() func() ([]byte, error) {
	b := slices.Clone(s.state)
	return func() ([]byte, error) { return b, nil }
}
func (s *catSM) Restore(index uint64, b []byte) error {
	s.state = slices.Clone(b)
	return nil
}

type tnode struct {
	id   uint64
	d    *Driver
	disk memDisk
	sm   *catSM
	up   bool
	// paused: the process is stopped (starved of CPU, SIGSTOP): it is
	// neither ticked nor given messages, which wait in held.
	paused bool
	held   []vr.Message
}

func (tn *tnode) n() *vr.Node { return tn.d.Node() }

type cluster struct {
	t     testing.TB
	cfg   vr.Config
	snap  uint64
	ids   []uint64
	nodes map[uint64]*tnode
	now   int64
	queue []vr.Message
	cut   map[[2]uint64]bool
	// drop, if set, loses the messages it returns true for.
	drop func(m vr.Message) bool
	// perStep, if set, bounds the messages delivered per 5 ms step (the
	// rest wait): a slow network.
	perStep int
	// checks are the CheckPeer calls of the last step: {asker, peer}. A
	// peer that is down (and a link that is not cut) answers with a
	// refusal, PeerGone, at the next step, as a dial of a dead process's
	// port would.
	checks [][2]uint64
}

// queueTransport puts messages on the cluster's queue.
type queueTransport struct{ c *cluster }

func (q queueTransport) Send(ms []vr.Message) { q.c.queue = append(q.c.queue, ms...) }

func newCluster(t testing.TB, size int, tweak func(*vr.Config)) *cluster {
	return newClusterSnap(t, size, 1<<40, tweak)
}

// newClusterSnap is newCluster with replicas that snapshot every
// snapEvery applied entries (DriverConfig.SnapshotEvery).
func newClusterSnap(t testing.TB, size int, snapEvery uint64, tweak func(*vr.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, nodes: map[uint64]*tnode{}, cut: map[[2]uint64]bool{}, now: 1_000_000_000, snap: snapEvery}
	var members vr.Members
	for i := 1; i <= size; i++ {
		members = append(members, vr.Member{ID: uint64(i), ClientAddr: fmt.Sprintf("r%d", i)})
		c.ids = append(c.ids, uint64(i))
	}
	c.cfg = vr.Config{InitialMembers: members}
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
	p := vr.Persisted{HardState: tn.disk.hs, Snapshot: tn.disk.snap, Entries: slices.Clone(tn.disk.entries)}
	tn.sm = &catSM{}
	d, err := NewDriver(cfg, p, tn.disk.snapDat, tn.sm, &tn.disk, queueTransport{c}, func() int64 { return c.now },
		DriverConfig{ID: tn.id, SnapshotEvery: c.snap, Logger: quiet(),
			CheckPeer: func(peer uint64) { c.checks = append(c.checks, [2]uint64{tn.id, peer}) }})
	if err != nil {
		c.t.Fatalf("start %d: %v", tn.id, err)
	}
	tn.d, tn.up = d, true
	d.Start()
	c.settle(tn)
}

// settle reports a snapshot save the last call started.
func (c *cluster) settle(tn *tnode) {
	for tn.up && tn.disk.saved != nil {
		r := *tn.disk.saved
		tn.disk.saved = nil
		tn.d.SnapshotSaved(r)
	}
}

func (c *cluster) crash(id uint64) { c.nodes[id].up = false; c.nodes[id].d = nil }

func (c *cluster) deliver() {
	budget := c.perStep
	for len(c.queue) > 0 {
		q := c.queue
		c.queue = nil
		if c.perStep > 0 {
			if budget == 0 {
				c.queue = q
				return
			}
			n := min(budget, len(q))
			budget -= n
			c.queue, q = q[n:], q[:n]
		}
		for _, m := range q {
			tn := c.nodes[m.To]
			if !tn.up || c.cut[[2]uint64{m.From, m.To}] || (c.drop != nil && c.drop(m)) {
				continue
			}
			if tn.paused {
				tn.held = append(tn.held, m)
				continue
			}
			tn.d.Step([]vr.Message{m})
			c.settle(tn)
		}
	}
}

// run advances time by d in 5 ms steps, ticking and delivering.
func (c *cluster) run(d time.Duration) {
	for end := c.now + int64(d); c.now < end; {
		c.now += int64(5 * time.Millisecond)
		checks := c.checks
		c.checks = nil
		for _, ch := range checks {
			asker, peer := c.nodes[ch[0]], c.nodes[ch[1]]
			if asker.up && peer != nil && !peer.up && !c.cut[ch] && !c.cut[[2]uint64{ch[1], ch[0]}] {
				asker.d.PeerGone(ch[1])
				c.settle(asker)
			}
		}
		for _, id := range c.ids {
			if tn := c.nodes[id]; tn.up && !tn.paused {
				tn.d.Tick()
				c.settle(tn)
			}
		}
		c.deliver()
	}
}

func (c *cluster) primary() *tnode {
	var p *tnode
	for _, id := range c.ids {
		if tn := c.nodes[id]; tn.up && tn.n().IsPrimary() {
			if p != nil && p.n().View() == tn.n().View() {
				c.t.Fatalf("two primaries in view %d", tn.n().View())
			}
			if p == nil || tn.n().View() > p.n().View() {
				p = tn
			}
		}
	}
	return p
}

// answer records a proposal's outcome.
type answer struct{ res *ProposalResult }

func (a *answer) Answer(r ProposalResult) { *a.res = r }

func (c *cluster) proposeOn(tn *tnode, data ...string) []*ProposalResult {
	entries := make([][]byte, len(data))
	replies := make([]Reply, len(data))
	out := make([]*ProposalResult, len(data))
	for i, s := range data {
		entries[i] = []byte(s)
		out[i] = &ProposalResult{Err: errPending}
		replies[i] = &answer{out[i]}
	}
	tn.d.Propose(entries, replies)
	c.settle(tn)
	return out
}

var errPending = fmt.Errorf("pending")

func (c *cluster) propose(data string) {
	c.t.Helper()
	p := c.primary()
	if p == nil {
		c.t.Fatal("no primary")
	}
	if r := c.proposeOn(p, data)[0]; r.Err != nil && r.Err != errPending {
		c.t.Fatal(r.Err)
	}
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
		if ref == nil || tn.d.Applied() > ref.d.Applied() {
			ref = tn
		}
	}
	for _, id := range c.ids {
		tn := c.nodes[id]
		if tn.up && tn.d.Applied() == ref.d.Applied() && !bytes.Equal(tn.sm.state, ref.sm.state) {
			c.t.Fatalf("replicas %d and %d applied %d entries with different states:\n%q\n%q", tn.id, ref.id, ref.d.Applied(), tn.sm.state, ref.sm.state)
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
				if got := c.nodes[id].d.Applied(); got != 51 {
					t.Errorf("replica %d applied %d, want 51", id, got)
				}
			}
			c.checkAgree()
			if p := c.primary(); !p.n().CanServeReads(c.now) {
				t.Errorf("primary cannot serve reads: %+v", p.n().Info())
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
			for c.primary() == nil || !c.primary().n().CanServeReads(c.now) {
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
				if got := c.nodes[id].d.Applied(); got != 41 {
					t.Errorf("replica %d applied %d, want 41 (%+v)", id, got, c.nodes[id].n().Info())
				}
			}
			c.checkAgree()
		})
	}
}

func TestCatchUpBySnapshot(t *testing.T) {
	c := newClusterSnap(t, 3, 20, nil) // replicas 1 and 2 snapshot at 22 and 25 applied entries
	c.run(100 * time.Millisecond)
	c.crash(3)
	for i := range 30 {
		c.propose(fmt.Sprint("s", i))
	}
	c.run(3 * vr.DefaultConfig().HeartbeatInterval) // the backup learns the commit on the next heartbeat
	for _, id := range []uint64{1, 2} {
		if s := c.nodes[id].n().Info().SnapshotIndex; s < 20 {
			t.Fatalf("replica %d has no snapshot past 20 (at %d)", id, s)
		}
	}
	for i := range 5 {
		c.propose(fmt.Sprint("t", i))
	}
	c.run(50 * time.Millisecond)
	c.start(c.nodes[3])
	c.run(time.Second) // a lost snapshot is resent after 2 view-change timeouts
	if got := c.nodes[3].n().Info(); got.Applied != 36 || got.SnapshotIndex < 20 || got.Status != vr.StatusNormal {
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
	if v := c.nodes[1].n().View(); v != 0 || !c.nodes[1].n().IsPrimary() {
		t.Fatalf("view changed to %d", v)
	}
	delete(c.cut, [2]uint64{1, 3})
	c.propose("after")
	c.run(200 * time.Millisecond)
	if got := c.nodes[3].n().Info(); got.Applied != 2 || got.Status != vr.StatusNormal {
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
		if leaseEnd < 0 && !c.nodes[1].n().LeaseValid(c.now) {
			leaseEnd = c.now
		}
		for _, id := range []uint64{2, 3} {
			if newView < 0 && c.nodes[id].n().IsPrimary() {
				newView = c.now
			}
		}
	}
	if leaseEnd < 0 || newView < 0 || leaseEnd > newView {
		t.Fatalf("old lease ended at %d, new view at %d", leaseEnd, newView)
	}
}

func TestProposeErrors(t *testing.T) {
	c := newCluster(t, 3, func(cfg *vr.Config) { cfg.MaxUncommittedEntries = 4 })
	c.run(50 * time.Millisecond)
	r := c.proposeOn(c.nodes[2], "x")[0]
	if nm, ok := r.Err.(*NotMasterError); !ok || nm.Primary != 1 || !nm.Known {
		t.Fatalf("backup Propose: %v", r.Err)
	}
	p := c.nodes[1]
	for _, r := range c.proposeOn(p, "1", "2", "3", "4") {
		if r.Err != errPending {
			t.Fatal(r.Err)
		}
	}
	if r := c.proposeOn(p, "5")[0]; r.Err != ErrOverloaded {
		t.Fatalf("overload: %v", r.Err)
	}
}

// A replica that joins a view change at once (here: one left behind in
// view-change status rejoins a healthy view) must still not let the new
// view form before the old primary's lease is over.
func TestLeaseHoldsAgainstImmediateViewChange(t *testing.T) {
	// A lease long enough to outlast SuspectAfter, so that the evidence
	// comes while the old primary still holds it.
	c := newCluster(t, 3, func(cfg *vr.Config) {
		cfg.SuspectAfter = vr.DefaultConfig().HeartbeatInterval
		cfg.LeaseDuration = 600 * time.Millisecond
	})
	c.run(200 * time.Millisecond)
	p := c.nodes[1].n()
	if !p.LeaseValid(c.now) {
		t.Fatal("primary has no lease")
	}
	// The primary is cut off, and the backups are told, wrongly, that its
	// process is gone (a firewall that refuses connections would say so)
	// as soon as they suspect it: they start a view change at once, while
	// the primary still holds its lease.
	for _, id := range []uint64{2, 3} {
		c.cut[[2]uint64{1, id}] = true
		c.cut[[2]uint64{id, 1}] = true
	}
	c.run(c.cfg.SuspectAfter)
	for _, id := range []uint64{2, 3} {
		c.nodes[id].d.PeerGone(1)
	}
	c.deliver()
	if v := c.nodes[2].n().Info(); v.Status != vr.StatusViewChange {
		t.Fatalf("replica 2 did not start a view change on the evidence: %+v", v)
	}
	var leaseEnd, formed int64
	for range 200 {
		c.run(2 * time.Millisecond)
		if leaseEnd == 0 && !p.LeaseValid(c.now) {
			leaseEnd = c.now
		}
		if formed == 0 && (c.nodes[2].n().IsPrimary() || c.nodes[3].n().IsPrimary()) {
			formed = c.now
		}
	}
	if formed == 0 || leaseEnd == 0 || formed < leaseEnd {
		t.Fatalf("new view formed at %d, old lease ended at %d", formed, leaseEnd)
	}
	t.Logf("lease ended %v before the new view formed", time.Duration(formed-leaseEnd))
}

// BenchmarkCommit measures the core and the driver (instant disks, no
// network): a 3-replica cluster committing batches of 100 64-byte
// commands.
func BenchmarkCommit(b *testing.B) {
	c := newClusterSnap(b, 3, 10_000, nil)
	c.run(100 * time.Millisecond)
	p := c.primary()
	cmd := make([]byte, 64)
	batch := make([]string, 100)
	for i := range batch {
		batch[i] = string(cmd)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		c.proposeOn(p, batch...)
		c.deliver()
		for _, tn := range c.nodes {
			if len(tn.sm.state) > 1<<20 {
				tn.sm.state = tn.sm.state[:0]
			}
		}
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "entries/s")
}

// A primary that cannot hear the backups (its inbound links are cut; they
// still hear its heartbeats, so none of them starts a view change) holds no
// lease and can serve nothing: it must step down so that another replica
// takes over, and the cell must serve again with a lease.
func TestDeafPrimaryStepsDown(t *testing.T) {
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := newCluster(t, size, nil)
			c.run(200 * time.Millisecond)
			old := c.primary()
			for _, id := range c.ids {
				if id != old.id {
					c.cut[[2]uint64{id, old.id}] = true
				}
			}
			cut := c.now
			var served int64
			for c.now-cut < int64(3*time.Second) {
				c.run(5 * time.Millisecond)
				if p := c.primary(); p != nil && p.id != old.id && p.n().CanServeReads(c.now) {
					served = c.now
					break
				}
			}
			if served == 0 {
				t.Fatalf("3 s after the primary went deaf no other replica serves: old primary %+v", old.n().Info())
			}
			if old.n().IsPrimary() {
				t.Fatalf("the deaf primary still says it is the primary of view %d", old.n().View())
			}
			t.Logf("a new primary served %v after the primary went deaf", time.Duration(served-cut))
			c.propose("after")
			c.run(100 * time.Millisecond)
			c.checkAgree()
		})
	}
}
