package vr

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// Direct tests of the core, one group per section of Viewstamped
// Replication Revisited (Liskov & Cowling, 2012) and of the package
// documentation, in the manner of etcd raft's raft_paper_test.go. Each
// test steps Nodes by hand through the network of net_test.go.

// --- §4.1 Normal operation ---

// TestPrimaryAssignsOpNumbersInOrder: "The primary advances op-number,
// adds the request to the end of the log, and then sends a PREPARE
// message to the other replicas." Proposals get consecutive indexes after
// the log (entry 1 is the configuration), in the primary's view, and the
// Prepares carry them after the entry they follow.
// Reference: §4.1, step 3.
func TestPrimaryAssignsOpNumbersInOrder(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	if !nw.node(1).IsPrimary() {
		t.Fatal("replica 1 is not the primary of view 0")
	}
	nw.drop = func(m *Message) bool { return true } // look at the Prepares only
	first, err := nw.node(1).Propose([]byte("a"), []byte("b"))
	if err != nil || first != 2 {
		t.Fatalf("Propose = %d, %v; want 2", first, err)
	}
	if next, err := nw.node(1).Propose([]byte("c")); err != nil || next != 4 {
		t.Fatalf("second Propose = %d, %v; want 4", next, err)
	}
	nw.sent = nil
	nw.ready(nw.reps[1])
	preps := nw.sentOf(MsgPrepare, 1)
	if len(preps) != 2 {
		t.Fatalf("%d Prepares, want one to each backup: %v", len(preps), preps)
	}
	for _, m := range preps {
		if m.PrevOp != 1 || m.PrevView != 0 || len(m.Entries) != 3 {
			t.Fatalf("Prepare %v: want entries 2..4 after 1/0", &m)
		}
		for i, e := range m.Entries {
			if e.Index != uint64(2+i) || e.View != 0 || string(e.Data) != string("abc"[i]) {
				t.Fatalf("Prepare entry %d = %d/%d %q", i, e.Index, e.View, e.Data)
			}
		}
	}
	if got := nw.info(1).LastOp; got != 4 {
		t.Fatalf("primary's log ends at %d, want 4", got)
	}
}

// TestProposeOnlyOnThePrimary: only the primary takes client requests
// (a backup's clients are sent to it): Propose off the primary fails
// with NotPrimaryError naming the primary of the view.
// Reference: §4.1.
func TestProposeOnlyOnThePrimary(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	_, err := nw.node(2).Propose([]byte("x"))
	var np *NotPrimaryError
	if !errors.As(err, &np) || np.Primary != 1 || np.View != 0 {
		t.Fatalf("Propose on a backup = %v, want NotPrimaryError naming 1", err)
	}
}

// TestBackupAcceptsPrepareOnlyInOrder: "A backup won't accept a prepare
// with op-number n until it has entries for all earlier requests in its
// log." A Prepare after a gap is refused with a PrepareOK that rejects
// it and names what the backup holds; one that follows the log is
// appended and acknowledged, after the entries are on disk (the answer is
// in the same Ready as the entries, which the driver sends after the
// fsync).
// Reference: §4.1, step 4.
func TestBackupAcceptsPrepareOnlyInOrder(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	b := nw.node(2)
	gap := Message{Type: MsgPrepare, From: 1, To: 2, PrevOp: 2, PrevView: 0, Commit: 1,
		Entries: []Entry{{Index: 3, Type: EntryCommand, Data: []byte("c")}}}
	if err := b.Step(gap); err != nil {
		t.Fatal(err)
	}
	rd := b.Ready()
	if len(rd.Entries) != 0 || len(rd.Messages) != 1 {
		t.Fatalf("after a Prepare with a gap: %d entries, messages %v", len(rd.Entries), rd.Messages)
	}
	if ok := rd.Messages[0]; ok.Type != MsgPrepareOK || !ok.Reject || ok.Op != 1 || ok.To != 1 {
		t.Fatalf("answer %v, want a rejecting PrepareOK naming op 1", &ok)
	}
	b.Advance()

	inOrder := Message{Type: MsgPrepare, From: 1, To: 2, PrevOp: 1, PrevView: 0, Commit: 1,
		Entries: []Entry{{Index: 2, Type: EntryCommand, Data: []byte("b")}, {Index: 3, Type: EntryCommand, Data: []byte("c")}}}
	if err := b.Step(inOrder); err != nil {
		t.Fatal(err)
	}
	rd = b.Ready()
	if len(rd.Entries) != 2 || !rd.MustSync || len(rd.EarlyMessages) != 0 {
		t.Fatalf("Ready: %d entries, sync %v, %d early messages; want 2 entries synced before any message", len(rd.Entries), rd.MustSync, len(rd.EarlyMessages))
	}
	if len(rd.Messages) != 1 {
		t.Fatalf("messages %v", rd.Messages)
	}
	if ok := rd.Messages[0]; ok.Type != MsgPrepareOK || ok.Reject || ok.Op != 3 || !ok.Normal {
		t.Fatalf("answer %v, want PrepareOK of op 3 from a normal backup", &ok)
	}
	b.Advance()
	if got := b.Info().LastOp; got != 3 {
		t.Fatalf("backup's log ends at %d, want 3", got)
	}
}

