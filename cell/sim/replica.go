package sim

import (
	"errors"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/chubbygo/chubby/fs"
	rp "github.com/chubbygo/chubby/replica"
	"github.com/chubbygo/chubby/replica/vr"
)

// disk is what a replica has written durably: it survives crashes;
// nothing else does.
type disk struct {
	hs       vr.HardState
	snap     *vr.SnapshotMeta
	snapData []byte
	entries  []vr.Entry
	staged   *staged // a snapshot being received
}

// staged is a snapshot received chunk by chunk, not yet installed.
type staged struct {
	meta   vr.SnapshotMeta
	info   rp.ChunkInfo
	chunks [][]byte
}

func (s *staged) data() []byte { return slices.Concat(s.chunks...) }

func (d *disk) lastIndex() uint64 {
	if n := len(d.entries); n > 0 {
		return d.entries[n-1].Index
	}
	if d.snap != nil {
		return d.snap.Index
	}
	return 0
}

// replica is one simulated replica process: the real rp.Driver (with
// vr inside) on a simulated disk and network and a drifting clock, the
// real fs state machine, and the master's duties (master.go) on top.
type replica struct {
	w     *world
	id    uint64
	up    bool
	epoch int // incarnation: bumped on crash and start; stale events check it

	d    *rp.Driver
	disk disk
	sm   *machine
	m    *masterSim

	rate   float64 // clock rate against real time, within 1±MaxClockDrift
	offset int64

	// The disk: writes in flight in order (a batch of joined async writes
	// is one job), and when it is free of everything queued.
	diskQ         []*diskJob
	diskFree      int64
	slowDiskUntil int64
	diskFailing   bool // the next write fails (then the replica fail-stops)
	diskBroken    bool // a write failed: nothing more reaches the disk
	saving        *snapSave

	// Inputs that wait: the driver is busy with its disk (only
	// completions reach it), or the process is paused (nothing does).
	waiting   []func()
	paused    bool
	pausedQ   []func()
	snapEvery uint64 // DriverConfig.SnapshotEvery
	stats     vr.Stats
	// join: a spare, started with an empty log (vr.Config.Join) until a
	// primary adds it.
	join bool
}

// diskJob is one write on the simulated disk: a driver write, or several
// async ones joined.
type diskJob struct {
	writes  []*rp.Write
	startAt int64
	async   bool
	view    uint64
}

// snapSave is a snapshot being stored in the background.
type snapSave struct {
	meta vr.SnapshotMeta
	data []byte
}

func newReplica(w *world, id uint64, snapEvery uint64) *replica {
	return &replica{w: w, id: id, rate: w.drift(), offset: w.rng.Int64N(1 << 40), snapEvery: snapEvery}
}

// local is the replica's monotonic clock in nanoseconds.
func (r *replica) local() int64 { return r.offset + int64(float64(r.w.now)*r.rate) }

// realAfter converts a duration on the replica's clock to real time.
func (r *replica) realAfter(d int64) int64 { return int64(float64(d)/r.rate) + 1 }

// wallMs is the master's wall clock stamped into commands.
func (r *replica) wallMs() int64 { return 1_700_000_000_000 + r.local()/ms }

func (r *replica) describe() string {
	if !r.up {
		return fmt.Sprintf("r%d down", r.id)
	}
	i := r.d.Node().Info()
	s := fmt.Sprintf("r%d v%d %v lnv%d last%d commit%d applied%d snap%d prim%v serving%v", r.id, i.View, i.Status, i.LastNormalView, i.LastOp, i.Commit, i.Applied, i.SnapshotIndex, i.IsPrimary, r.m.serving)
	if r.paused {
		s += " paused"
	}
	return s
}

