package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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

// PeerChecker is implemented by a Transport that can tell that a peer's
// process is gone (PeerTransport dials its peer port). The replica asks
// when its primary has been silent a while (vr.Node.Suspect) and acts on
// a refusal at once instead of waiting out the view-change timeout.
type PeerChecker interface {
	// CheckPeer checks without blocking the caller, and calls gone (from
	// any goroutine) only when the peer's process is certainly gone.
	CheckPeer(id uint64, gone func())
}

// ReplicatedConfig configures a replicated log. Zero fields take the
// defaults of DefaultReplicatedConfig.
type ReplicatedConfig struct {
	// ID is this replica; Members the configuration a new cell starts with
	// (ignored when the replica has state on disk: the configuration is in
	// the log).
	ID      uint64
	Members vr.Members
	// Core tunes the protocol (timers, limits); ID and InitialMembers are
	// filled in from the fields above.
	Core vr.Config
	// TickInterval is the longest the node goes without being told the
	// time. Default 50 ms: half the heartbeat interval, which every timer
	// of the core is a multiple of (the primary keeps its heartbeat cadence
	// across ticks a little late). Messages from peers tell the node the
	// time too, so the loop's timer fires only after TickInterval with
	// none (it is reset by each): it bounds how late a silence is noticed,
	// and a backup that hears its primary every heartbeat wakes once
	// between two instead of twice. The driver's own timers (snapshot
	// transfers) still get a Tick at least every TickInterval under a
	// steady stream of input. (At 5 ms an idle five-replica cell spent
	// about a third more CPU on waking its loops than at 20 ms; 50 ms
	// instead of 20 ms is 30 wake-ups a second fewer per replica.)
	TickInterval time.Duration
	// SnapshotEvery: see DriverConfig. Default DefaultDriverConfig's.
	SnapshotEvery uint64
	// MaxQueue bounds proposals waiting for the loop; past it Propose fails
	// at once with ErrOverloaded. Default 16,384.
	MaxQueue int
	// MaxProposalBatch bounds commands proposed together. Default 1024.
	MaxProposalBatch int
	// Logger is the replica's logger; its lines do not name the replica,
	// so it should (the cell's carries "replica"). Default slog.Default().
	Logger *slog.Logger
	// OnBatch, if set, is told the size and write+fsync time of each
	// persisted Ready with entries.
	OnBatch func(entries, bytes int, d time.Duration)
	// OnRole, if set, is told (from the loop, once the input that caused
	// it has been carried out) when this replica becomes or stops being
	// the normal primary, with the view, and when the primary moves into a
	// new view without stopping (DriverConfig.OnRole); a replica whose
	// disk failed stops being the primary. It must not block.
	OnRole func(view uint64, primary bool)
	// OnPause, if set, is told after every input the loop carried out how
	// long the longest one took (Driver.LongestPause): while it runs,
	// nothing else reaches the replica. It must not block.
	OnPause func(d time.Duration)
	// OnConfig, if set, is told (from the loop) the configuration in force
	// at start and whenever it changes: members and their addresses, the
	// epoch. It must not block.
	OnConfig func(members vr.Members, epoch uint64)
	// Join starts a replica with nothing on disk and no Members as a
	// learner-to-be of an existing cell (vr.Config.Join).
	Join bool
	// CheckEntry, if set, is given every command entry of the log on disk
	// before anything is restored; an error refuses the start (the
	// state machine checks that it can read them: a log written by a
	// newer release is refused before any of it is applied).
	CheckEntry func(index uint64, data []byte) error
}

// NotMasterError says this replica is not the normal primary; Primary is
// the one it believes in when Known, Addr its configured client address
// (vr.Member.ClientAddr).
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

// NeverApplies reports whether a proposal's error says the log never took
// the command, so that it cannot apply later: the replica was not the
// primary in the view asked for (*NotMasterError), or its queue was full
// (ErrOverloaded). Any other error leaves the outcome unknown.
func NeverApplies(err error) bool {
	var nm *NotMasterError
	return errors.As(err, &nm) || errors.Is(err, ErrOverloaded)
}

// stallWarning: an input that keeps the loop longer than this is logged.
const stallWarning = 500 * time.Millisecond

// drainInbox steps up to 64 more batches of messages that are waiting,
// while the driver is idle, and returns dones with theirs added.
func (r *Replicated) drainInbox(d *Driver, dones []func()) []func() {
	for range 64 {
		if d.Busy() {
			return dones
		}
		select {
		case more := <-r.inbox:
			d.Step(more.msgs)
			if more.done != nil {
				dones = append(dones, more.done)
			}
		default:
			return dones
		}
	}
	return dones
}