// TestPrimaryCommitsAfterQuorumOfPrepareOK: "the primary waits for f
// PREPAREOK messages from different backups; at this point it considers
// the operation ... to be committed." Here the primary counts itself only
// for what it has persisted (its write may still be queued: PersistAsync),
// so with its disk slow it needs f+1 backups (3 of 5 replicas here); with
// f backups' answers it commits once its own write is durable.
// Reference: §4.1, step 5; package documentation, "The core and its
// driver".
func TestPrimaryCommitsAfterQuorumOfPrepareOK(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3, 4, 5)
	nw.reps[1].holdAsync = true // the primary's disk is slow
	nw.reps[4].isolated, nw.reps[5].isolated = true, true
	i := nw.propose(1, "x")
	if got := nw.info(2).LastOp; got != i {
		t.Fatalf("backup 2 holds %d, want %d", got, i)
	}
	if c := nw.info(1).Commit; c >= i {
		t.Fatalf("committed %d with two backups and its own write not durable (quorum 3)", c)
	}
	if _, ok := nw.reps[1].applied[i]; ok {
		t.Fatalf("primary applied %d before it committed", i)
	}
	nw.release(1)
	if c := nw.info(1).Commit; c != i {
		t.Fatalf("commit %d once the primary's write is durable, want %d", c, i)
	}
	if _, ok := nw.reps[1].applied[i]; !ok {
		t.Fatalf("primary did not apply %d", i)
	}

	// Now with a slow primary disk and a quorum of backups: no wait for it.
	nw.reps[1].holdAsync = true
	nw.reps[4].isolated = false
	j := nw.propose(1, "y")
	if c := nw.info(1).Commit; c != j {
		t.Fatalf("commit %d with three backups' PrepareOK (quorum 3) and the primary's disk slow, want %d", c, j)
	}
	nw.release(1)
}

// TestBackupsLearnCommitsFromCommitAndPrepare: "Normally the primary
// informs backups about the commit when it sends the next PREPARE
// message ... When a backup learns of a commit, ... it executes the
// operation." When no request follows, the primary "informs the backups
// of the latest commit by sending them a COMMIT message", here every
// heartbeat interval.
// Reference: §4.1, steps 6–7 and the paragraph after them.
func TestBackupsLearnCommitsFromCommitAndPrepare(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	i := nw.propose(1, "a")
	if c := nw.info(1).Commit; c != i {
		t.Fatalf("primary commit %d, want %d", c, i)
	}
	if _, ok := nw.reps[2].applied[i]; ok {
		t.Fatal("a backup applied an entry before hearing it committed")
	}
	// The next Prepare carries the commit number.
	j := nw.propose(1, "b")
	for _, id := range []uint64{2, 3} {
		if _, ok := nw.reps[id].applied[i]; !ok {
			t.Fatalf("backup %d did not apply %d after the next Prepare", id, i)
		}
		if _, ok := nw.reps[id].applied[j]; ok {
			t.Fatalf("backup %d applied %d before hearing it committed", id, j)
		}
	}
	// Nothing more: the heartbeat (Commit) carries it.
	nw.sent = nil
	nw.run(nw.cfg.HeartbeatInterval)
	if len(nw.sentOf(MsgCommit, 1)) == 0 {
		t.Fatal("no Commit within a heartbeat interval")
	}
	for _, id := range []uint64{2, 3} {
		if _, ok := nw.reps[id].applied[j]; !ok {
			t.Fatalf("backup %d did not apply %d from the Commit", id, j)
		}
	}
}

