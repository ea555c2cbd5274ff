package vr

import "slices"

// This file holds the view change: the probe (pre-vote) that guards it,
// StartViewChange, DoViewChange, the new primary's reconciliation of its
// log with the best one, and StartView.

// probeNext probes for the view after this replica's.
func (n *Node) probeNext() {
	if w, ok := n.nextView(); ok {
		n.probe(w)
	}
}

// nextView returns the view after this replica's, unless its view is the
// last of its epoch (the counter in the low bits is full). Views move one
// at a time except on a quorum's word (probe) or a primary's (follow), and
// messages may name views near the end of an epoch only one ahead
// (tooFar), so no peer can make the end of an epoch reachable sooner than
// 2^24 view changes; reaching it would take years of view changes.
func (n *Node) nextView() (uint64, bool) {
	w := n.view + 1
	return w, epochOf(w) == epochOf(n.view)
}

// probe asks every replica whether it, too, hears no primary and would
// move to view w. Only with a quorum of yes does this replica start a view
// change, so a replica cut off alone (or one-way) cannot push a healthy
// view aside, and a slow primary that a quorum still hears keeps its view.
// A probe for a view further ahead (one that others are changing to) is
// how a replica joins it: not on one replica's word, but a quorum's.
func (n *Node) probe(w uint64) {
	if w <= n.view || epochOf(w) != n.conf.Epoch || (n.now < n.nextProbe && w <= n.probeView) {
		return
	}
	n.stats.Probes++
	n.probeView = w
	n.probeGrants = map[uint64]bool{n.id: true}
	n.nextProbe = n.now + n.hb
	n.broadcast(Message{Type: MsgProbe, View: n.probeView})
	n.maybeStartViewChangeFromProbe()
}

// onProbe grants a probe for view m.View when this replica, too, has no
// working primary and has not gone past that view (or is changing to it).
func (n *Node) onProbe(m *Message) {
	n.requestCatchUp(m) // a probe of an epoch we have not entered
	if epochOf(m.View) < n.conf.Epoch && n.conf.OpenIndex != 0 && epochOf(n.view) == n.conf.Epoch {
		// A replica still in an older epoch is looking for a primary
		// that no longer exists: tell it the epoch has moved on (it
		// learns the change committed if it holds the entry that opened
		// ours, adoptClosing; otherwise it asks for it, requestCatchUp).
		sv := n.startViewChangeMsg()
		sv.To = m.From
		n.send(sv)
		return
	}
	grant := !n.isPrimary() && !n.passive() && epochOf(m.View) == n.conf.Epoch && n.conf.Members.IsVoter(m.From) &&
		((m.View > n.view && !n.hearsPrimary()) || (m.View == n.view && n.status == StatusViewChange))
	if grant {
		n.granted = max(n.granted, m.View)
	}
	n.send(Message{Type: MsgProbeReply, To: m.From, View: m.View, Granted: grant})
}

func (n *Node) onProbeReply(m *Message) {
	if !m.Granted || m.View != n.probeView || n.probeView <= n.view || n.probeGrants == nil || !n.conf.Members.IsVoter(m.From) {
		return
	}
	n.probeGrants[m.From] = true
	n.maybeStartViewChangeFromProbe()
}

func (n *Node) maybeStartViewChangeFromProbe() {
	if len(n.probeGrants) < n.quorum || n.probeView <= n.view {
		return
	}
	if n.hearsPrimary() {
		return // the primary spoke since we asked
	}
	n.startViewChange(n.probeView)
}

// quorumAhead notes that m's sender is in view m.View, and reports
// whether so many replicas are in views after this one that its primary
// can no longer gather a quorum in it: then the primary this replica hears
// is a ghost (one that was paused, say, and still thinks its view works),
// and this replica leaves its view as it would without a primary. Only
// distinct senders count, the primary of this view and this replica
// excluded, so no single replica can make one leave a working view.
func (n *Node) quorumAhead(m *Message) bool {
	if epochOf(m.View) != n.conf.Epoch || !n.conf.Members.IsVoter(m.From) {
		return false
	}
	if n.ahead == nil {
		n.ahead = map[uint64]uint64{}
	}
	n.ahead[m.From] = max(n.ahead[m.From], m.View)
	p, k := n.primaryOf(n.view), 0
	for _, id := range n.voters {
		if id != n.id && id != p && n.ahead[id] > n.view {
			k++
		}
	}
	// The primary and the replicas not ahead: fewer than a quorum?
	return len(n.voters)-k < n.quorum
}