func (r *replica) start() {
	w := r.w
	r.epoch++
	cfg := w.cfg
	cfg.ID = r.id
	if r.join {
		cfg.InitialMembers, cfg.Join = nil, true
	}
	p := vr.Persisted{HardState: r.disk.hs, Entries: slices.Clone(r.disk.entries)}
	if r.disk.snap != nil {
		m := *r.disk.snap
		p.Snapshot = &m
	}
	r.sm = &machine{r: r, st: fs.New(fs.DefaultLimits())}
	r.m = newMasterSim(r)
	r.diskQ, r.diskFree, r.saving = nil, 0, nil
	r.waiting, r.paused, r.pausedQ = nil, false, nil
	r.diskFailing, r.diskBroken = false, false
	ep := r.epoch
	d, err := rp.NewDriver(cfg, p, r.disk.snapData, r.sm, simDisk{r}, simTransport{r}, r.local, rp.DriverConfig{
		ID: r.id, SnapshotEvery: r.snapEvery, Logger: quietLogger,
		OnRole: func(view uint64, primary bool) { r.m.roleChanged(view, primary) },
		OnFail: func(err error) {
			// Fail-stop: the process exits (as chubbyd does) once the
			// input that failed is over; the operator restarts it on its
			// disk.
			w.res.DiskFails++
			w.after(0, func() {
				if r.epoch == ep && r.up {
					r.crash("disk failed: " + err.Error())
					w.restartLater(r, w.between(50*ms, 800*ms))
				}
			})
		},
		OnApply:   func(e vr.Entry) { w.check.onApply(r, e) },
		CheckPeer: func(id uint64) { r.checkPeer(id) },
	})
	if err != nil {
		w.fail("replica %d cannot start from its disk: %v", r.id, err)
		return
	}
	r.d = d
	r.up = true
	w.tracef("r%d start: %s", r.id, r.describe())
	r.scheduleTick()
	r.do(func() { d.Start() }, true)
}

// crash stops the replica. The writes in flight reach the disk in order:
// some prefix of them whole, the next one torn, as the write contract
// allows.
func (r *replica) crash(why string) {
	w := r.w
	if !r.up {
		return
	}
	var inflight []*rp.Write
	for _, j := range r.diskQ {
		if !r.diskBroken {
			inflight = append(inflight, j.writes...)
		}
	}
	if len(inflight) > 0 {
		k := w.intn(len(inflight) + 1)
		for _, wr := range inflight[:k] {
			r.persist(wr, 4)
		}
		stage := 0
		if k < len(inflight) {
			stage = w.intn(4)
			r.persist(inflight[k], stage)
		}
		w.tracef("r%d %s while writing (%d of %d writes whole, the next torn at stage %d)", r.id, why, k, len(inflight), stage)
	} else {
		w.tracef("r%d %s", r.id, why)
	}
	if r.saving != nil && !r.diskBroken && w.chance(0.5) {
		r.storeSnapshot() // it landed just before the crash
	}
	st := r.d.Node().Stats()
	r.stats.ViewChanges += st.ViewChanges
	r.stats.CarriedOn += st.CarriedOn
	r.stats.SnapshotsInstalled += st.SnapshotsInstalled
	r.m.crashed()
	r.up, r.paused = false, false
	r.epoch++
	r.d, r.sm, r.waiting, r.pausedQ, r.diskQ, r.saving = nil, nil, nil, nil, nil, nil
	w.res.Crashes++
}

// pause stops the process from running anything for d of real time
// (SIGSTOP), then resumes it: what arrived meanwhile is handled in order,
// each handler reading the clock as it runs.
func (r *replica) pause(d int64) {
	r.paused = true
	r.w.res.Pauses++
	r.w.tracef("fault: replica %d paused for %v", r.id, d/ms)
	ep := r.epoch
	r.w.after(d, func() {
		if r.epoch == ep && r.paused {
			r.resume()
		}
	})
}

func (r *replica) resume() {
	r.paused = false
	r.w.tracef("r%d resumes with %d inputs queued", r.id, len(r.pausedQ))
	q := r.pausedQ
	r.pausedQ = nil
	for _, f := range q {
		if !r.up || r.paused {
			return
		}
		f()
	}
}

func (r *replica) scheduleTick() {
	ep := r.epoch
	w := r.w
	w.after(r.realAfter(10*ms)+w.between(0, ms), func() {
		if r.epoch != ep || !r.up {
			return
		}
		r.do(func() { r.d.Tick(); r.m.poll() }, true)
		r.scheduleTick()
	})
}