// Replicated is the replicated log of one replica: the protocol core
// (vr.Node) carried by a Driver on one goroutine that ticks it, feeds it
// messages and proposals, and hands its writes to a disk writer on
// Storage.
type Replicated struct {
	cfg   ReplicatedConfig
	disk  *storageDisk
	d     *Driver // owned by the loop
	start time.Time

	inbox chan inbound
	props chan *proposal
	calls chan func(d *Driver) // run on the loop while the driver is idle
	stop  chan struct{}
	done  chan struct{}

	applied   atomic.Uint64
	readUntil atomic.Int64 // driver-clock ns; reads are allowed before it
	mu        sync.Mutex
	info      vr.Info
	xfer      TransferStats // as of the loop's last iteration
	core      vr.Stats      // as of the loop's last iteration
	err       error
	changed   chan struct{} // closed when View, Status or IsPrimary next change
	// configTold: OnConfig has been told the configuration (loop only).
	configTold bool
	renewed    chan struct{} // closed when readUntil next moves forward
	failed     chan struct{} // closed when the disk failed
	// pinUntil (driver clock, ns): a backup read the stored snapshot
	// lately, so no periodic snapshot replaces it before then.
	pinUntil atomic.Int64
}

// inbound is a batch of messages from a peer and what to call once it is
// processed.
type inbound struct {
	msgs []vr.Message
	done func()
}

// StartReplicated restores the replica from storage (snapshot into the
// state machine, log entries into the core) and starts its loop.
func StartReplicated(st *Storage, sm StateMachine, tr Transport, cfg ReplicatedConfig) (*Replicated, error) {
	def := DefaultReplicatedConfig()
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = def.TickInterval
	}
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = def.SnapshotEvery
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = def.MaxQueue
	}
	if cfg.MaxProposalBatch <= 0 {
		cfg.MaxProposalBatch = def.MaxProposalBatch
	}
	if cfg.Logger == nil {
		cfg.Logger = def.Logger
	}
	p, app, err := st.loadVR()
	if err != nil {
		return nil, fmt.Errorf("load replica state: %w", err)
	}
	if cfg.CheckEntry != nil {
		for _, e := range p.Entries {
			if e.Type != vr.EntryCommand {
				continue
			}
			if err := cfg.CheckEntry(e.Index, e.Data); err != nil {
				return nil, fmt.Errorf("log entry %d: %w", e.Index, err)
			}
		}
	}
	core := cfg.Core
	core.ID = cfg.ID
	core.InitialMembers = cfg.Members
	core.Join = cfg.Join
	log := cfg.Logger
	if core.Hooks.Event == nil {
		// The core's messages name their package ("vr: ...") and begin
		// with the replica's id, which this replica's logger carries
		// already: leave it out rather than log it twice.
		core.Hooks.Event = func(msg string, args ...any) {
			if len(args) >= 2 && args[0] == "replica" {
				args = args[2:]
			}
			log.Info(msg, args...)
		}
	}
	if core.Hooks.Dropped == nil {
		core.Hooks.Dropped = func(m *vr.Message, reason string) {
			log.Warn("vr: dropped a malformed message", "msg", m.String(), "reason", reason)
		}
	}
	r := &Replicated{
		cfg: cfg, start: time.Now(),
		inbox:  make(chan inbound, 1024),
		props:  make(chan *proposal, cfg.MaxQueue),
		calls:  make(chan func(*Driver)),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		failed: make(chan struct{}),
	}
	r.disk = newStorageDisk(st, cfg.MaxProposalBatch, cfg.OnBatch)
	var checkPeer func(id uint64)
	if pc, ok := tr.(PeerChecker); ok {
		checkPeer = func(id uint64) {
			pc.CheckPeer(id, func() {
				// An input for the loop; dropped if the loop is stopping
				// or busy (the core asks again a heartbeat later).
				select {
				case r.calls <- func(d *Driver) { d.PeerGone(id) }:
				case <-r.stop:
				case <-time.After(checkTimeout):
				}
			})
		}
	}
	d, err := NewDriver(core, p, app, sm, r.disk, tr, r.now, DriverConfig{
		ID: cfg.ID, SnapshotEvery: cfg.SnapshotEvery, Logger: log,
		CheckPeer:      checkPeer,
		SnapshotPinned: func() bool { return r.now() < r.pinUntil.Load() },
		OnRole:         r.roleChanged,
		OnFail: func(err error) {
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
			close(r.failed)
		},
	})
	if err != nil {
		r.disk.close()
		return nil, err
	}
	r.d = d
	r.applied.Store(d.Applied())
	r.info = d.Node().Info()
	log.Info("replica restored", "view", r.info.View, "last_op", r.info.LastOp,
		"commit", r.info.Commit, "snapshot", r.info.SnapshotIndex, "members", len(r.info.Members))
	go r.run()
	return r, nil
}

