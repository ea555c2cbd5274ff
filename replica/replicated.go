package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chubbygo/chubby/replica/vr"
)

// Transport carries protocol messages between replicas. Send queues
// messages for their destinations (Message.To) and never blocks: the
// protocol tolerates loss, so a full queue drops.
type Transport interface {
	Send(msgs []vr.Message)
}

// ReplicatedConfig configures a replicated log. Zero fields take defaults.
type ReplicatedConfig struct {
	// ID is this replica; Members the configuration a new cell starts with
	// (ignored when the replica has state on disk: the configuration is in
	// the log).
	ID      uint64
	Members vr.Members
	// Core tunes the protocol (timers, limits); ID and InitialMembers are
	// filled in from the fields above.
	Core vr.Config
	// TickInterval is how often the node is told the time. Default 5 ms.
	TickInterval time.Duration
	// SnapshotEvery takes a snapshot after this many applied entries, plus
	// a stagger of (ID mod 4)/8 of it, so that the replicas of a cell,
	// which apply the same entries at nearly the same time, do not all
	// store snapshots at once on shared disks and CPUs. Default 50,000.
	SnapshotEvery uint64
	// MaxQueue bounds proposals waiting for the loop; past it Propose fails
	// at once with ErrOverloaded. Default 16,384.
	MaxQueue int
	// MaxProposalBatch bounds commands proposed together. Default 1024.
	MaxProposalBatch int
	Logger           *slog.Logger
	// OnBatch, if set, is told the size and write+fsync time of each
	// persisted Ready with entries.
	OnBatch func(entries, bytes int, d time.Duration)
	// OnRole, if set, is told (from the loop, before anything of the new
	// role is applied) when this replica becomes or stops being the normal
	// primary, with the view. It must not block.
	OnRole func(view uint64, primary bool)
}

// NotMasterError says this replica is not the normal primary; Primary is
// the one it believes in when Known, Addr its configured address.
type NotMasterError struct {
	View    uint64
	Primary uint64
	Addr    string
	Known   bool
}

func (e *NotMasterError) Error() string {
	if e.Known {
		return fmt.Sprintf("replica: not the master; view %d's master is replica %d at %s", e.View, e.Primary, e.Addr)
	}
	return fmt.Sprintf("replica: not the master; view %d has no master yet", e.View)
}

// ErrUnknownOutcome: the replica stopped being the primary (or another
// entry took the proposal's slot) before the proposal committed here; it may
// or may not take effect. The cell's exactly-once sequence numbers make a
// retry safe.
var ErrUnknownOutcome = errors.New("replica: lost mastership before the command committed; it may or may not take effect")

// Replicated is the replicated log of one replica: the view-change protocol
// core (vr.Node) driven by one goroutine that ticks it, feeds it messages
// and proposals, persists what it asks (one write batch and one fsync per
// Ready), sends its messages only after that, applies committed entries to
// the state machine and answers proposals with their results. It offers
// the same Propose as Local.
type Replicated struct {
	cfg   ReplicatedConfig
	st    *Storage
	sm    StateMachine
	tr    Transport
	node  *vr.Node
	start time.Time

	inbox   chan inbound
	props   chan *proposal
	queries chan func(*vr.Node)
	stop    chan struct{}
	done    chan struct{}

	// Owned by the loop.
	pending  map[uint64]pendingProposal
	primary  bool
	snapshot uint64 // index of the latest snapshot stored
	// The snapshot writer: at most one snapshot is being stored (by a
	// goroutine of its own, so that the loop goes on committing); it
	// reports on snapDone. snapFinished holds a report taken while a Ready
	// was out, for after Advance.
	snapSaving   bool
	snapDone     chan snapResult
	snapFinished *snapResult
	snapRetry    time.Time // after a failed save, the next try waits until then
	snapDue      uint64    // entries applied since the last snapshot that make the next due

	// The disk writer: jobs in order; async ones report the last entry
	// they made durable through diskLast/diskView and a nudge on
	// diskNote; a failure lands in diskErr.
	diskq    chan *diskJob
	diskDone chan struct{}
	diskNote chan struct{}
	diskErr  chan error
	diskMu   sync.Mutex
	diskLast uint64
	diskView uint64
	// diskBusy counts jobs queued or being written; at zero the loop (the
	// only producer) writes itself, saving two goroutine hand-offs on
	// every backup write.
	diskBusy atomic.Int64

	applied   atomic.Uint64
	readUntil atomic.Int64 // driver-clock ns; reads are allowed before it
	mu        sync.Mutex
	info      vr.Info
	err       error
	changed   chan struct{} // closed when View, Status or IsPrimary next change
}

