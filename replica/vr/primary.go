package vr

import "slices"

// This file holds the primary's side of normal operation: Prepares with
// batching and pipelining, commits, heartbeats and the master lease.

// becomePrimaryState makes this node the normal primary of its view with
// its current log as the view's start log.
func (n *Node) becomePrimaryState() {
	n.status = StatusNormal
	n.lnv = n.view
	n.mustSync = true
	n.verified = n.log.lastIndex()
	n.startOp = n.log.lastIndex()
	n.startKnown = true
	n.prs = make(map[uint64]*progress, len(n.peers))
	for _, id := range n.peers {
		n.prs[id] = &progress{next: n.log.lastIndex() + 1, voter: n.conf.Members.IsVoter(id)}
	}
	n.uncommittedBytes = 0
	for i := n.commit + 1; i <= n.log.lastIndex(); i++ {
		n.uncommittedBytes += len(n.log.at(i).Data)
	}
	n.nextHeartbeat = n.now // start a lease round at the next tick
	n.primarySince = n.live
	n.stranded = nil
	n.stats.BecamePrimary++
}

// heartbeat starts a lease round, sends Commit to every backup, and
// retransmits what seems lost.
func (n *Node) heartbeat() {
	n.stamp++
	n.stampAt[n.stamp%stampRing] = n.now
	n.stampLive[n.stamp%stampRing] = n.live
	n.promiseEnd = max(n.promiseEnd, n.now+n.leaseWait) // we count in the lease quorum too
	// The next round is due from three quarters of an interval on: ticks
	// come every fraction of an interval (replica.Replicated's every half),
	// each read a little late by a busy loop, and a tick read a hair
	// earlier after its period than the one that sent this round would
	// otherwise wait for the tick after it, stretching the gap to one and
	// a half intervals — a third of the lease's margin.
	n.nextHeartbeat = n.now + n.hb - n.hb/4
	for _, id := range n.peers {
		pr := n.prs[id]
		// No progress for a whole interval with Prepares outstanding: they
		// (or their answers) were lost. Send again from what the backup
		// last reported.
		if len(pr.inflight) > 0 && pr.reported == pr.hbMatch {
			pr.inflight = pr.inflight[:0]
			pr.next = pr.reported + 1
		}
		pr.hbMatch = pr.reported
		n.send(Message{Type: MsgCommit, To: id, View: n.view, Commit: n.commit, Stamp: n.stamp})
		if !pr.normal && n.now >= pr.nextSV {
			n.sendStartView(id)
		}
		n.sendAppends(id, pr)
	}
}

// flushAppends sends what the backups miss, batching everything proposed
// since the last Ready into as few Prepares as the limits allow.
func (n *Node) flushAppends() {
	if !n.isPrimary() {
		return
	}
	for _, id := range n.peers {
		n.sendAppends(id, n.prs[id])
	}
}

func (n *Node) sendAppends(to uint64, pr *progress) {
	if pr.snapUntil > n.now {
		return
	}
	pr.snapUntil = 0
	for len(pr.inflight) < n.cfg.MaxInflightPrepares && pr.next <= n.log.lastIndex() {
		if pr.next <= n.log.snapIndex {
			n.sendSnapshot(to, pr)
			return
		}
		es := slices.Clone(n.log.slice(pr.next, n.log.lastIndex(), n.cfg.MaxPrepareEntries, n.cfg.MaxPrepareBytes))
		prev := pr.next - 1
		pv, ok := n.log.viewAt(prev)
		if !ok {
			broken("prepare: no view at %d", prev)
		}
		n.send(Message{Type: MsgPrepare, To: to, View: n.view, PrevOp: prev, PrevView: pv,
			Entries: es, Commit: n.commit, Stamp: n.stamp})
		last := es[len(es)-1].Index
		pr.inflight = append(pr.inflight, last)
		pr.next = last + 1
	}
}

// snapshotPatience is how many heartbeat intervals the primary waits for
// a backup to install a snapshot it sent before it sends anything more.
const snapshotPatience = 12

func (n *Node) sendSnapshot(to uint64, pr *progress) {
	meta := n.snap.Clone()
	n.send(Message{Type: MsgSnapshot, To: to, View: n.view, Commit: n.commit, Stamp: n.stamp, Snapshot: &meta})
	pr.snapUntil = n.now + snapshotPatience*n.hb // a snapshot may take a while; don't flood
	pr.inflight = pr.inflight[:0]
	pr.next = meta.Index + 1
	n.stats.SnapshotsSent++
}

// sendStartView tells a backup the view has started: the primary's start
// op, commit, and the shape of its log after what the backup is known to
// hold, so the backup keeps every entry it shares with us and cuts the
// rest.
func (n *Node) sendStartView(to uint64) {
	pr := n.prs[to]
	a := min(max(n.log.snapIndex, pr.knownCommit, pr.reported), n.log.lastIndex())
	av, ok := n.log.viewAt(a)
	if !ok {
		broken("start view: no view at %d", a)
	}
	runs, covered := n.log.shape(a, n.log.lastIndex(), MaxRuns)
	n.send(Message{Type: MsgStartView, To: to, View: n.view, StartOp: n.startOp, Commit: n.commit,
		PrevOp: a, PrevView: av, Runs: runs, Final: covered == n.log.lastIndex(), Stamp: n.stamp})
	pr.nextSV = n.now + n.hb
}

