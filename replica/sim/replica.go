package sim

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/replica/vr"
)

// disk is what a replica has fsynced: it survives crashes; nothing else
// does.
type disk struct {
	hs       vr.HardState
	snap     *vr.SnapshotMeta
	snapData []byte
	entries  []vr.Entry
}

func (d *disk) lastIndex() uint64 {
	if n := len(d.entries); n > 0 {
		return d.entries[n-1].Index
	}
	if d.snap != nil {
		return d.snap.Index
	}
	return 0
}

// replica is one simulated replica process: the vr core, the fs state
// machine, a disk, a drifting clock, and the driver loop of a real replica
// (Ready → persist → send → apply → Advance), with inputs queued while a
// Ready is being persisted.
type replica struct {
	w     *world
	id    uint64
	up    bool
	epoch int // bumped on crash and start; stale timers check it

	core    *vr.Node
	disk    disk
	fs      *fs.State
	applied uint64

	rate   float64 // clock rate against real time, within 1±MaxClockDrift
	offset int64

	busy bool
	cur  *vr.Ready
	// The disk writer: async writes (PersistAsync Readies) in flight, in
	// order, and when the disk is free of everything queued.
	diskQ         []asyncWrite
	diskFree      int64
	inbox         []func()
	pending       map[uint64]pendingReq // log index → the request proposed there
	snapEvery     uint64
	slowDiskUntil int64
	// A snapshot being stored in the background, and one stored while a
	// Ready was out, to compact after it.
	saving    *snapSave
	savedLate *vr.SnapshotMeta

	stats vr.Stats // summed over incarnations
}

// asyncWrite is a PersistAsync Ready's write in flight.
type asyncWrite struct {
	rd      vr.Ready
	view    uint64
	startAt int64 // the disk starts it then; until then later writes join it
}

// snapSave is a snapshot taken and not yet stored.
type snapSave struct {
	meta vr.SnapshotMeta
	data []byte
}

type pendingReq struct {
	q    request
	data []byte
}

func newReplica(w *world, id uint64, snapEvery uint64) *replica {
	eps := vr.MaxClockDrift
	rate := 1 - eps + 2*eps*w.rng.Float64()
	switch w.intn(4) { // often right at the bounds
	case 0:
		rate = 1 - eps
	case 1:
		rate = 1 + eps
	}
	return &replica{w: w, id: id, rate: rate, offset: w.rng.Int64N(1 << 40), snapEvery: snapEvery}
}

// local is the replica's monotonic clock in nanoseconds.
func (r *replica) local() int64 { return r.offset + int64(float64(r.w.now)*r.rate) }

// wallMs is the master's clock stamped into commands.
func (r *replica) wallMs() int64 { return 1_700_000_000_000 + r.local()/ms }

func (r *replica) describe() string {
	if !r.up {
		return fmt.Sprintf("r%d down", r.id)
	}
	i := r.core.Info()
	return fmt.Sprintf("r%d v%d %v lnv%d last%d commit%d applied%d snap%d prim%v", r.id, i.View, i.Status, i.LastNormalView, i.LastOp, i.Commit, i.Applied, i.SnapshotIndex, i.IsPrimary)
}

func (r *replica) start() {
	w := r.w
	r.epoch++
	cfg := w.cfg
	cfg.ID = r.id
	p := vr.Persisted{HardState: r.disk.hs, Entries: slices.Clone(r.disk.entries)}
	if r.disk.snap != nil {
		m := *r.disk.snap
		p.Snapshot = &m
	}
	core, err := vr.NewNode(cfg, p, r.local())
	if err != nil {
		w.fail("replica %d cannot start from its disk: %v", r.id, err)
		return
	}
	r.core = core
	r.fs = fs.New(fs.DefaultLimits())
	r.applied = 0
	if r.disk.snap != nil {
		st, err := fs.Restore(r.disk.snapData, fs.DefaultLimits())
		if err != nil {
			w.fail("replica %d cannot restore its snapshot: %v", r.id, err)
			return
		}
		r.fs, r.applied = st, r.disk.snap.Index
	}
	r.up, r.busy, r.cur, r.inbox = true, false, nil, nil
	r.diskQ, r.diskFree = nil, 0
	r.saving, r.savedLate = nil, nil
	r.pending = map[uint64]pendingReq{}
	w.tracef("r%d start: %s", r.id, r.describe())
	r.scheduleTick()
	r.pump()
}

