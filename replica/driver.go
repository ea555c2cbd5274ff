package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/chubbygo/chubby/replica/vr"
)

// Driver carries out a vr.Node's work: the Ready → persist → send → apply →
// Advance loop, proposals and their answers, and snapshots. It is the one
// copy of that loop: Replicated runs it on goroutines, Kitex and Badger; the
// simulator (cell/sim) runs it on a simulated clock, disk and network.
// Everything it touches from outside is behind Disk, Transport,
// StateMachine and the clock function, and every completion comes back as
// an input (Written, SnapshotSaved), so the code is the same whether the
// disk answers at once or a simulated millisecond later.
//
// A Driver is not safe for concurrent use: one goroutine (or the
// simulator's event loop) calls its methods. While Busy, the caller gives
// it only completions (Written, SnapshotSaved); the inputs that reach the
// core (Step, Tick, Propose) wait, as vr's Ready contract demands.
type Driver struct {
	cfg   DriverConfig
	node  *vr.Node
	disk  Disk
	tr    Transport
	sm    StateMachine
	clock func() int64

	pending map[uint64]pendingProposal // log index → the proposal made there
	primary bool                       // as last reported to OnRole
	pview   uint64                     // the view of the last report of primary
	applied uint64

	cur         *vr.Ready // a Ready waiting for its write
	curWrite    *Write
	draining    bool // waiting for every write to land before a snapshot
	outstanding int  // writes issued and not reported back
	// Reports of async writes that arrived while a Ready was out: the core
	// hears of them after Advance.
	deferred []*Write

	snapshot   uint64 // index of the latest snapshot stored
	snapSaving bool
	snapLate   *SnapshotResult // a save that finished while a Ready was out
	snapRetry  int64           // after a failed save, not before this (driver clock)
	snapDue    uint64
	// snapWaiters asked for a snapshot of the state as it was when they
	// asked (RequestSnapshot); they are answered once one is stored.
	snapWaiters []snapWaiter

	out   map[uint64]*outgoing // snapshot transfers sent, by receiver
	in    *incoming            // the snapshot transfer received
	xfer  TransferStats
	pause time.Duration // longest input carried out (LongestPause)

	err error // the disk failed: the driver does nothing more
}

// DriverConfig configures a Driver. Zero fields take the defaults of
// DefaultDriverConfig.
type DriverConfig struct {
	// ID is this replica.
	ID uint64
	// SnapshotEvery takes a snapshot after this many applied entries, plus
	// a stagger of (ID mod 4)/8 of it, so that the replicas of a cell,
	// which apply the same entries at nearly the same time, do not all
	// store snapshots at once on shared disks and CPUs. Default 50,000.
	SnapshotEvery uint64
	// SnapshotRetry is how long (driver clock, ns) to wait after a failed
	// snapshot save before trying again. Default 1 s.
	SnapshotRetry int64
	Logger        *slog.Logger
	// OnRole, if set, is told when this replica becomes or stops being the
	// normal primary, with the view, after the input that caused it was
	// carried out. When the primary moves into a new view without stopping
	// (a voter change it made carries it into the next epoch: vr's
	// carryOn) it is told false, then true with the new view, so that a
	// master, whose epoch follows the view, gives up its duties and takes
	// them up again as after a failover. It must not call back into the
	// driver.
	OnRole func(view uint64, primary bool)
	// OnFail, if set, is told once when the disk fails (or the state
	// machine halts: ErrHalted); the driver has
	// then answered every proposal and does nothing more.
	OnFail func(err error)
	// OnApply, if set, is told of every committed entry (configuration
	// entries too) once it has been applied, before its proposal is
	// answered. It must not call back into the driver.
	OnApply func(e vr.Entry)
	// CheckPeer, if set, is asked to check whether the process of
	// replica id is still there (vr.Node.Suspect: its primary has been
	// silent for a while). It must not block or call back into the driver:
	// it checks elsewhere (the cell dials the peer port) and, only when
	// the process is certainly gone (the connection was refused), feeds
	// Driver.PeerGone as an input. Without it, a dead primary is found by
	// silence alone (vr.Config.ViewChangeTimeout).
	CheckPeer func(id uint64)
	// SnapshotPinned, if set, says whether the stored snapshot is being
	// read (a backup streams it): while it is, no periodic snapshot
	// replaces it unless the log has grown to four intervals. A snapshot
	// asked for (RequestSnapshot) is taken all the same.
	SnapshotPinned func() bool
	// SnapshotWindow bounds the chunks of a snapshot transfer in flight
	// to one receiver. Default 8 (2 MiB of Storage's chunks).
	SnapshotWindow int
	// SnapshotResend: a transfer without an acknowledgement for this long
	// (driver clock, ns) is sent again from the last chunk acknowledged.
	// Default 500 ms.
	SnapshotResend int64
	// SnapshotAbandon: a transfer without an acknowledgement for this
	// long is given up (the core asks again; the receiver resumes).
	// Default 30 s.
	SnapshotAbandon int64
}