// strandedFor notes, on the primary, that voter m.From is in the newer
// view m.View, and returns for how long (live time) it has been ahead. A
// voter can be left ahead honestly: a quorum granted its probe, and the
// granter heard the primary again before the voter's StartViewChange came
// (a primary starved for just over the view-change timeout). It can never
// come back to the older view, so after a view-change timeout of it the
// primary follows it into its view (mayJoin), and the cell, a view later,
// has every voter again: one view change, not a voter lost for good.
func (n *Node) strandedFor(m *Message) int64 {
	if !n.conf.Members.IsVoter(m.From) || epochOf(m.View) != n.conf.Epoch {
		return 0
	}
	if n.stranded == nil {
		n.stranded = map[uint64]int64{}
	}
	since, ok := n.stranded[m.From]
	if !ok {
		n.stranded[m.From] = n.live
		return 0
	}
	return n.live - since
}

// mayJoin reports whether a StartViewChange or DoViewChange for the newer
// view m.View may move this replica there. Not while it hears a working
// primary, unless the message comes from that primary (stepping down, or
// restarted); without one, the next view at once (its sender passed a
// probe), a view further ahead only if this replica granted a probe for it
// — otherwise it probes for that view itself, and joins on a quorum's
// grants. So every path into a new view passes a pre-vote, and no single
// replica moves others more than one view.
func (n *Node) mayJoin(m *Message) bool {
	switch {
	case epochOf(n.view) < n.conf.Epoch:
		return true // our epoch is over (adoptClosing), and its primary with it
	case n.isPrimary() && n.strandedFor(m) >= n.vcTimeout:
		return true
	case m.From == n.primaryOf(n.view) && n.status != StatusViewChange:
		return true // our primary left its view
	case n.hearsPrimary() && !n.quorumAhead(m):
		return false
	case m.View == n.view+1 || m.View <= n.granted:
		return true
	}
	n.probe(m.View)
	return false
}

// startViewChange moves this node to view w in view-change status. The new
// view is persisted before StartViewChange goes out (Ready order).
func (n *Node) startViewChange(w uint64) {
	if w <= n.view {
		broken("start view change to %d from %d", w, n.view)
	}
	n.forgetOlderViews(w)
	n.view = w
	n.primaryGone = false
	n.status = StatusViewChange
	n.mustSync = true
	n.startKnown = false
	n.verified = n.commit
	n.prs = nil
	n.stats.ViewChanges++
	n.resetViewChange()
	n.event("vr: view change", "new_primary", n.primaryOf(w))
	n.broadcast(n.startViewChangeMsg())
	n.nextSVC = n.now + n.hb
	n.maybeSendDVC()
}

// startViewChangeMsg is this replica's StartViewChange for its view. It
// names the entry that opened its epoch, so that a replica
// still holding that entry as pending learns it committed (adoptClosing).
func (n *Node) startViewChangeMsg() Message {
	return Message{Type: MsgStartViewChange, View: n.view, PrevOp: n.conf.OpenIndex, PrevView: n.conf.OpenView}
}

// resetViewChange clears the view change bookkeeping for the current view.
func (n *Node) resetViewChange() {
	n.clearViewChange()
	n.svcs = map[uint64]bool{}
	// A view change that has not completed in two timeouts after our
	// promise ran out is stuck (its primary is gone): probe for the next.
	n.vcDeadline = max(n.now, n.promiseEnd) + 2*n.vcTimeout
	n.vcStarted = n.now
	n.nextSVC = n.now
}

func (n *Node) clearViewChange() {
	n.svcs, n.dvcs = nil, nil
	n.dvcSent = false
	n.reconciling, n.best = false, nil
	n.probeGrants = nil
	n.probeView = 0
	n.nextProbe = 0
}

func (n *Node) tickViewChange() {
	if n.now >= n.nextSVC {
		n.broadcast(n.startViewChangeMsg())
		n.nextSVC = n.now + n.hb
	}
	n.maybeSendDVC()
	if n.reconciling && n.now >= n.nextFetch {
		n.sendGetLog()
	}
	if p := n.primaryOf(n.view); p != n.id && !n.primaryGone && n.now >= n.vcStarted+n.suspectAfter && n.now >= n.nextCheck {
		// The view's new primary has not started it yet: is it there?
		n.suspect = p
		n.nextCheck = n.now + n.hb
		n.stats.Suspicions++
	}
	if n.now >= n.vcDeadline {
		n.probeNext()
	}
}

