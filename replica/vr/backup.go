package vr

// This file holds a backup's side: following the primary's log, joining a
// view, catching up by entries or by snapshot.

// enterView makes this node a follower of the primary of view w (w >= its
// view) that has not yet checked its log against the primary's.
func (n *Node) enterView(w uint64) {
	if w < n.view {
		broken("enter view %d from %d", w, n.view)
	}
	if w > n.view {
		n.forgetOlderViews(w)
		n.view = w
		n.primaryGone = false
		n.mustSync = true
		n.verified = n.commit
		n.stats.ViewChanges++
		n.event("vr: following the primary of a newer view", "primary", n.primaryOf(w))
	} else if n.status == StatusViewChange {
		n.verified = n.commit
	}
	n.status = StatusRecovering
	n.startKnown = false
	n.prs = nil
	n.clearViewChange()
}

// heardFromPrimary notes a message from the primary of the view: it resets
// the view-change timer and, for a lease round, extends the promise.
func (n *Node) heardFromPrimary(m *Message) {
	n.lastHeard = n.live
	n.primaryGone = false
	if m.Stamp > 0 {
		n.promiseOwed = true
	}
}

// follow brings the node into the view of a message from that view's
// primary. It returns false when the message is from an older view.
func (n *Node) follow(m *Message) bool {
	if m.View < n.view {
		return false
	}
	if m.View > n.view || n.status == StatusViewChange {
		n.enterView(m.View)
	}
	n.heardFromPrimary(m)
	return true
}

func (n *Node) ack(m *Message, reject bool) {
	n.send(Message{Type: MsgPrepareOK, To: m.From, View: n.view, Op: n.verified,
		Normal: n.status == StatusNormal, Reject: reject, Stamp: m.Stamp, Commit: n.commit})
}

func (n *Node) onPrepare(m *Message) {
	if !n.follow(m) {
		return
	}
	if m.PrevOp > n.verified {
		n.updateCommit(m.Commit)
		n.ack(m, true)
		return
	}
	if v, ok := n.log.viewAt(m.PrevOp); ok && v != m.PrevView {
		n.drop(m, "previous entry's view differs from a verified entry")
		return
	}
	if !n.mergeEntries(m.Entries) {
		n.drop(m, "entry differs from a verified entry")
		return
	}
	n.updateCommit(m.Commit)
	n.maybeBecomeNormal()
	n.ack(m, false)
}

func (n *Node) onCommit(m *Message) {
	if m.View > n.view || m.View == n.view && n.status == StatusViewChange {
		// A heartbeat says nothing of a log: a replica that missed a view
		// change, or is still changing to the view, follows the new
		// primary on its StartView (resent every heartbeat to a backup
		// not yet normal) or Prepare, which carry one. A Commit alone
		// could strand it, on a forged header, in a view (or an epoch) no
		// primary of which exists: following it, a replica changing to a
		// view nobody leads would stop asking for that view
		// (StartViewChange, which a primary it is stranded ahead of
		// follows) and only probe for the next, which nobody grants
		// (simulator forger seed 1307).
		return
	}
	if !n.follow(m) {
		return
	}
	n.updateCommit(m.Commit)
	n.ack(m, false)
}

func (n *Node) onStartView(m *Message) {
	if m.View < n.view {
		return
	}
	if m.View == n.view && n.status == StatusNormal {
		n.heardFromPrimary(m)
		n.updateCommit(m.Commit)
		n.ack(m, false)
		return
	}
	n.follow(m)
	n.startOp = m.StartOp
	n.startKnown = true
	ok := n.matchShape(m.PrevOp, m.PrevView, m.Runs, m.Final)
	n.updateCommit(m.Commit)
	n.maybeBecomeNormal()
	n.ack(m, !ok)
}

func (n *Node) onSnapshot(m *Message) {
	if m.View < n.view {
		return
	}
	if n.reconciling && m.View == n.view && n.best != nil && m.From == n.best.from {
		// The new primary fetching the best log found it compacted.
		if !n.installSnapshot(m) {
			return
		}
		n.continueReconcile()
		return
	}
	if n.primaryKnown(m.View) && m.From != n.primaryOf(m.View) {
		return // an answer to a fetch of a view change we are done with
	}
	if epochOf(m.View) > n.conf.Epoch && m.Commit == 0 && m.View >= n.view && !n.isPrimary() {
		// A snapshot of a view of a later epoch without a commit number
		// (a primary's always has one): the answer to requestCatchUp
		// (answerCatchUp), from a voter of that epoch that is not its
		// view's primary. We take the committed state without following
		// or answering its sender.
		if m.View > n.view {
			n.enterView(m.View)
		}
		if n.installSnapshot(m) {
			n.caughtUp(m.From)
		}
		return
	}
	n.follow(m)
	if !n.installSnapshot(m) {
		return
	}
	n.updateCommit(m.Commit)
	n.maybeBecomeNormal()
	n.ack(m, false)
}

