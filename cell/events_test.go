package cell

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
)

// keepAliveRaw sends one KeepAlive for session id acknowledging acked and
// returns the session's grant.
func keepAliveRaw(t *testing.T, cli combineservice.Client, id chubby.SessionID, acked int64) (*chubby.LeaseGrant, int64) {
	t.Helper()
	g, epoch, err := keepAliveErr(cli, id, acked)
	if err != nil {
		t.Fatal(err)
	}
	return g, epoch
}

// keepAliveErr is keepAliveRaw for goroutines other than the test's.
func keepAliveErr(cli combineservice.Client, id chubby.SessionID, acked int64) (*chubby.LeaseGrant, int64, error) {
	r, err := cli.KeepAlive(ctx, &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{{Session: id, AckedEvent: &acked}}},
		callopt.WithRPCTimeout(time.Minute))
	if err != nil {
		return nil, 0, fmt.Errorf("KeepAlive: %w", err)
	}
	if len(r.Results) != 1 || r.Results[0].Error != nil {
		return nil, 0, fmt.Errorf("KeepAlive results %+v", r.Results)
	}
	return r.Results[0], r.Epoch, nil
}

// describe renders events as "seq KIND handle path [child]".
func describe(evs []*chubby.Event) []string {
	var out []string
	for _, e := range evs {
		s := fmt.Sprintf("%d %v h%d %s", e.Seq, e.Kind, e.GetHandle(), e.GetPath())
		if e.IsSetChild() {
			s += " " + e.GetChild()
		}
		if e.Kind == chubby.EventKind_MASTER_FAILED_OVER {
			s = fmt.Sprintf("%d %v epoch=%d", e.Seq, e.Kind, e.GetEpoch())
		}
		out = append(out, s)
	}
	return out
}

func watchRaw(t *testing.T, tc *testCell, s chubby.SessionID, path string, mask int32) *chubby.Handle {
	t.Helper()
	r, err := tc.cli.Open(ctx, &chubby.OpenRequest{Session: s, Path: path, Mode: chubby.OpenMode_READ,
		Create: chubby.CreateMode_OPEN_EXISTING, EventMask: &mask})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	return r.Handle
}

func queuedEvents(s *Server) int {
	var n int
	s.m.read(func(st *fs.State) { n = st.Counts().Events })
	return n
}

