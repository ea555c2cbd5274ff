package vr

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Node is one replica's protocol state machine. It does no I/O and keeps no
// clock: the driver feeds it messages (Step), the passing of time (Tick) and
// proposals (Propose), and carries out what Ready returns. A Node is not
// safe for concurrent use.
type Node struct {
	cfg Config
	id  uint64

	// The configuration in force (reconfig.go): its voters in order, the
	// other members (voters and learners) in order, a majority of the
	// voters, and whether this replica is a voter.
	conf   Configuration
	voters []uint64
	peers  []uint64
	quorum int
	voter  bool
	// base is the configuration at the start of the in-memory log, confs
	// the configuration entries after it; pending a voter change not yet
	// committed (index 0: none); confDirty says confs changed since the
	// configuration was last worked out.
	base      Configuration
	confs     []confAt
	pending   confAt
	confDirty bool
	confIndex uint64 // Info.ConfigIndex

	// Durations in clock units (nanoseconds).
	hb, vcTimeout, suspectAfter, leaseWait, leaseHold, stepDown int64

	view   uint64
	lnv    uint64
	status Status
	log    memLog
	// snap is the latest snapshot the application stored (what is sent to
	// a replica that needs compacted entries). The in-memory log may start
	// before it (Config.CompactMargin), never after.
	snap SnapshotMeta

	commit  uint64 // entries up to commit are known committed
	applied uint64 // entries up to applied were handed out in Ready.Committed
	// verified: the log matches the log of the view's primary (or, while
	// the new primary reconciles, the best log) up to here. It never
	// drops below commit; in StatusNormal it equals the last index.
	verified   uint64
	startOp    uint64 // the view's start log ends here (when startKnown)
	startKnown bool

	now int64
	// live is the time this replica ran: it advances with now, but by at
	// most HeartbeatInterval per Tick, so a replica starved of CPU (or
	// whose loop was busy) does not count its own stall as silence of its
	// primary. Silence and the primary's step-down are measured on it;
	// leases and promises, which safety rests on, on now.
	live       int64
	promiseEnd int64 // promised not to join a newer view before this
	// promiseOwed: a lease round arrived since the last Tick. Its promise
	// counts from a clock reading taken after the arrival (the next
	// Tick's), never from the last one, which may predate the round; until
	// then the promise end is unknown and no DoViewChange goes out.
	promiseOwed bool
	lastHeard   int64 // last message from the primary of the view (live time)
	ackStamp    uint64
	// primaryGone: the driver found the process of this view's primary
	// gone (PeerGone), evidence of death that silence is not. suspect is
	// the replica the driver is asked to check (Suspect), nextCheck when
	// it may be asked again.
	primaryGone bool
	suspect     uint64
	nextCheck   int64
	// granted is the highest view this replica granted a probe for: it
	// joins that view when asked, however far ahead it is.
	granted uint64
	// ahead: the highest view each voter was heard changing to (a
	// StartViewChange or DoViewChange), for quorumAhead.
	ahead map[uint64]uint64
	// stranded: when (live time) the primary first heard each voter
	// changing to a view after its own (strandedFor).
	stranded map[uint64]int64

	// Primary state.
	primarySince int64 // when this node became the normal primary (live time)
	// carried is the end (node clock) of the lease the previous epoch's
	// voters granted, kept in view carriedView, the first view of the
	// epoch this primary carried on into (carryOn).
	carried          int64
	carriedView      uint64
	prs              map[uint64]*progress
	stamp            uint64           // lease round
	stampAt          [stampRing]int64 // when each round began (now)
	stampLive        [stampRing]int64 // when each round began (live time)
	nextHeartbeat    int64
	uncommittedBytes int

	// View change state.
	svcs        map[uint64]bool     // StartViewChange (or DoViewChange) heard for view
	dvcs        map[uint64]*dvcInfo // at the new primary
	dvcSent     bool
	dvcSentAt   int64
	nextSVC     int64
	vcStarted   int64
	vcDeadline  int64
	reconciling bool
	best        *dvcInfo
	newCommit   uint64
	nextFetch   int64

	// Probe (pre-vote) state.
	probeView   uint64
	probeGrants map[uint64]bool
	nextProbe   int64

	// A replica that left the voters announces the new epoch until
	// announceUntil (enterEpoch).
	announceUntil, nextAnnounce int64
	// nextCatchUp: when a replica behind a later epoch may next ask for
	// the committed log (requestCatchUp).
	nextCatchUp int64

	// Persistence bookkeeping.
	hsDisk        HardState
	mustSync      bool
	persistedLast uint64 // last index on disk
	unstableFrom  uint64 // first index not yet handed out for disk
	truncFrom     uint64 // 0, or: delete from disk the entries >= truncFrom
	pendingSnap   *Snapshot
	msgs          []Message
	readyOut      bool
	rdLast        uint64
	rdApplied     uint64
	rdHS          HardState
	rdAsync       bool

	stats Stats
}

