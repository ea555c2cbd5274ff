package vr

import (
	"errors"
	"fmt"
	"slices"
)

// Reconfiguration: learners, epochs, and why two configurations never
// commit conflicting entries.
//
// A configuration (Configuration) has voters and learners. Learners get
// Prepares, Commits, StartViews and snapshots like backups and answer
// them, but never probe, grant a probe, join a view change, send
// DoViewChange, or count in a commit or lease quorum: nothing a learner
// does decides anything. Quorums, the primary of a view (voters[v mod n])
// and lease promises are all computed from the voters of the
// configuration in force.
//
// Changes are proposed on the normal primary (Node.ProposeConfig), one at
// a time: only when the primary has committed its view's start log and no
// configuration entry is uncommitted. Two kinds:
//
//   - A learner change (same voters; other learners or addresses) keeps
//     the epoch and takes effect as soon as the entry is in a replica's
//     log, committed or not, and is undone if the entry is cut. No quorum
//     depends on it, so it needs no care.
//
//   - A voter change (a learner promoted, a voter removed or demoted: a
//     new replica always joins as a learner first) opens the next epoch.
//     Its entry k is the last entry of its epoch: a primary appends
//     nothing after an uncommitted voter change (Propose answers "not
//     primary, no known primary" meanwhile). k commits once a majority of
//     the old voters and a majority of the new voters hold it, so the new
//     epoch always has a majority that holds the whole old epoch to form
//     its first view from. It takes effect on a replica only once the
//     replica knows k committed. Then the
//     replica moves to the first view of the new epoch — a voter by a view
//     change to it, anyone else by waiting in it for that view's primary —,
//     except the primary that made the change when it stays a voter: it
//     carries on as the normal primary of that view, with no view change
//     (below, "The primary carries on").
//
// Views carry their epoch in their high bits (epochOf). The first view of
// epoch e is e<<32 plus the offset that makes its primary the replica
// that proposed the change (when it is still a voter), so that the usual
// case keeps its primary; a primary that removes itself names instead the
// voter that has acknowledged the most of its log (Node.successor), the
// likeliest to hold k. Every replica computes the same first view from
// the same entry.
//
// A replica whose configuration is older than its view's epoch (it
// followed a newer primary before its log held the change, or was away)
// is passive as a learner is, and follows whoever speaks for the newer
// view; it cannot check who the primary of that view is, and it needs
// not: it decides nothing until its log holds the change committed, and
// then it holds the configuration in force. A replica outside the
// configuration in force (removed) is passive too, and follows a primary
// of a later epoch that adds it again.
//
// # Safety
//
// Claim: no two replicas ever commit different entries at one index, and
// a committed entry is in the log of every later view's primary.
//
//  1. Within one epoch the voters are fixed: every view of the epoch, its
//     view change, its commits and its lease use the same voters. That is
//     Viewstamped Replication with a fixed configuration (the package doc
//     argues it), and it holds for the views of each epoch on their own.
//     Only voters of the epoch act in its views' view changes: a replica
//     acts in a view change only when the view's epoch equals its
//     configuration's, and counts StartViewChange, DoViewChange and probe
//     grants only from its voters.
//
//  2. Epoch e commits nothing after its closing entry k. No primary
//     appends after an uncommitted voter change, so while k is in a log
//     nothing follows it in epoch e; if k is cut (it was not committed)
//     the epoch goes on as before. Once k commits in a view of epoch e,
//     every later view of epoch e starts with k in its start log (1.), so
//     its primary appends nothing either, and as soon as it commits its
//     start log it knows k committed and leaves the epoch. A primary of
//     epoch e never serves a read after k commits: CanServeReads needs
//     the start log committed, and knowing k committed moves the replica
//     to the next epoch in the same step.
//
//  3. A replica acts as a voter of epoch e+1 only with k committed in its
//     log, hence with the whole log up to k, which is final (2.) and the
//     same on every replica that holds k committed (log matching). So
//     every view change of epoch e+1 finds the log up to k in every
//     DoViewChange it counts and can only extend it; entries after k are
//     decided by epoch e+1 alone (1.). By induction over epochs, each
//     epoch's committed entries extend the previous epoch's and nothing
//     committed is lost.
//
//  4. The master lease across an epoch change. A primary of epoch e holds
//     its lease only while k is not known committed (2.), and voters of
//     epoch e+1 that came from epoch e keep the lease promises they made
//     in it: DoViewChange waits for them as always. Any majority of the
//     new voters shares a voter with any majority of the old ones (they
//     differ by one), so the first view of epoch e+1 cannot form before
//     the old lease ends — unless its primary is the old lease's holder,
//     which then carries on with it (below).
//
//  5. Persistence. A replica acts on a configuration only through
//     messages, which leave after the Ready that persists the entry (and
//     the view that follows from it). A restarted replica rebuilds the
//     configuration from its snapshot and log with its persisted commit
//     number, so it holds exactly the configuration it acted on before.
//
// # The primary carries on
//
// The primary p of view v (epoch e) that commits its own voter change k
// and is a voter of epoch e+1, hence the primary of its first view f,
// does not change views to f: in the step that tells it k committed, it
// becomes the normal primary of f with its log (which ends at k, all
// committed) as the start log — f persisted as a normal view before any
// message of f leaves — and sends StartView to the members of e+1. The
// StartView carries commit k, so a replica that held k pending learns
// from it that k committed; every member follows f as it follows any new
// primary (one that asked for f by StartViewChange meanwhile gets the
// StartView again). p keeps the lease epoch e's voters granted it in v
// until that lease ends, and takes a lease in f as usual meanwhile
// (Node.leaseEnd). So a promotion, or the removal of another voter, costs
// the cell no view change and no lease wait. That is safe:
//
//   - The view change it skips could only pick p's log: no entry of epoch
//     e follows k (2.), k and everything before it are committed, so every
//     later view's log extends p's; and f's primary is p, so f has no
//     other start log.
//   - The lease p keeps was granted by a majority Q of epoch e's voters (p
//     included), whose promises hold across the epoch change (4.). Any
//     other view — a later one of epoch e, or one of epoch e+1 after f —
//     forms only with DoViewChange from a majority of its epoch's voters,
//     and with one voter changed every majority of e+1's voters meets
//     every majority of e's: that view waits out Q's promise, so p's kept
//     lease ends first (if the replica they share is p itself, p has left
//     f before it sends a DoViewChange). The kept lease ends exactly when
//     it would have in v, and p serves under it only while it is the
//     normal primary of f.
//
// # A voter that missed the change
//
// A voter of epoch e+1 whose log lacks k (it was cut off, or slow, when k
// committed) cannot learn of the epoch from the others' StartViewChange
// (adoptClosing needs k in its log); until it learns it, it grants no
// probe of the epoch, joins none of its view changes and cannot lead one
// of its views. The epoch's first primary would catch it up, but the epoch
// may need it to have a primary at all: with three or four voters, that
// voter and one more down leave no quorum to form, or even probe for, any
// view of the epoch, and a view it is due to lead never completes. So it
// asks. On a Probe or StartViewChange of a later epoch than its
// configuration's, it sends the sender a GetLog naming a view of its own
// configuration's epoch (requestCatchUp). A voter of the later epoch
// without a working primary answers, in its own view, with its committed
// entries from there and its commit number, or with its snapshot when the
// entries are compacted and the asker is that view's primary-to-be
// (answerCatchUp). The asker enters that view, as it would a newer
// primary's, and takes the entries as committed (catchUp); once its log
// holds k committed it is a voter of the epoch and takes part in changing
// to that view (caughtUp): it grants probes, joins view changes and leads
// its views like the others. That is safe: a commit number names only
// committed entries, the same on every replica, so the asker holds k
// committed, and with it the whole log up to k, as 3. requires; its lease
// promises are untouched (4.); and it leaves its old view before it holds
// any entry that view's primary may not have.