// crash stops the replica. A Ready being persisted is torn: some prefix of
// its writes (in the order the contract gives) may have reached the disk.
func (r *replica) crash() {
	w := r.w
	if !r.up {
		return
	}
	// The writes in flight reach the disk in order: some prefix of them
	// whole, the next one torn.
	var inflight []*vr.Ready
	for i := range r.diskQ {
		inflight = append(inflight, &r.diskQ[i].rd)
	}
	if r.busy && r.cur != nil {
		inflight = append(inflight, r.cur)
	}
	if len(inflight) > 0 {
		k := w.intn(len(inflight) + 1)
		for _, rd := range inflight[:k] {
			r.persist(rd, 4)
		}
		stage := 0
		if k < len(inflight) {
			stage = w.intn(4)
			r.persist(inflight[k], stage)
		}
		w.tracef("r%d crash while persisting (%d of %d writes whole, the next torn at stage %d)", r.id, k, len(inflight), stage)
	} else {
		w.tracef("r%d crash", r.id)
	}
	r.diskQ = nil
	if r.saving != nil && w.chance(0.5) {
		r.storeSnapshot() // it landed just before the crash
	}
	r.saving, r.savedLate = nil, nil
	st := r.core.Stats()
	r.stats.ViewChanges += st.ViewChanges
	r.stats.SnapshotsInstalled += st.SnapshotsInstalled
	r.up = false
	r.epoch++
	r.core, r.fs, r.pending, r.inbox, r.cur, r.busy = nil, nil, nil, nil, nil, false
	w.res.Crashes++
}

func (r *replica) scheduleTick() {
	ep := r.epoch
	w := r.w
	w.after(int64(float64(10*ms)/r.rate)+w.between(0, ms), func() {
		if r.epoch != ep || !r.up {
			return
		}
		r.input(func() { r.core.Tick(r.local()) })
		r.scheduleTick()
	})
}

// input runs fn against the core now, or after the Ready in progress.
func (r *replica) input(fn func()) {
	if !r.up {
		return
	}
	if r.busy {
		r.inbox = append(r.inbox, fn)
		return
	}
	fn()
	r.pump()
}

func (r *replica) receive(m vr.Message) {
	r.input(func() {
		if err := r.core.Step(m); err != nil && !errors.Is(err, vr.ErrInvalidMessage) {
			r.w.fail("replica %d: step: %v", r.id, err)
		}
	})
}

// pump takes the next Ready and "persists" it for a simulated fsync time.
func (r *replica) pump() {
	w := r.w
	if !r.up || r.busy || w.done || !r.core.HasReady() {
		return
	}
	rd := r.core.Ready()
	if !rd.PersistAsync {
		r.busy, r.cur = true, &rd
	}
	if rd.Snapshot != nil && r.saving != nil {
		// The driver finishes the store in progress before it installs
		// one, and compacts for it after Advance (changing nothing: the
		// installed snapshot is newer).
		m := r.saving.meta
		r.storeSnapshot()
		r.savedLate = &m
	}
	// Early messages leave before the disk write: a crash during it leaves
	// backups holding entries this replica lost.
	for _, m := range rd.EarlyMessages {
		if m.Type != vr.MsgPrepare && m.Type != vr.MsgCommit {
			w.fail("replica %d sends %v early", r.id, m.String())
			return
		}
		if m.View != r.disk.hs.View || r.disk.hs.LastNormalView != m.View {
			w.fail("replica %d sends %v early with view %d, last normal %d on disk", r.id, m.String(), r.disk.hs.View, r.disk.hs.LastNormalView)
			return
		}
		w.net.send(m)
	}
	lat := w.between(5_000, 30_000)
	if rd.MustSync {
		lat = w.between(100_000, 1_500_000)
		if w.chance(0.01) {
			lat += w.between(5*ms, 20*ms)
		}
		if w.now < r.slowDiskUntil {
			lat += w.between(10*ms, 100*ms)
		}
	}
	// One disk: a write starts when the writes queued before it are done;
	// like the driver's disk writer, an async write joins the async write
	// queued before it if the disk has not started that one yet.
	ep := r.epoch
	if rd.PersistAsync {
		view := r.core.View()
		if n := len(r.diskQ); n > 0 && r.diskQ[n-1].startAt > w.now && r.diskQ[n-1].view == view && !r.busy {
			j := &r.diskQ[n-1]
			j.rd.Entries = append(j.rd.Entries, rd.Entries...)
			if rd.HardState != nil {
				j.rd.HardState = rd.HardState
			}
		} else {
			start := max(w.now, r.diskFree)
			r.diskFree = start + lat
			r.diskQ = append(r.diskQ, asyncWrite{rd: vr.Ready{Entries: rd.Entries, HardState: rd.HardState}, view: view, startAt: start})
			w.after(r.diskFree-w.now, func() {
				if r.epoch == ep {
					r.asyncDone()
				}
			})
		}
		// The driver goes on at once: apply, advance, next Ready.
		for _, e := range rd.Committed {
			r.apply(e)
			if w.done {
				return
			}
		}
		r.core.Advance()
		r.maybeSnapshot()
		r.pump()
		return
	}
	r.diskFree = max(w.now, r.diskFree) + lat
	w.after(r.diskFree-w.now, func() {
		if r.epoch == ep {
			r.complete(rd)
		}
	})
}