// Stats counts what the node did, for metrics.
type Stats struct {
	Dropped            uint64 // messages refused as malformed or impossible
	ViewChanges        uint64 // views entered through a view change
	BecamePrimary      uint64
	CarriedOn          uint64 // new epochs entered as their primary without a view change (carryOn)
	SnapshotsSent      uint64
	SnapshotsInstalled uint64
	Probes             uint64
	Suspicions         uint64 // a silent primary's process to be checked (Suspect)
	PeersGone          uint64 // evidence of a primary's death acted on (PeerGone)
}

// Info describes the node's state.
type Info struct {
	ID             uint64
	View           uint64
	LastNormalView uint64
	Status         Status
	Primary        uint64 // the primary of View
	IsPrimary      bool   // this node is the normal primary
	LastOp         uint64
	Commit         uint64
	Applied        uint64
	Persisted      uint64 // last entry known durable on this replica's disk
	SnapshotIndex  uint64
	// Members is the configuration in force, of epoch Epoch; Voter says
	// this replica is one of its voters. PendingConfig is the index of a
	// voter change not yet known committed (0: none).
	Members       Members
	Epoch         uint64
	Voter         bool
	PendingConfig uint64
	// Retired: replicas an operator took out (Configuration.Retired).
	Retired []uint64
	// ConfigIndex is a log index at which Members is in force: that of the
	// configuration entry that put it in force, or of the snapshot that
	// holds it. Of two replicas' configurations, one in force at an index
	// past the other's whole log is the newer.
	ConfigIndex uint64
}

type progress struct {
	next        uint64   // next index to send
	match       uint64   // acknowledged by the backup as normal in this view
	reported    uint64   // the backup's verified index, as last reported
	normal      bool     // the backup said it is normal in this view
	ackStamp    uint64   // lease round acknowledged
	voter       bool     // a voter (counts in quorums), not a learner
	lastAck     int64    // when its last acknowledgement arrived
	knownCommit uint64   // the backup's commit, from its DoViewChange
	inflight    []uint64 // last index of each Prepare not yet acknowledged
	hbMatch     uint64   // reported at the previous heartbeat
	nextSV      int64    // earliest time to resend StartView
	snapUntil   int64    // a snapshot is in flight until then
}

type dvcInfo struct {
	from               uint64
	lnv, op, opView    uint64
	commit             uint64
	anchor, anchorView uint64
	runs               []Run
	final              bool
}

const stampRing = 64

// NewNode starts a replica from what its disk holds. now is the driver's
// monotonic clock in nanoseconds. A new replica (empty p) starts from
// cfg.InitialMembers, and its first Ready persists the configuration
// entry; or, with cfg.Join, with an empty log, passive until a primary
// that added it sends it the log.
//
// A replica that held a lease promise before it stopped cannot know when
// it made it, so it waits a whole lease before joining a new view. A
// replica that was the normal primary of its view does not resume: it may
// have lost entries it had sent but not persisted, so it starts a view
// change at once.
func NewNode(cfg Config, p Persisted, now int64) (*Node, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, id: cfg.ID, now: now}
	n.hb = int64(cfg.HeartbeatInterval)
	n.vcTimeout = int64(cfg.ViewChangeTimeout)
	n.suspectAfter = int64(cfg.SuspectAfter)
	n.leaseWait = int64(float64(cfg.LeaseDuration) * (1 + MaxClockDrift))
	n.leaseHold = int64(float64(cfg.LeaseDuration) * (1 - MaxClockDrift))
	n.stepDown = n.leaseHold + n.vcTimeout
	n.promiseEnd = now + n.leaseWait
	n.live = now
	n.lastHeard = now

	switch {
	case !p.Empty():
		if err := n.restore(p); err != nil {
			return nil, err
		}
	case cfg.Join:
		n.unstableFrom = 1
		n.status = StatusRecovering
	case cfg.InitialMembers == nil:
		return nil, ErrNotBootstrapped
	default:
		if err := n.bootstrap(cfg.InitialMembers); err != nil {
			return nil, err
		}
	}
	n.checkInvariants()
	return n, nil
}