// inbound is a batch of messages from a peer and what to call once it is
// processed.
type inbound struct {
	msgs []vr.Message
	done func()
}

// diskJob is one write for the disk writer. An async job (a PersistAsync
// Ready on the primary) reports through Replicated.diskLast; the others
// answer on done.
type diskJob struct {
	trunc   uint64
	entries []vr.Entry
	hs      *vr.HardState
	sync    bool
	async   bool
	view    uint64
	done    chan error
}

// snapResult is what the snapshot writer reports.
type snapResult struct {
	meta  vr.SnapshotMeta
	bytes int
	took  time.Duration
	err   error
}

// diskQueue bounds the writes queued for the disk writer; past it the
// loop waits (back pressure on proposals).
const diskQueue = 64

type pendingProposal struct {
	view  uint64
	reply chan proposalResult
}

// StartReplicated restores the replica from storage (snapshot into the
// state machine, log entries into the core) and starts its loop.
func StartReplicated(st *Storage, sm StateMachine, tr Transport, cfg ReplicatedConfig) (*Replicated, error) {
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = 5 * time.Millisecond
	}
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = 50000
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 16384
	}
	if cfg.MaxProposalBatch <= 0 {
		cfg.MaxProposalBatch = 1024
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p, app, err := st.loadVR()
	if err != nil {
		return nil, fmt.Errorf("load replica state: %w", err)
	}
	if p.Snapshot != nil {
		if err := sm.Restore(p.Snapshot.Index, app); err != nil {
			return nil, fmt.Errorf("restore snapshot at %d: %w", p.Snapshot.Index, err)
		}
	}
	core := cfg.Core
	core.ID = cfg.ID
	core.InitialMembers = cfg.Members
	log := cfg.Logger
	if core.Hooks.Event == nil {
		core.Hooks.Event = func(msg string, args ...any) { log.Info("vr: "+msg, args...) }
	}
	if core.Hooks.Dropped == nil {
		core.Hooks.Dropped = func(m *vr.Message, reason string) {
			log.Warn("vr: dropped a malformed message", "msg", m.String(), "reason", reason)
		}
	}
	r := &Replicated{
		cfg: cfg, st: st, sm: sm, tr: tr, start: time.Now(),
		inbox:   make(chan inbound, 1024),
		props:   make(chan *proposal, cfg.MaxQueue),
		queries: make(chan func(*vr.Node), 64),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		pending: make(map[uint64]pendingProposal),

		diskq:    make(chan *diskJob, diskQueue),
		diskDone: make(chan struct{}),
		diskNote: make(chan struct{}, 1),
		diskErr:  make(chan error, 1),
		snapDone: make(chan snapResult, 1),
		snapDue:  cfg.SnapshotEvery + cfg.ID%4*cfg.SnapshotEvery/8,
	}
	node, err := vr.NewNode(core, p, r.now())
	if err != nil {
		return nil, fmt.Errorf("start replica %d: %w", cfg.ID, err)
	}
	r.node = node
	if p.Snapshot != nil {
		r.snapshot = p.Snapshot.Index
		r.applied.Store(p.Snapshot.Index)
	}
	r.info = node.Info()
	log.Info("replica restored", "id", cfg.ID, "view", r.info.View, "last_op", r.info.LastOp,
		"commit", r.info.Commit, "snapshot", r.snapshot, "members", len(r.info.Members))
	go r.diskLoop()
	go r.run()
	return r, nil
}

// now is the driver's monotonic clock in nanoseconds.
func (r *Replicated) now() int64 { return int64(time.Since(r.start)) }

// Step hands messages that arrived from other replicas to the loop. It
// never blocks: when the loop is that far behind, they are dropped.
func (r *Replicated) Step(msgs []vr.Message) { r.Receive(msgs, nil) }