// TransferStats counts snapshot transfer work.
type TransferStats struct {
	ChunksSent   uint64 // chunks sent, resends included
	ChunksStored uint64 // chunks received and stored
	ChunkResends uint64 // go-backs after a silent receiver
}

// Disk is the durable storage a Driver persists to. Writes are carried out
// in the order they are issued, one after the other.
type Disk interface {
	// Write starts w. It returns done when it carried w out before
	// returning (with err its outcome); otherwise the caller of the
	// driver reports the outcome later with Driver.Written, in issue
	// order. An empty write (nothing in it) is a barrier: it completes
	// once every write before it has.
	Write(w *Write) (done bool, err error)
	// SaveSnapshot starts storing a snapshot (with the log it covers
	// dropped) in the background: it calls data there, off the driver's
	// goroutine, for the application's bytes (see StateMachine.Snapshot).
	// Its outcome comes back through Driver.SnapshotSaved. At most one
	// save is under way.
	SaveSnapshot(meta vr.SnapshotMeta, data func() ([]byte, error))
	// FinishSnapshot waits for the save under way and returns its outcome
	// (the driver then hears of it from this call, not SnapshotSaved).
	FinishSnapshot() SnapshotResult
	// LoadSnapshot returns the application bytes of the stored snapshot,
	// which must be the one at index.
	LoadSnapshot(index uint64) ([]byte, error)
	// ReadSnapshotChunk returns chunk n of the stored snapshot, which must
	// be the one at index, and what the disk holds of it.
	ReadSnapshotChunk(index uint64, n uint32) ([]byte, ChunkInfo, error)
	// StageSnapshotChunk stores chunk n of the snapshot info describes,
	// being received, apart from the stored one: chunk 0 starts over
	// (whatever was staged goes), any other must be the next one staged.
	// It returns how many chunks are staged. Once all are, it checks the
	// length, the checksum and that the bytes are the snapshot meta
	// describes; an error wrapping ErrCorrupt says they are not (nothing
	// staged is kept), any other error is the disk's. A Write whose
	// Snapshot has no Data installs the complete staged snapshot.
	StageSnapshotChunk(meta vr.SnapshotMeta, info ChunkInfo, n uint32, data []byte) (uint32, error)
	// Staged returns the snapshot being received and how many of its
	// chunks are stored (0 when none), so that a restarted replica
	// resumes the transfer.
	Staged() (ChunkInfo, uint32, error)
}

// Write is one Ready's disk work, in the order vr.Ready prescribes:
// install Snapshot, delete from TruncateFrom, append Entries, store
// HardState, fsync if Sync.
type Write struct {
	Snapshot     *vr.Snapshot
	TruncateFrom uint64
	Entries      []vr.Entry
	HardState    *vr.HardState
	Sync         bool
	// Async: the driver went on without waiting (a PersistAsync Ready of
	// the normal primary of View); the core counts the entries as on
	// disk once Written reports them.
	Async bool
	View  uint64
}

