package fs

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/cloudwego/gopkg/protocol/thrift"
)

// watch opens path for sess with an event mask.
func (h *harness) watch(sess chubby.SessionID, path string, mode chubby.OpenMode, mask int32) *chubby.Handle {
	h.t.Helper()
	res, _ := h.ok(opOpen(&chubby.OpenRequest{Session: sess, Path: path, Mode: mode,
		Create: chubby.CreateMode_OPEN_EXISTING, EventMask: &mask}))
	return res.Handle
}

// queued returns every event queued for sess, oldest first.
func (h *harness) queued(sess chubby.SessionID) []*chubby.Event {
	return h.s.EventsAfter(sess, 0, 1<<30, 1<<30)
}

// brief renders events for comparison: kind, handle, path, child and data.
func brief(evs []*chubby.Event) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		s := fmt.Sprintf("%d %v h%d %s", e.Seq, e.Kind, e.GetHandle(), e.GetPath())
		if e.IsSetChild() {
			s += " child=" + e.GetChild()
		}
		if e.IsSetContentGeneration() {
			s += fmt.Sprintf(" cgen=%d", e.GetContentGeneration())
		}
		if e.IsSetLockGeneration() {
			s += fmt.Sprintf(" lgen=%d %v", e.GetLockGeneration(), e.GetLockMode())
		}
		if e.IsSetLostFrom() {
			s += fmt.Sprintf(" lost=%d..%d", e.GetLostFrom(), e.Seq)
		}
		out = append(out, s)
	}
	return out
}