// asyncDone finishes the oldest async write: it is on disk, and the core
// hears so.
func (r *replica) asyncDone() {
	w := r.w
	if len(r.diskQ) == 0 {
		w.fail("replica %d: an async write finished with none in flight", r.id)
		return
	}
	a := r.diskQ[0]
	r.diskQ = r.diskQ[1:]
	r.persist(&a.rd, 4)
	if last := a.rd.Last(); last > 0 {
		r.input(func() { r.core.Persisted(last, a.view) })
	}
}

// persist writes stages of a Ready to disk: 1 the snapshot, 2 the
// truncation and a prefix of the entries, 3 all entries, 4 the hard state.
func (r *replica) persist(rd *vr.Ready, stage int) {
	w := r.w
	d := &r.disk
	if stage >= 1 && rd.Snapshot != nil {
		m := rd.Snapshot.Meta
		m.Members = m.Members.Clone()
		d.snap, d.snapData, d.entries = &m, rd.Snapshot.Data, nil
	}
	if stage < 2 {
		return
	}
	if rd.TruncateFrom > 0 {
		for len(d.entries) > 0 && d.entries[len(d.entries)-1].Index >= rd.TruncateFrom {
			d.entries = d.entries[:len(d.entries)-1]
		}
	}
	es := rd.Entries
	if stage == 2 {
		es = es[:w.intn(len(es)+1)]
	}
	for _, e := range es {
		if e.Index != d.lastIndex()+1 {
			w.fail("replica %d: Ready appends entry %d after %d on disk", r.id, e.Index, d.lastIndex())
			return
		}
		d.entries = append(d.entries, e)
		w.check.onPersist(r, e)
	}
	if stage >= 4 && rd.HardState != nil {
		d.hs = *rd.HardState
	}
}