// TestProposeOverloaded: past MaxUncommittedEntries the primary refuses
// proposals with ErrOverloaded until entries commit.
// Reference: package documentation, "Normal operation".
func TestProposeOverloaded(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	nw.reps[2].isolated, nw.reps[3].isolated = true, true
	p := nw.node(1)
	max := p.cfg.MaxUncommittedEntries
	cmds := make([][]byte, max)
	for i := range cmds {
		cmds[i] = []byte{1}
	}
	if _, err := p.Propose(cmds...); err != nil {
		t.Fatalf("Propose of %d = %v", max, err)
	}
	if _, err := p.Propose([]byte{1}); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("Propose past the bound = %v, want ErrOverloaded", err)
	}
	nw.reps[2].isolated = false
	nw.flush()
	nw.run(2 * nw.cfg.HeartbeatInterval)
	if _, err := p.Propose([]byte{1}); err != nil {
		t.Fatalf("Propose once committed = %v", err)
	}
}

// --- §4.2 View changes ---

// TestBackupProbesBeforeAViewChange: "If a timeout expires without a
// communication from the primary, the replicas carry out a view change."
// Here a backup first probes (a pre-vote): it asks the others whether
// they too hear no primary, and moves to view v+1 only with a quorum of
// grants. It probes only after ViewChangeTimeout of silence.
// Reference: §4.2; package documentation, "View change".
func TestBackupProbesBeforeAViewChange(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	nw.reps[1].isolated = true // silent, not gone: no evidence of death
	nw.drop = func(m *Message) bool { return m.Type == MsgProbeReply }
	nw.sent = nil
	nw.run(nw.cfg.ViewChangeTimeout - 2*nw.cfg.HeartbeatInterval)
	if ps := nw.sentOf(MsgProbe, 0); len(ps) != 0 {
		t.Fatalf("probed before ViewChangeTimeout of silence: %v", ps)
	}
	nw.run(3 * nw.cfg.HeartbeatInterval)
	ps := nw.sentOf(MsgProbe, 0)
	if len(ps) == 0 {
		t.Fatal("no probe after ViewChangeTimeout of silence")
	}
	for _, m := range ps {
		if m.View != 1 {
			t.Fatalf("probe %v, want one for view 1", &m)
		}
	}
	nw.run(nw.cfg.ViewChangeTimeout)
	// (The cut-off primary steps down meanwhile; nobody hears it.)
	if svc := append(nw.sentOf(MsgStartViewChange, 2), nw.sentOf(MsgStartViewChange, 3)...); len(svc) != 0 {
		t.Fatalf("a view change without a quorum of grants: %v", svc)
	}
	for _, id := range []uint64{2, 3} {
		if v := nw.node(id).View(); v != 0 {
			t.Fatalf("replica %d in view %d without grants", id, v)
		}
	}
	nw.drop = nil
	if p := nw.waitPrimary(nw.viewChangeLimit(), 1); p != 2 || nw.node(2).View() != 1 {
		t.Fatalf("primary %d in view %d, want 2 in view 1", p, nw.node(p).View())
	}
}

// TestPrimaryAQuorumHearsKeepsItsView: with the pre-vote, "a primary that
// a quorum still hears keeps its view however slow it is for the others":
// a backup cut off from the primary alone probes, the backup that hears
// the primary refuses, and nobody changes views.
// Reference: package documentation, "View change".
func TestPrimaryAQuorumHearsKeepsItsView(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	nw.drop = func(m *Message) bool { return (m.From == 1 && m.To == 3) || (m.From == 3 && m.To == 1) }
	nw.sent = nil
	nw.run(3 * nw.cfg.ViewChangeTimeout)
	if len(nw.sentOf(MsgProbe, 3)) == 0 {
		t.Fatal("the cut-off backup never probed")
	}
	for _, r := range nw.sentOf(MsgProbeReply, 2) {
		if r.Granted {
			t.Fatalf("backup 2, which hears its primary, granted %v", &r)
		}
	}
	if svc := nw.sentOf(MsgStartViewChange, 0); len(svc) != 0 {
		t.Fatalf("view change started: %v", svc)
	}
	if !nw.node(1).IsPrimary() || nw.node(1).View() != 0 || nw.node(3).View() != 0 {
		t.Fatalf("views moved: primary %v, view %d, replica 3 in %d", nw.node(1).IsPrimary(), nw.node(1).View(), nw.node(3).View())
	}
	i := nw.propose(1, "still working")
	if c := nw.info(1).Commit; c != i {
		t.Fatalf("primary commit %d, want %d with backup 2", c, i)
	}
}