// A primary that removed itself, or whose lease had lapsed, goes through
// the view change as before. The master on top of the log (package cell)
// hears of f as of a failover (DriverConfig.OnRole) and takes it up at
// once: the log can serve reads as soon as f's primary has applied k.
//
// This is the epoch scheme of VR Revisited's reconfiguration section with
// the epoch folded into the view number, and with learners so that a new
// replica is caught up before it counts; Raft's single-server changes
// take effect on append instead and need the extra rule that a leader
// commits an entry of its term first (Ongaro's fix), because its voters
// may act on a configuration that a later leader cuts. Here a voter change
// takes effect only once committed, so it is never cut.

// epochShift places a view's epoch in its number: epoch = view >> 32.
const epochShift = 32

// maxEpoch bounds epochs so that views stay below maxView.
const maxEpoch = maxView >> epochShift

func epochOf(v uint64) uint64 { return v >> epochShift }

// viewCounterMask selects a view's counter within its epoch. A message
// may name a view whose counter is farViewCounter or more only when it is
// at most one ahead of the receiver's view: a peer (a confused one, or a
// forged message) can move a replica anywhere below that, but the last
// 2^24 views of an epoch are reached one view change at a time, so the end
// of an epoch, a view the cell could not leave (nextView), is years of
// view changes away from any state a message can cause.
const (
	viewCounterMask = 1<<epochShift - 1
	farViewCounter  = 1<<epochShift - 1<<24
)

