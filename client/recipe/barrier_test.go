package recipe

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

func init() {
	// A setter of an ephemeral barrier (path) that says "set" and holds
	// it until killed.
	children["barrier-setter"] = func(args []string) int {
		ctx := context.Background()
		b, err := NewBarrier(coordChildSession(ctx), args[0], BarrierOptions{Ephemeral: true})
		if err != nil {
			return coordChildFail("barrier", err)
		}
		if err := b.Set(ctx); err != nil {
			return coordChildFail("set", err)
		}
		fmt.Println("set")
		select {}
	}
	// A double-barrier participant (dir, n, id) that says "entered" once
	// the round starts, and never leaves: it is killed.
	children["double-barrier"] = func(args []string) int {
		ctx := context.Background()
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return coordChildFail("n", err)
		}
		b, err := NewDoubleBarrier(coordChildSession(ctx), args[0], n, args[2])
		if err != nil {
			return coordChildFail("double barrier", err)
		}
		fmt.Println("entering")
		if err := b.Enter(ctx); err != nil {
			return coordChildFail("enter", err)
		}
		fmt.Println("entered")
		select {}
	}
}

// inBackground runs f on a goroutine; the channel gets its error.
func inBackground(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// done waits (bounded) for a background call and fails the test on its error.
func done(t *testing.T, what string, ch <-chan error, within time.Duration) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(within):
		t.Fatalf("%s did not return within %v", what, within)
	}
}

// blocked checks that a background call has not returned after a while
// (it waits for something that has not happened).
func blocked(t *testing.T, what string, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned (%v) while it should wait", what, err)
	case <-time.After(500 * time.Millisecond):
	}
}

// TestBarrier: Wait returns at once with no barrier, waits while it is
// set, returns when it is removed; a permanent barrier outlives its
// setter's session, an ephemeral one does not.
func TestBarrier(t *testing.T) {
	cell := coordCell(t)
	s1, s2 := coordSession(t, cell.Addr), coordSession(t, cell.Addr)
	ctx := coordCtx(t, 60*time.Second)
	coordMkdir(t, s1, "/bar")
	b1, _ := NewBarrier(s1, "/bar/b", BarrierOptions{})
	b2, _ := NewBarrier(s2, "/bar/b", BarrierOptions{})
	if err := b2.Wait(ctx); err != nil {
		t.Fatalf("Wait with no barrier: %v", err)
	}
	if err := b1.Set(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b2.Set(ctx); err != nil {
		t.Fatalf("Set of a set barrier: %v", err)
	}
	waiting := inBackground(func() error { return b2.Wait(ctx) })
	blocked(t, "Wait on a set barrier", waiting)
	if err := b1.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	done(t, "Wait after Remove", waiting, 20*time.Second)
	if err := b1.Remove(ctx); err != nil {
		t.Fatalf("Remove of a removed barrier: %v", err)
	}

	// A permanent barrier stays when its setter's session ends.
	if err := b1.Set(ctx); err != nil {
		t.Fatal(err)
	}
	s1.Close(ctx)
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := b2.Wait(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a permanent barrier whose setter left: %v", err)
	}
	if err := b2.Remove(ctx); err != nil {
		t.Fatal(err)
	}

	// An ephemeral barrier lifts when its setter's session ends.
	s3 := coordSession(t, cell.Addr)
	e3, _ := NewBarrier(s3, "/bar/b", BarrierOptions{Ephemeral: true})
	if err := e3.Set(ctx); err != nil {
		t.Fatal(err)
	}
	waiting = inBackground(func() error { return b2.Wait(ctx) })
	blocked(t, "Wait on an ephemeral barrier", waiting)
	s3.Close(ctx)
	done(t, "Wait after the ephemeral barrier's setter closed", waiting, 20*time.Second)

	if _, err := NewBarrier(s2, "/", BarrierOptions{}); !client.IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
		t.Fatalf("a barrier at /: %v", err)
	}
}

// TestBarrierKilledSetter: kill -9 of an ephemeral barrier's setter
// lifts it once the setter's session expires.
func TestBarrierKilledSetter(t *testing.T) {
	cell := coordCell(t)
	s := coordSession(t, cell.Addr)
	coordMkdir(t, s, "/bar")
	setter := startChild(t, "barrier-setter", cell.Addr, "/bar/k")
	setter.Expect("set", 20*time.Second)
	b, _ := NewBarrier(s, "/bar/k", BarrierOptions{})
	ctx := coordCtx(t, 60*time.Second)
	waiting := inBackground(func() error { return b.Wait(ctx) })
	blocked(t, "Wait on the child's barrier", waiting)
	setter.Kill()
	done(t, "Wait after the setter was killed", waiting, coordTakeover)
}

// enterAll starts Enter of each barrier in the background.
func enterAll(ctx context.Context, bs ...*DoubleBarrier) []<-chan error {
	var chs []<-chan error
	for _, b := range bs {
		chs = append(chs, inBackground(func() error { return b.Enter(ctx) }))
	}
	return chs
}

// leaveAll starts Leave of each barrier in the background.
func leaveAll(ctx context.Context, bs ...*DoubleBarrier) []<-chan error {
	var chs []<-chan error
	for _, b := range bs {
		chs = append(chs, inBackground(func() error { return b.Leave(ctx) }))
	}
	return chs
}