// Empty reports whether w writes nothing (a barrier).
func (w *Write) Empty() bool {
	return w.Snapshot == nil && w.TruncateFrom == 0 && len(w.Entries) == 0 && w.HardState == nil
}

// Last is the index of the last entry w appends (0 if none).
func (w *Write) Last() uint64 {
	if len(w.Entries) == 0 {
		return 0
	}
	return w.Entries[len(w.Entries)-1].Index
}

// snapshotRetry is how long a replica waits after a failed snapshot save
// before it tries again (DriverConfig.SnapshotRetry's default).
const snapshotRetry = time.Second

// SnapshotResult is the outcome of a snapshot save.
type SnapshotResult struct {
	Meta  vr.SnapshotMeta
	Bytes int
	Err   error
}

// ProposalResult answers a proposal: the state machine's result once the
// entry committed and applied, or why it did not (*NotMasterError,
// ErrOverloaded, ErrUnknownOutcome, ErrStopped).
type ProposalResult struct {
	Index uint64
	Value any
	Err   error
}

// Reply receives a proposal's outcome, once.
type Reply interface {
	Answer(ProposalResult)
}

type pendingProposal struct {
	view  uint64
	reply Reply
}

// NewDriver restores a replica from what its disk holds (p, with the
// application's snapshot bytes app restored into sm) and returns its
// driver. now is the driver clock, in nanoseconds, monotonic.
func NewDriver(core vr.Config, p vr.Persisted, app []byte, sm StateMachine, disk Disk, tr Transport, now func() int64, cfg DriverConfig) (*Driver, error) {
	def := DefaultDriverConfig()
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = def.SnapshotEvery
	}
	if cfg.SnapshotRetry <= 0 {
		cfg.SnapshotRetry = def.SnapshotRetry
	}
	if cfg.Logger == nil {
		cfg.Logger = def.Logger
	}
	if cfg.SnapshotWindow <= 0 {
		cfg.SnapshotWindow = def.SnapshotWindow
	}
	if cfg.SnapshotResend <= 0 {
		cfg.SnapshotResend = def.SnapshotResend
	}
	if cfg.SnapshotAbandon <= 0 {
		cfg.SnapshotAbandon = def.SnapshotAbandon
	}
	info, staged, err := disk.Staged()
	if err != nil {
		return nil, fmt.Errorf("read the snapshot being received: %w", err)
	}
	if p.Snapshot != nil {
		if err := sm.Restore(p.Snapshot.Index, app); err != nil {
			return nil, fmt.Errorf("restore snapshot at %d: %w", p.Snapshot.Index, err)
		}
	}
	node, err := vr.NewNode(core, p, now())
	if err != nil {
		return nil, fmt.Errorf("start replica %d: %w", core.ID, err)
	}
	d := &Driver{cfg: cfg, node: node, disk: disk, tr: tr, sm: sm, clock: now,
		pending: make(map[uint64]pendingProposal), out: make(map[uint64]*outgoing),
		snapDue: cfg.SnapshotEvery + cfg.ID%4*cfg.SnapshotEvery/8}
	if staged > 0 {
		d.in = &incoming{info: info, next: staged}
	}
	if p.Snapshot != nil {
		d.snapshot, d.applied = p.Snapshot.Index, p.Snapshot.Index
	}
	return d, nil
}

// Node returns the protocol core, for reading (Info, LeaseValid,
// ReadsAllowedUntil, PrimaryHint). Its state changes only through the
// driver.
func (d *Driver) Node() *vr.Node { return d.node }

// Applied is the index of the last entry applied to the state machine.
func (d *Driver) Applied() uint64 { return d.applied }

// Busy reports whether the driver waits for the disk: a Ready is out, or
// every write must land before a snapshot. Only Written and
// SnapshotSaved may be called then.
func (d *Driver) Busy() bool { return d.cur != nil || d.draining }