func (n *Node) onStartViewChange(m *Message) {
	if epochOf(m.View) != n.conf.Epoch && !n.adoptClosing(m) {
		// A view of another epoch: only its voters change to it. Of a
		// later one whose opening entry we miss: we ask for it.
		n.requestCatchUp(m)
		return
	}
	if n.passive() || !n.conf.Members.IsVoter(m.From) {
		return
	}
	switch {
	case m.View > n.view:
		if !n.mayJoin(m) {
			return
		}
		n.startViewChange(m.View)
		n.svcs[m.From] = true
	case m.View == n.view && n.status == StatusViewChange:
		n.svcs[m.From] = true
	case m.View == n.view && n.isPrimary():
		if pr := n.prs[m.From]; pr != nil && n.now >= pr.nextSV {
			n.sendStartView(m.From) // it missed our StartView
		}
		return
	default:
		return
	}
	n.maybeSendDVC()
}

// maybeSendDVC sends our DoViewChange once a quorum (us included) is
// changing to this view and our lease promise has run out. The new primary
// records its own instead of sending it.
func (n *Node) maybeSendDVC() {
	if n.status != StatusViewChange || n.reconciling || len(n.svcs) < n.quorum-1 || n.promiseOwed || n.now < n.promiseEnd {
		return
	}
	p := n.primaryOf(n.view)
	if p == n.id {
		if n.dvcs == nil {
			n.dvcs = map[uint64]*dvcInfo{}
		}
		if n.dvcs[n.id] == nil {
			n.dvcs[n.id] = n.ownDVC()
		}
		n.checkDVCQuorum()
		return
	}
	if n.dvcSent && n.now < n.dvcSentAt+n.hb {
		return
	}
	d := n.ownDVC()
	n.send(Message{Type: MsgDoViewChange, To: p, View: n.view, LastNormalView: d.lnv, Op: d.op, OpView: d.opView,
		Commit: d.commit, PrevOp: d.anchor, PrevView: d.anchorView, Runs: d.runs, Final: d.final})
	n.dvcSent, n.dvcSentAt = true, n.now
}

// ownDVC describes our log: its last normal view and end, and its shape
// after the commit number (before it, every log agrees).
func (n *Node) ownDVC() *dvcInfo {
	av, ok := n.log.viewAt(n.commit)
	if !ok {
		broken("dvc: no view at commit %d", n.commit)
	}
	runs, covered := n.log.shape(n.commit, n.log.lastIndex(), MaxRuns)
	return &dvcInfo{from: n.id, lnv: n.lnv, op: n.log.lastIndex(), opView: n.log.lastView(), commit: n.commit,
		anchor: n.commit, anchorView: av, runs: runs, final: covered == n.log.lastIndex()}
}

func (n *Node) onDoViewChange(m *Message) {
	if m.View < n.view || n.passive() || epochOf(m.View) != n.conf.Epoch || !n.conf.Members.IsVoter(m.From) {
		return
	}
	if m.View > n.view {
		if !n.mayJoin(m) {
			return
		}
		n.startViewChange(m.View)
	}
	switch {
	case n.isPrimary():
		if pr := n.prs[m.From]; pr != nil && n.now >= pr.nextSV {
			n.sendStartView(m.From) // it missed our StartView
		}
		return
	case n.status != StatusViewChange:
		return
	}
	if m.OpView >= n.view {
		// Entries of this view exist only once its primary (us) is normal
		// and has persisted that; we are not, so this cannot be.
		n.drop(m, "do-view-change with entries of a view that has not started")
		return
	}
	n.svcs[m.From] = true
	if !n.reconciling {
		if n.dvcs == nil {
			n.dvcs = map[uint64]*dvcInfo{}
		}
		n.dvcs[m.From] = &dvcInfo{from: m.From, lnv: m.LastNormalView, op: m.Op, opView: m.OpView, commit: m.Commit,
			anchor: m.PrevOp, anchorView: m.PrevView, runs: slices.Clone(m.Runs), final: m.Final}
	}
	n.maybeSendDVC()
}

