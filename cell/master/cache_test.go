package master

import (
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
)

func leaseEnds(m map[chubby.SessionID]Time) func(chubby.SessionID) (Time, bool) {
	return func(id chubby.SessionID) (Time, bool) {
		e, ok := m[id]
		return e, ok
	}
}

func TestChangeWaitsForEveryCacher(t *testing.T) {
	c := NewCache(0, 0)
	c.Reset(1, nil)
	c.Declare(1)
	c.Declare(2)
	c.Declare(3) // caches nothing
	if !c.Register(1, "/a") || !c.Register(2, "/a") || !c.Register(2, "/b") {
		t.Fatal("Register refused")
	}
	ends := map[chubby.SessionID]Time{1: 100, 2: 200, 3: 300}
	ch, wake := c.Invalidate([]string{"/a", "/"}, nil, false, leaseEnds(ends))
	if len(wake) != 2 || wake[0] != 1 || wake[1] != 2 {
		t.Fatalf("wake %v", wake)
	}
	if c.Register(3, "/a") {
		t.Fatal("a node being changed is cachable")
	}
	if ready, next := c.Ready(ch, 10); ready || next != 100 {
		t.Fatalf("ready %v next %d", ready, next)
	}
	gs := []*chubby.LeaseGrant{{Session: 1}, {Session: 2}, {Session: 3}}
	c.Attach(gs)
	if gs[0].GetInvalidationSeq() == 0 || len(gs[0].Invalidations) != 1 || gs[2].InvalidationSeq != nil {
		t.Fatalf("attached %+v", gs)
	}
	c.Ack(0, []chubby.SessionID{1}, []int64{gs[0].GetInvalidationSeq()})
	if ready, next := c.Ready(ch, 10); ready || next != 200 {
		t.Fatalf("after one ack: ready %v next %d", ready, next)
	}
	// Session 2 never acks: its lease ends at 200 (its client stopped
	// using its cache by then).
	if ready, _ := c.Ready(ch, 200); !ready {
		t.Fatal("not ready at the cacher's lease end")
	}
	c.Done(ch)
	if !c.Register(3, "/a") {
		t.Fatal("not cachable after Done")
	}
	// Session 2's old invalidation is still unacknowledged: the next change
	// waits for it too, even on another node.
	ch2, _ := c.Invalidate([]string{"/z"}, nil, false, leaseEnds(map[chubby.SessionID]Time{2: 400}))
	if ready, _ := c.Ready(ch2, 300); ready {
		t.Fatal("a change committed while an older invalidation is unacknowledged")
	}
	c.Forget(2)
	if ready, _ := c.Ready(ch2, 300); !ready {
		t.Fatal("not ready once the session is gone")
	}
}

func TestNewMasterWaitsForEveryRecoveredCacher(t *testing.T) {
	c := NewCache(0, 0)
	c.Reset(5, []chubby.SessionID{7})
	if c.Register(7, "/a") {
		t.Fatal("a session that has not flushed may cache")
	}
	ch, _ := c.Invalidate([]string{"/x"}, nil, false, leaseEnds(map[chubby.SessionID]Time{7: 50}))
	if ready, next := c.Ready(ch, 0); ready || next != 50 {
		t.Fatalf("ready %v next %d", ready, next)
	}
	gs := []*chubby.LeaseGrant{{Session: 7}}
	c.Attach(gs)
	if !gs[0].GetInvalidateAll() || gs[0].GetInvalidationSeq() != 5<<32+1 {
		t.Fatalf("attached %+v", gs[0])
	}
	// An ack meant for an older master counts for nothing.
	c.Ack(0, []chubby.SessionID{7}, []int64{4<<32 + 1})
	if ready, _ := c.Ready(ch, 0); ready {
		t.Fatal("an older epoch's ack counted")
	}
	c.Ack(0, []chubby.SessionID{7}, []int64{5<<32 + 1})
	if ready, _ := c.Ready(ch, 0); !ready {
		t.Fatal("not ready after the flush was acknowledged")
	}
}