// Err is the disk failure that stopped the driver, or nil.
func (d *Driver) Err() error { return d.err }

// Start carries out the work the core has right after NewDriver (a new
// replica persists its configuration entry).
func (d *Driver) Start() { d.run() }

// Step feeds messages that arrived from peers, then tells the core the
// time and carries out what follows. A malformed message is dropped (the
// core reports it through its Dropped hook).
func (d *Driver) Step(msgs []vr.Message) {
	if !d.mustBeIdle() {
		return
	}
	defer d.timed(d.clock())
	for i := range msgs {
		m := &msgs[i]
		switch m.Type {
		case vr.MsgSnapshotChunk:
			if validChunk(m, d.cfg.ID) {
				d.onChunk(m)
			}
		case vr.MsgSnapshotChunkOK:
			if validChunk(m, d.cfg.ID) {
				d.onChunkOK(m)
			}
		case vr.MsgSnapshot:
			// Snapshots arrive in chunks; the core hears of one from
			// onChunk once it is on disk.
		default:
			_ = d.node.Step(*m)
		}
		if d.err != nil {
			return
		}
	}
	d.tick()
}

// timed records how long an input took (LongestPause).
func (d *Driver) timed(start int64) {
	d.pause = max(d.pause, time.Duration(d.clock()-start))
}

// LongestPause returns the longest time one input (Step, Tick, Propose, a
// completion) kept the driver busy since the last call, and starts over:
// while an input is carried out, nothing else reaches the replica.
func (d *Driver) LongestPause() time.Duration {
	p := d.pause
	d.pause = 0
	return p
}

// TransferStats returns the snapshot transfer counters.
func (d *Driver) TransferStats() TransferStats { return d.xfer }

// Tick tells the core the time and carries out what follows.
func (d *Driver) Tick() {
	if d.mustBeIdle() {
		defer d.timed(d.clock())
		d.tickTransfers()
		d.tick()
	}
}

// Propose proposes entries (consecutive indexes, in order); each reply is
// answered once, from a later call into the driver or from this one.
func (d *Driver) Propose(entries [][]byte, replies []Reply) {
	if len(entries) != len(replies) {
		panic("replica: Propose with entries and replies of different lengths")
	}
	if d.err != nil {
		for _, r := range replies {
			r.Answer(ProposalResult{Err: d.stoppedErr()})
		}
		return
	}
	if !d.mustBeIdle() {
		return
	}
	defer d.timed(d.clock())
	first, err := d.node.Propose(entries...)
	if err != nil {
		var np *vr.NotPrimaryError
		switch {
		case errors.As(err, &np):
			err = d.NotMaster()
		case errors.Is(err, vr.ErrOverloaded):
			err = ErrOverloaded
		}
		for _, r := range replies {
			r.Answer(ProposalResult{Err: err})
		}
		return
	}
	view := d.node.View()
	for i, r := range replies {
		d.pending[first+uint64(i)] = pendingProposal{view: view, reply: r}
	}
	d.tick()
}

// CheckView refuses (*NotMasterError) a proposal made for view when the
// node is in another view: Replicated.ProposeInView's check, before the
// entry is proposed.
func (d *Driver) CheckView(view uint64) error {
	if d.node.View() != view {
		return d.NotMaster()
	}
	return nil
}

// ProposeConfig proposes a configuration change (vr.Node.ProposeConfig)
// and returns its index. Its outcome shows in the configuration in force
// (Node().Info()): a change whose entry is cut by a view change is lost
// and may be proposed again.
func (d *Driver) ProposeConfig(next vr.Members, retire ...uint64) (uint64, error) {
	if d.err != nil {
		return 0, d.stoppedErr()
	}
	if !d.mustBeIdle() {
		return 0, d.stoppedErr()
	}
	defer d.timed(d.clock())
	i, err := d.node.ProposeConfig(next, retire...)
	var np *vr.NotPrimaryError
	if errors.As(err, &np) {
		return 0, d.NotMaster()
	}
	if err != nil {
		return 0, err
	}
	d.tick()
	return i, nil
}