func (n *Node) onPrepareOK(m *Message) {
	if !n.isPrimary() || m.View != n.view {
		return
	}
	pr := n.prs[m.From]
	if pr == nil {
		return // a member this primary no longer tracks
	}
	pr.lastAck = n.now
	if m.Op > n.log.lastIndex() {
		n.drop(m, "acknowledges an index beyond the primary's log")
		return
	}
	if m.Reject {
		pr.reported = m.Op
		pr.knownCommit = min(pr.knownCommit, m.Op)
		pr.next = m.Op + 1
		pr.inflight = pr.inflight[:0]
	} else {
		pr.reported = max(pr.reported, m.Op)
		pr.next = max(pr.next, m.Op+1)
		k := 0
		for k < len(pr.inflight) && pr.inflight[k] <= m.Op {
			k++
		}
		pr.inflight = append(pr.inflight[:0], pr.inflight[k:]...)
		if len(pr.inflight) == 0 && pr.next > m.Op+1 {
			// Nothing is on its way that would fill the gap (we were
			// optimistic after StartView, or it was lost): send from
			// what the backup has.
			pr.next = m.Op + 1
		}
	}
	if pr.snapUntil > 0 && m.Op >= n.snap.Index {
		pr.snapUntil = 0
	}
	if m.Normal {
		pr.normal = true
		if !m.Reject {
			pr.match = max(pr.match, m.Op)
		}
		if m.Stamp <= n.stamp {
			pr.ackStamp = max(pr.ackStamp, m.Stamp)
		}
	} else if n.now >= pr.nextSV {
		n.sendStartView(m.From)
	}
	n.maybeCommit()
	n.sendAppends(m.From, pr)
}

// maybeCommit advances the commit number to the highest index a quorum
// of voters holds on disk: the primary itself (what it persisted) and
// voters that acknowledged as normal in this view.
func (n *Node) maybeCommit() {
	ms := make([]uint64, 0, len(n.voters))
	ms = append(ms, n.persistedLast)
	for _, pr := range n.prs {
		if pr.normal && pr.voter {
			ms = append(ms, pr.match)
		}
	}
	if len(ms) < n.quorum {
		return
	}
	slices.Sort(ms)
	c := ms[len(ms)-n.quorum]
	if k := n.pending.index; k != 0 && c >= k && n.heldBy(n.pending.c.Members.Voters()) < k {
		// A voter change commits only once a majority of the new voters
		// holds it too (reconfig.go): then the new epoch's first view can
		// form from replicas that hold the whole old epoch.
		c = k - 1
	}
	if c <= n.commit {
		return
	}
	if c > n.log.lastIndex() {
		broken("commit %d beyond log %d", c, n.log.lastIndex())
	}
	for i := n.commit + 1; i <= c; i++ {
		n.uncommittedBytes -= len(n.log.at(i).Data)
	}
	n.commit = c
}

// heldBy returns the highest index a majority of voters holds on disk, as
// acknowledged to this primary (itself counted by what it persisted).
func (n *Node) heldBy(voters []uint64) uint64 {
	ms := make([]uint64, 0, len(voters))
	for _, id := range voters {
		if id == n.id {
			ms = append(ms, n.persistedLast)
		} else if pr := n.prs[id]; pr != nil && pr.normal {
			ms = append(ms, pr.match)
		} else {
			ms = append(ms, 0)
		}
	}
	slices.Sort(ms)
	return ms[len(ms)-(len(voters)/2+1)]
}

// leaseStart returns when the newest lease round a quorum acknowledged
// began.
func (n *Node) leaseStart() (int64, bool) {
	s, ok := n.leaseRound()
	if !ok {
		return 0, false
	}
	return n.stampAt[s%stampRing], true
}

// leaseRound returns the newest lease round a quorum acknowledged.
func (n *Node) leaseRound() (uint64, bool) {
	if !n.isPrimary() || n.stamp == 0 {
		return 0, false
	}
	stamps := make([]uint64, 0, len(n.voters))
	stamps = append(stamps, n.stamp)
	for _, pr := range n.prs {
		if pr.normal && pr.voter {
			stamps = append(stamps, pr.ackStamp)
		}
	}
	if len(stamps) < n.quorum {
		return 0, false
	}
	slices.Sort(stamps)
	s := stamps[len(stamps)-n.quorum]
	if s == 0 || s+stampRing <= n.stamp {
		return 0, false
	}
	return s, true
}

// lastQuorumLive is when (in live time) the newest lease round a quorum
// acknowledged began, or when this node became primary if none has been
// yet.
func (n *Node) lastQuorumLive() int64 {
	if s, ok := n.leaseRound(); ok {
		return max(n.stampLive[s%stampRing], n.primarySince)
	}
	return n.primarySince
}

// quorumLost reports whether the primary has run a whole view-change
// timeout past the end of its last lease without a quorum answering: then
// it steps down (Tick). A backup that hears nothing waits as long before
// it probes, so a slow but reachable primary is not pushed aside sooner
// than by its backups. It is measured in live time: a primary that was
// itself starved finds its backups' answers waiting when it runs again,
// not a reason to give up its view.
func (n *Node) quorumLost() bool {
	return n.quorum > 1 && n.live-n.lastQuorumLive() >= n.stepDown
}