// TestALoneReplicaCannotDeposeThePrimary: one replica's StartViewChange,
// DoViewChange or Probe moves nobody that hears a working primary.
// Reference: package documentation, "Every path into a view passes the
// pre-vote".
func TestALoneReplicaCannotDeposeThePrimary(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	msgs := []Message{
		{Type: MsgStartViewChange, From: 3, To: 2, View: 1},
		{Type: MsgStartViewChange, From: 3, To: 1, View: 1},
		{Type: MsgStartViewChange, From: 3, To: 2, View: 5},
		{Type: MsgDoViewChange, From: 3, To: 2, View: 1, Op: 1, Commit: 1, PrevOp: 1, Final: true},
		{Type: MsgProbe, From: 3, To: 2, View: 1},
		{Type: MsgProbe, From: 3, To: 1, View: 1},
	}
	for _, m := range msgs {
		nw.sent = nil
		if err := nw.node(m.To).Step(m); err != nil {
			t.Fatalf("Step(%v) = %v", &m, err)
		}
		nw.ready(nw.reps[m.To])
		for _, r := range nw.sentOf(MsgProbeReply, 0) {
			if r.Granted {
				t.Fatalf("after %v: granted %v", &m, &r)
			}
		}
		if svc := nw.sentOf(MsgStartViewChange, 0); len(svc) != 0 {
			t.Fatalf("after %v: %v", &m, svc)
		}
		if v := nw.node(m.To).View(); v != 0 {
			t.Fatalf("after %v: replica %d in view %d", &m, m.To, v)
		}
		nw.deliver()
	}
	if !nw.node(1).IsPrimary() {
		t.Fatal("replica 1 is no longer the primary")
	}
}

// TestDoViewChangeGoesToThePrimaryOfTheNewView: the primary of a view is
// chosen round-robin by the view number, so DoViewChange for view v goes
// to voters[v mod n], and a view change whose new primary is down too
// moves on to the next view after two timeouts.
// Reference: §4 and §4.2 steps 2–3; package documentation, "Views,
// configuration, quorum".
func TestDoViewChangeGoesToThePrimaryOfTheNewView(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3, 4, 5)
	nw.reps[1].isolated, nw.reps[2].isolated = true, true
	nw.sent = nil
	p := nw.waitPrimary(nw.viewChangeLimit(), 1, 2)
	if p != 3 || nw.node(3).View() != 2 {
		t.Fatalf("primary %d in view %d, want 3 in view 2", p, nw.node(p).View())
	}
	dvcs := nw.sentOf(MsgDoViewChange, 0)
	if len(dvcs) == 0 {
		t.Fatal("no DoViewChange")
	}
	for _, m := range dvcs {
		if want := nw.ids[m.View%5]; m.To != want {
			t.Fatalf("%v: want it sent to %d", &m, want)
		}
	}
}

// persistedLog is a replica's disk for the tests that start from given
// logs: entry 1 is the configuration of members, then one entry per view
// in views (index 2 on).
func persistedLog(members Members, hs HardState, views ...uint64) Persisted {
	es := []Entry{{Index: 1, View: 0, Type: EntryConfig, Data: EncodeConfig(Configuration{Members: members})}}
	for i, v := range views {
		es = append(es, Entry{Index: uint64(i + 2), View: v, Type: EntryCommand, Data: []byte{byte('a' + i), byte('0' + v)}})
	}
	return Persisted{HardState: hs, Entries: es}
}