// complete finishes a Ready after its fsync: the disk has it, messages go
// out, committed entries are applied, the core advances.
func (r *replica) complete(rd vr.Ready) {
	w := r.w
	r.persist(&rd, 4)
	if rd.Snapshot != nil {
		st, err := fs.Restore(rd.Snapshot.Data, fs.DefaultLimits())
		if err != nil {
			w.fail("replica %d: restore a received snapshot: %v", r.id, err)
			return
		}
		w.check.onSnapshot(r, rd.Snapshot.Meta.Index, rd.Snapshot.Data)
		r.fs, r.applied = st, rd.Snapshot.Meta.Index
		for i := range r.pending {
			if i <= r.applied {
				delete(r.pending, i)
			}
		}
		w.tracef("r%d installed snapshot %d", r.id, r.applied)
	}
	for _, m := range rd.Messages {
		// View state is on disk before it is acted on, and nothing is
		// acknowledged for an older view.
		switch m.Type {
		case vr.MsgProbe, vr.MsgProbeReply: // they name the view asked about
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
		if m.Type == vr.MsgSnapshot {
			if r.disk.snap != nil && r.disk.snap.Index > m.Snapshot.Index {
				// A newer snapshot was stored after the core chose this
				// one (a background store finished between two inputs
				// before this Ready): the driver finds it gone and skips
				// the message; the core sends again later.
				w.tracef("r%d skips sending snapshot %d: %d is stored", r.id, m.Snapshot.Index, r.disk.snap.Index)
				continue
			}
			if r.disk.snap == nil || r.disk.snap.Index != m.Snapshot.Index {
				w.fail("replica %d: asked to send snapshot %d, has %v", r.id, m.Snapshot.Index, r.disk.snap)
				return
			}
			m.SnapshotData = r.disk.snapData
		}
		w.net.send(m)
	}
	for _, e := range rd.Committed {
		r.apply(e)
		if w.done {
			return
		}
	}
	r.core.Advance()
	r.busy, r.cur = false, nil
	if m := r.savedLate; m != nil {
		r.savedLate = nil
		r.compact(*m)
		if i := r.core.Info().SnapshotIndex; i < m.Index {
			w.fail("replica %d: installed snapshot %d is older than the one it stored, %d", r.id, i, m.Index)
			return
		}
	}
	r.maybeSnapshot()
	items := r.inbox
	r.inbox = nil
	for _, f := range items {
		if !r.up {
			return
		}
		f()
	}
	r.pump()
}

func (r *replica) apply(e vr.Entry) {
	w := r.w
	if e.Index != r.applied+1 {
		w.fail("replica %d applies entry %d after %d", r.id, e.Index, r.applied)
		return
	}
	w.check.onApply(r, e)
	r.applied = e.Index
	if e.Type != vr.EntryCommand {
		return
	}
	res, _, err := r.fs.ApplyBytes(e.Data)
	if err != nil {
		w.fail("replica %d: entry %d does not decode: %v", r.id, e.Index, err)
		return
	}
	if p, ok := r.pending[e.Index]; ok {
		delete(r.pending, e.Index)
		if bytes.Equal(p.data, e.Data) {
			r.reply(p.q, reply{kind: replyResult, res: res})
		}
	}
}

// maybeSnapshot takes a snapshot when one is due. Like the driver, it
// serializes the state at once and stores it in the background: the
// store lands (and the core compacts) some time later, while the replica
// goes on; a crash before then may or may not have stored it.
func (r *replica) maybeSnapshot() {
	w := r.w
	if r.saving != nil || len(r.diskQ) > 0 || r.core.Info().Persisted < r.applied {
		return // one store at a time; the driver waits for its disk writer first
	}
	base := uint64(0)
	if r.disk.snap != nil {
		base = r.disk.snap.Index
	}
	if r.applied < base+r.snapEvery {
		return
	}
	meta, err := r.core.SnapshotMeta(r.applied)
	if err != nil {
		w.fail("replica %d: snapshot meta: %v", r.id, err)
		return
	}
	data := r.fs.Snapshot()
	w.check.onSnapshot(r, meta.Index, data)
	r.saving = &snapSave{meta: meta, data: data}
	ep := r.epoch
	w.after(w.between(ms, 200*ms), func() {
		if r.epoch != ep || r.saving == nil || r.saving.meta.Index != meta.Index {
			return
		}
		r.input(func() {
			if r.saving == nil || r.saving.meta.Index != meta.Index {
				return // an installed snapshot took it over
			}
			r.storeSnapshot()
			r.compact(meta)
		})
	})
}

// storeSnapshot puts the snapshot being stored on disk: it replaces the
// old one and the log entries it covers go.
func (r *replica) storeSnapshot() {
	s := r.saving
	r.saving = nil
	meta := s.meta
	r.disk.snap, r.disk.snapData = &meta, s.data
	for len(r.disk.entries) > 0 && r.disk.entries[0].Index <= meta.Index {
		r.disk.entries = r.disk.entries[1:]
	}
	r.disk.entries = slices.Clip(r.disk.entries)
	r.w.tracef("r%d stored snapshot %d", r.id, meta.Index)
}

func (r *replica) compact(meta vr.SnapshotMeta) {
	if err := r.core.Compact(meta); err != nil {
		r.w.fail("replica %d: compact %d: %v", r.id, meta.Index, err)
	}
}

// --- client requests ---

type request struct {
	c       *client
	opID    uint64
	attempt int
	handle  *chubby.Handle // a read
	cmd     *fsm.Command   // a command
}

type replyKind int

const (
	replyResult replyKind = iota
	replyNotPrimary
	replyBusy
)

type reply struct {
	opID    uint64
	attempt int
	kind    replyKind
	res     *fsm.Result_ // a command's result
	content []byte       // a read's
	stat    *chubby.Stat
	readErr error
	hint    uint64
	from    uint64
}

func (r *replica) onRequest(q request) {
	if q.cmd == nil {
		if !r.core.CanServeReads(r.local()) {
			r.refuse(q)
			return
		}
		content, stat, err := r.fs.GetContentsAndStat(q.handle)
		r.reply(q, reply{kind: replyResult, content: content, stat: stat, readErr: err})
		return
	}
	cmd := *q.cmd
	cmd.TimeMs = r.wallMs()
	data := fs.EncodeCommand(&cmd)
	idx, err := r.core.Propose(data)
	if err != nil {
		r.refuse(q)
		return
	}
	r.pending[idx] = pendingReq{q: q, data: data}
}

func (r *replica) refuse(q request) {
	rep := reply{kind: replyBusy}
	if id, ok := r.core.PrimaryHint(); ok && id != r.id {
		rep = reply{kind: replyNotPrimary, hint: id}
	}
	r.reply(q, rep)
}

func (r *replica) reply(q request, rep reply) {
	rep.opID, rep.attempt, rep.from = q.opID, q.attempt, r.id
	c := q.c
	r.w.net.sendClient(func() { c.onReply(rep) })
}
