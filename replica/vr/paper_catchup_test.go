package vr

import (
	"slices"
	"testing"
)

// Direct tests of catch-up: a backup missing entries, by entries or by
// snapshot (VR Revisited §4.1 step 4 and §5.2, state transfer), in the
// manner of paper_test.go.

// TestBackupWithAGapCatchesUp: a backup missing earlier entries waits
// for them, "doing state transfer if necessary to get the missing
// information". Here the primary resends: a lost Prepare
// shows as the backup rejecting the next one, or as no progress over a
// heartbeat; either way the backup ends with the primary's log.
// Reference: §4.1 and §5.2 (state transfer); package documentation,
// "Normal operation".
func TestBackupWithAGapCatchesUp(t *testing.T) {
	t.Run("next Prepare rejected", func(t *testing.T) {
		nw := newNetwork(t, 1, 2, 3)
		nw.drop = func(m *Message) bool { return m.Type == MsgPrepare && m.To == 3 }
		nw.propose(1, "a")
		nw.drop = nil
		nw.sent = nil
		last := nw.propose(1, "b")
		if rej := slices.ContainsFunc(nw.sentOf(MsgPrepareOK, 3), func(m Message) bool { return m.Reject }); !rej {
			t.Fatal("backup 3 did not reject the Prepare after its gap")
		}
		if got := nw.info(3).LastOp; got != last {
			t.Fatalf("backup 3's log ends at %d, want %d", got, last)
		}
		if !slices.Equal(nw.logOf(3), nw.logOf(1)) {
			t.Fatalf("logs differ: %v, %v", nw.logOf(3), nw.logOf(1))
		}
	})
	t.Run("no progress over a heartbeat", func(t *testing.T) {
		nw := newNetwork(t, 1, 2, 3)
		nw.drop = func(m *Message) bool { return m.Type == MsgPrepare && m.To == 3 }
		last := nw.propose(1, "a")
		nw.drop = nil
		nw.runUntil(3*nw.cfg.HeartbeatInterval, "backup 3 has the entry", func() bool { return nw.info(3).LastOp == last })
		nw.runUntil(2*nw.cfg.HeartbeatInterval, "backup 3 applies it", func() bool { _, ok := nw.reps[3].applied[last]; return ok })
	})
	t.Run("compacted: snapshot", func(t *testing.T) {
		nw := newNetwork(t, 1, 2, 3)
		nw.reps[3].isolated = true
		nw.propose(1, "a", "b", "c")
		last := nw.propose(1, "d")
		nw.run(nw.cfg.HeartbeatInterval) // commit reaches 2, entries applied
		meta, err := nw.node(1).SnapshotMeta(last)
		if err != nil {
			t.Fatal(err)
		}
		r := nw.reps[1]
		r.disk.snap, r.disk.snapData = &meta, []byte("state")
		if err := nw.node(1).Compact(meta); err != nil {
			t.Fatal(err)
		}
		nw.reps[3].isolated = false
		nw.sent = nil
		nw.runUntil(3*nw.cfg.HeartbeatInterval, "backup 3 installs the snapshot", func() bool {
			return nw.info(3).SnapshotIndex == last && nw.reps[3].disk.snap != nil
		})
		if len(nw.sentOf(MsgSnapshot, 1)) == 0 {
			t.Fatal("no snapshot sent")
		}
		if got := string(nw.reps[3].disk.snapData); got != "state" {
			t.Fatalf("backup 3 stored snapshot %q", got)
		}
		next := nw.propose(1, "e")
		nw.run(nw.cfg.HeartbeatInterval)
		if _, ok := nw.reps[3].applied[next]; !ok {
			t.Fatalf("backup 3 did not go on by entries after the snapshot (applied %v)", nw.reps[3].applied)
		}
	})
}

// TestASnapshotIsNotInstalledOverALogThatHoldsItsLastEntry: a backup
// whose log already holds the snapshot's last entry (same index and view)
// takes the snapshot's index as committed and keeps its log: nothing to
// install.
// Reference: package documentation, "Catch-up and snapshots".
func TestASnapshotIsNotInstalledOverALogThatHoldsItsLastEntry(t *testing.T) {
	members := Members{{ID: 1}, {ID: 2}, {ID: 3}}
	cfg := testConfig()
	cfg.ID = 2
	n, err := NewNode(cfg, persistedLog(members, HardState{View: 0, LastNormalView: 0, Commit: 1}, 0, 0, 0), 1e12)
	if err != nil {
		t.Fatal(err)
	}
	meta := SnapshotMeta{Index: 3, View: 0, Members: members}
	if err := n.Step(Message{Type: MsgSnapshot, From: 1, To: 2, View: 0, Commit: 3, Snapshot: &meta, SnapshotData: []byte("s")}); err != nil {
		t.Fatal(err)
	}
	rd := n.Ready()
	if rd.Snapshot != nil || rd.TruncateFrom != 0 {
		t.Fatalf("installed a snapshot over a log holding its last entry: %+v", rd)
	}
	if got := len(rd.Committed); got != 3 || rd.Committed[2].Index != 3 {
		t.Fatalf("applied %v, want entries 1 to 3 from the log", rd.Committed)
	}
	n.Advance()
	if i := n.Info(); i.LastOp != 4 || i.SnapshotIndex != 0 {
		t.Fatalf("after the snapshot: %+v", i)
	}
}

// TestABackupAppliesOnlyWhatItKnowsMatches: a backup applies entries up
// to the primary's commit number only as far as its log is known to match
// the primary's; a replica that has just entered a view with entries it
// has not checked against the new primary's log applies none of them.
// Reference: package documentation, "Normal operation".
func TestABackupAppliesOnlyWhatItKnowsMatches(t *testing.T) {
	members := Members{{ID: 1}, {ID: 2}, {ID: 3}}
	cfg := testConfig()
	cfg.ID = 3
	// Changing to view 1 (primary 2) with entries 2, 3 of view 0 not
	// known committed.
	n, err := NewNode(cfg, persistedLog(members, HardState{View: 1, LastNormalView: 0, Commit: 1}, 0, 0), 1e12)
	if err != nil {
		t.Fatal(err)
	}
	if n.HasReady() {
		n.Ready()
		n.Advance()
	}
	if err := n.Step(Message{Type: MsgCommit, From: 2, To: 3, View: 1, Commit: 3, Stamp: 1}); err != nil {
		t.Fatal(err)
	}
	rd := n.Ready()
	if len(rd.Committed) != 0 || n.Info().Commit != 1 {
		t.Fatalf("applied %v (commit %d) before checking its log against the view's primary", rd.Committed, n.Info().Commit)
	}
	n.Advance()
}
