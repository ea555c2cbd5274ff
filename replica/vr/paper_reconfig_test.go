package vr

import (
	"errors"
	"slices"
	"testing"
)

// Direct tests of reconfiguration by epochs (VR Revisited §7, as built
// here: reconfig.go), in the manner of paper_test.go.

// join starts replica id with an empty log, to be added to the cell.
func (nw *network) join(id uint64) *testReplica {
	nw.t.Helper()
	cfg := nw.cfg
	cfg.ID, cfg.Join = id, true
	return nw.addReplica(cfg, Persisted{})
}

// proposeConfig proposes next on replica id and delivers what follows.
func (nw *network) proposeConfig(id uint64, next Members) uint64 {
	nw.t.Helper()
	i, err := nw.node(id).ProposeConfig(next)
	if err != nil {
		nw.t.Fatalf("ProposeConfig on %d: %v", id, err)
	}
	nw.ready(nw.reps[id])
	nw.deliver()
	return i
}

// withLearner returns a cell of 1, 2, 3 with replica 4 added as a learner
// and caught up.
func withLearner(t *testing.T) (*network, Members) {
	nw := newNetwork(t, 1, 2, 3)
	nw.join(4)
	next := append(nw.info(1).Members, Member{ID: 4, Learner: true})
	i := nw.proposeConfig(1, next)
	nw.runUntil(4*nw.cfg.HeartbeatInterval, "the learner holds the log", func() bool {
		return nw.info(4).LastOp == i && nw.info(4).Commit == i
	})
	return nw, next
}

// TestALearnerGetsTheLogButCountsInNoQuorum: a learner change keeps the
// epoch; the learner receives entries and answers them, but its answers
// commit nothing, it never probes, and it follows a new view's primary.
// Reference: §7 (as built: reconfig.go, learners).
func TestALearnerGetsTheLogButCountsInNoQuorum(t *testing.T) {
	nw, _ := withLearner(t)
	if e := nw.info(1).Epoch; e != 0 {
		t.Fatalf("a learner change opened epoch %d", e)
	}
	nw.reps[2].isolated, nw.reps[3].isolated = true, true
	i := nw.propose(1, "x")
	if got := nw.info(4).LastOp; got != i {
		t.Fatalf("learner holds %d, want %d", got, i)
	}
	if c := nw.info(1).Commit; c >= i {
		t.Fatalf("committed %d with the primary and a learner only", c)
	}
	nw.reps[2].isolated, nw.reps[3].isolated = false, false
	nw.reps[1].isolated = true
	nw.sent = nil
	p := nw.waitPrimary(nw.viewChangeLimit(), 1)
	if ps := nw.sentOf(MsgProbe, 4); len(ps) != 0 {
		t.Fatalf("the learner probed: %v", ps)
	}
	if v := nw.node(4).View(); v != nw.node(p).View() || nw.info(4).Status != StatusNormal || nw.info(4).Voter {
		t.Fatalf("learner: %+v; want a normal non-voter in view %d", nw.info(4), nw.node(p).View())
	}
}

// TestAVoterChangeCommitsWithMajoritiesOfOldAndNewVoters: promoting a
// learner opens the next epoch; its entry commits only once a majority
// of the old voters and one of the new voters hold it, the primary
// appends nothing after it meanwhile, and then the primary, still a
// voter, carries on as the first primary of the new epoch without a
// view change.
// Reference: §7 (as built: reconfig.go, "The primary carries on").
func TestAVoterChangeCommitsWithMajoritiesOfOldAndNewVoters(t *testing.T) {
	nw, members := withLearner(t)
	nw.reps[3].isolated, nw.reps[4].isolated = true, true
	k := nw.proposeConfig(1, members.WithRole(4, false))
	if c := nw.info(1).Commit; c >= k {
		t.Fatalf("voter change committed at %d with 2 of the 4 new voters", c)
	}
	var np *NotPrimaryError
	if _, err := nw.node(1).Propose([]byte("x")); !errors.As(err, &np) {
		t.Fatalf("Propose after an uncommitted voter change = %v, want NotPrimaryError", err)
	}
	if _, err := nw.node(1).ProposeConfig(members); !errors.Is(err, ErrConfigInProgress) {
		t.Fatalf("a second change = %v, want ErrConfigInProgress", err)
	}
	nw.reps[4].isolated = false
	nw.sent = nil
	nw.runUntil(4*nw.cfg.HeartbeatInterval, "the change committed", func() bool { return nw.info(1).Commit >= k })
	info := nw.info(1)
	if !info.IsPrimary || info.Epoch != 1 || EpochOf(info.View) != 1 || !slices.Contains(info.Members.Voters(), 4) {
		t.Fatalf("primary after the change: %+v", info)
	}
	if nw.node(1).Stats().CarriedOn != 1 || len(nw.sentOf(MsgDoViewChange, 0)) != 0 {
		t.Fatalf("carried on %d times, %d DoViewChanges: want no view change", nw.node(1).Stats().CarriedOn, len(nw.sentOf(MsgDoViewChange, 0)))
	}
	nw.reps[3].isolated = false
	nw.waitPrimary(nw.viewChangeLimit())
	for _, id := range nw.ids {
		if i := nw.info(id); i.Epoch != 1 || i.View != info.View || !i.Voter {
			t.Fatalf("replica %d: %+v", id, i)
		}
	}
	i := nw.propose(1, "y")
	nw.run(nw.cfg.HeartbeatInterval)
	for _, id := range nw.ids {
		if _, ok := nw.reps[id].applied[i]; !ok {
			t.Fatalf("replica %d did not apply %d in the new epoch", id, i)
		}
	}
}