// bootstrap starts a new cell's replica: entry 1 is the configuration.
func (n *Node) bootstrap(members Members) error {
	if err := members.Validate(); err != nil {
		return err
	}
	if !members.IsVoter(n.id) {
		return fmt.Errorf("vr: replica %d is not a voter of the initial configuration", n.id)
	}
	n.appendEntry(Entry{Index: 1, View: 0, Type: EntryConfig, Data: EncodeConfig(Configuration{Members: members})})
	n.commit = 1 // the same on every replica by construction
	n.settle()
	n.unstableFrom = 1
	n.verified = 1
	n.status = StatusNormal
	n.mustSync = true
	if n.primaryOf(0) == n.id {
		n.startOp = 1
		n.becomePrimaryState()
	}
	return nil
}

func (n *Node) restore(p Persisted) error {
	hs := p.HardState
	if hs.LastNormalView > hs.View || hs.View >= maxView {
		return fmt.Errorf("vr: corrupt hard state %+v", hs)
	}
	if p.Snapshot != nil {
		if err := p.Snapshot.Members.Validate(); err != nil {
			return fmt.Errorf("vr: snapshot: %w", err)
		}
		if p.Snapshot.Index == 0 || p.Snapshot.Index >= maxIndex || p.Snapshot.View > hs.View || p.Snapshot.Epoch >= maxEpoch {
			return fmt.Errorf("vr: corrupt snapshot meta %+v", *p.Snapshot)
		}
		n.log.reset(p.Snapshot.Index, p.Snapshot.View)
		n.snap = p.Snapshot.Clone()
		n.base = p.Snapshot.Config()
	}
	for i, e := range p.Entries {
		if e.View > hs.View && e.Index == n.log.lastIndex()+1 {
			// A write torn after its entries, before its hard state: the
			// entries came with a newer view that never reached the disk,
			// so nothing was acknowledged of them (messages leave after
			// the whole write). Drop them, here and on disk.
			n.truncFrom = e.Index
			break
		}
		if e.Index != n.log.lastIndex()+1 || e.View < n.log.lastView() || !e.Type.valid() {
			return fmt.Errorf("vr: corrupt log at entry %d (index %d, view %d)", i, e.Index, e.View)
		}
		if e.Type == EntryConfig {
			if _, err := DecodeConfig(e.Data); err != nil {
				return fmt.Errorf("vr: log entry %d: %w", e.Index, err)
			}
		}
		n.appendEntry(e)
	}
	if len(n.base.Members) == 0 && len(n.confs) == 0 && (n.log.lastIndex() > 0 || !n.cfg.Join) {
		return errors.New("vr: no configuration on disk (no snapshot and no configuration entry)")
	}
	n.view, n.lnv = hs.View, hs.LastNormalView
	n.applied = n.log.snapIndex
	n.commit = max(n.log.snapIndex, min(hs.Commit, n.log.lastIndex()))
	n.persistedLast = n.log.lastIndex()
	n.unstableFrom = n.log.lastIndex() + 1
	n.hsDisk = hs
	n.verified = n.commit
	n.loadConfig()
	switch {
	case n.passive():
		// A learner, a removed replica or one behind its view's epoch
		// waits for a primary to speak to it.
		n.status = StatusRecovering
	case epochOf(n.view) < n.conf.Epoch:
		n.status = StatusViewChange
		n.startViewChange(firstView(n.conf))
	case n.lnv == n.view && n.primaryOf(n.view) == n.id:
		// We were the primary: entries we sent but had not persisted may
		// be on backups, so this view cannot go on with us.
		n.status = StatusViewChange
		if w, ok := n.nextView(); ok {
			n.startViewChange(w)
		} else {
			n.resetViewChange()
		}
	case n.lnv == n.view:
		n.status = StatusNormal
		n.verified = n.log.lastIndex()
	default:
		n.status = StatusViewChange
		n.resetViewChange()
	}
	return nil
}

// primaryOf returns the primary of view v by the configuration in force
// (meaningful when primaryKnown(v); 0 when there are no voters yet).
func (n *Node) primaryOf(v uint64) uint64 {
	if len(n.voters) == 0 {
		return 0
	}
	return n.voters[v%uint64(len(n.voters))]
}