// EpochOf returns the epoch a view number belongs to.
func EpochOf(view uint64) uint64 { return epochOf(view) }

// LastOfEpoch reports whether view is the last view of its epoch: a
// replica there cannot start a view change (there is no next view in the
// epoch), so a cell whose voters are all there keeps the primary it has
// and cannot elect another. No message can bring a replica there (Step
// refuses views near the end of an epoch more than one ahead); only disks
// written by releases before that check can hold such a view. chubbyd
// export and chubbyd restore move such a cell's state to a new cell.
func LastOfEpoch(view uint64) bool { return view&viewCounterMask == viewCounterMask }

// ViewCounter returns a view's counter within its epoch (the view number's
// low bits): the view is EpochOf(view)<<32 + ViewCounter(view).
func ViewCounter(view uint64) uint64 { return view & viewCounterMask }

// firstView is the first view of c's epoch: its primary is c.Proposer (the
// proposer, or the successor it named) when that is a voter of c, else
// c's first voter.
func firstView(c Configuration) uint64 {
	voters := c.Members.Voters()
	n := uint64(len(voters))
	base := c.Epoch << epochShift
	var pos uint64
	for i, id := range voters {
		if id == c.Proposer {
			pos = uint64(i)
		}
	}
	return base + (pos+n-base%n)%n
}

// Errors of ProposeConfig.
var (
	// ErrConfigInProgress: a configuration entry is not committed yet, or
	// the primary has not committed its view's start log.
	ErrConfigInProgress = errors.New("vr: a configuration change is in progress")
	// ErrNoChange: the proposed configuration is the one in force.
	ErrNoChange = errors.New("vr: the configuration is already in force")
)

// confAt is a configuration entry of the in-memory log.
type confAt struct {
	index, view uint64
	c           Configuration
}

// foldConfig returns the configuration in force after confs (in log order)
// on top of base, when entries up to commit are known committed: learner
// changes of the same epoch take effect at once, a voter change opening
// the next epoch once committed (and naming its own index and view as the
// epoch's opening entry). It also returns a voter change not yet
// committed (index 0 when none): nothing after it counts. An entry that
// is neither is skipped; no correct primary writes one, and skipping is
// the same on every replica with the same log.
func foldConfig(base Configuration, confs []confAt, commit uint64) (c Configuration, pending confAt) {
	c, pending, _ = foldConfigAt(base, confs, commit)
	return c, pending
}

// foldConfigAt is foldConfig that also returns the index of the entry that
// put c in force (0: base is still in force).
func foldConfigAt(base Configuration, confs []confAt, commit uint64) (c Configuration, pending confAt, at uint64) {
	c = base
	for _, e := range confs {
		if len(c.Members) == 0 {
			c, at = e.c, e.index // a joining replica's log starts here
			continue
		}
		kind, err := Classify(c.Members, e.c.Members)
		switch {
		case err != nil:
		case kind != ChangeVoters && e.c.Epoch == c.Epoch && e.c.OpenIndex == c.OpenIndex && e.c.OpenView == c.OpenView:
			c, at = e.c, e.index
		case kind == ChangeVoters && e.c.Epoch == c.Epoch+1 && e.c.OpenIndex == e.index && e.c.OpenView == e.view:
			if e.index > commit {
				return c, e, at
			}
			c, at = e.c, e.index
		}
	}
	return c, confAt{}, at
}