// TestProposeConfigRules: a change is proposed on the primary only, one
// voter at a time, and a new replica joins as a learner before it votes.
// Reference: §7 (as built: Node.ProposeConfig).
func TestProposeConfigRules(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	cur := nw.info(1).Members
	var np *NotPrimaryError
	if _, err := nw.node(2).ProposeConfig(cur.Without(3)); !errors.As(err, &np) {
		t.Fatalf("on a backup: %v", err)
	}
	if _, err := nw.node(1).ProposeConfig(cur); !errors.Is(err, ErrNoChange) {
		t.Fatalf("the same configuration: %v", err)
	}
	if _, err := nw.node(1).ProposeConfig(cur.Without(2).Without(3)); !errors.Is(err, ErrBadConfigChange) {
		t.Fatalf("two voters out: %v", err)
	}
	if _, err := nw.node(1).ProposeConfig(append(cur, Member{ID: 4})); !errors.Is(err, ErrBadConfigChange) {
		t.Fatalf("a new voter that was no learner: %v", err)
	}
}

// TestARemovedReplicaMovesNobody: once a voter is removed (a new epoch of
// the remaining voters), its messages of the new epoch are ignored and
// its probes granted by nobody; the others go on committing.
// Reference: §7 (as built: reconfig.go; Node.outsider).
func TestARemovedReplicaMovesNobody(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	cur := nw.info(1).Members
	k := nw.proposeConfig(1, cur.Without(3))
	nw.runUntil(4*nw.cfg.HeartbeatInterval, "the removal committed", func() bool {
		return nw.info(1).Epoch == 1 && nw.info(2).Epoch == 1 && nw.info(2).Status == StatusNormal
	})
	if nw.info(1).Commit < k || !nw.node(1).IsPrimary() {
		t.Fatalf("primary after the removal: %+v", nw.info(1))
	}
	v := nw.node(1).View()
	n2 := nw.node(2)
	for _, m := range []Message{
		{Type: MsgProbe, From: 3, To: 2, View: v + 1},
		{Type: MsgStartViewChange, From: 3, To: 2, View: v + 1},
	} {
		if err := n2.Step(m); err != nil {
			t.Fatalf("Step(%v) = %v", &m, err)
		}
		if n2.HasReady() {
			nw.ready(nw.reps[2])
		}
		if n2.View() != v || slices.ContainsFunc(nw.inflight, func(x Message) bool { return x.To == 3 && x.Type == MsgProbeReply }) {
			t.Fatalf("after %v: view %d, in flight %v", &m, n2.View(), nw.inflight)
		}
	}
	nw.reps[3].isolated = true
	i := nw.propose(1, "after")
	if c := nw.info(1).Commit; c != i {
		t.Fatalf("commit %d with the two remaining voters, want %d", c, i)
	}
}

// TestAPrimaryThatRemovesItselfHandsOver: a primary that removes itself
// names as the new epoch's first primary the voter that acknowledged the
// most of its log (the lowest id among equals), leaves the voters once the
// change commits, and the remaining voters form the new epoch's first
// view by a view change.
// Reference: §7 (as built: reconfig.go, Node.successor, enterEpoch).
func TestAPrimaryThatRemovesItselfHandsOver(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	cur := nw.info(1).Members
	k := nw.proposeConfig(1, cur.Without(1))
	nw.sent = nil
	nw.runUntil(nw.viewChangeLimit(), "a primary of the new epoch", func() bool {
		p := nw.primary()
		return p != 0 && p != 1 && nw.info(p).Epoch == 1 && nw.info(p).Commit >= k
	})
	p := nw.primary()
	if p != 2 || EpochOf(nw.node(2).View()) != 1 {
		t.Fatalf("primary %d in view %d, want 2 in epoch 1", p, nw.node(p).View())
	}
	if len(nw.sentOf(MsgDoViewChange, 0)) == 0 {
		t.Fatal("the new epoch formed without a view change")
	}
	if i := nw.info(1); i.Voter || i.IsPrimary || i.Members.Contains(1) {
		t.Fatalf("the removed primary: %+v", i)
	}
	i := nw.propose(2, "after")
	if c := nw.info(2).Commit; c != i {
		t.Fatalf("commit %d with the two remaining voters, want %d", c, i)
	}
}