func (n *Node) isPrimary() bool {
	return n.status == StatusNormal && n.voter && n.primaryOf(n.view) == n.id && epochOf(n.view) == n.conf.Epoch
}

func (n *Node) event(msg string, args ...any) {
	if n.cfg.Hooks.Event != nil {
		n.cfg.Hooks.Event(msg, append([]any{"replica", n.id, "view", n.view}, args...)...)
	}
}

func (n *Node) drop(m *Message, reason string) {
	n.stats.Dropped++
	if n.cfg.Hooks.Dropped != nil {
		n.cfg.Hooks.Dropped(m, reason)
	}
}

func (n *Node) send(m Message) {
	m.From = n.id
	n.msgs = append(n.msgs, m)
}

// forgetOlderViews drops the queued messages of views before w, once this
// node has moved to w: they would go out after w is on disk, and a replica
// never acknowledges (or says anything in) a view older than its own.
// Probes name the view asked about and stay.
func (n *Node) forgetOlderViews(w uint64) {
	kept := n.msgs[:0]
	for _, m := range n.msgs {
		if m.View >= w || m.Type == MsgProbe || m.Type == MsgProbeReply {
			kept = append(kept, m)
		}
	}
	clear(n.msgs[len(kept):])
	n.msgs = kept
}

// broadcast sends m to the other voters (probes and view changes concern
// them only).
func (n *Node) broadcast(m Message) {
	for _, id := range n.voters {
		if id != n.id {
			m.To = id
			n.send(m)
		}
	}
}

// ErrInvalidMessage wraps the reason a message was refused.
var ErrInvalidMessage = errors.New("vr: invalid message")

// Step feeds one message from a peer. A malformed or impossible message is
// dropped (counted, reported to Hooks.Dropped) and returned as an error
// wrapping ErrInvalidMessage; the node's state is unchanged by it.
func (n *Node) Step(m Message) error {
	n.mustNotBeReady()
	if n.outsider(&m) {
		return nil
	}
	reason := n.validate(&m)
	if reason == "" && m.View > n.view+1 && m.View&viewCounterMask >= farViewCounter {
		reason = "a view near the end of its epoch, more than one ahead"
	}
	if reason != "" {
		n.drop(&m, reason)
		return fmt.Errorf("%w: %s: %s", ErrInvalidMessage, m.String(), reason)
	}
	switch m.Type {
	case MsgPrepare:
		n.onPrepare(&m)
	case MsgPrepareOK:
		n.onPrepareOK(&m)
	case MsgCommit:
		n.onCommit(&m)
	case MsgProbe:
		n.onProbe(&m)
	case MsgProbeReply:
		n.onProbeReply(&m)
	case MsgStartViewChange:
		n.onStartViewChange(&m)
	case MsgDoViewChange:
		n.onDoViewChange(&m)
	case MsgStartView:
		n.onStartView(&m)
	case MsgGetLog:
		n.onGetLog(&m)
	case MsgLog:
		n.onLog(&m)
	case MsgSnapshot:
		n.onSnapshot(&m)
	}
	n.settle()
	n.checkInvariants()
	return nil
}

// outsider reports whether m comes from a replica outside the
// configuration of m's view's epoch, which this node holds: a replica
// removed (or not yet added) still sends what it sent before it heard.
// Such a message is stale, not malformed, and is ignored. (A replica that
// cannot judge — a learner-to-be, one behind its view's epoch — hears
// whoever speaks for a newer view.)
func (n *Node) outsider(m *Message) bool {
	return !n.passive() && epochOf(m.View) == n.conf.Epoch && !n.conf.Members.Contains(m.From)
}