// ProposeConfig appends a configuration change on the normal primary and
// returns its index: next must differ from the configuration in force by
// learners or addresses only, or by exactly one voter. It fails with a
// *NotPrimaryError off the primary, ErrConfigInProgress while a change is
// uncommitted (one at a time) or the view's start log is not committed,
// ErrNoChange, or an error wrapping ErrBadConfigChange.
//
// retire names replicas the change takes out at an operator's request:
// they join Configuration.Retired (see there).
func (n *Node) ProposeConfig(next Members, retire ...uint64) (uint64, error) {
	n.mustNotBeReady()
	if !n.isPrimary() {
		return 0, n.notPrimary()
	}
	if n.commit < n.startOp || (len(n.confs) > 0 && n.confs[len(n.confs)-1].index > n.commit) {
		return 0, ErrConfigInProgress
	}
	kind, err := Classify(n.conf.Members, next)
	switch {
	case err != nil:
		return 0, err
	case kind == ChangeNone:
		return 0, ErrNoChange
	}
	for _, id := range next.Voters() {
		if !n.conf.Members.Contains(id) {
			return 0, fmt.Errorf("%w: replica %d must join as a learner before it votes", ErrBadConfigChange, id)
		}
	}
	c := Configuration{Epoch: n.conf.Epoch, Proposer: n.conf.Proposer, Members: next.Clone(), Retired: retireIDs(n.conf.Retired, next, retire...)}
	i := n.log.lastIndex() + 1
	c.OpenIndex, c.OpenView = n.conf.OpenIndex, n.conf.OpenView
	if kind == ChangeVoters {
		c.Epoch, c.Proposer, c.OpenIndex, c.OpenView = c.Epoch+1, n.successor(next), i, n.view
		if c.Epoch >= maxEpoch {
			return 0, ErrBadConfigChange
		}
	}
	data := EncodeConfig(c)
	if n.log.lastIndex()-n.commit+1 > uint64(n.cfg.MaxUncommittedEntries) {
		return 0, ErrOverloaded
	}
	n.appendEntry(Entry{Index: i, View: n.view, Type: EntryConfig, Data: data})
	n.uncommittedBytes += len(data)
	n.verified = i
	n.event("vr: configuration change proposed", "index", i, "epoch", c.Epoch, "voters", c.Members.Voters(), "members", len(c.Members))
	n.settle()
	n.checkInvariants()
	return i, nil
}

// successor names the first primary of the epoch a voter change opens
// (Configuration.Proposer): this primary when it stays a voter, else the
// voter of next that has acknowledged the most of the log, as a normal
// backup of this view (the lowest id among equals; next's first voter
// when none has). The first primary of an epoch must hold the entry that
// opened it before the epoch can start; one that was cut off when the
// change was made is the likeliest to lack it, and would hold up the new
// epoch until the others move on to its next view, two view-change
// timeouts later.
func (n *Node) successor(next Members) uint64 {
	if next.IsVoter(n.id) {
		return n.id
	}
	best, bestMatch := uint64(0), uint64(0)
	for _, id := range next.Voters() {
		pr := n.prs[id]
		if pr == nil || !pr.normal {
			continue
		}
		if best == 0 || pr.match > bestMatch {
			best, bestMatch = id, pr.match
		}
	}
	return best
}

// appendEntry appends e to the log, noting a configuration entry.
func (n *Node) appendEntry(e Entry) {
	n.log.append(e)
	if e.Type == EntryConfig {
		if c, err := DecodeConfig(e.Data); err == nil {
			n.confs = append(n.confs, confAt{index: e.Index, view: e.View, c: c})
			n.confDirty = true
		}
	}
}

// dropConfsFrom forgets the configuration entries at i and after (the log
// was cut there).
func (n *Node) dropConfsFrom(i uint64) {
	k := len(n.confs)
	for k > 0 && n.confs[k-1].index >= i {
		k--
	}
	if k < len(n.confs) {
		n.confs = n.confs[:k]
		n.confDirty = true
	}
}

// compactConfs folds the configuration entries up to the log's new start
// into the base configuration.
func (n *Node) compactConfs() {
	k := 0
	for k < len(n.confs) && n.confs[k].index <= n.log.snapIndex {
		k++
	}
	if k > 0 {
		n.base, _ = foldConfig(n.base, n.confs[:k], n.log.snapIndex)
		n.confs = append([]confAt(nil), n.confs[k:]...)
	}
}