// TestEventsEveryKind: every per-handle kind reaches the watching session
// through KeepAlive replies, numbered 1, 2, 3... without gaps, each once
// when the client acknowledges what it got, in the order of the changes.
func TestEventsEveryKind(t *testing.T) {
	tc := startCell(t, Config{Lease: 3 * time.Second})
	w, a := tc.session("watcher"), tc.session("actor")
	must[*chubby.Stat](t)(tc.cli.Mkdir(ctx, &chubby.MkdirRequest{Session: a, Path: "/d"}))
	must[*chubby.Stat](t)(tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: a, Path: "/d/f", Content: []byte("0")}))
	hd := watchRaw(t, tc, w, "/d", chubby.EVENT_MASK_ALL)
	hf := watchRaw(t, tc, w, "/d/f", chubby.EVENT_MASK_ALL)

	af := tc.open(a, "/d/f", chubby.CreateMode_OPEN_EXISTING, false)
	must[*chubby.Stat](t)(tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: af, Content: []byte("1")}))
	tc.open(a, "/d/g", chubby.CreateMode_CREATE_NEW, false)
	must[*chubby.Sequencer](t)(tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: hf, Mode: chubby.LockMode_EXCLUSIVE}))
	_, err := tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: af, Mode: chubby.LockMode_SHARED})
	wantCode(t, err, chubby.ErrorCode_LOCK_HELD)
	ag := tc.open(a, "/d/g", chubby.CreateMode_OPEN_EXISTING, false)
	if err := tc.cli.Delete(ctx, &chubby.DeleteRequest{Handle: ag}); err != nil {
		t.Fatal(err)
	}
	if err := tc.cli.Delete(ctx, &chubby.DeleteRequest{Handle: af}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		fmt.Sprintf("1 FILE_CONTENTS_MODIFIED h%d /d/f", hf.Id),
		fmt.Sprintf("2 CHILD_MODIFIED h%d /d f", hd.Id),
		fmt.Sprintf("3 CHILD_ADDED h%d /d g", hd.Id),
		fmt.Sprintf("4 LOCK_ACQUIRED h%d /d/f", hf.Id),
		fmt.Sprintf("5 CONFLICTING_LOCK_REQUEST h%d /d/f", hf.Id),
		fmt.Sprintf("6 CHILD_REMOVED h%d /d g", hd.Id),
		fmt.Sprintf("7 HANDLE_INVALID h%d /d/f", hf.Id),
		fmt.Sprintf("8 CHILD_REMOVED h%d /d f", hd.Id),
	}

	// A client acknowledging what it got: it gets each event once.
	var got []*chubby.Event
	acked := int64(0)
	for deadline := time.Now().Add(5 * time.Second); len(got) < len(want); {
		if time.Now().After(deadline) {
			t.Fatalf("only %v within 5s", describe(got))
		}
		g, _ := keepAliveRaw(t, tc.cli, w, acked)
		got = append(got, g.Events...)
		if n := len(g.Events); n > 0 {
			acked = g.Events[n-1].Seq
		}
	}
	if d := describe(got); !slices.Equal(d, want) {
		t.Fatalf("events:\n  %s\nwant:\n  %s", strings.Join(d, "\n  "), strings.Join(want, "\n  "))
	}
	if e := got[0]; e.GetContentGeneration() != 2 || e.TimeMs <= 0 {
		t.Fatalf("contents event data %+v", e)
	}
	if e := got[3]; e.GetLockGeneration() != 1 || e.GetLockMode() != chubby.LockMode_EXCLUSIVE {
		t.Fatalf("lock event data %+v", e)
	}
	if e := got[4]; e.GetLockMode() != chubby.LockMode_SHARED {
		t.Fatalf("conflict event data %+v", e)
	}
	// The actor asked for nothing and gets nothing.
	tc.s.m.read(func(st *fs.State) {
		if st.LastEvent(a) != 0 {
			t.Errorf("the actor has %d events", st.LastEvent(a))
		}
	})

	// A bad mask is refused at the edge.
	bad := int32(1 << 20)
	_, err = tc.cli.Open(ctx, &chubby.OpenRequest{Session: w, Path: "/d", Mode: chubby.OpenMode_READ,
		Create: chubby.CreateMode_OPEN_EXISTING, EventMask: &bad})
	wantCode(t, err, chubby.ErrorCode_INVALID_ARGUMENT)
	neg := int64(-1)
	_, err = tc.cli.KeepAlive(ctx, &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{{Session: w, AckedEvent: &neg}}})
	wantCode(t, err, chubby.ErrorCode_INVALID_ARGUMENT)
}

// TestKeepAliveReturnsEarlyOnEvent: a parked KeepAlive is answered as soon
// as its session gets an event, not at the lease; one that acknowledges
// less than was sent is answered at once with the rest again (at least
// once); one that acknowledges everything parks.
func TestKeepAliveReturnsEarlyOnEvent(t *testing.T) {
	const lease = 4 * time.Second
	tc := startCell(t, Config{Lease: lease})
	w, a := tc.session("watcher"), tc.session("actor")
	must[*chubby.Stat](t)(tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: a, Path: "/f"}))
	watchRaw(t, tc, w, "/f", chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
	af := tc.open(a, "/f", chubby.CreateMode_OPEN_EXISTING, false)

	type reply struct {
		g   *chubby.LeaseGrant
		err error
		at  time.Time
	}
	park := func(acked int64) chan reply {
		ch := make(chan reply, 1)
		go func() {
			g, _, err := keepAliveErr(tc.cli, w, acked)
			ch <- reply{g, err, time.Now()}
		}()
		return ch
	}
	for i := int64(1); i <= 2; i++ {
		ch := park(i - 1)
		select {
		case r := <-ch:
			t.Fatalf("KeepAlive %d answered before any event: %+v", i, r)
		case <-time.After(300 * time.Millisecond): // parked
		}
		wrote := time.Now()
		must[*chubby.Stat](t)(tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: af, Content: []byte("x")}))
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatal(r.err)
			}
			if d := r.at.Sub(wrote); d > lease/4 {
				t.Fatalf("KeepAlive answered %v after the write", d)
			}
			if len(r.g.Events) != 1 || r.g.Events[0].Seq != i {
				t.Fatalf("KeepAlive %d events %v", i, describe(r.g.Events))
			}
		case <-time.After(lease):
			t.Fatal("parked KeepAlive not answered on an event")
		}
	}
	// Acknowledging only the first: the second comes again, at once.
	start := time.Now()
	g, _ := keepAliveRaw(t, tc.cli, w, 1)
	if time.Since(start) > lease/4 || len(g.Events) != 1 || g.Events[0].Seq != 2 {
		t.Fatalf("resend after %v: %v", time.Since(start), describe(g.Events))
	}
}