// Written reports the outcome of a write Disk.Write did not finish at
// once. Writes are reported in the order they were issued.
func (d *Driver) Written(w *Write, err error) {
	defer d.timed(d.clock())
	d.outstanding--
	if d.err != nil {
		return
	}
	if err != nil {
		d.fail(err)
		return
	}
	switch {
	case w == d.curWrite:
		d.finishReady()
	case w.Async && d.cur != nil:
		d.deferred = append(d.deferred, w) // the core hears of it after Advance
	case w.Async:
		d.persisted(w)
	}
	// Anything else was a barrier: run looks whether the snapshot it
	// waited for can be taken now.
	d.run()
}

// persisted tells the core that an async write is durable.
func (d *Driver) persisted(w *Write) {
	if last := w.Last(); last > 0 {
		d.node.Persisted(last, w.View)
	}
}

// SnapshotSaved reports the outcome of Disk.SaveSnapshot.
func (d *Driver) SnapshotSaved(res SnapshotResult) {
	defer d.timed(d.clock())
	d.snapSaving = false
	if d.err != nil {
		return
	}
	if d.cur != nil {
		d.snapLate = &res
		return
	}
	d.finishSnapshot(res)
	d.run()
}

// NotMaster is the error for a proposal made off the normal primary.
func (d *Driver) NotMaster() *NotMasterError {
	i := d.node.Info()
	return notMaster(d.cfg.ID, i)
}

func notMaster(self uint64, info vr.Info) *NotMasterError {
	e := &NotMasterError{View: info.View, Primary: info.Primary, Known: info.Status != vr.StatusViewChange}
	if e.Known && e.Primary == self {
		e.Known = false // we are the primary of this view but not normal yet
	}
	for _, m := range info.Members {
		if m.ID == e.Primary {
			e.Addr = m.ClientAddr
		}
	}
	return e
}

// Stop answers every proposal in flight with ErrStopped (the replica is
// shutting down).
func (d *Driver) Stop() {
	d.failPending(ErrStopped)
	d.answerSnapWaiters(ErrStopped)
}

func (d *Driver) stoppedErr() error {
	if d.err != nil {
		return fmt.Errorf("%w: %w", ErrStopped, d.err)
	}
	return ErrStopped
}

func (d *Driver) mustBeIdle() bool {
	if d.err != nil {
		return false
	}
	if d.Busy() {
		panic("replica: driver input while it waits for its disk")
	}
	return true
}

// PeerGone tells the core that the process of replica id is gone (its
// peer port refused a connection; see DriverConfig.CheckPeer) and carries
// out what follows.
func (d *Driver) PeerGone(id uint64) {
	if d.mustBeIdle() {
		defer d.timed(d.clock())
		d.node.Tick(d.clock())
		d.node.PeerGone(id)
		d.run()
	}
}

func (d *Driver) tick() {
	d.node.Tick(d.clock())
	if id, ok := d.node.Suspect(); ok && d.cfg.CheckPeer != nil {
		d.cfg.CheckPeer(id)
	}
	d.run()
}

// run carries out every Ready the core has until one must wait for the
// disk, takes a snapshot when one is due, then reports a role change.
func (d *Driver) run() {
	if d.draining && d.outstanding == 0 && d.err == nil {
		d.draining = false
		d.takeSnapshot()
	}
	for d.err == nil && !d.Busy() {
		if d.node.HasReady() {
			d.ready()
			continue
		}
		if !d.snapshotDue() {
			break
		}
		if d.outstanding > 0 {
			// Compact needs the entries up to the snapshot durable here:
			// let every queued write land first (a barrier), taking
			// nothing new meanwhile.
			d.draining = true
			d.write(&Write{})
			if d.outstanding > 0 || d.err != nil {
				break
			}
			d.draining = false
		}
		d.takeSnapshot()
	}
	d.reportRole()
}