// TestAVoterThatMissedTheEpochCatchesUpWithoutAPrimary: a voter of the new
// epoch that does not hold the entry that opened it (it was cut off when
// the change committed) learns the epoch from the other voters, not only
// from a primary of the epoch: here the new epoch cannot form without it
// (three voters, the first primary crashed before its view formed), so a
// cell that waited for a primary to teach it would stay without one for
// good.
// Reference: §7 (as built: reconfig.go, "A voter that missed the change").
func TestAVoterThatMissedTheEpochCatchesUpWithoutAPrimary(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3, 4)
	cur := nw.info(1).Members
	nw.reps[3].isolated = true
	k := nw.proposeConfig(1, cur.Without(1))
	nw.runUntil(4*nw.cfg.HeartbeatInterval, "2 and 4 in the new epoch", func() bool {
		return nw.info(2).Epoch == 1 && nw.info(4).Epoch == 1
	})
	if i := nw.info(3); i.LastOp >= k || i.Epoch != 0 {
		t.Fatalf("replica 3 holds the change: %+v", i)
	}
	// The new epoch's first primary dies before its view forms; the
	// removed primary is gone too.
	nw.reps[2].crashed, nw.reps[1].crashed = true, true
	nw.reps[3].isolated = false
	nw.sent = nil
	p := nw.waitPrimary(nw.viewChangeLimit(), 1, 2)
	for _, id := range []uint64{3, 4} {
		if i := nw.info(id); i.Epoch != 1 || !i.Voter || i.Commit < k || EpochOf(i.View) != 1 {
			t.Fatalf("replica %d: %+v", id, i)
		}
	}
	if len(nw.sentOf(MsgGetLog, 3)) == 0 || len(nw.sentOf(MsgLog, 4)) == 0 {
		t.Fatal("replica 3 did not take the log from replica 4")
	}
	i := nw.propose(p, "after")
	if c := nw.info(p).Commit; c != i {
		t.Fatalf("commit %d with voters 3 and 4, want %d", c, i)
	}
	for _, id := range nw.ids {
		if d := nw.node(id).Stats().Dropped; d != 0 {
			t.Fatalf("replica %d dropped %d messages", id, d)
		}
	}
}

// TestAVoterThatMissedTheEpochLeadsTheViewItIsDue: the same voter, behind
// the others' compacted logs, is the primary of the view the others move
// to when the epoch's first view fails (its primary restarted): a voter
// changing to that view sends it the snapshot, and it leads the view,
// instead of the others waiting out two view-change timeouts for the next.
// Reference: §7 (as built: reconfig.go, "A voter that missed the change").
func TestAVoterThatMissedTheEpochLeadsTheViewItIsDue(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3, 4, 5)
	cur := nw.info(1).Members
	nw.reps[3].isolated = true
	k := nw.proposeConfig(1, cur.Without(1))
	nw.runUntil(4*nw.cfg.HeartbeatInterval, "2, 4 and 5 in the new epoch", func() bool {
		for _, id := range []uint64{2, 4, 5} {
			if i := nw.info(id); i.Epoch != 1 || i.Applied < k {
				return false
			}
		}
		return true
	})
	for _, id := range []uint64{2, 4, 5} {
		meta, err := nw.node(id).SnapshotMeta(k)
		if err != nil {
			t.Fatal(err)
		}
		r := nw.reps[id]
		r.disk.snap, r.disk.snapData = &meta, []byte("state")
		r.disk.entries = slices.DeleteFunc(r.disk.entries, func(e Entry) bool { return e.Index <= k })
		if err := nw.node(id).Compact(meta); err != nil {
			t.Fatal(err)
		}
	}
	// The first view's primary (2) crashes before the view forms; the
	// others give it up, and it restarts as they probe for the next
	// view, whose primary is 3.
	first := nw.node(4).View()
	nw.reps[1].crashed, nw.reps[2].crashed = true, true
	nw.reps[3].isolated = false
	nw.run(nw.cfg.SuspectAfter + 2*nw.cfg.HeartbeatInterval) // 4 and 5 find 2 gone
	nw.restart(2)
	nw.sent = nil
	p := nw.waitPrimary(nw.cfg.ViewChangeTimeout, 1)
	if v := nw.node(p).View(); p != 3 || v != first+1 {
		t.Fatalf("primary %d in view %d, want 3 in %d", p, v, first+1)
	}
	if len(nw.sentOf(MsgSnapshot, 0)) == 0 {
		t.Fatal("no snapshot sent")
	}
	if i := nw.info(3); i.Epoch != 1 || !i.Voter || i.Commit < k {
		t.Fatalf("replica 3: %+v", i)
	}
	for _, id := range nw.ids {
		if d := nw.node(id).Stats().Dropped; d != 0 {
			t.Fatalf("replica %d dropped %d messages", id, d)
		}
	}
}