// TestEventsTrimmedAfterAck: acknowledged events leave the replicated
// queue (a batched TrimEvents); unacknowledged ones stay; numbering goes
// on.
func TestEventsTrimmedAfterAck(t *testing.T) {
	tc := startCell(t, Config{Lease: 3 * time.Second, EventTrimInterval: 20 * time.Millisecond})
	w, a := tc.session("watcher"), tc.session("actor")
	must[*chubby.Stat](t)(tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: a, Path: "/f"}))
	watchRaw(t, tc, w, "/f", chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
	af := tc.open(a, "/f", chubby.CreateMode_OPEN_EXISTING, false)
	for range 3 {
		must[*chubby.Stat](t)(tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: af, Content: []byte("x")}))
	}
	if g, _ := keepAliveRaw(t, tc.cli, w, 0); len(g.Events) != 3 {
		t.Fatalf("events %v", describe(g.Events))
	}
	time.Sleep(100 * time.Millisecond)
	if n := queuedEvents(tc.s); n != 3 {
		t.Fatalf("%d events queued after a KeepAlive that acknowledged none, want 3", n)
	}
	// Acknowledging 2: 3 comes back at once, and 1 and 2 are trimmed.
	if g, _ := keepAliveRaw(t, tc.cli, w, 2); len(g.Events) != 1 || g.Events[0].Seq != 3 {
		t.Fatalf("after ack 2: %v", describe(g.Events))
	}
	waitFor(t, "trim to 1 event", func() bool { return queuedEvents(tc.s) == 1 })
	go keepAliveErr(tc.cli, w, 3) // parks: nothing after 3
	waitFor(t, "trim to 0 events", func() bool { return queuedEvents(tc.s) == 0 })
	must[*chubby.Stat](t)(tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: af, Content: []byte("y")}))
	if g, _ := keepAliveRaw(t, tc.cli, w, 3); len(g.Events) != 1 || g.Events[0].Seq != 4 {
		t.Fatalf("after the trim: %v", describe(g.Events))
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 5s", what)
		}
	}
}

// TestEventsSurviveFailover: in a 3-replica cell, events queued before the
// master is killed — delivered but not acknowledged, or not delivered at
// all — are delivered by the new master, after MASTER_FAILED_OVER with its
// epoch.
func TestEventsSurviveFailover(t *testing.T) {
	mc := startMultiCell(t, 3, Config{Lease: 3 * time.Second})
	m := mc.master()
	cli := newRawClient(t, m.Addr())
	cs := func(name string) chubby.SessionID {
		return must[*chubby.CreateSessionResponse](t)(cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: name})).Session
	}
	w, a := cs("watcher"), cs("actor")
	mask := int32(chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
	hw := must[*chubby.OpenResponse](t)(cli.Open(ctx, &chubby.OpenRequest{Session: w, Path: "/f", Mode: chubby.OpenMode_READ,
		Create: chubby.CreateMode_OPEN_OR_CREATE, EventMask: &mask})).Handle
	ha := must[*chubby.OpenResponse](t)(cli.Open(ctx, &chubby.OpenRequest{Session: a, Path: "/f", Mode: chubby.OpenMode_READ_WRITE,
		Create: chubby.CreateMode_OPEN_EXISTING})).Handle
	write := func(c combineservice.Client) {
		t.Helper()
		must[*chubby.Stat](t)(c.SetContents(ctx, &chubby.SetContentsRequest{Handle: ha, Content: []byte("x")}))
	}
	for range 3 {
		write(cli)
	}
	g, epoch := keepAliveRaw(t, cli, w, 0)
	if len(g.Events) != 3 {
		t.Fatalf("before the failover: %v", describe(g.Events))
	}
	write(cli) // event 4: never delivered by this master
	m.Stop()

	var m2 *Server
	waitFor(t, "new master", func() bool {
		for _, s := range mc.servers {
			if s != m && s.IsMaster() {
				m2 = s
				return true
			}
		}
		return false
	})
	cli2 := newRawClient(t, m2.Addr())
	g, epoch2 := keepAliveRaw(t, cli2, w, 1) // the client had only 1 when the master died
	if epoch2 <= epoch {
		t.Fatalf("epoch %d after the failover, was %d", epoch2, epoch)
	}
	want := []string{
		fmt.Sprintf("0 MASTER_FAILED_OVER epoch=%d", epoch2),
		fmt.Sprintf("2 FILE_CONTENTS_MODIFIED h%d /f", hw.Id),
		fmt.Sprintf("3 FILE_CONTENTS_MODIFIED h%d /f", hw.Id),
		fmt.Sprintf("4 FILE_CONTENTS_MODIFIED h%d /f", hw.Id),
	}
	if d := describe(g.Events); !slices.Equal(d, want) {
		t.Fatalf("after the failover:\n  %s\nwant:\n  %s", strings.Join(d, "\n  "), strings.Join(want, "\n  "))
	}
	// Greeted once: the next reply has no MASTER_FAILED_OVER.
	write(cli2)
	if g, _ := keepAliveRaw(t, cli2, w, 4); len(g.Events) != 1 || g.Events[0].Seq != 5 {
		t.Fatalf("next reply: %v", describe(g.Events))
	}
}

