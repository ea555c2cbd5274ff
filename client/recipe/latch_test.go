package recipe

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

func init() {
	// A latch (path, id) that says "leader" once it leads, and leads
	// until killed.
	children["latch"] = func(args []string) int {
		ctx := context.Background()
		l, err := NewLeaderLatch(coordChildSession(ctx), args[0], []byte(args[1]), LatchOptions{LockDelay: 300 * time.Millisecond})
		if err != nil {
			return coordChildFail("latch", err)
		}
		if err := l.Start(ctx); err != nil {
			return coordChildFail("start", err)
		}
		if err := l.Await(ctx); err != nil {
			return coordChildFail("await", err)
		}
		fmt.Println("leader", l.HasLeadership())
		select {}
	}
}

// startLatch starts a latch of id on s at path.
func startLatch(t *testing.T, s *client.Session, path, id string) *LeaderLatch {
	t.Helper()
	l, err := NewLeaderLatch(s, path, []byte(id), LatchOptions{LockDelay: client.NoLockDelay})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(coordCtx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	return l
}

// awaitLatch waits (bounded) for l to lead.
func awaitLatch(t *testing.T, l *LeaderLatch, within time.Duration) {
	t.Helper()
	if err := l.Await(coordCtx(t, within)); err != nil {
		t.Fatalf("latch did not lead: %v", err)
	}
}

// TestLeaderLatch: the first latch leads, the second waits; Close hands
// leadership over at once; a closed latch neither leads nor awaits.
func TestLeaderLatch(t *testing.T) {
	cell := coordCell(t)
	s1, s2, s3 := coordSession(t, cell.Addr), coordSession(t, cell.Addr), coordSession(t, cell.Addr)
	coordMkdir(t, s1, "/latch")
	ctx := coordCtx(t, 60*time.Second)

	a := startLatch(t, s1, "/latch/l", "a")
	awaitLatch(t, a, 20*time.Second)
	b := startLatch(t, s2, "/latch/l", "b")
	if !a.HasLeadership() || b.HasLeadership() || a.Sequencer() == nil || b.Sequencer() != nil {
		t.Fatalf("a leads %v (seq %v), b leads %v (seq %v)", a.HasLeadership(), a.Sequencer(), b.HasLeadership(), b.Sequencer())
	}
	if err := b.Start(ctx); !client.IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
		t.Fatalf("second Start: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := b.Await(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b.Await while a leads: %v", err)
	}
	e3, _ := NewElection(s3, "/latch/l")
	if info, err := e3.Leader(ctx); err != nil || string(info.Address) != "a" {
		t.Fatalf("election file says %+v %v, want a", info, err)
	}

	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	awaitLatch(t, b, 20*time.Second)
	if a.HasLeadership() || !b.HasLeadership() || b.Sequencer().GetLockGeneration() <= a.Sequencer().GetLockGeneration() {
		t.Fatalf("after a closed: a leads %v, b leads %v, generations %d %d", a.HasLeadership(), b.HasLeadership(),
			a.Sequencer().GetLockGeneration(), b.Sequencer().GetLockGeneration())
	}
	if err := a.Await(ctx); !errors.Is(err, ErrLatchClosed) {
		t.Fatalf("Await of a closed latch: %v", err)
	}
	if info, err := e3.Leader(ctx); err != nil || string(info.Address) != "b" {
		t.Fatalf("election file says %+v %v, want b", info, err)
	}

	// A latch closed while it waits leaves the queue: c never leads.
	c := startLatch(t, s3, "/latch/l", "c")
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if c.HasLeadership() {
		t.Fatal("a latch closed while waiting leads")
	}
	if info, err := e3.Leader(ctx); err != nil || info.Leads() || info.Waiters != 0 {
		t.Fatalf("after every latch closed: %+v %v", info, err)
	}
	if _, err := NewLeaderLatch(s1, "/latch/l", nil, LatchOptions{}); !client.IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
		t.Fatalf("a latch without an id: %v", err)
	}
}

// TestLeaderLatchKilledLeader: kill -9 of the leading latch's process;
// the waiting latch leads once the dead one's session has expired.
func TestLeaderLatchKilledLeader(t *testing.T) {
	cell := coordCell(t)
	s := coordSession(t, cell.Addr)
	coordMkdir(t, s, "/latch")
	leader := startChild(t, "latch", cell.Addr, "/latch/k", "child")
	leader.Expect("leader true", 20*time.Second)
	l := startLatch(t, s, "/latch/k", "survivor")
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := l.Await(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || l.HasLeadership() {
		t.Fatalf("the survivor leads beside the child: %v", err)
	}
	leader.Kill()
	awaitLatch(t, l, coordTakeover)
	if !l.HasLeadership() {
		t.Fatal("awaited, but no leadership")
	}
}

// TestLeaderLatchJeopardy: when the leader's session is in jeopardy (its
// only replica stopped, so no renewal comes), the latch has no
// leadership and the Leadership is not held.
func TestLeaderLatchJeopardy(t *testing.T) {
	cell := coordCell(t)
	s := coordSession(t, cell.Addr)
	coordMkdir(t, s, "/latch")
	l := startLatch(t, s, "/latch/j", "a")
	awaitLatch(t, l, 20*time.Second)
	if !l.HasLeadership() {
		t.Fatal("no leadership before the cell stopped")
	}
	cell.Stop()
	ctx := coordCtx(t, 20*time.Second)
	for s.State() != client.StateJeopardy {
		if err := coordPause(ctx, 20*time.Millisecond); err != nil {
			t.Fatalf("the session is %v, not in jeopardy", s.State())
		}
	}
	if l.HasLeadership() {
		t.Fatal("a latch whose session is in jeopardy has leadership")
	}
}
