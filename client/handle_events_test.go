package client

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/chubbygo/chubby/client/keepalive"
	"github.com/chubbygo/chubby/gen/chubby"
)

// nextHandleEvent returns the handle's next event within d.
func nextHandleEvent(t *testing.T, h *Handle, d time.Duration) Event {
	t.Helper()
	select {
	case e, ok := <-h.Events():
		if !ok {
			t.Fatalf("%s: event channel closed", h.Path())
		}
		return e
	case <-time.After(d):
		t.Fatalf("%s: no event within %v", h.Path(), d)
	}
	panic("unreachable")
}

// wantClosed checks that h's event channel is closed once drained.
func wantClosed(t *testing.T, h *Handle) {
	t.Helper()
	select {
	case e, ok := <-h.Events():
		if ok {
			t.Fatalf("%s: event %+v, want a closed channel", h.Path(), e)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: event channel not closed", h.Path())
	}
}

// TestHandleEvents: events chosen at Open arrive on Handle.Events, in
// order, with their data; a handle without a mask has a closed channel;
// HANDLE_INVALID closes the channel, as do Close and the session's end.
func TestHandleEvents(t *testing.T) {
	c := connect(t, startCell(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, a := newSession(t, c), newSession(t, c)
	if _, err := a.Mkdir(ctx, "/d", MkdirOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateFile(ctx, "/d/f", []byte("0"), CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hd, err := w.Open(ctx, "/d", OpenOptions{EventMask: chubby.EVENT_MASK_CHILD_ADDED | chubby.EVENT_MASK_CHILD_REMOVED})
	if err != nil {
		t.Fatal(err)
	}
	hf, err := w.Open(ctx, "/d/f", OpenOptions{EventMask: chubby.EVENT_MASK_ALL})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := w.Open(ctx, "/d/f", OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantClosed(t, plain)

	af, err := a.Open(ctx, "/d/f", OpenOptions{Mode: chubby.OpenMode_READ_WRITE})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := af.SetContents(ctx, []byte("1")); err != nil {
		t.Fatal(err)
	}
	e := nextHandleEvent(t, hf, 5*time.Second)
	if e.Kind != chubby.EventKind_FILE_CONTENTS_MODIFIED || e.Path != "/d/f" || e.ContentGeneration != 2 || e.Seq != 1 ||
		time.Since(e.Time) > time.Minute {
		t.Fatalf("contents event %+v", e)
	}
	if _, err := af.Acquire(ctx, chubby.LockMode_SHARED, time.Second, LockOptions{}); err != nil {
		t.Fatal(err)
	}
	if e := nextHandleEvent(t, hf, 5*time.Second); e.Kind != chubby.EventKind_LOCK_ACQUIRED || e.LockMode != chubby.LockMode_SHARED || e.LockGeneration != 1 {
		t.Fatalf("lock event %+v", e)
	}
	if _, err := a.CreateFile(ctx, "/d/g", nil, CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if e := nextHandleEvent(t, hd, 5*time.Second); e.Kind != chubby.EventKind_CHILD_ADDED || e.Child != "g" || e.Path != "/d" {
		t.Fatalf("child event %+v", e)
	}
	if err := af.Delete(ctx, false); err != nil {
		t.Fatal(err)
	}
	if e := nextHandleEvent(t, hf, 5*time.Second); e.Kind != chubby.EventKind_HANDLE_INVALID {
		t.Fatalf("invalid event %+v", e)
	}
	wantClosed(t, hf)
	if e := nextHandleEvent(t, hd, 5*time.Second); e.Kind != chubby.EventKind_CHILD_REMOVED || e.Child != "f" {
		t.Fatalf("child removed event %+v", e)
	}

	// Close closes the channel; so does the session's end.
	if err := hd.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wantClosed(t, hd)
	h2, err := w.Open(ctx, "/d", OpenOptions{EventMask: chubby.EVENT_MASK_ALL})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wantClosed(t, h2)
}

// testSession is a session with no cell behind it, for the event delivery
// logic alone.
func testSession() *Session {
	return &Session{cache: newCache(DefaultCacheMaxEntries), log: slog.New(slog.NewTextHandler(io.Discard, nil)), events: newEventQueue[SessionEvent](SessionEventBuffer),
		changed: make(chan struct{}), k: keepalive.New(keepalive.DefaultConfig(time.Minute), time.Now(), time.Hour, 1)}
}

// testWatch registers a handle with id in s, as a returning Open does.
func testWatch(s *Session, id int64) *Handle {
	h := &Handle{s: s, h: &chubby.Handle{Id: id, Path: "/f"}, events: newEventQueue[Event](HandleEventBuffer)}
	s.beginOpen()
	s.endOpen(h)
	return h
}

func wireEvent(seq, handle int64, kind chubby.EventKind) *chubby.Event {
	p := "/f"
	return &chubby.Event{Seq: seq, Kind: kind, Handle: &handle, Path: &p}
}

func contents(seq, handle int64) *chubby.Event {
	return wireEvent(seq, handle, chubby.EventKind_FILE_CONTENTS_MODIFIED)
}

func drainHandle(h *Handle) []Event {
	var out []Event
	for {
		select {
		case e, ok := <-h.Events():
			if !ok {
				return out
			}
			out = append(out, e)
		default:
			return out
		}
	}
}

func seqsOf(evs []Event) []int64 {
	var out []int64
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

// TestDeliverEventsOnce: a new master may send again what the old one
// sent: each seq is delivered once, in order; MASTER_FAILED_OVER is one
// EventMasterChanged per epoch; the ack is the highest seq received.
func TestDeliverEventsOnce(t *testing.T) {
	s := testSession()
	h := testWatch(s, 7)
	other := testWatch(s, 8)
	ep := int64(2)
	failover := &chubby.Event{Kind: chubby.EventKind_MASTER_FAILED_OVER, Epoch: &ep}
	s.deliverEvents([]*chubby.Event{contents(1, 7), contents(2, 8), contents(3, 7)})
	if s.acked() != 3 {
		t.Fatalf("acked %d, want 3", s.acked())
	}
	s.deliverEvents([]*chubby.Event{failover, contents(2, 8), contents(3, 7), contents(4, 7)})
	s.deliverEvents([]*chubby.Event{failover, contents(4, 7), contents(5, 9) /* unknown handle */, contents(6, 8)})
	if got := seqsOf(drainHandle(h)); !equalInts(got, []int64{1, 3, 4}) {
		t.Fatalf("handle 7 got %v", got)
	}
	if got := seqsOf(drainHandle(other)); !equalInts(got, []int64{2, 6}) {
		t.Fatalf("handle 8 got %v", got)
	}
	if s.acked() != 6 {
		t.Fatalf("acked %d, want 6", s.acked())
	}
	if ev := <-s.Events(); ev.Kind != EventMasterChanged || ev.Epoch != 2 {
		t.Fatalf("session event %+v", ev)
	}
	select {
	case ev := <-s.Events():
		t.Fatalf("a second session event %+v", ev)
	default:
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDeliverEventsEarlyAndLost: an event that overtakes its handle's Open
// is delivered once the Open returns; EVENTS_LOST goes to the session (how
// many the client really lost) and to every handle; a gap is reported as a
// loss; a full handle buffer drops the oldest.
func TestDeliverEventsEarlyAndLost(t *testing.T) {
	s := testSession()
	s.beginOpen()
	s.deliverEvents([]*chubby.Event{contents(1, 7)}) // Open of 7 not returned yet
	h := &Handle{s: s, h: &chubby.Handle{Id: 7, Path: "/f"}, events: newEventQueue[Event](HandleEventBuffer)}
	s.endOpen(h)
	if got := seqsOf(drainHandle(h)); !equalInts(got, []int64{1}) {
		t.Fatalf("early event: %v", got)
	}
	// Nothing is kept once no Open is in flight.
	s.deliverEvents([]*chubby.Event{contents(2, 9)})
	if len(s.ev.early) != 0 {
		t.Fatalf("kept %d events for an unknown handle", len(s.ev.early))
	}

	from := int64(2) // the cell dropped 2..5; the client had 2 already
	s.deliverEvents([]*chubby.Event{{Seq: 5, Kind: chubby.EventKind_EVENTS_LOST, LostFrom: &from}, contents(6, 7)})
	if ev := <-s.Events(); ev.Kind != EventLostEvents || ev.Lost != 3 {
		t.Fatalf("session event %+v, want lost-events of 3", ev)
	}
	got := drainHandle(h)
	if len(got) != 2 || got[0].Kind != chubby.EventKind_EVENTS_LOST || got[0].LostFrom != 3 || got[0].Seq != 5 || got[1].Seq != 6 {
		t.Fatalf("handle got %+v", got)
	}
	// A gap the cell did not mark.
	s.deliverEvents([]*chubby.Event{contents(9, 7)})
	if ev := <-s.Events(); ev.Kind != EventLostEvents || ev.Lost != 2 {
		t.Fatalf("gap: session event %+v", ev)
	}
	if got := drainHandle(h); len(got) != 2 || got[0].LostFrom != 7 || got[0].Seq != 8 || got[1].Seq != 9 {
		t.Fatalf("gap: handle got %+v", got)
	}

	// A slow reader loses the oldest, never blocks the loop.
	var evs []*chubby.Event
	for i := range HandleEventBuffer + 10 {
		evs = append(evs, contents(int64(10+i), 7))
	}
	s.deliverEvents(evs)
	got = drainHandle(h)
	if len(got) != HandleEventBuffer || got[0].Seq != 20 || h.DroppedEvents() != 10 {
		t.Fatalf("full buffer: %d events from %d, dropped %d", len(got), got[0].Seq, h.DroppedEvents())
	}
	// HANDLE_INVALID closes the channel.
	s.deliverEvents([]*chubby.Event{wireEvent(int64(10+HandleEventBuffer+10), 7, chubby.EventKind_HANDLE_INVALID)})
	if got := drainHandle(h); len(got) != 1 {
		t.Fatalf("invalid: %+v", got)
	}
	wantClosed(t, h)
}
