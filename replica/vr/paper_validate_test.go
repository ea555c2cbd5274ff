package vr

import (
	"errors"
	"slices"
	"testing"
)

// Direct tests of what the core trusts and of the view arithmetic
// (validate.go, reconfig.go, viewchange.go), in the manner of
// paper_test.go.

// --- What the core trusts (package documentation; validate.go) ---

// TestAMessageFromANonMemberIsIgnored: a message from a replica outside
// the configuration of its view's epoch is stale, not malformed: Step
// ignores it (no error, nothing counted as dropped, no answer), so a
// removed or unknown replica moves nobody.
func TestAMessageFromANonMemberIsIgnored(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	nw.drop = func(*Message) bool { return true }
	nw.run(nw.cfg.ViewChangeTimeout + nw.cfg.HeartbeatInterval) // replica 2 hears no primary: it would grant a member
	n := nw.node(2)
	for _, m := range []Message{
		{Type: MsgProbe, From: 9, To: 2, View: 1},
		{Type: MsgStartViewChange, From: 9, To: 2, View: 1},
		{Type: MsgPrepare, From: 9, To: 2, View: 0, PrevOp: 1, Entries: []Entry{{Index: 2, Type: EntryCommand}}},
	} {
		before := n.Info()
		if err := n.Step(m); err != nil {
			t.Fatalf("Step(%v) = %v, want it ignored", &m, err)
		}
		if n.HasReady() {
			if rd := n.Ready(); len(rd.Messages)+len(rd.EarlyMessages) > 0 {
				t.Fatalf("answered %v with %v", &m, rd.Messages)
			}
			n.Advance()
		}
		if after := n.Info(); after.View != before.View || after.LastOp != before.LastOp || n.Stats().Dropped != 0 {
			t.Fatalf("after %v: %+v → %+v, dropped %d", &m, before, after, n.Stats().Dropped)
		}
	}
	// A member's probe is granted (the check above is not vacuous).
	if err := n.Step(Message{Type: MsgProbe, From: 3, To: 2, View: 1}); err != nil {
		t.Fatal(err)
	}
	rd := n.Ready()
	n.Advance()
	if !slices.ContainsFunc(rd.Messages, func(m Message) bool { return m.Type == MsgProbeReply && m.Granted }) {
		t.Fatalf("a member's probe was not granted: %v", rd.Messages)
	}
}

// TestAViewOfAnotherEpochMovesNobody: StartViewChange, DoViewChange,
// Probe and Commit naming a view of an epoch other than the
// configuration's are ignored (a probe for one is refused): only voters
// of an epoch change views in it.
func TestAViewOfAnotherEpochMovesNobody(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	nw.drop = func(*Message) bool { return true }
	nw.run(nw.cfg.ViewChangeTimeout + nw.cfg.HeartbeatInterval) // replica 2 hears no primary
	n := nw.node(2)
	far := uint64(5)<<epochShift | 1
	for _, m := range []Message{
		{Type: MsgStartViewChange, From: 3, To: 2, View: far},
		{Type: MsgDoViewChange, From: 3, To: 2, View: far, Op: 1, Commit: 1, PrevOp: 1, Final: true},
		{Type: MsgCommit, From: 3, To: 2, View: far, Commit: 1},
		{Type: MsgProbe, From: 3, To: 2, View: far},
	} {
		if err := n.Step(m); err != nil {
			t.Fatalf("Step(%v) = %v", &m, err)
		}
		rd := n.Ready()
		n.Advance()
		if slices.ContainsFunc(rd.Messages, func(m Message) bool { return m.Granted || m.Type == MsgStartViewChange }) {
			t.Fatalf("after %v: %v", &m, rd.Messages)
		}
		if v := n.View(); v != 0 {
			t.Fatalf("after %v: view %d", &m, v)
		}
	}
}