// TestNewPrimaryPicksTheLogOfTheLatestNormalView: "it selects as the new
// log the one contained in the message with the largest v′; if several
// messages have the same v′ it selects the one among them with the
// largest n." A shorter log of a later normal view beats a longer one of
// an earlier view; the new primary cuts its own, fetches the entry it
// misses, and StartView makes every replica's log the same (a replica's
// entries of an older view after the common prefix are cut).
// Reference: §4.2 step 3 and step 5.
func TestNewPrimaryPicksTheLogOfTheLatestNormalView(t *testing.T) {
	members := Members{{ID: 1}, {ID: 2}, {ID: 3}}
	nw := &network{t: t, now: int64(1e12), cfg: testConfig(), reps: map[uint64]*testReplica{}, committed: map[uint64]Entry{}}
	cfg := func(id uint64) Config { c := nw.cfg; c.ID = id; return c }
	// Common: entries 2, 3 of view 0, committed. Replica 1 was normal in
	// view 1 and has 4..6 of it; replica 2 normal in view 2 with 4 of it;
	// replica 3 last normal in view 0 with the longest log. All are
	// changing to view 3, whose primary is replica 1.
	p1 := persistedLog(members, HardState{View: 3, LastNormalView: 1, Commit: 3}, 0, 0, 1, 1, 1)
	p2 := persistedLog(members, HardState{View: 3, LastNormalView: 2, Commit: 3}, 0, 0, 2)
	p3 := persistedLog(members, HardState{View: 3, LastNormalView: 0, Commit: 3}, 0, 0, 0, 0, 0, 0)
	for id, p := range map[uint64]Persisted{1: p1, 2: p2} {
		r := nw.addReplica(cfg(id), p)
		r.disk.hs, r.disk.entries = p.HardState, slices.Clone(p.Entries)
	}
	nw.reps[3] = &testReplica{id: 3, cfg: cfg(3), crashed: true, applied: map[uint64]Entry{}}
	nw.ids = []uint64{1, 2, 3}
	nw.runUntil(nw.viewChangeLimit(), "replica 1 primary of view 3", func() bool {
		return nw.node(1).IsPrimary() && nw.info(2).Status == StatusNormal
	})
	if v := nw.node(1).View(); v != 3 {
		t.Fatalf("primary in view %d, want 3", v)
	}
	want := []string{nw.logOf(2)[0], "2/0:a0", "3/0:b0", "4/2:c2"}
	if got := nw.logOf(1); !slices.Equal(got, want) {
		t.Fatalf("new primary's log %v, want %v (replica 2's, normal in the latest view)", got, want)
	}
	if got := nw.info(1).LastNormalView; got != 3 {
		t.Fatalf("new primary's last normal view %d, want 3", got)
	}
	// Replica 3 comes back with its longer log of view 0: StartView cuts
	// it to the new primary's.
	r3 := nw.addReplica(cfg(3), p3)
	r3.disk.hs, r3.disk.entries = p3.HardState, slices.Clone(p3.Entries)
	nw.runUntil(nw.viewChangeLimit(), "replica 3 normal in view 3", func() bool {
		return nw.node(3).View() == 3 && nw.info(3).Status == StatusNormal
	})
	if got := nw.logOf(3); !slices.Equal(got, want) {
		t.Fatalf("replica 3's log %v, want %v", got, want)
	}
}

// TestNewPrimaryPicksTheLongestLogOfTheSameNormalView: with the same last
// normal view the longest log wins, so entries that reached only a
// minority of the old view (here: one backup, not committed) may survive.
// Reference: §4.2 step 3.
func TestNewPrimaryPicksTheLongestLogOfTheSameNormalView(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	nw.reps[1].holdAsync = true // the primary's own write never lands
	nw.drop = func(m *Message) bool { return m.Type == MsgPrepare && m.To == 2 }
	i := nw.propose(1, "x", "y")
	if c := nw.info(1).Commit; c >= i {
		t.Fatalf("committed %d with one backup and no primary write", c)
	}
	nw.reps[1].crashed = true
	nw.drop = nil
	if p := nw.waitPrimary(nw.viewChangeLimit(), 1); p != 2 {
		t.Fatalf("primary %d, want 2", p)
	}
	if got, want := nw.logOf(2), nw.logOf(3); !slices.Equal(got, want) || len(got) != 3 {
		t.Fatalf("new primary's log %v, want replica 3's longer log %v", got, want)
	}
}

// TestCommittedEntriesSurviveEveryViewChange: every operation committed
// in a view is in the log the next view starts with. Round after
// round the primary commits entries on a bare majority (the next view's
// primary misses them) and crashes (then restarts from its disk); every
// committed entry stays at its index in every log, and no two replicas
// apply different entries at one index.
// Reference: §4.2, and the paper's correctness argument for view changes
// (§8).
func TestCommittedEntriesSurviveEveryViewChange(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	committed := map[uint64]string{}
	p := uint64(1)
	for round := range 4 {
		next := nw.ids[(nw.node(p).View()+1)%3]
		nw.drop = func(m *Message) bool { return m.Type == MsgPrepare && m.To == next }
		last := nw.propose(p, fmt.Sprint("a", round), fmt.Sprint("b", round))
		nw.runUntil(2*nw.cfg.HeartbeatInterval, "commit", func() bool { return nw.info(p).Commit >= last })
		if nw.info(next).LastOp >= last {
			t.Fatalf("round %d: the next primary %d holds the entries", round, next)
		}
		for _, e := range nw.reps[p].disk.entries {
			if e.Index <= nw.info(p).Commit {
				committed[e.Index] = fmt.Sprintf("%s@%d", e.Data, e.View)
			}
		}
		nw.reps[p].crashed = true
		nw.drop = nil
		old := p
		if p = nw.waitPrimary(nw.viewChangeLimit(), old); p != next {
			t.Fatalf("round %d: primary %d, want %d", round, p, next)
		}
		nw.restart(old)
		nw.waitPrimary(nw.viewChangeLimit())
		for _, id := range nw.ids {
			got := map[uint64]string{}
			for _, e := range nw.reps[id].disk.entries {
				got[e.Index] = fmt.Sprintf("%s@%d", e.Data, e.View)
			}
			for i, want := range committed {
				if got[i] != want {
					t.Fatalf("round %d: replica %d holds %q at %d, committed %q", round, id, got[i], i, want)
				}
			}
		}
	}
	if len(committed) < 9 {
		t.Fatalf("only %d entries committed", len(committed))
	}
}