func wantEvents(t *testing.T, got []*chubby.Event, want ...string) {
	t.Helper()
	if b := brief(got); !slices.Equal(b, want) {
		t.Fatalf("events:\n  %s\nwant:\n  %s", strings.Join(b, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestEventKinds: each kind is queued for exactly the handles whose mask
// asks for it, with its data, numbered per session, in ascending handle id.
func TestEventKinds(t *testing.T) {
	const all = chubby.EVENT_MASK_ALL
	tests := []struct {
		name string
		mask int32
		// run sets up with session a (the actor) and watcher session w,
		// opens the watched handle (its id is always 4: see setup) and acts.
		run  func(h *harness, a, w chubby.SessionID)
		want []string
	}{
		{"contents", chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED, func(h *harness, a, w chubby.SessionID) {
			h.watch(w, "/d/f", rd, chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
			h.ok(opSet(h.rw(a, "/d/f"), "x"))
			h.ok(opSet(h.rw(a, "/d/f"), "y"))
		}, []string{
			"1 FILE_CONTENTS_MODIFIED h4 /d/f cgen=2",
			"2 FILE_CONTENTS_MODIFIED h4 /d/f cgen=3",
		}},
		{"contents not asked", all &^ chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED, func(h *harness, a, w chubby.SessionID) {
			h.watch(w, "/d/f", rd, all&^chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
			h.ok(opSet(h.rw(a, "/d/f"), "x"))
		}, nil},
		{"child added, also by make-parents", chubby.EVENT_MASK_CHILD_ADDED, func(h *harness, a, w chubby.SessionID) {
			h.watch(w, "/d", rd, chubby.EVENT_MASK_CHILD_ADDED)
			h.write(a, "/d/g", "1")
			h.ok(opMkdir(a, "/d/x/y", true, false))
			h.ok(opOpen(&chubby.OpenRequest{Session: a, Path: "/d/seq-", Mode: rd, Create: chubby.CreateMode_CREATE_NEW, Sequential: ptr(true)}))
		}, []string{
			"1 CHILD_ADDED h4 /d child=g",
			"2 CHILD_ADDED h4 /d child=x",
			"3 CHILD_ADDED h4 /d child=seq-0000000000",
		}},
		{"child removed", chubby.EVENT_MASK_CHILD_REMOVED | chubby.EVENT_MASK_CHILD_ADDED, func(h *harness, a, w chubby.SessionID) {
			h.watch(w, "/d", rd, chubby.EVENT_MASK_CHILD_REMOVED)
			h.ok(opDelete(h.rw(a, "/d/f"), false))
		}, []string{"1 CHILD_REMOVED h4 /d child=f"}},
		{"child modified", chubby.EVENT_MASK_CHILD_MODIFIED, func(h *harness, a, w chubby.SessionID) {
			h.watch(w, "/d", rd, chubby.EVENT_MASK_CHILD_MODIFIED)
			h.ok(opSet(h.rw(a, "/d/f"), "x"))
			h.write(a, "/d/g", "new") // an add is not a modification
		}, []string{"1 CHILD_MODIFIED h4 /d child=f cgen=2"}},
		{"lock acquired: free to held only", chubby.EVENT_MASK_LOCK_ACQUIRED, func(h *harness, a, w chubby.SessionID) {
			h.watch(w, "/d/f", rd, chubby.EVENT_MASK_LOCK_ACQUIRED)
			x, y := h.rw(a, "/d/f"), h.rw(a, "/d/f")
			h.ok(opAcquire(x, shared, false, 0))
			h.ok(opAcquire(y, shared, false, 0)) // joins: same generation, no event
			h.ok(opRelease(x))
			h.ok(opRelease(y))
			h.ok(opAcquire(x, excl, true, 0))
		}, []string{
			"1 LOCK_ACQUIRED h4 /d/f lgen=1 SHARED",
			"2 LOCK_ACQUIRED h4 /d/f lgen=2 EXCLUSIVE",
		}},
		{"conflicting request: queued and tried", chubby.EVENT_MASK_CONFLICTING_LOCK_REQUEST, func(h *harness, a, w chubby.SessionID) {
			me := h.watch(w, "/d/f", rd, chubby.EVENT_MASK_CONFLICTING_LOCK_REQUEST)
			h.ok(opAcquire(me, shared, false, 0))
			o1, o2 := h.rw(a, "/d/f"), h.rw(a, "/d/f")
			h.ok(opAcquire(o1, shared, false, 0)) // compatible: no event
			h.fail(chubby.ErrorCode_LOCK_HELD, opAcquire(o2, excl, false, 0))
			h.ok(opAcquire(o2, excl, true, 0))
		}, []string{
			"1 CONFLICTING_LOCK_REQUEST h4 /d/f lgen=1 EXCLUSIVE",
			"2 CONFLICTING_LOCK_REQUEST h4 /d/f lgen=1 EXCLUSIVE",
		}},
		{"conflicting request: granted while others wait", chubby.EVENT_MASK_CONFLICTING_LOCK_REQUEST, func(h *harness, a, w chubby.SessionID) {
			me := h.watch(w, "/d/f", rd, chubby.EVENT_MASK_CONFLICTING_LOCK_REQUEST)
			o1, o2 := h.rw(a, "/d/f"), h.rw(a, "/d/f")
			h.ok(opAcquire(o1, excl, false, 0))
			h.ok(opAcquire(me, excl, true, 0))
			h.ok(opAcquire(o2, shared, true, 0))
			h.ok(opRelease(o1)) // me is granted; o2 still waits behind it
		}, []string{"1 CONFLICTING_LOCK_REQUEST h4 /d/f lgen=2 SHARED"}},
		{"handle invalid on delete, parent first told of nothing else", chubby.EVENT_MASK_HANDLE_INVALID, func(h *harness, a, w chubby.SessionID) {
			h.watch(w, "/d/f", rd, all)
			h.ok(opDelete(h.rw(a, "/d"), true))
		}, []string{"1 HANDLE_INVALID h4 /d/f"}},
		{"recursive delete, watched directory", chubby.EVENT_MASK_CHILD_REMOVED | chubby.EVENT_MASK_HANDLE_INVALID, func(h *harness, a, w chubby.SessionID) {
			h.write(a, "/d/g", "")
			h.watch(w, "/d", rd, chubby.EVENT_MASK_CHILD_REMOVED|chubby.EVENT_MASK_HANDLE_INVALID)
			h.watch(w, "/", rd, chubby.EVENT_MASK_CHILD_REMOVED)
			h.ok(opDelete(h.rw(a, "/d"), true))
		}, []string{
			"1 CHILD_REMOVED h4 /d child=f",
			"2 CHILD_REMOVED h4 /d child=g",
			"3 HANDLE_INVALID h4 /d",
			"4 CHILD_REMOVED h5 / child=d",
		}},
		{"ephemeral file of an ended session", all, func(h *harness, a, w chubby.SessionID) {
			h.ok(opCreateFile(&chubby.CreateFileRequest{Session: a, Path: "/d/e", Ephemeral: ptr(true)}))
			h.watch(w, "/d/e", rd, all)
			h.watch(w, "/d", rd, all)
			h.ok(opEnd(a, true))
		}, []string{
			"1 HANDLE_INVALID h4 /d/e",
			"2 CHILD_REMOVED h5 /d child=e",
		}},
		{"several watchers in handle order, closed ones not", chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED, func(h *harness, a, w chubby.SessionID) {
			w1 := h.watch(w, "/d/f", rd, chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
			h.watch(w, "/d/f", rd, chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
			h.watch(w, "/d/f", rd, 0)
			w4 := h.watch(w, "/d/f", rd, chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
			h.ok(opClose(w1))
			_ = w4
			h.ok(opSet(h.rw(w, "/d/f"), "x")) // the writer's session's handles too
		}, []string{
			"1 FILE_CONTENTS_MODIFIED h5 /d/f cgen=2",
			"2 FILE_CONTENTS_MODIFIED h7 /d/f cgen=2",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			a, w := h.session(), h.session()
			h.write(a, "/d/f", "0")
			// Handle ids 1..3 are taken, so the first watched handle is 4.
			for range 3 {
				h.ok(opClose(h.rw(a, "/d/f")))
			}
			tc.run(h, a, w)
			wantEvents(t, h.queued(w), tc.want...)
			if len(tc.want) > 0 && h.s.LastEvent(w) != int64(len(tc.want)) {
				t.Fatalf("last event %d, want %d", h.s.LastEvent(w), len(tc.want))
			}
			if h.s.SessionExists(a) && len(h.queued(a)) != 0 {
				t.Fatalf("the actor's session, which asked for nothing, has events %v", brief(h.queued(a)))
			}
		})
	}
}

// TestEventMaskValidated: an Open whose mask has unknown bits is refused.
func TestEventMaskValidated(t *testing.T) {
	h := newHarness(t)
	a := h.session()
	for _, m := range []int32{128, -1, 1 << 30} {
		h.fail(chubby.ErrorCode_INVALID_ARGUMENT, opOpen(&chubby.OpenRequest{Session: a, Path: "/", Mode: rd,
			Create: chubby.CreateMode_OPEN_EXISTING, EventMask: ptr(m)}))
	}
}

// TestEventsNotified: Effects.Notified names the sessions that got events,
// in the order of their first event, once each.
func TestEventsNotified(t *testing.T) {
	h := newHarness(t)
	a, b, c := h.session(), h.session(), h.session()
	h.write(a, "/d/f", "")
	h.watch(c, "/d", rd, chubby.EVENT_MASK_CHILD_MODIFIED)
	h.watch(b, "/d/f", rd, chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
	h.watch(b, "/d", rd, chubby.EVENT_MASK_CHILD_MODIFIED)
	_, fx := h.ok(opSet(h.rw(a, "/d/f"), "x"))
	if !slices.Equal(fx.Notified, []chubby.SessionID{b, c}) {
		t.Fatalf("notified %v, want [%d %d]", fx.Notified, b, c)
	}
	_, fx = h.ok(opTick())
	if len(fx.Notified) != 0 {
		t.Fatalf("tick notified %v", fx.Notified)
	}
}

// TestEventOverflow: a full queue folds its oldest events into one
// EVENTS_LOST at the front, which grows as more are lost; a trim keeps the
// numbering; the cell-wide limit stops queues from growing.
func TestEventOverflow(t *testing.T) {
	l := DefaultLimits()
	l.MaxEventsPerSession = 3
	h := newHarnessLimits(t, l)
	a := h.session()
	h.write(a, "/f", "")
	w := h.watch(a, "/f", rdwr, chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
	set := func(n int) {
		for range n {
			h.ok(opSet(w, "x"))
		}
	}
	set(3)
	wantEvents(t, h.queued(a),
		"1 FILE_CONTENTS_MODIFIED h1 /f cgen=2",
		"2 FILE_CONTENTS_MODIFIED h1 /f cgen=3",
		"3 FILE_CONTENTS_MODIFIED h1 /f cgen=4")
	set(1)
	wantEvents(t, h.queued(a),
		"2 EVENTS_LOST h0  lost=1..2",
		"3 FILE_CONTENTS_MODIFIED h1 /f cgen=4",
		"4 FILE_CONTENTS_MODIFIED h1 /f cgen=5")
	set(2)
	wantEvents(t, h.queued(a),
		"4 EVENTS_LOST h0  lost=1..4",
		"5 FILE_CONTENTS_MODIFIED h1 /f cgen=6",
		"6 FILE_CONTENTS_MODIFIED h1 /f cgen=7")
	// A client that had seen up to 3 is told only of 4 as lost.
	h.ok(&fsm.Op{TrimEvents: &fsm.TrimEvents{Acks: []*fsm.EventAck{{Session: a, Acked: 3}}}})
	wantEvents(t, h.queued(a),
		"4 EVENTS_LOST h0  lost=4..4",
		"5 FILE_CONTENTS_MODIFIED h1 /f cgen=6",
		"6 FILE_CONTENTS_MODIFIED h1 /f cgen=7")
	if c := h.s.Counts().Events; c != 3 {
		t.Fatalf("counted %d events, want 3", c)
	}

	// Cell-wide: two sessions, at most 3 events in all (plus one per
	// session whose queue was empty).
	l = DefaultLimits()
	l.MaxTotalEvents = 3
	h = newHarnessLimits(t, l)
	a, b := h.session(), h.session()
	h.write(a, "/f", "")
	h.watch(a, "/f", rd, chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
	h.watch(b, "/f", rd, chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
	wr := h.rw(a, "/f")
	h.ok(opSet(wr, "1")) // a:1 b:1
	h.ok(opSet(wr, "2")) // a:2 (total 3) b:2 (over: b folds)
	wantEvents(t, h.queued(a), "1 FILE_CONTENTS_MODIFIED h1 /f cgen=2", "2 FILE_CONTENTS_MODIFIED h1 /f cgen=3")
	wantEvents(t, h.queued(b), "2 EVENTS_LOST h0  lost=1..2")
	h.ok(opSet(wr, "3"))
	wantEvents(t, h.queued(a), "2 EVENTS_LOST h0  lost=1..2", "3 FILE_CONTENTS_MODIFIED h1 /f cgen=4")
	wantEvents(t, h.queued(b), "3 EVENTS_LOST h0  lost=1..3")
	if c := h.s.Counts().Events; c != 3 {
		t.Fatalf("counted %d events, want 3", c)
	}
	// An empty queue may still take one event.
	h.ok(&fsm.Op{TrimEvents: &fsm.TrimEvents{Acks: []*fsm.EventAck{{Session: b, Acked: 3}}}})
	h.write(a, "/g", "")
	h.watch(b, "/g", rd, chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
	h.ok(opSet(h.rw(a, "/g"), "x"))
	wantEvents(t, h.queued(b), "4 FILE_CONTENTS_MODIFIED h4 /g cgen=2")
}

// TestTrimEvents: acks trim each session's queue up to the ack (clamped to
// the newest event); ended sessions are skipped; bad acks refuse the whole
// command.
func TestTrimEvents(t *testing.T) {
	h := newHarness(t)
	a, b := h.session(), h.session()
	h.write(a, "/f", "")
	h.watch(a, "/f", rd, chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
	h.watch(b, "/f", rd, chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
	wr := h.rw(a, "/f")
	for range 5 {
		h.ok(opSet(wr, "x"))
	}
	trim := func(acks ...*fsm.EventAck) *fsm.Op { return &fsm.Op{TrimEvents: &fsm.TrimEvents{Acks: acks}} }
	h.fail(chubby.ErrorCode_INVALID_ARGUMENT, trim(&fsm.EventAck{Session: a, Acked: 2}, &fsm.EventAck{Session: b, Acked: -1}))
	h.fail(chubby.ErrorCode_INVALID_ARGUMENT, trim(&fsm.EventAck{Session: a, Acked: 2}, nil))
	h.fail(chubby.ErrorCode_INVALID_ARGUMENT, trim(make([]*fsm.EventAck, MaxTrimAcks+1)...))
	h.ok(trim(&fsm.EventAck{Session: a, Acked: 2}, &fsm.EventAck{Session: b, Acked: 99}, &fsm.EventAck{Session: 777, Acked: 1}))
	if got := h.queued(a); len(got) != 3 || got[0].Seq != 3 {
		t.Fatalf("a keeps %v", brief(got))
	}
	if got := h.queued(b); len(got) != 0 || h.s.HasEventsAfter(b, 0) {
		t.Fatalf("b keeps %v", brief(got))
	}
	// Numbering goes on after a full trim.
	h.ok(opSet(wr, "y"))
	wantEvents(t, h.queued(b), "6 FILE_CONTENTS_MODIFIED h2 /f cgen=7")
	if !h.s.HasEventsAfter(b, 5) || h.s.HasEventsAfter(b, 6) {
		t.Fatal("HasEventsAfter wrong")
	}
	// TrimEvents names no session of its own.
	res, _ := h.cmd(&fsm.Command{Session: &a, Op: trim()})
	if res.Err == nil || res.Err.Code != chubby.ErrorCode_INVALID_ARGUMENT {
		t.Fatalf("TrimEvents with a session: %v", res.Err)
	}
	// An ended session's events go with it.
	h.ok(opEnd(b, false))
	if h.s.Counts().Events != 4 {
		t.Fatalf("%d events counted after b ended, want 4", h.s.Counts().Events)
	}
}

// TestEventsAfter: a reply takes the events after the ack, bounded by count
// and bytes (but at least one).
func TestEventsAfter(t *testing.T) {
	h := newHarness(t)
	a := h.session()
	h.write(a, "/f", "")
	h.watch(a, "/f", rd, chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
	wr := h.rw(a, "/f")
	for range 10 {
		h.ok(opSet(wr, "x"))
	}
	seqs := func(evs []*chubby.Event) []int64 {
		var out []int64
		for _, e := range evs {
			out = append(out, e.Seq)
		}
		return out
	}
	for _, tc := range []struct {
		after           int64
		maxEvents, maxB int
		want            []int64
	}{
		{0, 3, 1 << 20, []int64{1, 2, 3}},
		{7, 100, 1 << 20, []int64{8, 9, 10}},
		{10, 100, 1 << 20, nil},
		{4, 100, 1, []int64{5}},
		{4, 100, 2 * (eventWireOverhead + 2), []int64{5, 6}},
		{4, 0, 1 << 20, nil},
	} {
		if got := seqs(h.s.EventsAfter(a, tc.after, tc.maxEvents, tc.maxB)); !slices.Equal(got, tc.want) {
			t.Errorf("EventsAfter(%d, %d, %d) = %v, want %v", tc.after, tc.maxEvents, tc.maxB, got, tc.want)
		}
	}
	if h.s.EventsAfter(999, 0, 10, 1<<20) != nil || h.s.LastEvent(999) != 0 {
		t.Error("events of an unknown session")
	}
}

// TestEventsSnapshot: queues, numbering, masks and watchers survive
// Snapshot and Restore byte for byte; a version 2 snapshot (before events)
// still restores; corrupt queues are refused.
func TestEventsSnapshot(t *testing.T) {
	l := DefaultLimits()
	l.MaxEventsPerSession = 4
	h := newHarnessLimits(t, l)
	a, b := h.session(), h.session()
	h.write(a, "/d/f", "")
	h.watch(a, "/d", rd, chubby.EVENT_MASK_ALL)
	h.watch(b, "/d/f", rd, chubby.EVENT_MASK_ALL)
	wr := h.rw(a, "/d/f")
	for range 6 {
		h.ok(opSet(wr, "x"))
	}
	snap := h.s.Snapshot()
	r, err := Restore(snap, l)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap, r.Snapshot()) {
		t.Fatal("snapshot → restore → snapshot differs")
	}
	// Both go on identically: same numbers, same watchers.
	for _, st := range []*State{h.s, r} {
		st.Apply(&fsm.Command{TimeMs: h.now, Op: opSet(wr, "y")})
		st.Apply(&fsm.Command{TimeMs: h.now, Op: opDelete(wr, false)})
		if err := st.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(h.s.Snapshot(), r.Snapshot()) {
		t.Fatal("restored state diverged")
	}
	wantEvents(t, r.EventsAfter(b, 0, 100, 1<<20),
		"5 EVENTS_LOST h0  lost=1..5",
		"6 FILE_CONTENTS_MODIFIED h2 /d/f cgen=7",
		"7 FILE_CONTENTS_MODIFIED h2 /d/f cgen=8",
		"8 HANDLE_INVALID h2 /d/f")

	// Version 2: no events, masks as stored.
	old := newHarness(t)
	s := old.session()
	old.write(s, "/f", "")
	old.watch(s, "/f", rd, chubby.EVENT_MASK_ALL)
	owr := old.rw(s, "/f")
	dec, err := decodeSnapshot(old.s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	dec.Version = 2
	r2, err := Restore(thrift.FastMarshal(dec), DefaultLimits())
	if err != nil {
		t.Fatalf("version 2 snapshot: %v", err)
	}
	if res, _ := r2.Apply(&fsm.Command{TimeMs: old.now, Op: opSet(owr, "x")}); res.Err != nil {
		t.Fatal(res.Err)
	}
	if len(r2.EventsAfter(s, 0, 10, 1<<20)) != 1 {
		t.Fatal("a handle restored from version 2 does not watch")
	}

	// Corrupt queues.
	corrupt := map[string]func(ss *fsm.SnapSession){
		"gap":                func(ss *fsm.SnapSession) { ss.Events[2].Seq++ },
		"marker not first":   func(ss *fsm.SnapSession) { ss.Events[1].Kind = chubby.EventKind_EVENTS_LOST },
		"last seq":           func(ss *fsm.SnapSession) { ss.LastEventSeq = ptr(int64(99)) },
		"negative last":      func(ss *fsm.SnapSession) { ss.LastEventSeq = ptr(int64(-1)) },
		"huge last":          func(ss *fsm.SnapSession) { ss.LastEventSeq = ptr(int64(maxEventSeq + 1)) },
		"failover queued":    func(ss *fsm.SnapSession) { ss.Events[1].Kind = chubby.EventKind_MASTER_FAILED_OVER },
		"bad kind":           func(ss *fsm.SnapSession) { ss.Events[1].Kind = 42 },
		"bad handle":         func(ss *fsm.SnapSession) { ss.Events[1].Handle = ptr(int64(1000)) },
		"bad path":           func(ss *fsm.SnapSession) { ss.Events[1].Path = ptr("x/") },
		"future":             func(ss *fsm.SnapSession) { ss.Events[1].TimeMs = 1 << 50 },
		"child on contents":  func(ss *fsm.SnapSession) { ss.Events[1].Child = ptr("c") },
		"lost_from too high": func(ss *fsm.SnapSession) { ss.Events[0].LostFrom = ptr(ss.Events[0].Seq + 1) },
		"nil event":          func(ss *fsm.SnapSession) { ss.Events[1] = nil },
	}
	for name, f := range corrupt {
		dec, err := decodeSnapshot(snap)
		if err != nil {
			t.Fatal(err)
		}
		f(dec.Sessions[1])
		if _, err := Restore(thrift.FastMarshal(dec), l); err == nil {
			t.Errorf("%s: corrupt event queue restored", name)
		}
	}
	// A version 2 snapshot with events is not one.
	dec, _ = decodeSnapshot(snap)
	dec.Version = 2
	if _, err := Restore(thrift.FastMarshal(dec), l); err == nil {
		t.Error("version 2 snapshot with events restored")
	}
}

// TestRandomEvents drives random command streams with watchers and checks
// what every session's queue must satisfy at every step: it is gapless and
// ascending (checkInvariants), its numbers only grow, and an event seen
// once is never changed (only dropped by a trim or folded into
// EVENTS_LOST).
func TestRandomEvents(t *testing.T) {
	seeds, steps := soak(6, 2000)
	total := 0
	for seed := int64(1); seed <= seeds; seed++ {
		g := newCmdGen(seed * 7919)
		h := newHarness(t)
		h.strict = false
		seen := map[chubby.SessionID]map[int64]string{}
		for i := 0; i < steps; i++ {
			c := g.next()
			h.now = c.TimeMs
			res, fx := h.cmd(c)
			g.observe(c, res, fx)
			for _, id := range fx.Notified {
				if !h.s.SessionExists(id) {
					t.Fatalf("seed %d step %d: notified ended session %d", seed, i, id)
				}
			}
			for _, id := range h.s.Sessions() {
				m := seen[id]
				if m == nil {
					m = map[int64]string{}
					seen[id] = m
				}
				for _, e := range h.s.EventsAfter(id, 0, 1<<30, 1<<30) {
					b := brief([]*chubby.Event{e})[0]
					if prev, ok := m[e.Seq]; ok && prev != b && e.Kind != chubby.EventKind_EVENTS_LOST {
						t.Fatalf("seed %d step %d: session %d event %d changed: %s → %s", seed, i, id, e.Seq, prev, b)
					}
					if _, ok := m[e.Seq]; !ok {
						total++
					}
					m[e.Seq] = b
				}
			}
		}
	}
	if total < 100 {
		t.Fatalf("only %d events in the random streams: the generator does not exercise them", total)
	}
}