// Tick tells the node the time: now is the driver's monotonic clock in
// nanoseconds (a smaller value than before is ignored). Call it every few
// milliseconds, and after feeding the messages that arrived: a backup
// counts the primary's silence from the last message it was given.
func (n *Node) Tick(now int64) {
	n.mustNotBeReady()
	if now > n.now {
		n.live += min(now-n.now, n.hb)
		n.now = now
	}
	if n.promiseOwed {
		n.promiseEnd = max(n.promiseEnd, n.now+n.leaseWait)
		n.promiseOwed = false
	}
	switch {
	case n.passive():
		// Learners, removed replicas and replicas behind their view's
		// epoch decide nothing: they wait for a primary.
		if n.now < n.announceUntil && n.now >= n.nextAnnounce && n.silence() >= n.hb {
			n.announce()
		}
	case n.isPrimary() && n.quorumLost():
		// A primary no quorum answers holds no lease and can serve
		// nothing; the backups may well hear its heartbeats (it is deaf
		// one way) and never change views by themselves. Start the next
		// view: whoever hears of it joins.
		if w, ok := n.nextView(); ok {
			n.event("vr: primary stepping down: no quorum acknowledged it", "for", time.Duration(n.live-n.lastQuorumLive()))
			n.startViewChange(w)
		}
	case n.isPrimary():
		if n.now >= n.nextHeartbeat {
			n.heartbeat()
		}
	case n.status == StatusViewChange:
		n.tickViewChange()
	default:
		// A backup: patient on silence, fast on evidence of death.
		switch s := n.silence(); {
		case s >= n.vcTimeout || n.primaryGone:
			n.probeNext()
		case s >= n.suspectAfter:
			n.suspectPrimary()
		}
	}
	n.settle()
	n.checkInvariants()
}

// silence is how long this replica has run without hearing from the
// primary of its view.
func (n *Node) silence() int64 { return n.live - n.lastHeard }

// hearsPrimary reports whether this replica has a working primary: it is
// the normal primary and a quorum acknowledged it within a view-change
// timeout (of live time), or a backup that heard its primary within one
// and has no evidence that its process is gone. A replica that hears its
// primary joins no newer view on another replica's word (onStartViewChange,
// onDoViewChange) and grants no probe: one replica, confused, stale or with
// a bad clock, cannot depose a primary the others still hear.
func (n *Node) hearsPrimary() bool {
	switch {
	case n.passive() || n.status == StatusViewChange || epochOf(n.view) != n.conf.Epoch:
		return false
	case n.isPrimary():
		return n.live-n.lastQuorumLive() < n.vcTimeout
	default:
		return !n.primaryGone && n.silence() < n.vcTimeout
	}
}

// suspectPrimary asks the driver, at most once a heartbeat interval, to
// check whether the process of the primary being waited for is still
// there (Suspect).
func (n *Node) suspectPrimary() {
	if p := n.primaryOf(n.view); p != n.id && p != 0 && n.now >= n.nextCheck {
		n.suspect = p
		n.nextCheck = n.now + n.hb
		n.stats.Suspicions++
	}
}

// Suspect returns the replica whose process the driver should check, and
// forgets it: the primary of this backup's view after SuspectAfter of
// silence (or the primary of a view being formed that has not started it
// by then), at most once a heartbeat interval. The driver checks without
// blocking the node (the cell dials its peer port) and, when the process
// is certainly gone (the connection is refused: nothing listens there),
// calls PeerGone. Anything less (a timeout, a slow answer) is no evidence
// and is not reported.
func (n *Node) Suspect() (id uint64, ok bool) {
	id, n.suspect = n.suspect, 0
	return id, id != 0
}

// PeerGone tells the node that the process of replica id is gone (its peer
// port refused a connection). A backup whose primary it is probes for the
// next view at once instead of waiting out ViewChangeTimeout; a replica
// whose view change waits for id as the new primary moves on to the next
// view. The evidence shortens detection only: a new view still waits out
// every lease promise (Tick, maybeSendDVC), so the lease rule holds even if
// the evidence is wrong (a firewall that refuses, say). A report that came
// after the primary was heard from again is ignored.
func (n *Node) PeerGone(id uint64) {
	n.mustNotBeReady()
	switch {
	case n.passive() || n.isPrimary() || id == n.id || id != n.primaryOf(n.view):
	case n.status == StatusViewChange:
		n.stats.PeersGone++
		n.primaryGone = true
		n.vcDeadline = min(n.vcDeadline, n.now)
		n.tickViewChange()
	case n.silence() >= n.suspectAfter:
		n.stats.PeersGone++
		n.primaryGone = true
		n.probeNext()
	}
	n.settle()
	n.checkInvariants()
}

