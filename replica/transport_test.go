package replica

import (
	"reflect"
	"strings"
	"testing"

	gr "github.com/chubbygo/chubby/gen/replica"
	"github.com/chubbygo/chubby/replica/vr"
)

// TestMessagesWireRoundTrip converts batches of messages to the wire form
// and back: every field survives, each message keeps its own entries.
func TestMessagesWireRoundTrip(t *testing.T) {
	prep := func(to, first uint64, n int) vr.Message {
		m := vr.Message{Type: vr.MsgPrepare, From: 1, To: to, View: 7, PrevOp: first - 1, PrevView: 6, Commit: first - 2, Stamp: 99}
		for i := range n {
			m.Entries = append(m.Entries, vr.Entry{Index: first + uint64(i), View: 7, Type: vr.EntryCommand, Data: []byte{byte(i), 'x'}})
		}
		return m
	}
	cases := []struct {
		name string
		msgs []vr.Message
	}{
		{"empty", nil},
		{"one ack", []vr.Message{{Type: vr.MsgPrepareOK, From: 2, To: 1, View: 3, Op: 40, OpView: 3, Stamp: 5, Normal: true}}},
		{"prepares with entries", []vr.Message{prep(2, 10, 3), prep(3, 10, 0), prep(2, 13, 5), {Type: vr.MsgCommit, From: 1, To: 2, View: 7, Commit: 17}}},
		{"start view with runs", []vr.Message{{Type: vr.MsgStartView, From: 1, To: 4, View: 9, StartOp: 30, Commit: 28, PrevOp: 20, PrevView: 8,
			Runs: []vr.Run{{View: 8, Last: 25}, {View: 9, Last: 30}}, Final: true}}},
		{"snapshot", []vr.Message{{Type: vr.MsgSnapshot, From: 1, To: 5, View: 9, Commit: 50,
			Snapshot: &vr.SnapshotMeta{Index: 50, View: 8, Members: vr.Members{{ID: 1, ClientAddr: "a:1", PeerAddr: "a:2"}, {ID: 2, ClientAddr: "b:1"}}}, SnapshotData: []byte("state")}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wire := messagesToWire(c.msgs)
			if len(wire) != len(c.msgs) {
				t.Fatalf("%d wire messages for %d", len(wire), len(c.msgs))
			}
			for i, w := range wire {
				got, err := messageFromWire(w)
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				if !reflect.DeepEqual(got, c.msgs[i]) {
					t.Fatalf("message %d:\n got  %+v\n want %+v", i, got, c.msgs[i])
				}
			}
		})
	}
}