// ready takes one Ready and carries it out as far as the disk lets it.
func (d *Driver) ready() {
	rd := d.node.Ready()
	if rd.PersistAsync {
		d.carryOutAsync(&rd)
		return
	}
	if rd.Snapshot != nil && d.snapSaving {
		// One snapshot store at a time: ours is older than the one being
		// installed (the core installs only past its commit), and its
		// Compact, after Advance, changes nothing.
		res := d.disk.FinishSnapshot()
		d.snapSaving = false
		d.snapLate = &res
	}
	if len(rd.EarlyMessages) > 0 {
		// Backups start storing the entries while we do.
		d.tr.Send(rd.EarlyMessages)
	}
	d.cur = &rd
	w := &Write{Snapshot: rd.Snapshot, TruncateFrom: rd.TruncateFrom, Entries: rd.Entries, HardState: rd.HardState, Sync: rd.MustSync}
	if w.Empty() && d.outstanding == 0 {
		d.finishReady()
		return
	}
	// Even an empty write waits for the async writes queued before it:
	// Advance of a Ready without PersistAsync counts everything handed
	// out as on disk.
	d.curWrite = w
	if d.write(w) {
		d.finishReady()
	}
}

// write hands w to the disk and reports whether it is already carried out
// (the disk wrote it at once) and succeeded; otherwise Written reports it
// later. A failed write stops the driver.
func (d *Driver) write(w *Write) bool {
	d.outstanding++
	done, err := d.disk.Write(w)
	if !done {
		return false
	}
	d.outstanding--
	if err != nil {
		d.fail(err)
		return false
	}
	return true
}

// finishReady carries out the rest of the Ready whose write is durable:
// the installed snapshot into the state machine, the messages, the
// committed entries, Advance.
func (d *Driver) finishReady() {
	rd := d.cur
	if rd.Snapshot != nil && !d.restore(rd.Snapshot) {
		return
	}
	if len(rd.Messages) > 0 {
		for i := range rd.Messages {
			m := &rd.Messages[i]
			if m.Type == vr.MsgSnapshot && m.Snapshot != nil {
				d.sendSnapshot(m) // its bytes go in chunks
				m.Type = 0
			}
		}
		d.tr.Send(dropUnsent(rd.Messages))
	}
	d.apply(rd.Committed)
	d.node.Advance()
	d.cur, d.curWrite = nil, nil
	for _, w := range d.deferred {
		d.persisted(w)
	}
	d.deferred = d.deferred[:0]
	if res := d.snapLate; res != nil {
		d.snapLate = nil
		d.finishSnapshot(*res)
	}
}

// restore replaces the state machine's state with the snapshot just
// installed on disk.
func (d *Driver) restore(s *vr.Snapshot) bool {
	meta := s.Meta
	data := s.Data
	if data == nil {
		// Received in chunks: the disk has it.
		var err error
		if data, err = d.disk.LoadSnapshot(meta.Index); err != nil {
			d.fail(fmt.Errorf("load the snapshot installed at %d: %w", meta.Index, err))
			return false
		}
		d.in = nil
	}
	if err := d.sm.Restore(meta.Index, data); err != nil {
		d.fail(fmt.Errorf("restore snapshot: %w", err))
		return false
	}
	d.snapshot, d.applied = meta.Index, meta.Index
	d.failPendingUpTo(meta.Index, ErrUnknownOutcome)
	d.answerSnapWaiters(nil)
	return true
}

// dropUnsent removes the messages marked unsendable (type 0).
func dropUnsent(ms []vr.Message) []vr.Message {
	out := ms[:0]
	for _, m := range ms {
		if m.Type != 0 {
			out = append(out, m)
		}
	}
	return out
}