// TestUncommittedEntriesOfAMinorityMayBeDropped: entries the old primary
// appended that no backup received are not in any DoViewChange quorum's
// log; the new view reuses their indexes, and the old primary, rejoining,
// cuts them.
// Reference: §4.2 (an operation that was not committed may be lost in a
// view change).
func TestUncommittedEntriesOfAMinorityMayBeDropped(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	nw.reps[1].isolated = true
	lost := nw.propose(1, "lost")
	p := nw.waitPrimary(nw.viewChangeLimit(), 1)
	if got := nw.propose(p, "new"); got != lost {
		t.Fatalf("new view's entry at %d, want %d (the lost entry's index)", got, lost)
	}
	nw.reps[1].isolated = false
	nw.runUntil(nw.viewChangeLimit(), "replica 1 normal in the new view", func() bool {
		return nw.node(1).View() == nw.node(p).View() && nw.info(1).Status == StatusNormal && nw.info(1).LastOp == lost
	})
	if got, want := nw.logOf(1), nw.logOf(p); !slices.Equal(got, want) {
		t.Fatalf("old primary's log %v, want %v", got, want)
	}
	for _, r := range nw.reps {
		if e, ok := r.applied[lost]; ok && string(e.Data) == "lost" {
			t.Fatalf("replica %d applied the lost entry", r.id)
		}
	}
}

// TestAReplicaThatMissedStartViewFollowsAPrepareNotACommit: a replica
// learns of a newer view from its primary's Prepare, which describes a
// log, and asks for StartView by answering "not normal"; a Commit
// (heartbeat) of a newer view is not followed.
// Reference: package documentation, "View change" and "Every path into a
// view passes the pre-vote".
func TestAReplicaThatMissedStartViewFollowsAPrepareNotACommit(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	n3 := nw.node(3)
	if err := n3.Step(Message{Type: MsgCommit, From: 2, To: 3, View: 1, Commit: 1, Stamp: 1}); err != nil {
		t.Fatal(err)
	}
	if v := n3.View(); v != 0 {
		t.Fatalf("followed a Commit into view %d", v)
	}
	nw.ready(nw.reps[3])
	nw.inflight = nil
	nw.sent = nil
	if err := n3.Step(Message{Type: MsgPrepare, From: 2, To: 3, View: 1, PrevOp: 1, Commit: 1, Stamp: 1,
		Entries: []Entry{{Index: 2, View: 1, Type: EntryCommand, Data: []byte("n")}}}); err != nil {
		t.Fatal(err)
	}
	if v, s := n3.View(), n3.Info().Status; v != 1 || s != StatusRecovering {
		t.Fatalf("after a Prepare of view 1: view %d, %v; want view 1, recovering", v, s)
	}
	nw.ready(nw.reps[3])
	oks := nw.sentOf(MsgPrepareOK, 3)
	if len(oks) != 1 || oks[0].Normal || oks[0].View != 1 {
		t.Fatalf("answers %v, want one PrepareOK of view 1, not normal", oks)
	}
}

// TestAReplicaWithoutAPrimaryJoinsTheNextViewWhenAsked: "A replica
// notices the need for a view change either based on its own timer, or
// because it receives a STARTVIEWCHANGE or DOVIEWCHANGE message for a
// view with a larger number than its own." Here a replica without a
// working primary joins view v+1 on one StartViewChange (its sender
// passed a probe); a view further ahead it only probes for.
// Reference: §4.2 step 1; package documentation, "Every path into a view
// passes the pre-vote".
func TestAReplicaWithoutAPrimaryJoinsTheNextViewWhenAsked(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	nw.drop = func(*Message) bool { return true }
	nw.run(nw.cfg.ViewChangeTimeout + nw.cfg.HeartbeatInterval)
	n := nw.node(2)
	if n.View() != 0 {
		t.Fatalf("view %d", n.View())
	}
	nw.sent = nil
	if err := n.Step(Message{Type: MsgStartViewChange, From: 3, To: 2, View: 3}); err != nil {
		t.Fatal(err)
	}
	nw.ready(nw.reps[2])
	if n.View() != 0 || !slices.ContainsFunc(nw.sentOf(MsgProbe, 2), func(m Message) bool { return m.View == 3 }) {
		t.Fatalf("StartViewChange three ahead: view %d, probes %v; want a probe for 3, no move", n.View(), nw.sentOf(MsgProbe, 2))
	}
	if err := n.Step(Message{Type: MsgStartViewChange, From: 3, To: 2, View: 1}); err != nil {
		t.Fatal(err)
	}
	if n.View() != 1 || n.Info().Status != StatusViewChange {
		t.Fatalf("StartViewChange one ahead: view %d, %v; want changing to view 1", n.View(), n.Info().Status)
	}
}