// Receive is Step that calls done (if not nil) once the messages have been
// processed: stepped, and the Ready that followed carried out, so whatever
// they caused (a PrepareOK after the fsync) has been sent. It never blocks;
// done is called at once when the messages are dropped.
func (r *Replicated) Receive(msgs []vr.Message, done func()) {
	select {
	case r.inbox <- inbound{msgs, done}:
	default:
		if done != nil {
			done()
		}
	}
}

// Propose appends entry to the replicated log and returns the state
// machine's result once a majority has it on disk and it is applied here.
// Off the primary it fails with *NotMasterError.
func (r *Replicated) Propose(ctx context.Context, entry []byte) (any, error) {
	if len(entry) > vr.MaxEntryBytes {
		return nil, fmt.Errorf("propose: entry of %d bytes over the %d limit", len(entry), vr.MaxEntryBytes)
	}
	if err := r.checkPrimary(); err != nil {
		return nil, err
	}
	p := &proposal{entry: entry, reply: make(chan proposalResult, 1)}
	select {
	case <-r.done:
		return nil, r.stoppedErr()
	case r.props <- p:
	default:
		return nil, ErrOverloaded
	}
	select {
	case res := <-p.reply:
		return res.value, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.done:
		select {
		case res := <-p.reply:
			return res.value, res.err
		default:
			return nil, r.stoppedErr()
		}
	}
}

// checkPrimary fails fast off the primary, from the last published state.
func (r *Replicated) checkPrimary() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.info.IsPrimary {
		return nil
	}
	return r.notMasterLocked()
}

func (r *Replicated) notMasterLocked() *NotMasterError {
	e := &NotMasterError{View: r.info.View, Primary: r.info.Primary, Known: r.info.Status != vr.StatusViewChange}
	if e.Known && e.Primary == r.cfg.ID {
		e.Known = false // we are the primary of this view but not normal yet
	}
	for _, m := range r.info.Members {
		if m.ID == e.Primary {
			e.Addr = m.Addr
		}
	}
	return e
}

// NotMaster returns the error to answer with when this replica is not the
// master, or nil when it is.
func (r *Replicated) NotMaster() *NotMasterError {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.info.IsPrimary {
		return nil
	}
	return r.notMasterLocked()
}

// CanServeReads reports whether a read may be answered from the local
// state now: this replica is the primary, holds a master lease
// acknowledged by a majority, and has applied every entry its view
// started with.
func (r *Replicated) CanServeReads() bool {
	return r.now() < r.readUntil.Load()
}

// Changed returns a channel closed the next time this replica's view,
// status or primary role changes (a view change starts or ends), so that
// a caller can wait for one without polling.
func (r *Replicated) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.changed
}

// Applied returns the index of the last entry applied.
func (r *Replicated) Applied() uint64 { return r.applied.Load() }

// Info returns the protocol state as of the loop's last iteration.
func (r *Replicated) Info() vr.Info {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.info
}

// Close stops the loop. Proposals not yet committed fail.
func (r *Replicated) Close() error {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
	return nil
}

func (r *Replicated) stoppedErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return fmt.Errorf("%w: %w", ErrStopped, r.err)
	}
	return ErrStopped
}

func (r *Replicated) run() {
	defer close(r.done)
	defer func() {
		r.mu.Lock()
		if r.changed != nil {
			close(r.changed)
			r.changed = nil
		}
		r.mu.Unlock()
	}()
	defer func() {
		// Let the disk writer and the snapshot writer finish what they
		// were handed, so that the storage is quiet when Close returns.
		close(r.diskq)
		<-r.diskDone
		if r.snapSaving {
			r.snapshotStored()
		}
	}()
	defer func() { r.failAll(ErrStopped, ErrStopped) }()
	tick := time.NewTicker(r.cfg.TickInterval)
	defer tick.Stop()
	batch := make([][]byte, 0, r.cfg.MaxProposalBatch)
	replies := make([]chan proposalResult, 0, r.cfg.MaxProposalBatch)
	var dones []func()
	defer func() {
		for _, d := range dones {
			d()
		}
	}()
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
		case in := <-r.inbox:
			dones = r.step(in, dones)
		drain:
			for range 64 {
				select {
				case more := <-r.inbox:
					dones = r.step(more, dones)
				default:
					break drain
				}
			}
		case p := <-r.props:
			batch, replies = append(batch[:0], p.entry), append(replies[:0], p.reply)
		more:
			for len(batch) < r.cfg.MaxProposalBatch {
				select {
				case p := <-r.props:
					batch, replies = append(batch, p.entry), append(replies, p.reply)
				default:
					break more
				}
			}
			r.propose(batch, replies)
		case q := <-r.queries:
			q(r.node)
		case <-r.diskNote:
			r.notePersisted()
		case res := <-r.snapDone:
			r.snapSaving = false // as snapshotStored
			r.finishSnapshot(res)
		case err := <-r.diskErr:
			r.diskFailed(err)
			return
		}
		r.node.Tick(r.now())
		if err := r.drainReady(); err != nil {
			r.diskFailed(err)
			return
		}
		r.publish()
		for i, d := range dones {
			d()
			dones[i] = nil
		}
		dones = dones[:0]
	}
}