// do runs fn in the process: at once, or once the process may — it is
// paused, or fn feeds the driver an input (feeds) while the driver waits
// for its disk. Then what was waiting for the driver runs.
func (r *replica) do(fn func(), feeds bool) {
	if !r.up {
		return
	}
	if r.paused {
		r.pausedQ = append(r.pausedQ, func() { r.do(fn, feeds) })
		return
	}
	if feeds && r.d.Busy() {
		r.waiting = append(r.waiting, fn)
		return
	}
	fn()
	for r.up && !r.paused && !r.d.Busy() && len(r.waiting) > 0 && !r.w.done {
		f := r.waiting[0]
		r.waiting = r.waiting[1:]
		f()
	}
}

// checkPeer models PeerTransport.CheckPeer, a dial of the peer's port: a
// refusal comes back after a network delay when the peer's process is
// down (crashed, not merely paused: a stopped process's kernel still
// accepts) and the link between the two carries anything; otherwise
// nothing does.
func (r *replica) checkPeer(id uint64) {
	w, ep := r.w, r.epoch
	if id == 0 || int(id) > len(w.replicas) || w.net.blocked[[2]uint64{r.id, id}] || w.net.blocked[[2]uint64{id, r.id}] {
		return
	}
	peer := w.replicas[id-1]
	w.after(2*w.net.delay(), func() {
		if r.epoch == ep && r.up && !peer.up {
			r.do(func() { r.d.PeerGone(id); r.m.poll() }, true)
		}
	})
}

func (r *replica) receive(m vr.Message) {
	r.do(func() { r.d.Step([]vr.Message{m}); r.m.poll() }, true)
}

// --- the simulated disk ---

// simDisk is the driver's Disk: one queue of writes, a snapshot store
// landing in the background.
type simDisk struct{ r *replica }

func (s simDisk) Write(wr *rp.Write) (bool, error) {
	r, w := s.r, s.r.w
	lat := w.between(5_000, 30_000)
	if wr.Sync {
		lat = w.between(100_000, 1_500_000)
		if w.chance(0.01) {
			lat += w.between(5*ms, 20*ms)
		}
		if w.now < r.slowDiskUntil {
			lat += w.between(10*ms, 100*ms)
		}
	}
	if wr.Async {
		// Like the driver's disk writer, an async write joins the async
		// write queued before it if the disk has not started that one.
		if n := len(r.diskQ); n > 0 && r.diskQ[n-1].async && r.diskQ[n-1].startAt > w.now && r.diskQ[n-1].view == wr.View {
			r.diskQ[n-1].writes = append(r.diskQ[n-1].writes, wr)
			return false, nil
		}
	}
	start := max(w.now, r.diskFree)
	r.diskFree = start + lat
	j := &diskJob{writes: []*rp.Write{wr}, startAt: start, async: wr.Async, view: wr.View}
	r.diskQ = append(r.diskQ, j)
	ep := r.epoch
	w.after(r.diskFree-w.now, func() {
		if r.epoch == ep {
			r.jobDone(j)
		}
	})
	return false, nil
}

// jobDone finishes the oldest write job: it is on disk (or it failed), and
// the driver hears so.
func (r *replica) jobDone(j *diskJob) {
	w := r.w
	if len(r.diskQ) == 0 || r.diskQ[0] != j {
		w.fail("replica %d: a disk write finished out of order", r.id)
		return
	}
	r.diskQ = r.diskQ[1:]
	var err error
	switch {
	case r.diskBroken:
		err = errors.New("simulated disk failure: the disk failed before")
	case r.diskFailing:
		err = errors.New("simulated disk failure: file too large")
		r.diskBroken = true
		// What of it reached the disk: some prefix, torn.
		k := w.intn(len(j.writes) + 1)
		for _, wr := range j.writes[:k] {
			r.persist(wr, 4)
		}
		if k < len(j.writes) {
			r.persist(j.writes[k], w.intn(4))
		}
		w.tracef("r%d disk write failed", r.id)
	default:
		for _, wr := range j.writes {
			r.persist(wr, 4)
		}
	}
	r.do(func() {
		for _, wr := range j.writes {
			r.d.Written(wr, err)
		}
		r.m.poll()
	}, false)
}