// TestAPausedPrimaryFollowsAQuorumAhead: a primary that still thinks its
// view works (it was paused) joins a newer view once so many other voters
// are changing to it that it can no longer gather a quorum — not on one
// voter's word.
// Reference: package documentation, "Every path into a view passes the
// pre-vote" (quorumAhead).
func TestAPausedPrimaryFollowsAQuorumAhead(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	p := nw.node(1)
	if err := p.Step(Message{Type: MsgStartViewChange, From: 2, To: 1, View: 1}); err != nil {
		t.Fatal(err)
	}
	if !p.IsPrimary() || p.View() != 0 {
		t.Fatalf("one voter ahead moved the primary to view %d", p.View())
	}
	if err := p.Step(Message{Type: MsgStartViewChange, From: 3, To: 1, View: 1}); err != nil {
		t.Fatal(err)
	}
	if p.IsPrimary() || p.View() != 1 {
		t.Fatalf("with both backups ahead the primary stays in view %d (primary %v)", p.View(), p.IsPrimary())
	}
}

// TestAViewIsOnDiskBeforeAnythingIsSaidInIt: "the replica ... advances its
// view-number, sets its status to view-change" — here on disk first: the
// Ready that carries its StartViewChange persists the new view (MustSync,
// nothing early), and the answers it had queued in the older view are
// forgotten, so no acknowledgement of an older view leaves once the newer
// one is on disk.
// Reference: §4.2 step 1; package documentation, "View change".
func TestAViewIsOnDiskBeforeAnythingIsSaidInIt(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	n := nw.node(2)
	if err := n.Step(Message{Type: MsgCommit, From: 1, To: 2, View: 0, Commit: 1, Stamp: 9}); err != nil {
		t.Fatal(err)
	}
	// Its primary leaves view 0 before the answer to the Commit went out.
	if err := n.Step(Message{Type: MsgStartViewChange, From: 1, To: 2, View: 1}); err != nil {
		t.Fatal(err)
	}
	rd := n.Ready()
	if rd.HardState == nil || rd.HardState.View != 1 || !rd.MustSync || len(rd.EarlyMessages) != 0 {
		t.Fatalf("Ready: hard state %+v, sync %v, %d early; want view 1 synced before any message", rd.HardState, rd.MustSync, len(rd.EarlyMessages))
	}
	if !slices.ContainsFunc(rd.Messages, func(m Message) bool { return m.Type == MsgStartViewChange && m.View == 1 }) {
		t.Fatalf("no StartViewChange for view 1 in %v", rd.Messages)
	}
	for _, m := range rd.Messages {
		if m.View < 1 {
			t.Fatalf("a message of view %d after view 1 was entered: %v", m.View, &m)
		}
	}
	n.Advance()
}

// TestAPrimaryFollowsAVoterStrandedAhead: a voter left in a newer view
// (it never comes back to an older one) moves nobody at once, but after a
// whole ViewChangeTimeout of it the primary follows it, and one view
// change later the cell has every voter again.
// Reference: package documentation, "Every path into a view passes the
// pre-vote" (strandedFor).
func TestAPrimaryFollowsAVoterStrandedAhead(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	nw.reps[3].disk.hs.View = 1 // stranded: changing to view 1, on disk
	nw.restart(3)
	if v := nw.node(3).View(); v != 1 {
		t.Fatalf("replica 3 in view %d", v)
	}
	since := nw.now
	nw.run(nw.cfg.ViewChangeTimeout - 2*nw.cfg.HeartbeatInterval)
	if !nw.node(1).IsPrimary() || nw.node(1).View() != 0 || nw.node(2).View() != 0 {
		t.Fatalf("moved before a view-change timeout: primary %v view %d, replica 2 in %d", nw.node(1).IsPrimary(), nw.node(1).View(), nw.node(2).View())
	}
	nw.runUntil(nw.viewChangeLimit(), "every replica normal in view 1", func() bool {
		for _, id := range nw.ids {
			if nw.node(id).View() != 1 || nw.info(id).Status != StatusNormal {
				return false
			}
		}
		return true
	})
	if d := time.Duration(nw.now - since); d < nw.cfg.ViewChangeTimeout {
		t.Fatalf("the primary followed after %v, within the view-change timeout", d)
	}
	if p := nw.primary(); p != 2 {
		t.Fatalf("primary %d, want 2", p)
	}
}