// TestDoubleBarrier: Enter waits for N participants, Leave for all of the
// round to leave; the directory is clean afterwards and serves a second
// round; a participant that arrives during a round waits for the next.
func TestDoubleBarrier(t *testing.T) {
	cell := coordCell(t)
	ctx := coordCtx(t, 60*time.Second)
	var bs []*DoubleBarrier
	for i := range 3 {
		b, err := NewDoubleBarrier(coordSession(t, cell.Addr), "/dbar/r", 3, fmt.Sprintf("p%d", i))
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	late, _ := NewDoubleBarrier(coordSession(t, cell.Addr), "/dbar/r", 3, "late")

	entered := enterAll(ctx, bs[0], bs[1])
	blocked(t, "Enter of 2 of 3", entered[0])
	entered = append(entered, enterAll(ctx, bs[2])...)
	for i, ch := range entered {
		done(t, fmt.Sprintf("Enter of p%d", i), ch, 20*time.Second)
	}
	lateEntered := enterAll(ctx, late)[0]
	blocked(t, "Enter of a participant that came during the round", lateEntered)
	left := leaveAll(ctx, bs[0], bs[1])
	blocked(t, "Leave of 2 of 3", left[0])
	left = append(left, leaveAll(ctx, bs[2])...)
	for i, ch := range left {
		done(t, fmt.Sprintf("Leave of p%d", i), ch, 20*time.Second)
	}

	// The late one is the first of the next round, which p0 and p1 fill.
	blocked(t, "Enter of the next round's first participant", lateEntered)
	entered = enterAll(ctx, bs[0], bs[1])
	for i, ch := range append(entered, lateEntered) {
		done(t, fmt.Sprintf("second round: Enter %d", i), ch, 20*time.Second)
	}
	for i, ch := range leaveAll(ctx, bs[0], bs[1], late) {
		done(t, fmt.Sprintf("second round: Leave %d", i), ch, 20*time.Second)
	}
	h, err := bs[0].s.Open(ctx, "/dbar/r", client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if entries, err := h.ReadDir(ctx); err != nil || len(entries) != 0 {
		t.Fatalf("after the rounds the directory holds %v (%v)", entries, err)
	}
	for _, tc := range []struct {
		n  int
		id string
	}{{0, "a"}, {3, ""}, {3, "ready"}, {3, "a/b"}, {3, "a b"}} {
		if _, err := NewDoubleBarrier(bs[0].s, "/dbar/r", tc.n, tc.id); !client.IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
			t.Errorf("NewDoubleBarrier(n %d, id %q): %v", tc.n, tc.id, err)
		}
	}
}

// TestDoubleBarrierKilledParticipant: a participant killed before the
// round starts stops counting when its session expires; one killed in a
// round holds the others' Leave only until its session expires.
func TestDoubleBarrierKilledParticipant(t *testing.T) {
	cell := coordCell(t)
	ctx := coordCtx(t, 90*time.Second)
	s1, s2 := coordSession(t, cell.Addr), coordSession(t, cell.Addr)
	p1, _ := NewDoubleBarrier(s1, "/dbar/k", 2, "p1")
	p2, _ := NewDoubleBarrier(s2, "/dbar/k", 2, "p2")

	// Killed before the round: it no longer counts once expired.
	dead := startChild(t, "double-barrier", cell.Addr, "/dbar/k", "2", "child")
	dead.Expect("entering", 20*time.Second)
	waitChildren(t, s1, "/dbar/k", 1)
	dead.Kill()
	waitChildren(t, s1, "/dbar/k", 0) // its session expired
	entered := enterAll(ctx, p1)
	blocked(t, "Enter beside a dead participant", entered[0])
	entered = append(entered, enterAll(ctx, p2)...)
	done(t, "Enter of p1", entered[0], 20*time.Second)
	done(t, "Enter of p2", entered[1], 20*time.Second)
	for i, ch := range leaveAll(ctx, p1, p2) {
		done(t, fmt.Sprintf("Leave %d", i), ch, 20*time.Second)
	}

	// Killed in a round: Leave returns once its session expired.
	inRound := startChild(t, "double-barrier", cell.Addr, "/dbar/k", "2", "child")
	entered = enterAll(ctx, p1)
	inRound.Expect("entered", 20*time.Second)
	done(t, "Enter of p1 with the child", entered[0], 20*time.Second)
	left := inBackground(func() error { return p1.Leave(ctx) })
	blocked(t, "Leave while the child is in the round", left)
	inRound.Kill()
	done(t, "Leave after the child was killed", left, coordTakeover)
}

// waitChildren waits (bounded) until dir has n entries.
func waitChildren(t *testing.T, s *client.Session, dir string, n int) {
	t.Helper()
	ctx := coordCtx(t, coordTakeover)
	for {
		h, err := s.Open(ctx, dir, client.OpenOptions{})
		if err == nil {
			entries, err := h.ReadDir(ctx)
			h.Close(ctx)
			if err == nil && len(entries) == n {
				return
			}
		}
		if err := coordPause(ctx, 50*time.Millisecond); err != nil {
			t.Fatalf("%s does not have %d entries: %v", dir, n, err)
		}
	}
}
