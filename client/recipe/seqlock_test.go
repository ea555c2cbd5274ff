package recipe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// lkQueue lists the queue nodes of a SeqLock's directory, in queue order.
func lkQueue(t testing.TB, s *client.Session, dir string) []string {
	t.Helper()
	ctx := lkCtx(t, 20*time.Second)
	h, err := s.Open(ctx, dir, client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	es, err := h.ReadDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, q := range seqQueue(es) {
		names = append(names, q.name)
	}
	return names
}

// lkQueued waits until dir's queue has n nodes.
func lkQueued(t testing.TB, s *client.Session, dir string, n int) {
	t.Helper()
	lkWait(t, 30*time.Second, fmt.Sprintf("%d nodes in %s", n, dir), func() bool { return len(lkQueue(t, s, dir)) == n })
}

// TestSeqLockBasic: lock, wait behind the holder, unlock, the errors, and
// leaving the queue when the context ends.
func TestSeqLockBasic(t *testing.T) {
	addr := lkCell(t, 0)
	ctx := lkCtx(t, 60*time.Second)
	obs := lkSession(t, addr)
	const dir = "/seq/basic"
	a := NewSeqLock(lkSession(t, addr), dir)
	b := NewSeqLock(lkSession(t, addr), dir)
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if !a.Held() || !strings.HasPrefix(a.Node(), dir+"/lock-") {
		t.Fatalf("held %v, node %q", a.Held(), a.Node())
	}
	if err := a.Lock(ctx); !errors.Is(err, ErrHeld) {
		t.Errorf("Lock while held: %v", err)
	}
	if err := b.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock not held: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := b.Lock(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline: %v", err)
	}
	if q := lkQueue(t, obs, dir); len(q) != 1 {
		t.Errorf("queue after the cancelled Lock: %v, want the holder's node alone", q)
	}
	got := make(chan struct{})
	go func() {
		if err := b.Lock(ctx); err != nil {
			t.Error(err)
		}
		close(got)
	}()
	lkQueued(t, obs, dir, 2)
	select {
	case <-got:
		t.Fatal("the second got the lock while the first holds it")
	case <-time.After(100 * time.Millisecond):
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	<-got
	if err := a.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("second Unlock: %v", err)
	}
	if err := b.Close(ctx); err != nil { // releases
		t.Fatal(err)
	}
	if q := lkQueue(t, obs, dir); len(q) != 0 {
		t.Errorf("queue after Close: %v", q)
	}
}

// TestSeqLockFIFO: the lock goes in queue order, also when a waiter in
// the middle leaves (its successor then watches the node before it).
func TestSeqLockFIFO(t *testing.T) {
	addr := lkCell(t, 0)
	ctx := lkCtx(t, 60*time.Second)
	obs := lkSession(t, addr)
	const dir = "/seq/fifo"
	holder := NewSeqLock(lkSession(t, addr), dir)
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	var order lkOrder
	var wg sync.WaitGroup
	names := []string{"w0", "quitter", "w1", "w2"}
	quit, stop := context.WithCancel(ctx)
	defer stop()
	for i, name := range names {
		l := NewSeqLock(lkSession(t, addr), dir)
		wctx := ctx
		if name == "quitter" {
			wctx = quit
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Lock(wctx); err != nil {
				if name != "quitter" {
					t.Error(err)
				}
				return
			}
			order.add(name)
			l.Unlock(ctx)
		}()
		lkQueued(t, obs, dir, i+2)
	}
	stop() // the quitter leaves; w1 now watches w0
	lkQueued(t, obs, dir, len(names))
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := fmt.Sprint(order.list()); got != "[w0 w1 w2]" {
		t.Errorf("order %s", got)
	}
}

// TestSeqLockExclusion: holders in separate sessions never overlap.
func TestSeqLockExclusion(t *testing.T) {
	lkExclusion(t, "/seq", func(s *client.Session) lkLocker { return NewSeqLock(s, "/seq/excl") })
}

// TestSeqLockKillHolder: a holder killed with SIGKILL keeps the lock until
// its session expires; then its node goes, and the waiter holds at once:
// there is no lock-delay.
func TestSeqLockKillHolder(t *testing.T) {
	const lease = 2 * time.Second
	addr := lkCell(t, lease)
	ctx := lkCtx(t, 60*time.Second)
	obs := lkSession(t, addr)
	const dir = "/seq/kill"
	c := startChild(t, "lk-hold", addr, "seq", dir)
	dead := lkHolding(c)
	l := NewSeqLock(lkSession(t, addr), dir)
	got := make(chan time.Time, 1)
	go func() {
		if err := l.Lock(ctx); err != nil {
			t.Error(err)
		}
		got <- time.Now()
	}()
	lkQueued(t, obs, dir, 2)
	killed := time.Now()
	c.Kill()
	select {
	case at := <-got:
		took := at.Sub(killed)
		t.Logf("the waiter holds %v after the kill (lease %v, no lock-delay)", took, lease)
		if took > lease+3*time.Second {
			t.Errorf("took %v", took)
		}
	case <-ctx.Done():
		t.Fatal("the waiter never got the lock")
	}
	if q := lkQueue(t, obs, dir); len(q) != 1 || dir+"/"+q[0] == dead {
		t.Errorf("queue %v (the dead holder's node was %s)", q, dead)
	}
}

// TestSeqLockFailover: the queue is nodes, so a failover of the master
// keeps it as it was: the holder keeps the lock, and the waiters, whose
// watches were set before the failover, get it in their order.
func TestSeqLockFailover(t *testing.T) {
	rc := lkReplicas(t, 0)
	addrs := rc.Addrs()
	ctx := lkCtx(t, 120*time.Second)
	obs := lkSession(t, addrs...)
	const dir = "/seq/fo"
	holder := NewSeqLock(lkSession(t, addrs...), dir)
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	node := holder.Node()
	var order lkOrder
	var wg sync.WaitGroup
	names := []string{"w0", "w1", "w2"}
	for i, name := range names {
		l := NewSeqLock(lkSession(t, addrs...), dir)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Lock(ctx); err != nil {
				t.Error(err)
				return
			}
			order.add(name)
			time.Sleep(20 * time.Millisecond)
			l.Unlock(ctx)
		}()
		lkQueued(t, obs, dir, i+2)
	}
	// Let the waiters set their watches.
	time.Sleep(200 * time.Millisecond)

	m := rc.Master()
	rc.Stop(m)
	rc.Master(m)
	if q := lkQueue(t, obs, dir); len(q) != 4 || dir+"/"+q[0] != node {
		t.Fatalf("queue after the failover: %v (holder's node %s)", q, node)
	}
	if !holder.Held() {
		t.Fatal("the holder lost the lock")
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := fmt.Sprint(order.list()); got != fmt.Sprint(names) {
		t.Errorf("order %s, want %v", got, names)
	}
}

// TestSeqQueueOrder: the queue is ordered by the counter, whatever the
// tokens before it; other names are not in it.
func TestSeqQueueOrder(t *testing.T) {
	var es []*chubby.DirEntry
	for _, n := range []string{"lock-ffff-0000000002", "lock-0000-0000000010", "lock-aaaa-0000000001", "other", "lock-x", "lock-bbbb-000000000a"} {
		es = append(es, &chubby.DirEntry{Name: n, Stat: &chubby.Stat{}})
	}
	var got []string
	for _, q := range seqQueue(es) {
		got = append(got, q.name)
	}
	if want := "[lock-aaaa-0000000001 lock-ffff-0000000002 lock-0000-0000000010]"; fmt.Sprint(got) != want {
		t.Errorf("queue %v, want %s", got, want)
	}
}