// now is the driver's monotonic clock in nanoseconds.
func (r *Replicated) now() int64 { return int64(time.Since(r.start)) }

// Now is the clock the log's lease times are on (monotonic nanoseconds):
// compare it with ReadsAllowedUntil.
func (r *Replicated) Now() int64 { return r.now() }

// Receive hands messages that arrived from other replicas to the loop and
// calls done (if not nil) once they have been processed: stepped, and the
// Ready that followed carried out, so whatever they caused (a PrepareOK
// after the fsync) has been sent. It never blocks: when the loop is that
// far behind, the messages are dropped and done is called at once.
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
	return r.propose(ctx, &proposal{entry: entry, reply: make(chan ProposalResult, 1)})
}

// ProposeInView is Propose, but the entry is proposed only if this replica
// is still the primary of view when the loop takes it;
// otherwise it fails with a *NotMasterError and was never proposed. A
// caller that prepared the command under one master epoch (the cell's
// cache invalidations) uses it so that the command cannot go into the log
// of a later view of the same replica.
func (r *Replicated) ProposeInView(ctx context.Context, view uint64, entry []byte) (any, error) {
	return r.propose(ctx, &proposal{entry: entry, view: view, inView: true, reply: make(chan ProposalResult, 1)})
}

func (r *Replicated) propose(ctx context.Context, p *proposal) (any, error) {
	entry := p.entry
	if len(entry) > vr.MaxEntryBytes {
		return nil, fmt.Errorf("propose: entry of %d bytes over the %d limit", len(entry), vr.MaxEntryBytes)
	}
	if err := r.checkPrimary(); err != nil {
		return nil, err
	}
	select {
	case <-r.done:
		return nil, r.stoppedErr()
	case r.props <- p:
	default:
		return nil, ErrOverloaded
	}
	select {
	case res := <-p.reply:
		return res.Value, res.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.done:
		select {
		case res := <-p.reply:
			return res.Value, res.Err
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
	return notMaster(r.cfg.ID, r.info)
}

// NotMaster returns the error to answer with when this replica is not the
// master, or nil when it is.
func (r *Replicated) NotMaster() *NotMasterError {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.info.IsPrimary {
		return nil
	}
	return notMaster(r.cfg.ID, r.info)
}

// CanServeReads reports whether a read may be answered from the local
// state now: this replica is the primary, holds a master lease
// acknowledged by a majority, and has applied every entry its view
// started with.
func (r *Replicated) CanServeReads() bool {
	return r.now() < r.readUntil.Load()
}

// ReadsAllowedUntil is the end (on Now's clock) of the master lease under
// which this replica may answer from its own state; 0 when it may not.
func (r *Replicated) ReadsAllowedUntil() int64 { return r.readUntil.Load() }

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

// LeaseRenewed returns a channel closed the next time the master lease is
// extended (ReadsAllowedUntil moves forward), so that a caller waiting for
// a lapsed lease to come back need not poll.
func (r *Replicated) LeaseRenewed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.renewed == nil {
		r.renewed = make(chan struct{})
	}
	return r.renewed
}

// Failed returns a channel closed when the replica's disk failed; Err then
// says how. The replica has stopped: it serves nothing and must exit.
func (r *Replicated) Failed() <-chan struct{} { return r.failed }

// Err is the disk failure that stopped the replica, or nil.
func (r *Replicated) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Applied returns the index of the last entry applied.
func (r *Replicated) Applied() uint64 { return r.applied.Load() }

// TransferStats returns the snapshot transfer counters as of the loop's
// last iteration.
func (r *Replicated) TransferStats() TransferStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.xfer
}