// configAt returns the configuration in force after applying the entries
// up to index, which must be committed and in memory.
func (n *Node) configAt(index uint64) Configuration {
	k := 0
	for k < len(n.confs) && n.confs[k].index <= index {
		k++
	}
	c, _ := foldConfig(n.base, n.confs[:k], index)
	return c.Clone()
}

// settle brings the configuration in force up to date with the log and
// the commit number, and moves the replica into a new epoch it learned of.
// Every input ends with it.
func (n *Node) settle() {
	if !n.confDirty && (n.pending.index == 0 || n.commit < n.pending.index) {
		return
	}
	// The lease as the epoch's voters granted it, before the voters
	// change under it (carryOn).
	wasPrimary := n.isPrimary()
	lease, leased := n.leaseEnd()
	n.loadConfig()
	if len(n.voters) > 0 && epochOf(n.view) < n.conf.Epoch {
		if wasPrimary && leased && n.mayCarryOn() {
			n.carryOn(lease)
			return
		}
		n.enterEpoch()
	}
}

// mayCarryOn reports whether this replica, the normal primary of the
// epoch that just closed, may become the normal primary of the new
// epoch's first view without a view change (carryOn): it is the primary
// of that view (it proposed the change and stays a voter), and its whole
// log, which ends with the closing entry, is committed.
func (n *Node) mayCarryOn() bool {
	return n.conf.Members.IsVoter(n.id) && n.primaryOf(firstView(n.conf)) == n.id &&
		n.commit == n.log.lastIndex() && n.conf.OpenIndex == n.log.lastIndex()
}

// carryOn moves the primary of the closing epoch straight into the first
// view of the new one as its normal primary, keeping its lease of the old
// epoch until it ends: no view change, no lease wait. See "The primary
// carries on" above for why that is safe. The others learn the epoch from
// its StartView, which names the closing entry committed.
func (n *Node) carryOn(lease int64) {
	first := firstView(n.conf)
	n.event("vr: carrying on as primary into a new epoch", "epoch", n.conf.Epoch, "first_view", first)
	n.forgetOlderViews(first)
	n.view = first
	n.primaryGone = false
	n.clearViewChange()
	n.becomePrimaryState()
	n.carried, n.carriedView = lease, first
	n.stats.CarriedOn++
	for _, id := range n.peers {
		n.sendStartView(id)
	}
}

// loadConfig works out the configuration in force from the base, the
// configuration entries and the commit number.
func (n *Node) loadConfig() {
	n.confDirty = false
	c, pending, at := foldConfigAt(n.base, n.confs, n.commit)
	n.pending = pending
	if at == 0 {
		at = n.log.snapIndex // the base, in force at the snapshot
	}
	n.confIndex = at
	if !equalConfig(c, n.conf) {
		n.setConfig(c)
	}
}

func equalConfig(a, b Configuration) bool {
	return a.Epoch == b.Epoch && a.Proposer == b.Proposer && a.OpenIndex == b.OpenIndex && a.OpenView == b.OpenView &&
		equalMembers(a.Members, b.Members) && slices.Equal(a.Retired, b.Retired)
}

// setConfig puts c in force. On a primary (a learner change: the epoch
// and the voters stay) it starts or stops tracking the members' progress.
func (n *Node) setConfig(c Configuration) {
	n.conf = c.Clone()
	n.voters = c.Members.Voters()
	n.quorum = len(n.voters)/2 + 1
	n.voter = c.Members.IsVoter(n.id)
	n.peers = n.peers[:0]
	for _, m := range c.Members {
		if m.ID != n.id {
			n.peers = append(n.peers, m.ID)
		}
	}
	if n.prs != nil {
		for id := range n.prs {
			if !c.Members.Contains(id) {
				delete(n.prs, id)
			}
		}
		for _, id := range n.peers {
			if n.prs[id] == nil {
				n.prs[id] = &progress{next: n.log.lastIndex() + 1}
			}
			n.prs[id].voter = c.Members.IsVoter(id)
		}
	}
	n.event("vr: configuration in force", "epoch", c.Epoch, "voters", n.voters, "members", len(c.Members))
}