func (r *Replicated) diskFailed(err error) {
	r.cfg.Logger.Error("replica stops: its disk failed", "err", err)
	r.mu.Lock()
	r.err = err
	r.mu.Unlock()
}

// diskLoop is the disk writer: it carries out the jobs in order, writing
// consecutive async jobs as one batch with one fsync (group commit across
// the loop's Readies).
func (r *Replicated) diskLoop() {
	defer close(r.diskDone)
	var next *diskJob
	failed := false
	for {
		j := next
		next = nil
		if j == nil {
			var ok bool
			if j, ok = <-r.diskq; !ok {
				return
			}
		}
		if failed {
			if j.done != nil {
				j.done <- ErrStopped
			}
			r.diskBusy.Add(-1)
			continue
		}
		if !j.async {
			j.done <- r.write(j.trunc, j.entries, j.hs, j.sync)
			r.diskBusy.Add(-1)
			continue
		}
		jobs := int64(1)
		entries, hs, view := j.entries, j.hs, j.view
	gather:
		for len(entries) < r.cfg.MaxProposalBatch*4 {
			select {
			case more, ok := <-r.diskq:
				if !ok {
					break gather
				}
				if !more.async || more.view != view {
					next = more
					break gather
				}
				entries = append(entries, more.entries...)
				if more.hs != nil {
					hs = more.hs
				}
				jobs++
			default:
				break gather
			}
		}
		err := r.write(0, entries, hs, true)
		if err != nil {
			failed = true
			select {
			case r.diskErr <- err:
			default:
			}
		}
		r.diskBusy.Add(-jobs)
		if err != nil {
			continue
		}
		if len(entries) > 0 {
			r.diskMu.Lock()
			r.diskLast, r.diskView = entries[len(entries)-1].Index, view
			r.diskMu.Unlock()
			select {
			case r.diskNote <- struct{}{}:
			default:
			}
		}
	}
}

// write persists one batch and reports it to OnBatch.
func (r *Replicated) write(trunc uint64, entries []vr.Entry, hs *vr.HardState, sync bool) error {
	if trunc == 0 && len(entries) == 0 && hs == nil {
		return nil // a barrier
	}
	start := time.Now()
	if err := r.st.persistReady(trunc, entries, hs, sync); err != nil {
		return err
	}
	if r.cfg.OnBatch != nil && len(entries) > 0 {
		bytes := 0
		for _, e := range entries {
			bytes += len(e.Data)
		}
		r.cfg.OnBatch(len(entries), bytes, time.Since(start))
	}
	return nil
}

// persist hands a write to the disk writer and waits for it, and so for
// every write queued before it.
func (r *Replicated) persist(trunc uint64, entries []vr.Entry, hs *vr.HardState, sync bool) error {
	if r.diskBusy.Load() == 0 {
		// Nothing queued and nothing being written, and only this
		// goroutine queues: write here.
		return r.write(trunc, entries, hs, sync)
	}
	j := &diskJob{trunc: trunc, entries: entries, hs: hs, sync: sync, done: make(chan error, 1)}
	r.diskBusy.Add(1)
	r.diskq <- j
	return <-j.done
}

// notePersisted tells the core what the disk writer made durable.
func (r *Replicated) notePersisted() {
	r.diskMu.Lock()
	last, view := r.diskLast, r.diskView
	r.diskMu.Unlock()
	if last > 0 {
		r.node.Persisted(last, view)
	}
}

// waitDisk waits until every queued write is durable.
func (r *Replicated) waitDisk() error { return r.persist(0, nil, nil, false) }