// Propose appends commands to the log of the normal primary and returns the
// index of the first (they get consecutive indexes). It fails with a
// *NotPrimaryError elsewhere, ErrTooLarge for an entry over MaxEntryBytes,
// ErrOverloaded when the uncommitted entries would exceed their bounds. An
// index is not a promise: the entry commits only if the view survives;
// the application learns the outcome from Ready.Committed (a different
// entry at that index means the proposal was lost).
func (n *Node) Propose(cmds ...[]byte) (first uint64, err error) {
	n.mustNotBeReady()
	if !n.isPrimary() || n.pending.index != 0 {
		// With a voter change uncommitted the epoch takes no more entries;
		// its first view of the next epoch is moments away.
		return 0, n.notPrimary()
	}
	if len(cmds) == 0 {
		return n.log.lastIndex() + 1, nil
	}
	total := 0
	for _, c := range cmds {
		if len(c) > MaxEntryBytes {
			return 0, ErrTooLarge
		}
		total += len(c)
	}
	if n.log.lastIndex()-n.commit+uint64(len(cmds)) > uint64(n.cfg.MaxUncommittedEntries) ||
		n.uncommittedBytes+total > n.cfg.MaxUncommittedBytes {
		return 0, ErrOverloaded
	}
	first = n.log.lastIndex() + 1
	for i, c := range cmds {
		n.appendEntry(Entry{Index: first + uint64(i), View: n.view, Type: EntryCommand, Data: c})
	}
	n.uncommittedBytes += total
	n.verified = n.log.lastIndex()
	n.checkInvariants()
	return first, nil
}

func (n *Node) notPrimary() error {
	_, known := n.PrimaryHint()
	return &NotPrimaryError{View: n.view, Primary: n.primaryOf(n.view), Known: known}
}

// PrimaryHint returns the primary this replica believes in, for NOT_MASTER
// answers: the primary of its view, heard from less than a view-change
// timeout ago. ok is false during a view change, and when this replica
// has not heard from it lately: a replica removed from the cell, or cut
// off, would otherwise send clients to a primary that is gone (two such
// replicas can send a client back and forth between them for ever).
func (n *Node) PrimaryHint() (id uint64, ok bool) {
	if n.status == StatusViewChange || !n.primaryKnown(n.view) || n.isPrimary() || n.primaryGone || n.silence() >= n.vcTimeout {
		return 0, false
	}
	return n.primaryOf(n.view), true
}

// LeaseValid reports whether this node is the normal primary and holds a
// master lease at time now: a quorum (itself included) acknowledged a
// heartbeat round it started less than LeaseDuration·(1−MaxClockDrift)
// ago, or, in the first view of an epoch it carried on into, the lease of
// the previous epoch has not ended (reconfig.go, "The primary carries
// on"). While it holds, no other replica can complete a view change.
func (n *Node) LeaseValid(now int64) bool {
	end, ok := n.leaseEnd()
	return ok && max(now, n.now) < end
}

// CanServeReads reports whether the application may answer reads from its
// own state at time now: this node is the normal primary, holds the lease,
// and has committed and applied the whole log its view started with (so
// everything any earlier primary acknowledged is in the state).
func (n *Node) CanServeReads(now int64) bool {
	return n.LeaseValid(now) && n.commit >= n.startOp && n.applied >= n.startOp
}

// Info returns a summary of the node's state.
func (n *Node) Info() Info {
	return Info{
		ID: n.id, View: n.view, LastNormalView: n.lnv, Status: n.status,
		Primary: n.primaryOf(n.view), IsPrimary: n.isPrimary(),
		LastOp: n.log.lastIndex(), Commit: n.commit, Applied: n.applied, Persisted: n.persistedLast,
		SnapshotIndex: n.snap.Index, Members: n.conf.Members.Clone(), Epoch: n.conf.Epoch, Voter: n.voter,
		PendingConfig: n.pending.index, Retired: slices.Clone(n.conf.Retired), ConfigIndex: n.confIndex,
	}
}

// View returns the node's view number (cheaper than Info).
func (n *Node) View() uint64 { return n.view }

// IsPrimary reports whether this node is the normal primary of its view
// (cheaper than Info).
func (n *Node) IsPrimary() bool { return n.isPrimary() }

// Stats returns the node's counters.
func (n *Node) Stats() Stats { return n.stats }

// SnapshotMeta returns the metadata of a snapshot of the application state
// after applying index, which must be applied and not compacted. The
// application stores it with its snapshot, then calls Compact.
func (n *Node) SnapshotMeta(index uint64) (SnapshotMeta, error) {
	v, ok := n.log.viewAt(index)
	if index > n.applied || !ok {
		return SnapshotMeta{}, fmt.Errorf("vr: no snapshot at %d: applied %d, log from %d", index, n.applied, n.log.snapIndex)
	}
	meta := SnapshotMeta{Index: index, View: v}
	meta.SetConfig(n.configAt(index))
	return meta, nil
}

