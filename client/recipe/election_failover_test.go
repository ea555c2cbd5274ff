package recipe

import (
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
)

// TestFailoverElectionAndRegistry: the master of a 3-replica cell fails
// over while a leader leads, a candidate waits, an observer follows the
// election and a watcher follows a registry. Afterwards the leader still
// holds its term, the waiting candidate still waits (and leads when the
// leader resigns), and the observer and the watcher report the changes
// made after the failover.
func TestFailoverElectionAndRegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: starts a cell (skipped with -short)")
	}
	rc := celltest.StartStaticWith(t, 3, func(c *cell.Config) { c.Lease = coordLease })
	old := rc.Master()
	addrs := rc.Addrs()
	s1, s2, s3 := coordSession(t, addrs...), coordSession(t, addrs...), coordSession(t, addrs...)
	ctx := coordCtx(t, 120*time.Second)
	coordMkdir(t, s1, "/fo")

	e1, _ := NewElection(s1, "/fo/leader")
	l1, err := e1.Campaign(ctx, []byte("one"), CampaignOptions{LockDelay: client.NoLockDelay})
	if err != nil {
		t.Fatal(err)
	}
	e3, _ := NewElection(s3, "/fo/leader")
	obs, err := e3.Observe(ctx, ObserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close(ctx)
	if info := nextLeader(t, obs); string(info.Address) != "one" {
		t.Fatalf("first observation %+v", info)
	}
	e2, _ := NewElection(s2, "/fo/leader")
	won := make(chan *Leadership, 1)
	go func() {
		l, err := e2.Campaign(ctx, []byte("two"), CampaignOptions{LockDelay: client.NoLockDelay})
		if err != nil {
			t.Errorf("the waiting candidate: %v", err)
		}
		won <- l
	}()
	for info, _ := e3.Leader(ctx); info.Waiters == 0; info, _ = e3.Leader(ctx) {
		if err := coordPause(ctx, 20*time.Millisecond); err != nil {
			t.Fatal("the second candidate does not wait")
		}
	}

	r1, _ := NewRegistry(s1, "/fo/svc")
	r3, _ := NewRegistry(s3, "/fo/svc")
	if _, err := r1.Register(ctx, "web", "a", []byte("10.0.0.1:80")); err != nil {
		t.Fatal(err)
	}
	w, err := r3.Watch(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if ch := nextChange(t, w, 20*time.Second); instancesText(ch.Instances) != "a=10.0.0.1:80" {
		t.Fatalf("first set %+v", ch)
	}

	rc.Stop(old)
	t.Logf("master %d stopped; new master %d", old, rc.Master(old))

	// The leader's term survived: its sequencer is still valid.
	if valid, reason, err := s3.Client().CheckSequencer(ctx, l1.Sequencer()); err != nil || !valid {
		t.Fatalf("after the failover the leader's sequencer: valid %v (%s), %v", valid, reason, err)
	}
	// The watcher reports a registration made after the failover.
	r2, _ := NewRegistry(s2, "/fo/svc")
	if _, err := r2.Register(ctx, "web", "b", []byte("10.0.0.2:80")); err != nil {
		t.Fatal(err)
	}
	awaitInstances(t, w, "a=10.0.0.1:80 b=10.0.0.2:80", 30*time.Second)

	// The waiting candidate leads when the leader resigns; the observer
	// sees it.
	if err := l1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	awaitLeader(t, obs, "two")
	select {
	case l2 := <-won:
		if l2 == nil || l2.LockGeneration() <= l1.LockGeneration() {
			t.Fatalf("the second leader's term %+v after %d", l2, l1.LockGeneration())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting candidate did not lead")
	}
}