func (r *Replicated) step(in inbound, dones []func()) []func() {
	for _, m := range in.msgs {
		// Step validates; an invalid message is dropped (and reported
		// through the Dropped hook), never fatal.
		_ = r.node.Step(m)
	}
	if in.done != nil {
		dones = append(dones, in.done)
	}
	return dones
}

func (r *Replicated) propose(batch [][]byte, replies []chan proposalResult) {
	first, err := r.node.Propose(batch...)
	if err != nil {
		var np *vr.NotPrimaryError
		switch {
		case errors.As(err, &np):
			r.mu.Lock()
			e := r.notMasterLocked()
			r.mu.Unlock()
			err = e
		case errors.Is(err, vr.ErrOverloaded):
			err = ErrOverloaded
		}
		for _, c := range replies {
			c <- proposalResult{err: err}
		}
		return
	}
	// The entries carry the view the core assigned them in: ask it, so
	// that a commit is recognised as this proposal's.
	view := r.node.Info().View
	for i, c := range replies {
		r.pending[first+uint64(i)] = pendingProposal{view: view, reply: c}
	}
}

// drainReady carries out every Ready the node has, in the order vr.Ready
// prescribes.
func (r *Replicated) drainReady() error {
	for r.node.HasReady() {
		rd := r.node.Ready()
		if rd.PersistAsync {
			r.carryOutAsync(&rd)
			continue
		}
		if rd.Snapshot != nil {
			if err := r.waitDisk(); err != nil {
				return err
			}
			if r.snapSaving {
				// One snapshot write at a time. Ours is older than the
				// one installed (the core installs only past its commit):
				// its Compact, after Advance, changes nothing.
				res := r.snapshotStored()
				r.snapFinished = &res
			}
			if err := r.st.installSnapshot(rd.Snapshot.Meta, rd.Snapshot.Data); err != nil {
				return fmt.Errorf("install snapshot: %w", err)
			}
			if err := r.sm.Restore(rd.Snapshot.Meta.Index, rd.Snapshot.Data); err != nil {
				return fmt.Errorf("restore snapshot: %w", err)
			}
			r.snapshot = rd.Snapshot.Meta.Index
			r.applied.Store(rd.Snapshot.Meta.Index)
			r.failPendingUpTo(rd.Snapshot.Meta.Index)
		}
		if len(rd.EarlyMessages) > 0 {
			// Backups start storing the entries while we do.
			r.tr.Send(rd.EarlyMessages)
		}
		if rd.TruncateFrom > 0 || len(rd.Entries) > 0 || rd.HardState != nil {
			if err := r.persist(rd.TruncateFrom, rd.Entries, rd.HardState, rd.MustSync); err != nil {
				return err
			}
		}
		if len(rd.Messages) > 0 {
			for i := range rd.Messages {
				m := &rd.Messages[i]
				if m.Type == vr.MsgSnapshot && m.Snapshot != nil && m.SnapshotData == nil {
					data, err := r.st.loadVRSnapshot(m.Snapshot.Index)
					if err != nil {
						r.cfg.Logger.Warn("snapshot to send is gone", "index", m.Snapshot.Index, "err", err)
						continue
					}
					m.SnapshotData = data
				}
			}
			r.tr.Send(rd.Messages)
		}
		r.apply(rd.Committed)
		r.node.Advance()
	}
	if res := r.snapFinished; res != nil {
		r.snapFinished = nil
		r.finishSnapshot(*res)
	}
	if applied := r.applied.Load(); !r.snapSaving && applied-r.snapshot >= r.snapDue && !time.Now().Before(r.snapRetry) {
		if err := r.waitDisk(); err != nil {
			return err
		}
		r.notePersisted() // Compact needs the entries known durable
		r.takeSnapshot(applied)
	}
	return nil
}

// carryOutAsync carries out a PersistAsync Ready: its Prepares leave, its
// write is queued, committed entries are applied, and the loop goes on;
// the write reports back through diskNote.
func (r *Replicated) carryOutAsync(rd *vr.Ready) {
	if len(rd.EarlyMessages) > 0 {
		r.tr.Send(rd.EarlyMessages)
	}
	if len(rd.Entries) > 0 || rd.HardState != nil {
		r.diskBusy.Add(1)
		r.diskq <- &diskJob{entries: rd.Entries, hs: rd.HardState, async: true, view: r.node.View()}
	}
	r.apply(rd.Committed)
	r.node.Advance()
}