// enterEpoch moves the replica to the first view of the epoch now in
// force: a voter starts the view change to it, anyone else waits in it for
// its primary. Its StartViewChange names the entry that opened the epoch,
// so the other voters that hold that entry learn it committed and come
// along without waiting for a timeout (adoptClosing); learners hear of the
// epoch from its first primary, and voters that miss the entry ask for it
// ("A voter that missed the change" above). (No message of
// the old view may leave once the new view is on disk, so the old primary
// cannot just send the old view one last Commit.)
//
// A replica that is no voter of the new epoch (a primary that removed
// itself, say) announces it the same way, with a StartViewChange the
// voters do not count, for announceFor: it may be the only one that knows
// the change committed.
func (n *Node) enterEpoch() {
	first := firstView(n.conf)
	n.event("vr: entering a new epoch", "epoch", n.conf.Epoch, "first_view", first, "voter", n.conf.Members.IsVoter(n.id))
	if n.conf.Members.IsVoter(n.id) {
		n.startViewChange(first)
		return
	}
	n.enterView(first)
	n.announceUntil = n.now + announceFor*n.vcTimeout
	n.announce()
}

// announceFor is how long, in view-change timeouts, a replica that left
// the voters keeps announcing the epoch it entered.
const announceFor = 10

// announce sends the voters this replica's StartViewChange for its view
// (see enterEpoch), while that view is of the epoch of its configuration:
// a replica that has since followed the primary of a later epoch (it was
// added again) before its log holds that epoch's configuration does not
// speak for that epoch, and another voter behind it would ask it in vain
// for the log (requestCatchUp).
func (n *Node) announce() {
	if epochOf(n.view) == n.conf.Epoch {
		n.broadcast(n.startViewChangeMsg())
	}
	n.nextAnnounce = n.now + n.hb
}

// adoptClosing lets a replica of the previous epoch learn from a
// StartViewChange of the next epoch that the change it holds pending has
// committed: the message names the entry that opened the sender's epoch
// (PrevOp, PrevView), and the same index and view mean the same entry and
// the same log up to it. It reports whether the replica moved.
func (n *Node) adoptClosing(m *Message) bool {
	p := n.pending
	if p.index == 0 || epochOf(m.View) != p.c.Epoch || m.PrevOp != p.index || m.PrevView != p.view {
		return false
	}
	if v, ok := n.log.viewAt(p.index); !ok || v != p.view {
		return false
	}
	n.verified = max(n.verified, p.index)
	n.commit = max(n.commit, p.index)
	n.settle()
	return epochOf(n.view) == n.conf.Epoch
}

// passive reports whether this replica only follows primaries: a learner,
// a replica outside its configuration, or one whose configuration is
// older than its view's epoch.
func (n *Node) passive() bool {
	return !n.voter || epochOf(n.view) != n.conf.Epoch
}

// primaryKnown reports whether this replica can tell the primary of view
// v: v is of the epoch of its configuration.
func (n *Node) primaryKnown(v uint64) bool {
	return len(n.voters) > 0 && epochOf(v) == n.conf.Epoch
}

// Progress is what the primary knows of one member.
type Progress struct {
	ID     uint64
	Voter  bool
	Normal bool   // acknowledged as normal in this view
	Match  uint64 // last index acknowledged on its disk in this view
	// LastAck is when its last acknowledgement arrived, on the node's
	// clock (nanoseconds; 0: none in this view).
	LastAck int64
}

// Progress returns the members' progress on the normal primary (nil
// elsewhere), in id order.
func (n *Node) Progress() []Progress {
	if !n.isPrimary() {
		return nil
	}
	out := make([]Progress, 0, len(n.peers))
	for _, id := range n.peers {
		pr := n.prs[id]
		out = append(out, Progress{ID: id, Voter: pr.voter, Normal: pr.normal, Match: pr.match, LastAck: pr.lastAck})
	}
	return out
}