// TestMessageFromWireRefusesMalformed: negative numbers, nil elements and
// a missing type are refused, never converted.
func TestMessageFromWireRefusesMalformed(t *testing.T) {
	good := func() *gr.Message {
		return messagesToWire([]vr.Message{{Type: vr.MsgPrepare, From: 1, To: 2, View: 1,
			Entries: []vr.Entry{{Index: 1, View: 1, Type: vr.EntryCommand}}}})[0]
	}
	for name, mut := range map[string]func(*gr.Message){
		"nil entry":      func(w *gr.Message) { w.Entries[0] = nil },
		"negative view":  func(w *gr.Message) { w.View = -1 },
		"negative index": func(w *gr.Message) { w.Entries[0].Index = -3 },
		"no type":        func(w *gr.Message) { w.Type = 0 },
		"entry type":     func(w *gr.Message) { w.Entries[0].Type = 0 },
		"nil run":        func(w *gr.Message) { w.Runs = []*gr.Run{nil} },
		"snapshot member": func(w *gr.Message) {
			w.Snapshot = &gr.SnapshotMeta{Index: 1, Members: []*gr.Member{{Id: 0}}}
		},
	} {
		w := good()
		mut(w)
		if _, err := messageFromWire(w); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := messageFromWire(nil); err == nil {
		t.Error("nil message accepted")
	}
}

// TestMemberWireForm: a member's two addresses travel in the peer IDL's one
// address field in the packed form replicas have always sent, so a peer
// that sends "client|peer" or a bare address is understood.
func TestMemberWireForm(t *testing.T) {
	ms := vr.Members{{ID: 1, ClientAddr: "a:1", PeerAddr: "a:2"}, {ID: 2, ClientAddr: "b:1"}}
	w := messagesToWire([]vr.Message{{Type: vr.MsgSnapshot, From: 1, To: 2, Snapshot: &vr.SnapshotMeta{Index: 1, Members: ms}}})[0]
	if a, b := w.Snapshot.Members[0].Addr, w.Snapshot.Members[1].Addr; a != "a:1|a:2" || b != "b:1" {
		t.Fatalf("wire addresses %q, %q; want \"a:1|a:2\", \"b:1\"", a, b)
	}
	w.Snapshot.Members = []*gr.Member{{Id: 1, Addr: "c:1|c:2"}, {Id: 2, Addr: "d:1"}}
	w.Snapshot.Config = nil // a metadata of members only, as before configurations had epochs
	m, err := messageFromWire(w)
	if err != nil {
		t.Fatal(err)
	}
	want := vr.Members{{ID: 1, ClientAddr: "c:1", PeerAddr: "c:2"}, {ID: 2, ClientAddr: "d:1"}}
	if !reflect.DeepEqual(m.Snapshot.Members, want) {
		t.Fatalf("members %+v, want %+v", m.Snapshot.Members, want)
	}
}

// TestSnapshotConfigWireForm: a snapshot's whole configuration — learners,
// epoch, proposer, the entry that opened the epoch — crosses the wire, and
// a malformed one is refused.
func TestSnapshotConfigWireForm(t *testing.T) {
	meta := &vr.SnapshotMeta{Index: 9, View: 1<<32 + 2}
	meta.SetConfig(vr.Configuration{Epoch: 1, Proposer: 2, OpenIndex: 7, OpenView: 3,
		Members: vr.Members{{ID: 1, ClientAddr: "a:1"}, {ID: 2, ClientAddr: "b:1"}, {ID: 3, ClientAddr: "c:1", Learner: true}}})
	w := messagesToWire([]vr.Message{{Type: vr.MsgSnapshot, From: 1, To: 2, View: 1<<32 + 2, Snapshot: meta}})[0]
	m, err := messageFromWire(w)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*m.Snapshot, *meta) {
		t.Fatalf("round trip %+v, want %+v", *m.Snapshot, *meta)
	}
	w.Snapshot.Config = []byte{2, 1}
	if _, err := messageFromWire(w); err == nil {
		t.Fatal("a malformed configuration accepted")
	}
}

// TestDeliverDropsMessagesForAnotherID: a replica that took over the
// address of one removed from the cell (a wiped machine rejoining under a
// new id) is sent its predecessor's messages until the others' configuration
// drops the old id. The peer server refuses them, naming the replica it
// serves, instead of handing them to the core, which would count each one
// malformed and warn (hundreds in a replacement).
func TestDeliverDropsMessagesForAnotherID(t *testing.T) {
	tr, err := NewPeerTransport("test", 7, map[uint64]string{7: "127.0.0.1:1"}, quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var got []vr.Message
	h := &peerHandler{cfg: PeerServerConfig{Cell: "test", Logger: quiet(), Transport: tr,
		Deliver: func(ms []vr.Message, done func()) {
			got = append(got, ms...)
			if done != nil {
				done()
			}
		}}}
	old := messagesToWire([]vr.Message{{Type: vr.MsgCommit, From: 2, To: 3, View: 4, Commit: 9}})
	if _, err := h.Deliver(t.Context(), "test", 2, old, "127.0.0.1:2"); err == nil || !strings.Contains(err.Error(), "replica 7") {
		t.Errorf("Deliver of messages for replica 3 to replica 7: err %v, want a refusal naming replica 7", err)
	}
	if len(got) != 0 {
		t.Fatalf("messages for replica 3 reached replica 7's core: %v", got)
	}
	mine := messagesToWire([]vr.Message{{Type: vr.MsgCommit, From: 2, To: 7, View: 4, Commit: 9}})
	if _, err := h.Deliver(t.Context(), "test", 2, mine, "127.0.0.1:2"); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].To != 7 {
		t.Fatalf("replica 7 got %v, want its own Commit", got)
	}
}