// installSnapshot takes a snapshot of committed state: unless the log
// already holds its last entry, it replaces the whole log (every entry
// after a differing or missing index differs too, by log matching).
func (n *Node) installSnapshot(m *Message) bool {
	meta := m.Snapshot
	s := meta.Index
	if s <= n.commit {
		return true
	}
	if v, ok := n.log.viewAt(s); ok {
		if v == meta.View {
			n.verified = max(n.verified, s)
			n.commit = s
			return true
		}
		if s <= n.verified {
			n.drop(m, "snapshot differs from a verified entry")
			return false
		}
	}
	n.log.reset(s, meta.View)
	n.snap = meta.Clone()
	n.pendingSnap = &Snapshot{Meta: meta.Clone(), Data: m.SnapshotData}
	n.base, n.confs, n.confDirty = meta.Config(), nil, true
	n.commit, n.applied, n.verified = s, s, s
	n.truncFrom = 0
	n.unstableFrom = s + 1
	n.persistedLast = s // once installed, the disk holds nothing after s
	n.stats.SnapshotsInstalled++
	n.event("vr: installing a snapshot", "index", s, "from", m.From)
	return true
}

// mergeEntries adds entries from the log being followed. They start at or
// before verified+1. Entries the log already holds with the same view are
// the same (log matching); at the first that differs the log is cut.
// It returns false when an entry differs from a verified one.
func (n *Node) mergeEntries(es []Entry) bool {
	for _, e := range es {
		if e.Index <= n.log.snapIndex {
			continue
		}
		if e.Index <= n.log.lastIndex() {
			if v, _ := n.log.viewAt(e.Index); v == e.View {
				n.verified = max(n.verified, e.Index)
				continue
			}
			if e.Index <= n.verified {
				return false
			}
			n.cut(e.Index)
		}
		n.appendEntry(e)
		n.verified = max(n.verified, e.Index)
	}
	return true
}

// matchShape compares the log with the shape of a reference log — anchor
// a with view av, then runs, final when they reach the reference's end —
// extends verified over what matches, and cuts the log where it differs
// (and, when final, after the reference's end). It returns false when the
// anchor could not be checked: this log does not hold it.
func (n *Node) matchShape(a, av uint64, runs []Run, final bool) bool {
	if a > n.verified {
		v, ok := n.log.viewAt(a)
		if !ok || v != av {
			if ok {
				n.cut(a) // differs at a, so everything after differs too
			}
			return false
		}
	}
	i := a
	for _, r := range runs {
		for i < r.Last {
			i++
			if i > n.log.lastIndex() {
				n.verified = max(n.verified, n.log.lastIndex())
				return true
			}
			if i <= n.verified {
				continue
			}
			if v, _ := n.log.viewAt(i); v != r.View {
				n.verified = max(n.verified, i-1)
				n.cut(i)
				return true
			}
		}
	}
	n.verified = max(n.verified, min(i, n.log.lastIndex()))
	if final && n.log.lastIndex() > n.verified {
		// The reference ended at i when it was described; what we hold
		// past it (and past what we verified since, from a later message)
		// is not in it.
		n.cut(n.verified + 1)
	}
	return true
}

// updateCommit takes the primary's commit number, as far as this log is
// known to match the primary's.
func (n *Node) updateCommit(c uint64) {
	if c = min(c, n.verified); c > n.commit {
		n.commit = c
	}
}

// maybeBecomeNormal makes a recovering backup normal once its log holds the
// view's start log: only then may it say LastNormalView is this view.
func (n *Node) maybeBecomeNormal() {
	if n.status != StatusRecovering || !n.startKnown || n.verified < n.startOp {
		return
	}
	n.cut(n.verified + 1) // unverified entries past the start log were never counted
	n.status = StatusNormal
	n.lnv = n.view
	n.mustSync = true
	n.event("vr: normal as a backup", "primary", n.primaryOf(n.view), "last", n.log.lastIndex())
}