// apply applies committed entries and answers their proposals.
func (r *Replicated) apply(committed []vr.Entry) {
	for _, e := range committed {
		var v any
		if e.Type == vr.EntryCommand {
			v = r.sm.Apply(e.Index, e.Data)
		}
		r.applied.Store(e.Index)
		if p, ok := r.pending[e.Index]; ok {
			delete(r.pending, e.Index)
			if p.view == e.View {
				p.reply <- proposalResult{index: e.Index, value: v}
			} else {
				p.reply <- proposalResult{err: ErrUnknownOutcome}
			}
		}
	}
}

// takeSnapshot serializes the state machine at index (applied, on disk)
// and hands it to a goroutine that stores it and drops the log it covers:
// storing takes two fsyncs and deleting tens of thousands of log keys,
// which on the loop stalled every command for 100-300 ms. The loop goes on
// meanwhile; finishSnapshot compacts the core when the store reports.
func (r *Replicated) takeSnapshot(index uint64) {
	meta, err := r.node.SnapshotMeta(index)
	if err != nil {
		r.cfg.Logger.Warn("snapshot skipped", "index", index, "err", err)
		return
	}
	start := time.Now()
	data := r.sm.Snapshot()
	r.snapSaving = true
	go func() {
		err := r.st.saveVRSnapshot(meta, data)
		r.snapDone <- snapResult{meta: meta, bytes: len(data), took: time.Since(start), err: err}
	}()
}

// snapshotStored waits for the snapshot being stored and returns the
// writer's report.
func (r *Replicated) snapshotStored() snapResult {
	res := <-r.snapDone
	r.snapSaving = false
	return res
}

// finishSnapshot takes the snapshot writer's report: once the snapshot is
// stored, the core may forget the entries it covers.
func (r *Replicated) finishSnapshot(res snapResult) {
	if res.err != nil {
		r.snapRetry = time.Now().Add(snapshotRetry)
		r.cfg.Logger.Error("snapshot failed", "index", res.meta.Index, "err", res.err, "retry_in", snapshotRetry)
		return
	}
	if err := r.node.Compact(res.meta); err != nil {
		r.cfg.Logger.Error("compact failed", "index", res.meta.Index, "err", err)
		return
	}
	r.snapshot = max(r.snapshot, res.meta.Index)
	r.cfg.Logger.Info("snapshot saved", "index", res.meta.Index, "bytes", res.bytes, "took", res.took)
}

// snapshotRetry is how long a replica waits after a failed snapshot save
// before it tries again.
const snapshotRetry = time.Second

// publish makes the loop's view of the protocol visible to other
// goroutines and reports role changes.
func (r *Replicated) publish() {
	info := r.node.Info()
	if until, ok := r.node.ReadsAllowedUntil(); ok {
		r.readUntil.Store(until)
	} else {
		r.readUntil.Store(0)
	}
	r.mu.Lock()
	old := r.info
	r.info = info
	if r.changed != nil && (old.View != info.View || old.Status != info.Status || old.IsPrimary != info.IsPrimary) {
		close(r.changed)
		r.changed = nil
	}
	r.mu.Unlock()
	if info.IsPrimary != r.primary {
		r.primary = info.IsPrimary
		if !info.IsPrimary {
			// Proposed entries may still commit in the next view; queued
			// ones were never proposed.
			r.mu.Lock()
			nm := r.notMasterLocked()
			r.mu.Unlock()
			r.failAll(ErrUnknownOutcome, nm)
		}
		if r.cfg.OnRole != nil {
			r.cfg.OnRole(info.View, info.IsPrimary)
		}
	}
}

func (r *Replicated) failPendingUpTo(index uint64) {
	for i, p := range r.pending {
		if i <= index {
			delete(r.pending, i)
			p.reply <- proposalResult{err: ErrUnknownOutcome}
		}
	}
}

// failAll answers every proposal in flight: proposed ones with proposed,
// those still queued with queued.
func (r *Replicated) failAll(proposed, queued error) {
	for i, p := range r.pending {
		delete(r.pending, i)
		p.reply <- proposalResult{err: proposed}
	}
	for {
		select {
		case p := <-r.props:
			p.reply <- proposalResult{err: queued}
		default:
			return
		}
	}
}