// TestTreeUncachable: while a change may remove everything under a tree
// (a recursive delete), every node under it is uncachable, not only the
// ones cached when it began, and their cachers are invalidated.
func TestTreeUncachable(t *testing.T) {
	c := NewCache(0, 0)
	c.Declare(1)
	if !c.Register(1, "/d/a") || !c.Register(1, "/dx") {
		t.Fatal("Register refused")
	}
	ch, wake := c.Invalidate([]string{"/", "/d"}, []string{"/d"}, false, leaseEnds(map[chubby.SessionID]Time{1: 100}))
	if len(wake) != 1 {
		t.Fatalf("wake %v", wake)
	}
	gs := []*chubby.LeaseGrant{{Session: 1}}
	c.Attach(gs)
	if got := gs[0].Invalidations; len(got) != 1 || got[0] != "/d/a" {
		t.Fatalf("invalidations %v, want [/d/a]", got)
	}
	for _, p := range []string{"/d", "/d/a", "/d/b/c"} {
		if c.Register(1, p) {
			t.Errorf("%s is cachable while the tree /d is being removed", p)
		}
	}
	if !c.Register(1, "/dx") {
		t.Error("/dx, beside the tree, is uncachable")
	}
	c.Done(ch)
	if !c.Register(1, "/d/b/c") {
		t.Error("not cachable after Done")
	}
}

// TestEpochsPastTwoToThe31: master epochs follow views, and a view carries
// its configuration epoch in its high bits, so master epochs pass 2^31
// after the first reconfiguration. Seqs must stay positive and distinct
// from every other master's, and an acknowledgement sent to this master
// with another master's epoch counts for nothing.
func TestEpochsPastTwoToThe31(t *testing.T) {
	for _, epoch := range []int64{1<<32 + 1, 3<<32 + 3, 1<<62 + 7} {
		c := NewCache(0, 0)
		c.Reset(epoch, []chubby.SessionID{7})
		gs := []*chubby.LeaseGrant{{Session: 7}}
		c.Attach(gs)
		seq := gs[0].GetInvalidationSeq()
		if seq <= 0 {
			t.Fatalf("epoch %d: seq %d", epoch, seq)
		}
		ch, _ := c.Invalidate([]string{"/x"}, nil, false, leaseEnds(map[chubby.SessionID]Time{7: 50}))
		c.Ack(epoch-1, []chubby.SessionID{7}, []int64{seq})
		if ready, _ := c.Ready(ch, 0); ready {
			t.Fatalf("epoch %d: an ack sent with another epoch counted", epoch)
		}
		c.Ack(epoch, []chubby.SessionID{7}, []int64{seq})
		if ready, _ := c.Ready(ch, 0); !ready {
			t.Fatalf("epoch %d: not ready after the flush was acknowledged", epoch)
		}
	}
}

// TestChangeAcrossEpochsNeverReady: a change that was waiting when a new
// master epoch reset the table is not ready, ever: its marks that kept its
// paths uncachable are gone with the old table, so a session may cache a
// path from the new master meanwhile and would keep the old value if the
// change committed. (It used to count as ready at once: a voter change
// that kept its primary let such a write commit while a reader served the
// old value from its cache — found by TestNetnsReconfig.)
func TestChangeAcrossEpochsNeverReady(t *testing.T) {
	c := NewCache(0, 0)
	c.Reset(5, nil)
	c.Declare(7)
	if !c.Register(7, "/x") {
		t.Fatal("a fresh session may not cache")
	}
	ch, _ := c.Invalidate([]string{"/x"}, nil, false, leaseEnds(map[chubby.SessionID]Time{7: 1000}))
	if ready, _ := c.Ready(ch, 0); ready {
		t.Fatal("ready before the cacher acknowledged")
	}
	c.Reset(6, []chubby.SessionID{7})
	if c.Current(ch) {
		t.Fatal("a change of epoch 5 is current in epoch 6")
	}
	for _, now := range []Time{0, 999, 2000} {
		if ready, _ := c.Ready(ch, now); ready {
			t.Fatalf("a change of the old epoch is ready at %d", now)
		}
	}
}