// TestClientEventsAcrossFailover: through the Go client library, a
// handle's events written before, during and after the master's failover
// all arrive, each once, in order; the session reports the failover once
// (once per master change, if the cell changed masters more than once).
func TestClientEventsAcrossFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("fails over a 3-replica cell")
	}
	mc := startMultiCell(t, 3, Config{Lease: 3 * time.Second})
	m := mc.master()
	var addrs []string
	for _, s := range mc.servers {
		addrs = append(addrs, s.Addr())
	}
	tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	connect := func() *client.Session {
		c, err := client.Connect(tctx, client.Config{Addrs: addrs, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s, err := c.NewSession(tctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ws, as := connect(), connect()
	hw, err := ws.Open(tctx, "/f", client.OpenOptions{Create: chubby.CreateMode_OPEN_OR_CREATE,
		EventMask: chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED})
	if err != nil {
		t.Fatal(err)
	}
	ha, err := as.Open(tctx, "/f", client.OpenOptions{Mode: chubby.OpenMode_READ_WRITE})
	if err != nil {
		t.Fatal(err)
	}
	const before, after = 5, 5
	for i := range before + after {
		if i == before {
			m.Stop() // right after a write: its event may not have been delivered yet
		}
		if _, err := ha.SetContents(tctx, []byte{byte(i)}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	var got []client.Event
	for len(got) < before+after {
		select {
		case e, ok := <-hw.Events():
			if !ok {
				t.Fatalf("event channel closed after %d events", len(got))
			}
			got = append(got, e)
		case <-tctx.Done():
			t.Fatalf("only %d events: %+v", len(got), got)
		}
	}
	for i, e := range got {
		if e.Kind != chubby.EventKind_FILE_CONTENTS_MODIFIED || e.Seq != int64(i+1) || e.ContentGeneration != int64(i+2) || e.Path != "/f" {
			t.Fatalf("event %d: %+v", i, e)
		}
	}
	select {
	case e := <-hw.Events():
		t.Fatalf("an extra event: %+v", e)
	case <-time.After(300 * time.Millisecond):
	}
	changes := 0
	for done := false; !done; {
		select {
		case e := <-ws.Events():
			if e.Kind == client.EventMasterChanged {
				changes++
			}
		default:
			done = true
		}
	}
	// Once per master change: one, unless the loaded machine made the cell
	// change masters again (count the terms the replicas began).
	terms := uint64(0)
	for _, s := range mc.servers {
		terms += s.log.CoreStats().BecamePrimary
	}
	if changes < 1 || uint64(changes) > terms-1 {
		t.Fatalf("%d master-changed events, want 1 (or one per master change: %d)", changes, terms-1)
	}
}