// persist writes stages of a write to disk: 1 the snapshot, 2 the
// truncation and a prefix of the entries, 3 all entries, 4 the hard state.
func (r *replica) persist(wr *rp.Write, stage int) {
	w := r.w
	d := &r.disk
	if stage >= 1 && wr.Snapshot != nil {
		m := wr.Snapshot.Meta
		m.Members = m.Members.Clone()
		data := wr.Snapshot.Data
		if data == nil {
			st := d.staged
			if st == nil || st.info.Index != m.Index || len(st.chunks) != int(st.info.Chunks) {
				w.fail("replica %d installs snapshot %d, which is not staged", r.id, m.Index)
				return
			}
			data, d.staged = st.data(), nil
		}
		d.snap, d.snapData, d.entries = &m, data, nil
		w.check.onSnapshot(r, m.Index, data)
	}
	if stage < 2 {
		return
	}
	if wr.TruncateFrom > 0 {
		for len(d.entries) > 0 && d.entries[len(d.entries)-1].Index >= wr.TruncateFrom {
			d.entries = d.entries[:len(d.entries)-1]
		}
	}
	es := wr.Entries
	if stage == 2 {
		es = es[:w.intn(len(es)+1)]
	}
	for _, e := range es {
		if e.Index != d.lastIndex()+1 {
			w.fail("replica %d: a write appends entry %d after %d on disk", r.id, e.Index, d.lastIndex())
			return
		}
		d.entries = append(d.entries, e)
		w.check.onPersist(r, e)
	}
	if stage >= 4 && wr.HardState != nil {
		d.hs = *wr.HardState
	}
}

func (s simDisk) SaveSnapshot(meta vr.SnapshotMeta, encode func() ([]byte, error)) {
	r, w := s.r, s.r.w
	data, err := encode()
	if err != nil {
		w.fail("replica %d: snapshot encoding failed: %v", r.id, err)
		return
	}
	w.check.onSnapshot(r, meta.Index, data)
	r.saving = &snapSave{meta: meta, data: data}
	ep := r.epoch
	w.after(w.between(ms, 200*ms), func() {
		if r.epoch != ep || r.saving == nil || r.saving.meta.Index != meta.Index {
			return
		}
		res := r.storeSnapshot()
		r.do(func() { r.d.SnapshotSaved(res); r.m.poll() }, false)
	})
}

func (s simDisk) FinishSnapshot() rp.SnapshotResult { return s.r.storeSnapshot() }

func (s simDisk) LoadSnapshot(index uint64) ([]byte, error) {
	d := &s.r.disk
	if d.snap == nil || d.snap.Index != index {
		return nil, fmt.Errorf("no snapshot at %d", index)
	}
	return d.snapData, nil
}

func (s simDisk) ReadSnapshotChunk(index uint64, n uint32) ([]byte, rp.ChunkInfo, error) {
	d := &s.r.disk
	if d.snap == nil || d.snap.Index != index {
		return nil, rp.ChunkInfo{}, fmt.Errorf("no snapshot at %d", index)
	}
	cs := s.r.w.chunkBytes
	info := rp.ChunkInfo{Index: index, Chunks: uint32(max(1, (len(d.snapData)+cs-1)/cs)),
		Length: uint64(len(d.snapData)), Sum: crc32.Checksum(d.snapData, castagnoli)}
	if n >= info.Chunks {
		return nil, info, fmt.Errorf("snapshot %d has %d chunks", index, info.Chunks)
	}
	off := int(n) * cs
	return slices.Clone(d.snapData[off:min(off+cs, len(d.snapData))]), info, nil
}

func (s simDisk) StageSnapshotChunk(meta vr.SnapshotMeta, info rp.ChunkInfo, n uint32, data []byte) (uint32, error) {
	r, d := s.r, &s.r.disk
	if r.diskBroken || r.diskFailing {
		r.diskBroken = true
		return 0, errors.New("simulated disk failure: staging a snapshot chunk")
	}
	if n == 0 {
		meta.Members = meta.Members.Clone()
		d.staged = &staged{meta: meta, info: info}
	}
	st := d.staged
	if st == nil || st.info != info || len(st.chunks) != int(n) {
		return 0, fmt.Errorf("%w: chunk %d does not follow what is staged", rp.ErrCorrupt, n)
	}
	st.chunks = append(st.chunks, slices.Clone(data))
	if len(st.chunks) == int(info.Chunks) {
		all := st.data()
		if uint64(len(all)) != info.Length || crc32.Checksum(all, castagnoli) != info.Sum ||
			st.meta.View != meta.View || !slices.Equal(st.meta.Members, meta.Members) {
			d.staged = nil
			return 0, fmt.Errorf("%w: the snapshot received at %d fails its checks", rp.ErrCorrupt, info.Index)
		}
	}
	return uint32(len(st.chunks)), nil
}