// CoreStats returns the protocol core's counters (view changes, probes,
// evidence of death acted on) as of the loop's last iteration.
func (r *Replicated) CoreStats() vr.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.core
}

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
		r.disk.close()
		if r.d.snapSaving {
			r.disk.FinishSnapshot()
		}
	}()
	defer func() {
		r.d.Stop()
		r.failQueued(r.stoppedErr())
	}()
	d := r.d
	d.Start()
	r.publish()
	// The timer fires TickInterval after the node was last told the time
	// (told): by a tick or by messages. ticked is the last full Tick,
	// which also runs the driver's snapshot-transfer timers.
	every := int64(r.cfg.TickInterval)
	tick := time.NewTimer(r.cfg.TickInterval)
	defer tick.Stop()
	told, ticked := r.now(), r.now()
	entries := make([][]byte, 0, r.cfg.MaxProposalBatch)
	replies := make([]Reply, 0, r.cfg.MaxProposalBatch)
	var dones []func()
	defer func() {
		for _, f := range dones {
			f()
		}
	}()
	for {
		// While the driver waits for its disk, only completions reach it.
		var inbox <-chan inbound
		var props <-chan *proposal
		var tickC <-chan time.Time
		var calls <-chan func(*Driver)
		if !d.Busy() {
			inbox, props, tickC, calls = r.inbox, r.props, tick.C, r.calls
		}
		var what string // the input, for the stall warning
		select {
		case <-r.stop:
			return
		case <-tickC:
			what = "tick"
			// Messages that arrived while the loop was away go in first:
			// a backup counts its primary's silence from the last message
			// it was given.
			dones = r.drainInbox(d, dones)
			if !d.Busy() {
				d.Tick()
				ticked = r.now()
			}
			told = r.now()
		case in := <-inbox:
			what = "messages"
			d.Step(in.msgs)
			if in.done != nil {
				dones = append(dones, in.done)
			}
			dones = r.drainInbox(d, dones)
			told = r.now()
		case p := <-props:
			what = "proposals"
			entries, replies = entries[:0], replies[:0]
			entries, replies = r.take(d, p, entries, replies)
		more:
			for len(entries) < r.cfg.MaxProposalBatch {
				select {
				case p := <-r.props:
					entries, replies = r.take(d, p, entries, replies)
				default:
					break more
				}
			}
			if len(entries) > 0 {
				d.Propose(entries, replies)
			}
			clear(replies)
		case <-r.disk.note:
			what = "disk completions"
			for _, c := range r.disk.take() {
				d.Written(c.w, c.err)
			}
		case res := <-r.disk.snapDone:
			what = "snapshot saved"
			d.SnapshotSaved(res)
		case f := <-calls:
			what = "call"
			f(d)
		}
		if now := r.now(); d.Err() == nil && !d.Busy() && now-ticked >= every {
			// A steady stream of input keeps the timer from firing.
			d.Tick()
			told, ticked = now, now
		}
		pause := d.LongestPause()
		if pause > stallWarning {
			r.cfg.Logger.Warn("replica loop stalled: nothing else reached the replica meanwhile", "input", what, "took", pause)
		}
		if r.cfg.OnPause != nil {
			r.cfg.OnPause(pause)
		}
		r.applied.Store(d.Applied())
		r.publish()
		if d.Err() != nil {
			return // fail-stop: the disk failed
		}
		if !d.Busy() {
			for i, f := range dones {
				f()
				dones[i] = nil
			}
			dones = dones[:0]
			tick.Reset(time.Duration(told + every - r.now()))
		}
	}
}

// take adds p to the batch, or refuses it when it was made for a view the
// node is no longer in.
func (r *Replicated) take(d *Driver, p *proposal, entries [][]byte, replies []Reply) ([][]byte, []Reply) {
	if p.inView {
		if err := d.CheckView(p.view); err != nil {
			p.Answer(ProposalResult{Err: err})
			return entries, replies
		}
	}
	return append(entries, p.entry), append(replies, Reply(p))
}

// roleChanged is the driver's OnRole: proposals still queued for the loop
// were never proposed, so they are refused with NOT_MASTER when the
// replica stops being the primary.
func (r *Replicated) roleChanged(view uint64, primary bool) {
	if !primary {
		r.failQueued(r.d.NotMaster())
	}
	if r.cfg.OnRole != nil {
		r.cfg.OnRole(view, primary)
	}
}

func (r *Replicated) failQueued(err error) {
	for {
		select {
		case p := <-r.props:
			p.Answer(ProposalResult{Err: err})
		default:
			return
		}
	}
}

// publish makes the loop's view of the protocol visible to other
// goroutines. A replica whose disk failed publishes that it is nobody's
// primary and may serve nothing.
func (r *Replicated) publish() {
	node := r.d.Node()
	info := node.Info()
	until, ok := node.ReadsAllowedUntil()
	if !ok || r.d.Err() != nil {
		until = 0
	}
	if r.d.Err() != nil {
		info.IsPrimary = false
		info.Status = vr.StatusViewChange
	}
	old := r.readUntil.Swap(until)
	r.mu.Lock()
	prev := r.info
	configChanged := prev.Epoch != info.Epoch || !slices.Equal(prev.Members, info.Members)
	r.info = info
	r.xfer = r.d.TransferStats()
	r.core = node.Stats()
	if r.changed != nil && (prev.View != info.View || prev.Status != info.Status || prev.IsPrimary != info.IsPrimary) {
		close(r.changed)
		r.changed = nil
	}
	if r.renewed != nil && until > old {
		close(r.renewed)
		r.renewed = nil
	}
	r.mu.Unlock()
	if (configChanged || !r.configTold) && r.cfg.OnConfig != nil {
		r.configTold = true
		r.cfg.OnConfig(info.Members, info.Epoch)
	}
}