// carryOutAsync carries out a PersistAsync Ready: its Prepares leave, its
// write is queued, committed entries are applied, and the driver goes on;
// the write reports back through Written.
func (d *Driver) carryOutAsync(rd *vr.Ready) {
	if len(rd.EarlyMessages) > 0 {
		d.tr.Send(rd.EarlyMessages)
	}
	if len(rd.Entries) > 0 || rd.HardState != nil {
		w := &Write{Entries: rd.Entries, HardState: rd.HardState, Sync: true, Async: true, View: d.node.View()}
		if d.write(w) {
			// A disk that writes at once: as if reported right away.
			defer func() {
				if d.err == nil {
					d.persisted(w)
				}
			}()
		} else if d.err != nil {
			return
		}
	}
	d.apply(rd.Committed)
	d.node.Advance()
}

// apply applies committed entries and answers their proposals.
func (d *Driver) apply(committed []vr.Entry) {
	for _, e := range committed {
		var v any
		if e.Type == vr.EntryCommand {
			v = d.sm.Apply(e.Index, e.Data)
			if h, ok := v.(Halt); ok {
				d.fail(fmt.Errorf("%w: entry %d: %w", ErrHalted, e.Index, h.Err))
				return
			}
		}
		d.applied = e.Index
		if d.cfg.OnApply != nil {
			d.cfg.OnApply(e)
		}
		if p, ok := d.pending[e.Index]; ok {
			delete(d.pending, e.Index)
			if p.view == e.View {
				p.reply.Answer(ProposalResult{Index: e.Index, Value: v})
			} else {
				p.reply.Answer(ProposalResult{Err: ErrUnknownOutcome})
			}
		}
	}
}

// snapshotDue reports whether a snapshot should be taken now.
func (d *Driver) snapshotDue() bool {
	behind := d.applied - d.snapshot
	if d.snapSaving || d.clock() < d.snapRetry {
		return false
	}
	if len(d.snapWaiters) > 0 && behind > 0 && !d.sendingSnapshot() {
		return true // asked for (a transfer finishes first)
	}
	if behind < d.snapDue {
		return false
	}
	// A transfer, or a backup, reads the stored snapshot; the log it
	// leaves grows meanwhile, up to a bound.
	pinned := d.sendingSnapshot() || d.cfg.SnapshotPinned != nil && d.cfg.SnapshotPinned()
	return !pinned || behind >= 4*d.snapDue
}

// snapWaiter is a RequestSnapshot waiting for a snapshot at need or later.
type snapWaiter struct {
	need uint64
	done func(index uint64, err error)
}

// RequestSnapshot asks for a snapshot of the state as it is now, stored
// like the periodic ones (captured between two Applies, encoded and
// stored off the loop), and calls done, on the loop, with the index of
// the stored snapshot that holds at least everything applied now, or an
// error (the save failed, the driver stopped). A snapshot already stored
// at the applied index answers at once.
func (d *Driver) RequestSnapshot(done func(index uint64, err error)) {
	if d.err != nil {
		done(0, d.stoppedErr())
		return
	}
	if d.snapshot > 0 && d.snapshot >= d.applied {
		done(d.snapshot, nil)
		return
	}
	defer d.timed(d.clock())
	d.snapWaiters = append(d.snapWaiters, snapWaiter{need: d.applied, done: done})
	d.run()
}

// answerSnapWaiters answers the waiters that the stored snapshot serves,
// and every one with err when it is set.
func (d *Driver) answerSnapWaiters(err error) {
	keep := d.snapWaiters[:0]
	for _, w := range d.snapWaiters {
		switch {
		case err != nil:
			w.done(0, err)
		case d.snapshot > 0 && d.snapshot >= w.need:
			w.done(d.snapshot, nil)
		default:
			keep = append(keep, w)
		}
	}
	clear(d.snapWaiters[len(keep):])
	d.snapWaiters = keep
}