// Compact tells the node that the application has durably stored a
// snapshot with meta (as SnapshotMeta returned it, possibly some steps
// ago: the driver may store it while the node goes on): from now on the
// node sends that snapshot to replicas that need entries it no longer
// holds, and it drops from memory the entries up to meta.Index, keeping the
// last Config.CompactMargin of them for backups that lag a little.
// meta.Index must be applied and persisted. A snapshot at or below the
// current one (one was installed meanwhile) changes nothing.
func (n *Node) Compact(meta SnapshotMeta) error {
	n.mustNotBeReady()
	index := meta.Index
	if index > n.applied || index > n.persistedLast {
		return fmt.Errorf("vr: compact %d beyond applied %d or persisted %d", index, n.applied, n.persistedLast)
	}
	if index <= n.snap.Index {
		return nil
	}
	if v, ok := n.log.viewAt(index); !ok || v != meta.View {
		return fmt.Errorf("vr: compact %d: snapshot of view %d, the log has %d (%v)", index, meta.View, v, ok)
	}
	n.snap = meta.Clone()
	if keep := uint64(n.cfg.CompactMargin); index > keep {
		n.log.compact(index - keep)
		n.compactConfs()
	}
	n.unstableFrom = max(n.unstableFrom, n.log.snapIndex+1)
	n.checkInvariants()
	return nil
}

// HasReady reports whether Ready has work.
func (n *Node) HasReady() bool {
	n.mustNotBeReady()
	n.flushAppends()
	return n.pendingSnap != nil || n.truncFrom > 0 || n.unstableFrom <= n.log.lastIndex() ||
		n.hardState() != n.hsDisk || len(n.msgs) > 0 || n.applied < n.commit
}

func (n *Node) hardState() HardState {
	return HardState{View: n.view, LastNormalView: n.lnv, Commit: n.commit}
}

// Ready returns the pending work; see Ready for what the driver must do,
// then call Advance.
func (n *Node) Ready() Ready {
	n.mustNotBeReady()
	n.flushAppends()
	var rd Ready
	if hs := n.hardState(); hs != n.hsDisk {
		rd.HardState = &hs
	}
	rd.Snapshot = n.pendingSnap
	rd.TruncateFrom = n.truncFrom
	last := n.log.lastIndex()
	if n.unstableFrom <= last {
		if n.unstableFrom <= n.log.snapIndex {
			broken("ready: unstable %d inside snapshot %d", n.unstableFrom, n.log.snapIndex)
		}
		rd.Entries = slices.Clone(n.log.entries[n.unstableFrom-n.log.snapIndex-1:])
	}
	rd.MustSync = n.mustSync || len(rd.Entries) > 0 || rd.TruncateFrom > 0 || rd.Snapshot != nil
	rd.Messages, n.msgs = n.msgs, nil
	if n.isPrimary() && n.hsDisk.View == n.view && n.hsDisk.LastNormalView == n.view {
		rd.EarlyMessages, rd.Messages = splitEarly(rd.Messages)
		rd.PersistAsync = rd.Snapshot == nil && rd.TruncateFrom == 0 && len(rd.Messages) == 0
	}
	if n.applied < n.commit {
		size := 0
		for i := n.applied + 1; i <= n.commit; i++ {
			e := n.log.at(i)
			size += len(e.Data)
			if len(rd.Committed) > 0 && size > n.cfg.MaxApplyBytes {
				break
			}
			rd.Committed = append(rd.Committed, *e)
		}
	}
	n.rdLast = last
	n.rdApplied = n.applied + uint64(len(rd.Committed))
	n.rdHS = n.hardState()
	n.rdAsync = rd.PersistAsync
	n.readyOut = true
	return rd
}

// Persisted tells the primary that its entries up to last, handed out in
// view by a Ready with PersistAsync, are durable: it counts itself for
// them in the commit quorum. A report from another view, or about entries
// this node no longer holds as handed out, is ignored (a Ready without
// PersistAsync, carried out after every queued write, settles the disk
// state anyway).
func (n *Node) Persisted(last, view uint64) {
	n.mustNotBeReady()
	if view != n.view || !n.isPrimary() || last <= n.persistedLast || last >= n.unstableFrom {
		return
	}
	n.persistedLast = last
	n.maybeCommit()
	n.settle()
	n.checkInvariants()
}