// TestViewsStayInTheirEpoch: a view number is epoch<<32 | counter, and
// the counter never overflows into the epoch: a replica in the last view
// of its epoch neither probes for nor starts the next view number, and a
// primary restarted in it stays there.
// Reference: package documentation, "Every path into a view passes the
// pre-vote" (the arithmetic is total); viewchange.go, nextView.
func TestViewsStayInTheirEpoch(t *testing.T) {
	members := Members{{ID: 1}, {ID: 2}, {ID: 3}}
	last := uint64(1)<<epochShift - 1 // epoch 0's last view; its primary is voters[last%3] = 1
	for _, id := range []uint64{1, 2} {
		cfg := testConfig()
		cfg.ID = id
		now := int64(1e12)
		n, err := NewNode(cfg, persistedLog(members, HardState{View: last, LastNormalView: last, Commit: 1}), now)
		if err != nil {
			t.Fatal(err)
		}
		for range 4 * int(cfg.ViewChangeTimeout/cfg.HeartbeatInterval) {
			now += int64(cfg.HeartbeatInterval)
			n.Tick(now)
			if n.HasReady() {
				rd := n.Ready()
				for _, m := range rd.Messages {
					if m.View > last {
						t.Fatalf("replica %d sent %v past the last view of its epoch", id, &m)
					}
				}
				n.Advance()
			}
		}
		if v := n.View(); v != last || EpochOf(v) != 0 {
			t.Fatalf("replica %d in view %d (epoch %d), want %d", id, v, EpochOf(v), last)
		}
	}
}

// TestTheLastViewsOfAnEpochAreNotReachedByOneMessage: a message naming a
// view in the last 2^24 of its epoch is refused unless it is at most one
// ahead of the receiver's view; just below that range, a view's primary
// moves a replica as far ahead as it likes.
// Reference: package documentation ("The arithmetic is total");
// reconfig.go, farViewCounter.
func TestTheLastViewsOfAnEpochAreNotReachedByOneMessage(t *testing.T) {
	members := Members{{ID: 1}, {ID: 2}, {ID: 3}}
	voters := []uint64{1, 2, 3}
	start := func(view uint64) *Node {
		t.Helper()
		cfg := testConfig()
		cfg.ID = 2
		lnv := view
		n, err := NewNode(cfg, persistedLog(members, HardState{View: view, LastNormalView: lnv, Commit: 1}), 1e12)
		if err != nil {
			t.Fatal(err)
		}
		if n.HasReady() {
			n.Ready()
			n.Advance()
		}
		return n
	}
	prepare := func(v uint64) Message {
		return Message{Type: MsgPrepare, From: voters[v%3], To: 2, View: v, PrevOp: 1, Commit: 1,
			Entries: []Entry{{Index: 2, View: v, Type: EntryCommand, Data: []byte("x")}}}
	}
	if voters[farViewCounter%3] == 2 || voters[(farViewCounter-1)%3] == 2 {
		t.Fatal("test setup: replica 2 is the primary of a view used here")
	}

	n := start(0)
	if err := n.Step(prepare(farViewCounter)); !errors.Is(err, ErrInvalidMessage) || n.View() != 0 {
		t.Fatalf("Prepare of view %d to a replica in view 0: %v, view %d; want refused", uint64(farViewCounter), err, n.View())
	}
	if err := n.Step(prepare(farViewCounter - 1)); err != nil || n.View() != farViewCounter-1 {
		t.Fatalf("Prepare of view %d: %v, view %d; want followed", uint64(farViewCounter-1), err, n.View())
	}

	// One ahead is accepted, two are not.
	n = start(farViewCounter - 1)
	if err := n.Step(Message{Type: MsgStartViewChange, From: 1, To: 2, View: farViewCounter + 1}); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("StartViewChange two ahead into the last views: %v, want refused", err)
	}
	if err := n.Step(Message{Type: MsgStartViewChange, From: 1, To: 2, View: farViewCounter}); err != nil {
		t.Fatalf("StartViewChange one ahead: %v", err)
	}
}