func (s simDisk) Staged() (rp.ChunkInfo, uint32, error) {
	if st := s.r.disk.staged; st != nil {
		return st.info, uint32(len(st.chunks)), nil
	}
	return rp.ChunkInfo{}, 0, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// storeSnapshot puts the snapshot being saved on disk: it replaces the
// old one and the log entries it covers go.
func (r *replica) storeSnapshot() rp.SnapshotResult {
	s := r.saving
	r.saving = nil
	meta := s.meta
	if r.diskBroken {
		return rp.SnapshotResult{Meta: meta, Err: errors.New("simulated disk failure")}
	}
	r.disk.snap, r.disk.snapData = &meta, s.data
	for len(r.disk.entries) > 0 && r.disk.entries[0].Index <= meta.Index {
		r.disk.entries = r.disk.entries[1:]
	}
	r.disk.entries = slices.Clip(r.disk.entries)
	r.w.tracef("r%d stored snapshot %d", r.id, meta.Index)
	return rp.SnapshotResult{Meta: meta, Bytes: len(s.data)}
}

// simTransport sends replica messages over the simulated network, after
// checking what the Ready contract promises about them.
type simTransport struct{ r *replica }

func (t simTransport) Send(ms []vr.Message) {
	r, w := t.r, t.r.w
	for _, m := range ms {
		switch m.Type {
		case vr.MsgSnapshotChunk, vr.MsgSnapshotChunkOK:
			// The driver's transfer: they repeat the view of the
			// MsgSnapshot or chunk they follow, not a claim about this
			// replica's disk.
		case vr.MsgProbe, vr.MsgProbeReply: // they name the view asked about
		case vr.MsgPrepare, vr.MsgCommit:
			// The primary's, sent before its own write (early) or after:
			// either way its view, as last normal view, is on disk.
			if m.View != r.disk.hs.View || r.disk.hs.LastNormalView != m.View {
				w.fail("replica %d sends %v with view %d, last normal %d on disk", r.id, m.String(), r.disk.hs.View, r.disk.hs.LastNormalView)
				return
			}
		default:
			if m.View > r.disk.hs.View {
				w.fail("replica %d sends %v with view %d on disk", r.id, m.String(), r.disk.hs.View)
				return
			}
		}
		if m.Type == vr.MsgPrepareOK && m.View != r.disk.hs.View {
			w.fail("replica %d acknowledges view %d with view %d on disk: %v", r.id, m.View, r.disk.hs.View, m.String())
			return
		}
		if m.Type == vr.MsgPrepareOK && m.Normal && r.disk.hs.LastNormalView != m.View {
			w.fail("replica %d says it is normal in view %d with last normal view %d on disk", r.id, m.View, r.disk.hs.LastNormalView)
			return
		}
		w.net.send(m)
	}
}

// --- the state machine ---

// machine is the fs state machine as the driver applies it, handing each
// command's effects to the master's duties (as cell's machine does).
type machine struct {
	r  *replica
	st *fs.State
	// clockAt is the instant (the replica's local clock) the state clock
	// reached its value, which a new master anchors its stamps at (as
	// cell's machine records it).
	clockAt int64
}

func (m *machine) Apply(index uint64, entry []byte) any {
	before := m.st.Now()
	res, fx, err := m.st.ApplyBytes(entry)
	if err != nil {
		m.r.w.fail("replica %d: entry %d does not decode: %v", m.r.id, index, err)
		return nil
	}
	if m.st.Now() != before {
		m.clockAt = m.r.local()
	}
	m.r.m.applied(fx)
	return res
}

func (m *machine) Snapshot() func() ([]byte, error) {
	b := m.st.Snapshot()
	return func() ([]byte, error) { return b, nil }
}

func (m *machine) Restore(index uint64, b []byte) error {
	st, err := fs.Restore(b, fs.DefaultLimits())
	if err != nil {
		return err
	}
	m.st, m.clockAt = st, m.r.local()
	m.r.w.check.onSnapshot(m.r, index, b)
	return nil
}