// splitEarly moves the Prepares and Commits of ms to early, keeping the
// order of each part: the primary may send them before it persists (see
// Ready.EarlyMessages). Everything else (StartView, snapshots, answers to
// view-change messages) waits for the disk.
func splitEarly(ms []Message) (early, late []Message) {
	if !slices.ContainsFunc(ms, func(m Message) bool { return m.Type != MsgPrepare && m.Type != MsgCommit }) {
		return ms, nil // the common case on a busy primary: nothing to copy
	}
	for _, m := range ms {
		if m.Type == MsgPrepare || m.Type == MsgCommit {
			early = append(early, m)
		} else {
			late = append(late, m)
		}
	}
	return early, late
}

// Advance tells the node the last Ready was carried out.
func (n *Node) Advance() {
	if !n.readyOut {
		broken("Advance without Ready")
	}
	n.readyOut = false
	if !n.rdAsync {
		// Everything handed out so far is durable: the driver waited for
		// the queued writes before this one.
		n.persistedLast = n.rdLast
	}
	n.unstableFrom = n.rdLast + 1
	n.truncFrom = 0
	n.pendingSnap = nil
	n.hsDisk = n.rdHS
	n.mustSync = false
	n.applied = n.rdApplied
	if n.isPrimary() {
		n.maybeCommit()
	}
	n.settle()
	n.checkInvariants()
}

func (n *Node) mustNotBeReady() {
	if n.readyOut {
		broken("the driver called into the node between Ready and Advance")
	}
}

// cut drops the entries from i on: they are known to differ from the log
// being followed. Committed entries are never cut.
func (n *Node) cut(i uint64) {
	if i > n.log.lastIndex() {
		return
	}
	if !(i > n.commit && i > n.verified) {
		broken("cut at %d: commit %d, verified %d", i, n.commit, n.verified)
	}
	n.log.truncateFrom(i)
	n.dropConfsFrom(i)
	// Entries handed out to the disk writer may be on disk even if not yet
	// reported durable: they are deleted too.
	if i < n.unstableFrom && (n.truncFrom == 0 || i < n.truncFrom) {
		n.truncFrom = i
	}
	n.unstableFrom = min(n.unstableFrom, i)
	n.persistedLast = min(n.persistedLast, i-1)
}

// checkInvariants asserts what must always hold (TigerBeetle style: a
// broken invariant is a bug, and stopping beats corrupting the log).
func (n *Node) checkInvariants() {
	last := n.log.lastIndex()
	if n.lnv > n.view {
		broken("lnv %d > view %d", n.lnv, n.view)
	}
	if n.commit > last {
		broken("commit %d > last %d", n.commit, last)
	}
	if n.applied > n.commit {
		broken("applied %d > commit %d", n.applied, n.commit)
	}
	if !(n.log.snapIndex <= n.snap.Index && n.snap.Index <= n.applied) {
		broken("log start %d, snapshot %d, applied %d", n.log.snapIndex, n.snap.Index, n.applied)
	}
	if !(n.commit <= n.verified && n.verified <= last) {
		broken("verified %d not in [commit %d, last %d]", n.verified, n.commit, last)
	}
	if !(n.unstableFrom > n.log.snapIndex && n.unstableFrom <= last+1) {
		broken("unstable %d not in (%d, %d]", n.unstableFrom, n.log.snapIndex, last+1)
	}
	if n.persistedLast >= n.unstableFrom {
		broken("persisted %d not handed out (unstable from %d)", n.persistedLast, n.unstableFrom)
	}
	if n.status == StatusNormal {
		if n.lnv != n.view {
			broken("normal in view %d with lnv %d", n.view, n.lnv)
		}
		if n.verified != last {
			broken("normal with verified %d < last %d", n.verified, last)
		}
	}
	if n.isPrimary() {
		if !(n.startKnown && n.startOp <= last && n.prs != nil) {
			broken("primary without start op")
		}
		if n.pending.index != 0 && n.pending.index != last {
			broken("primary with entries after the pending voter change %d (last %d)", n.pending.index, last)
		}
	}
	if len(n.voters) > 0 && epochOf(n.view) < n.conf.Epoch {
		broken("view %d of an epoch before the configuration's %d", n.view, n.conf.Epoch)
	}
}

// broken panics: an invariant does not hold. Callers test the condition
// themselves (if !cond { broken(...) }) so that the arguments are boxed
// only on the failure path: checked on every step, boxed arguments were
// 4% of a primary's allocations.
func broken(format string, args ...any) {
	panic(fmt.Sprintf("vr: invariant broken: "+format, args...))
}