// takeSnapshot serializes the state machine at the applied index (on
// disk here) and hands it to the disk to store in the background: storing
// takes two fsyncs and deleting tens of thousands of log keys, which on
// the loop stalled every command for 100-300 ms. The driver goes on
// meanwhile; SnapshotSaved compacts the core when the store reports.
func (d *Driver) takeSnapshot() {
	meta, err := d.node.SnapshotMeta(d.applied)
	if err != nil {
		d.cfg.Logger.Warn("snapshot skipped", "index", d.applied, "err", err)
		d.snapRetry = d.clock() + d.cfg.SnapshotRetry
		d.answerSnapWaiters(fmt.Errorf("snapshot at %d: %w", d.applied, err))
		return
	}
	data := d.sm.Snapshot()
	d.snapSaving = true
	d.disk.SaveSnapshot(meta, data)
	if len(d.out) > 0 {
		// Forced past transfers that went on too long: the chunks they
		// read go with the old snapshot.
		clear(d.out)
	}
}

// finishSnapshot takes a save's outcome: once the snapshot is stored, the
// core may forget the entries it covers.
func (d *Driver) finishSnapshot(res SnapshotResult) {
	if res.Err != nil {
		d.snapRetry = d.clock() + d.cfg.SnapshotRetry
		d.cfg.Logger.Error("snapshot failed", "index", res.Meta.Index, "err", res.Err)
		d.answerSnapWaiters(fmt.Errorf("snapshot at %d: %w", res.Meta.Index, res.Err))
		return
	}
	if err := d.node.Compact(res.Meta); err != nil {
		d.cfg.Logger.Error("compact failed", "index", res.Meta.Index, "err", err)
		d.answerSnapWaiters(fmt.Errorf("snapshot at %d: compact: %w", res.Meta.Index, err))
		return
	}
	d.snapshot = max(d.snapshot, res.Meta.Index)
	d.cfg.Logger.Info("snapshot saved", "index", res.Meta.Index, "bytes", res.Bytes)
	d.answerSnapWaiters(nil)
}

// fail stops the driver: the disk failed, or the state machine cannot
// apply a committed entry (Halt) (fail-stop, as etcd does on a
// failed fsync). Every proposal is answered; the replica stops being the
// primary at once.
func (d *Driver) fail(err error) {
	if d.err != nil {
		return
	}
	d.err = err
	if errors.Is(err, ErrHalted) {
		d.cfg.Logger.Error("replica stops: it cannot apply a committed entry", "err", err)
	} else {
		d.cfg.Logger.Error("replica stops: its disk failed", "err", err)
	}
	d.failPending(d.stoppedErr())
	d.answerSnapWaiters(d.stoppedErr())
	if d.primary {
		d.primary = false
		if d.cfg.OnRole != nil {
			d.cfg.OnRole(d.node.View(), false)
		}
	}
	if d.cfg.OnFail != nil {
		d.cfg.OnFail(err)
	}
}

// reportRole tells OnRole when the replica became or stopped being the
// normal primary, or moved as the primary into a new view. Proposals in flight when it stops may still commit in
// the next view: their outcome is unknown.
func (d *Driver) reportRole() {
	if d.err != nil {
		return
	}
	p := d.node.IsPrimary()
	if p == d.primary && (!p || d.node.View() == d.pview) {
		return
	}
	moved := p && d.primary // carried on into a new view
	d.primary, d.pview = p, d.node.View()
	if !p {
		d.failPending(ErrUnknownOutcome)
	}
	// A primary that carried on has committed its whole log: what it
	// has pending is answered as it applies.
	if d.cfg.OnRole != nil {
		if moved {
			d.cfg.OnRole(d.node.View(), false)
		}
		d.cfg.OnRole(d.node.View(), p)
	}
}

func (d *Driver) failPending(err error) { d.failPendingUpTo(^uint64(0), err) }

// failPendingUpTo answers the proposals at indexes up to index with err, in
// index order (so that a simulation replays the same).
func (d *Driver) failPendingUpTo(index uint64, err error) {
	var is []uint64
	for i := range d.pending {
		if i <= index {
			is = append(is, i)
		}
	}
	slices.Sort(is)
	for _, i := range is {
		p := d.pending[i]
		delete(d.pending, i)
		p.reply.Answer(ProposalResult{Err: err})
	}
}