// checkDVCQuorum starts reconciliation once the new primary holds a quorum
// of DoViewChange, its own included.
func (n *Node) checkDVCQuorum() {
	if n.status != StatusViewChange || n.reconciling || n.dvcs[n.id] == nil || len(n.dvcs) < n.quorum {
		return
	}
	// The best log: highest last normal view, then longest. Ties go to
	// our own log (nothing to fetch), then to the lowest id.
	best := n.dvcs[n.id]
	ids := make([]uint64, 0, len(n.dvcs))
	for id := range n.dvcs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	n.newCommit = 0
	for _, id := range ids {
		d := n.dvcs[id]
		if d.lnv > best.lnv || (d.lnv == best.lnv && d.op > best.op) {
			best = d
		}
		n.newCommit = max(n.newCommit, d.commit)
	}
	if best.op < n.commit || n.newCommit > best.op {
		// Impossible if every replica follows the protocol: the best log
		// holds everything committed. Refuse to build a view on it.
		n.drop(&Message{Type: MsgDoViewChange, From: best.from, To: n.id, View: n.view},
			"best log is shorter than a commit number")
		delete(n.dvcs, best.from)
		return
	}
	n.reconciling, n.best = true, best
	n.event("vr: reconciling with the best log", "best", best.from, "lnv", best.lnv, "op", best.op)
	if best.from != n.id {
		n.matchShape(best.anchor, best.anchorView, best.runs, best.final)
	}
	n.continueReconcile()
}

// continueReconcile finishes the view change when our log equals the best
// one, or asks the best replica for what we miss.
func (n *Node) continueReconcile() {
	b := n.best
	if b.from == n.id {
		n.becomePrimary()
		return
	}
	if v, ok := n.log.viewAt(b.op); ok && v == b.opView && b.op <= n.log.lastIndex() {
		// Same last entry, so the same log up to it (log matching).
		n.verified = max(n.verified, b.op)
		n.cut(b.op + 1)
		n.becomePrimary()
		return
	}
	n.sendGetLog()
}

func (n *Node) sendGetLog() {
	n.send(Message{Type: MsgGetLog, To: n.best.from, View: n.view, Op: n.verified + 1})
	n.nextFetch = n.now + n.hb
}

func (n *Node) onGetLog(m *Message) {
	if epochOf(m.View) < n.conf.Epoch {
		n.answerCatchUp(m) // from a replica that has not entered our epoch
		return
	}
	if m.View != n.view || n.status != StatusViewChange || n.passive() {
		return
	}
	from := m.Op
	switch {
	case from <= n.log.snapIndex:
		meta := n.snap.Clone()
		n.send(Message{Type: MsgSnapshot, To: m.From, View: n.view, Snapshot: &meta})
		n.stats.SnapshotsSent++
	case from <= n.log.lastIndex()+1:
		pv, _ := n.log.viewAt(from - 1)
		var es []Entry
		if from <= n.log.lastIndex() {
			es = slices.Clone(n.log.slice(from, n.log.lastIndex(), n.cfg.MaxPrepareEntries, n.cfg.MaxPrepareBytes))
		}
		n.send(Message{Type: MsgLog, To: m.From, View: n.view, PrevOp: from - 1, PrevView: pv, Entries: es, Op: n.log.lastIndex()})
	}
}

func (n *Node) onLog(m *Message) {
	if epochOf(m.View) > n.conf.Epoch {
		n.catchUp(m) // the answer to requestCatchUp
		return
	}
	if m.View != n.view || n.status != StatusViewChange || !n.reconciling || m.From != n.best.from {
		return
	}
	if m.PrevOp > n.verified {
		return // an old answer; we asked again since
	}
	if v, ok := n.log.viewAt(m.PrevOp); ok && v != m.PrevView {
		n.drop(m, "previous entry's view differs from a verified entry")
		return
	}
	if !n.mergeEntries(m.Entries) {
		n.drop(m, "entry differs from a verified entry")
		return
	}
	n.continueReconcile()
}

// becomePrimary completes the view change: our log is the best log; it is
// persisted (with LastNormalView after it) before StartView goes out.
func (n *Node) becomePrimary() {
	if !(n.status == StatusViewChange && n.primaryOf(n.view) == n.id) {
		broken("become primary in status %v", n.status)
	}
	dvcs := n.dvcs
	n.commit = max(n.commit, min(n.newCommit, n.log.lastIndex()))
	n.clearViewChange()
	n.becomePrimaryState()
	for id, pr := range n.prs {
		if d := dvcs[id]; d != nil {
			pr.knownCommit = min(d.commit, n.log.lastIndex())
		}
	}
	n.event("vr: primary", "start_op", n.startOp, "commit", n.commit)
	for _, id := range n.peers {
		n.sendStartView(id)
	}
}