// call runs f on the loop while the driver is idle and waits for it.
func (r *Replicated) call(ctx context.Context, f func(d *Driver)) error {
	done := make(chan struct{})
	select {
	case r.calls <- func(d *Driver) { f(d); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return r.stoppedErr()
	}
	<-done
	return nil
}

// BackupPin is how long a read of the stored snapshot (SnapshotNow,
// ReadSnapshotChunk) keeps it from being replaced by a periodic one, so
// that a backup that reads chunk after chunk finds them all.
const BackupPin = 30 * time.Second

// SnapshotNow stores a snapshot of the state as it is now, as the
// periodic ones are (the state machine captures it between two Applies
// and encodes it off the loop, the disk stores it off the loop), and
// returns its description; a snapshot already stored at the applied index
// is used as it is. It is kept for BackupPin, and for BackupPin after each
// ReadSnapshotChunk: a backup reads it from the disk chunk by chunk, and
// the replica does not serialize its state for it.
func (r *Replicated) SnapshotNow(ctx context.Context) (ChunkInfo, error) {
	r.pinUntil.Store(r.now() + int64(BackupPin))
	type result struct {
		index uint64
		err   error
	}
	ch := make(chan result, 1)
	if err := r.call(ctx, func(d *Driver) {
		d.RequestSnapshot(func(index uint64, err error) { ch <- result{index, err} })
	}); err != nil {
		return ChunkInfo{}, err
	}
	var res result
	select {
	case res = <-ch:
	case <-ctx.Done():
		return ChunkInfo{}, ctx.Err()
	case <-r.done:
		return ChunkInfo{}, r.stoppedErr()
	}
	if res.err != nil {
		return ChunkInfo{}, res.err
	}
	_, info, err := r.ReadSnapshotChunk(res.index, 0)
	return info, err
}

// ReadSnapshotChunk returns chunk n of the stored snapshot, which must be
// the one at index (else an error wrapping ErrNoSnapshot), read from the
// disk off the loop, and keeps the snapshot for BackupPin more. The bytes
// are the snapshot as stored: the protocol's envelope, then the state
// machine's snapshot (DecodeStoredSnapshot).
func (r *Replicated) ReadSnapshotChunk(index uint64, n uint32) ([]byte, ChunkInfo, error) {
	r.pinUntil.Store(r.now() + int64(BackupPin))
	return r.disk.st.ReadSnapshotChunk(index, n)
}

// ProposeConfig proposes a configuration change on the primary
// (vr.Node.ProposeConfig) and returns its log index; off the primary it
// fails with *NotMasterError. The change is in force once Info shows it.
func (r *Replicated) ProposeConfig(ctx context.Context, next vr.Members, retire ...uint64) (uint64, error) {
	var i uint64
	var err error
	if cerr := r.call(ctx, func(d *Driver) { i, err = d.ProposeConfig(next, retire...) }); cerr != nil {
		return 0, cerr
	}
	return i, err
}

// Progress returns what the primary knows of each member (nil off the
// primary), with LastAck turned into the time since it, and the
// primary's commit number.
func (r *Replicated) Progress(ctx context.Context) ([]MemberProgress, uint64, error) {
	var out []MemberProgress
	var commit uint64
	err := r.call(ctx, func(d *Driver) {
		n := d.Node()
		now := r.now()
		commit = n.Info().Commit
		for _, p := range n.Progress() {
			mp := MemberProgress{Progress: p, SinceAck: -1}
			if p.LastAck > 0 {
				mp.SinceAck = time.Duration(now - p.LastAck)
			}
			out = append(out, mp)
		}
	})
	return out, commit, err
}

// MemberProgress is a member's progress as the primary sees it; SinceAck
// is the time since its last acknowledgement, -1 if none in this view.
type MemberProgress struct {
	vr.Progress
	SinceAck time.Duration
}

// proposal is one Propose call waiting for the loop; its outcome comes
// back on reply.
type proposal struct {
	entry  []byte
	view   uint64 // with inView: propose only in this view
	inView bool
	reply  chan ProposalResult
}

// Answer implements Reply.
func (p *proposal) Answer(res ProposalResult) { p.reply <- res }