// TestAStrandedVoterIgnoresACommitOfItsView: a voter changing to a view
// nobody leads gets a Commit of that view, its sender forged as the
// view's primary. It stays in its view change, asking for the view, and
// the primary it is stranded ahead of follows it as above; following the
// Commit, it would wait for a StartView nobody sends and only probe for
// the next view, which nobody grants (simulator forger seed 1307).
// Reference: package documentation, "Every path into a view passes the
// pre-vote" and "What the core trusts".
func TestAStrandedVoterIgnoresACommitOfItsView(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	nw.reps[3].disk.hs.View = 1
	nw.restart(3)
	n3 := nw.node(3)
	if err := n3.Step(Message{Type: MsgCommit, From: 2, To: 3, View: 1, Commit: 1, Stamp: 1}); err != nil {
		t.Fatal(err)
	}
	if v, s := n3.View(), n3.Info().Status; v != 1 || s != StatusViewChange {
		t.Fatalf("after a Commit of its view: view %d, %v; want view 1, view-change", v, s)
	}
	nw.runUntil(nw.viewChangeLimit(), "every replica normal in view 1", func() bool {
		for _, id := range nw.ids {
			if nw.node(id).View() != 1 || nw.info(id).Status != StatusNormal {
				return false
			}
		}
		return true
	})
}

// TestPreparesLeaveBeforeThePrimarysOwnWriteOnlyInAViewOnDisk: the
// normal primary's Prepares and Commits come as EarlyMessages (and the
// write may be queued: PersistAsync) once its view is on disk as a normal
// view; a new primary's first Ready, which persists that view, sends
// everything after the write.
// Reference: package documentation, "The core and its driver".
func TestPreparesLeaveBeforeThePrimarysOwnWriteOnlyInAViewOnDisk(t *testing.T) {
	members := Members{{ID: 1}, {ID: 2}, {ID: 3}}
	cfg := testConfig()
	cfg.ID = 2
	now := int64(1e12)
	n, err := NewNode(cfg, persistedLog(members, HardState{View: 1, Commit: 1}, 0), now)
	if err != nil {
		t.Fatal(err)
	}
	if n.HasReady() {
		n.Ready()
		n.Advance()
	}
	now += int64(float64(cfg.LeaseDuration) * (1 + MaxClockDrift)) // the restart's lease wait
	n.Tick(now)
	for _, m := range []Message{
		{Type: MsgStartViewChange, From: 3, To: 2, View: 1},
		{Type: MsgDoViewChange, From: 3, To: 2, View: 1, Op: 2, Commit: 1, PrevOp: 1, Runs: []Run{{View: 0, Last: 2}}, Final: true},
	} {
		if err := n.Step(m); err != nil {
			t.Fatal(err)
		}
	}
	if !n.IsPrimary() {
		t.Fatalf("not the primary of view 1: %+v", n.Info())
	}
	if _, err := n.Propose([]byte("p")); err != nil {
		t.Fatal(err)
	}
	n.Tick(now + int64(cfg.HeartbeatInterval)) // a heartbeat too
	rd := n.Ready()
	if len(rd.EarlyMessages) != 0 || rd.PersistAsync || rd.HardState == nil || rd.HardState.LastNormalView != 1 || !rd.MustSync {
		t.Fatalf("new primary's first Ready: %d early, async %v, hard state %+v; want view 1 persisted before any message",
			len(rd.EarlyMessages), rd.PersistAsync, rd.HardState)
	}
	if !slices.ContainsFunc(rd.Messages, func(m Message) bool { return m.Type == MsgStartView }) ||
		!slices.ContainsFunc(rd.Messages, func(m Message) bool { return m.Type == MsgPrepare || m.Type == MsgCommit }) {
		t.Fatalf("first Ready's messages %v", rd.Messages)
	}
	n.Advance()

	if _, err := n.Propose([]byte("q")); err != nil {
		t.Fatal(err)
	}
	rd = n.Ready()
	if len(rd.Messages) != 0 || !rd.PersistAsync || len(rd.Entries) != 1 ||
		!slices.ContainsFunc(rd.EarlyMessages, func(m Message) bool { return m.Type == MsgPrepare }) {
		t.Fatalf("once the view is on disk: %d early, %d late, async %v", len(rd.EarlyMessages), len(rd.Messages), rd.PersistAsync)
	}
	n.Advance()
}