// requestCatchUp asks the sender of m, which names a view of an epoch
// after that of this replica's configuration, for the committed log from
// this replica's commit number on (see "A voter that missed the change"),
// at most once a heartbeat interval. The GetLog names the lowest view
// number of this replica's configuration's epoch: a replica of a later
// epoch knows from it that the asker has not entered its own (and checks
// no role in an epoch it has left), and the view is no later than the
// asker's own, as the view of anything it sends must be.
func (n *Node) requestCatchUp(m *Message) {
	if epochOf(m.View) <= n.conf.Epoch || n.isPrimary() || n.now < n.nextCatchUp {
		return
	}
	n.nextCatchUp = n.now + n.hb
	n.send(Message{Type: MsgGetLog, To: m.From, View: n.conf.Epoch << epochShift, Op: n.commit + 1})
}

// answerCatchUp answers a GetLog from a replica of an earlier epoch
// (requestCatchUp) that is a voter of this one, in this replica's view,
// with the committed entries from m.Op (a bounded chunk) and the commit
// number, which marks the answer as a catch-up (validRole lets it go to
// any voter). Only a voter of this epoch without a working primary
// answers: a working primary catches the asker up itself (StartView), and
// the asker, entering this replica's view, could otherwise leave the
// primary's. When the entries are compacted away, it sends its snapshot
// only if the asker is the primary of this replica's view (the view is
// changing to it): then no primary of the view can be sending the asker
// a snapshot of its own — a replica's driver stages one incoming snapshot
// at a time, and two senders would take turns displacing each other's
// for ever — and the answer goes to the view's primary, as validRole
// wants of a snapshot. Otherwise an asker that far behind waits for the
// epoch's primary, as before.
func (n *Node) answerCatchUp(m *Message) {
	if n.passive() || n.hearsPrimary() || !n.conf.Members.IsVoter(m.From) {
		return
	}
	switch from := m.Op; {
	case from <= n.log.snapIndex:
		if n.primaryOf(n.view) == m.From {
			// Without a commit number, as a view change's fetch answer:
			// the asker tells it from a primary's (onSnapshot).
			meta := n.snap.Clone()
			n.send(Message{Type: MsgSnapshot, To: m.From, View: n.view, Snapshot: &meta})
			n.stats.SnapshotsSent++
		}
	case from <= n.commit:
		pv, _ := n.log.viewAt(from - 1)
		es := slices.Clone(n.log.slice(from, n.commit, n.cfg.MaxPrepareEntries, n.cfg.MaxPrepareBytes))
		n.send(Message{Type: MsgLog, To: m.From, View: n.view, PrevOp: from - 1, PrevView: pv, Entries: es, Op: n.commit, Commit: n.commit})
	}
}

// catchUp takes an answer to requestCatchUp: committed entries of a voter
// of a later epoch, in its view m.View. It enters that view first (passive
// until its log holds the epoch's opening entry committed), so that no
// primary of its old view can send it entries that differ from the
// committed ones it takes.
func (n *Node) catchUp(m *Message) {
	if m.View < n.view || n.isPrimary() || m.PrevOp > n.commit {
		return // an answer for a view we left, or one we cannot connect yet
	}
	if v, ok := n.log.viewAt(m.PrevOp); ok && v != m.PrevView {
		n.drop(m, "previous entry's view differs from a committed entry")
		return
	}
	es := m.Entries
	for len(es) > 0 && es[len(es)-1].Index > m.Commit {
		es = es[:len(es)-1]
	}
	if m.View > n.view {
		n.enterView(m.View)
	}
	if !n.mergeEntries(es) {
		n.drop(m, "entry differs from a committed entry")
		return
	}
	if len(es) > 0 {
		n.commit = max(n.commit, es[len(es)-1].Index)
	}
	n.caughtUp(m.From)
}

// caughtUp brings the configuration up to date after catchUp (or the
// install of a snapshot answering requestCatchUp) and, when this replica
// now holds the epoch of its view as a voter, takes part in changing to
// that view: it entered it on no primary's word (it heard no StartView),
// and the voter it asked had no working primary either. (A replica that
// restarts in a view it was not normal in does the same.) If the view has
// a primary after all, its StartView, sent to whoever joins the change,
// brings this replica in.
func (n *Node) caughtUp(from uint64) {
	n.settle()
	if !n.passive() && n.status == StatusRecovering && !n.startKnown {
		n.event("vr: caught up with a later epoch", "from", from, "epoch", n.conf.Epoch, "commit", n.commit)
		n.status = StatusViewChange
		n.resetViewChange()
	}
}
