package recipe

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chubbygo/chubby/client"
)

// TestSemaphoreBasic: N permits and no more, TryAcquire, Release twice,
// users that disagree on N, bounds of N.
func TestSemaphoreBasic(t *testing.T) {
	addr := lkCell(t, 0)
	ctx := lkCtx(t, 60*time.Second)
	for _, n := range []int{0, -1, MaxPermits + 1} {
		if _, err := NewSemaphore(lkSession(t, addr), "/sem/b", n); err == nil {
			t.Errorf("NewSemaphore with %d permits: no error", n)
		}
	}
	var sems []*Semaphore
	for i := 0; i < 3; i++ {
		sem, err := NewSemaphore(lkSession(t, addr), "/sem/b", 2)
		if err != nil {
			t.Fatal(err)
		}
		sems = append(sems, sem)
	}
	p0, err := sems[0].Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := sems[1].Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p0.Slot() == p1.Slot() {
		t.Fatalf("two permits of slot %d", p0.Slot())
	}
	for _, p := range []*Permit{p0, p1} {
		if !lkValid(t, sems[2].s, p.Sequencer()) {
			t.Errorf("permit %d: sequencer not valid", p.Slot())
		}
	}
	if p, err := sems[2].TryAcquire(ctx); p != nil || err != nil {
		t.Fatalf("TryAcquire of a full semaphore: %v, %v", p, err)
	}
	wrong, _ := NewSemaphore(lkSession(t, addr), "/sem/b", 3)
	if p, err := wrong.Acquire(ctx); err == nil {
		t.Fatalf("a user with another N got permit %d", p.Slot())
	} else {
		t.Logf("a user with another N: %v", err)
	}
	if err := p0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p0.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("second Release: %v", err)
	}
	if lkValid(t, sems[2].s, p0.Sequencer()) {
		t.Error("a released permit's sequencer is still valid")
	}
	p2, err := sems[2].TryAcquire(ctx)
	if err != nil || p2 == nil {
		t.Fatalf("TryAcquire after a release: %v, %v", p2, err)
	}
	// One value may hold several permits; Close gives them back.
	p1.Release(ctx)
	if _, err := sems[0].Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err := sems[0].TryAcquire(ctx); p != nil || err != nil {
		t.Fatalf("TryAcquire of a full semaphore: %v, %v", p, err)
	}
	if err := sems[2].Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p2.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Release after Close: %v", err)
	}
	if p, err := sems[0].Acquire(ctx); err != nil || p == nil {
		t.Fatalf("a second permit of one value: %v, %v", p, err)
	}
}

// TestSemaphoreBound: never more than N hold at once, with holders in
// separate sessions and child processes holding permits that are killed
// with SIGKILL while the others go on. The workers share the one permit
// the children leave them; the killed children's permits come back after
// their sessions expire (and a short lock-delay), and then the workers
// hold all N.
func TestSemaphoreBound(t *testing.T) {
	const n, workers = 3, 8
	// The lease is no shorter than 5 s: a parked KeepAlive is answered a
	// quarter of a lease before the lease ends, and that quarter must
	// outlast the scheduling delays of a loaded machine (with 2 s, eight
	// workers' sessions expired under -race beside a CPU hog).
	const lease, delay = 5 * time.Second, 500 * time.Millisecond
	addr := lkCell(t, lease)
	ctx := lkCtx(t, 120*time.Second)
	const dir = "/sem/bound"
	var inUse, maxInUse, working, maxWorking atomic.Int32
	raise := func(v int32, m *atomic.Int32) {
		for old := m.Load(); v > old && !m.CompareAndSwap(old, v); old = m.Load() {
		}
	}
	enter := func(who string) {
		v := inUse.Add(1)
		raise(v, &maxInUse)
		if v > n {
			t.Errorf("%s: %d holders, N is %d", who, v, n)
		}
	}
	// Two children hold permits first; they count until they are killed.
	var kids []*child
	for i := 0; i < 2; i++ {
		c := startChild(t, "lk-hold", addr, "sem", dir, strconv.Itoa(n), strconv.Itoa(int(delay/time.Millisecond)))
		lkHolding(c)
		enter(fmt.Sprintf("child %d", i))
		kids = append(kids, c)
	}
	var wg sync.WaitGroup
	var rounds atomic.Int32
	var stop, afterKills atomic.Bool
	for w := 0; w < workers; w++ {
		sem, err := NewSemaphore(lkSession(t, addr), dir, n, client.LockOptions{LockDelay: delay})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				p, err := sem.Acquire(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				enter(fmt.Sprintf("worker %d", w))
				raise(working.Add(1), &maxWorking)
				time.Sleep(20 * time.Millisecond)
				// Once the children are dead, a worker keeps its permit
				// until the workers hold all N at once (or the wait below
				// gives up), so that the test measures when the dead
				// holders' permits came free, not how soon N short holds
				// happen to overlap.
				for afterKills.Load() && !stop.Load() && maxWorking.Load() < n {
					time.Sleep(5 * time.Millisecond)
				}
				working.Add(-1)
				inUse.Add(-1)
				if err := p.Release(ctx); err != nil {
					t.Error(err)
				}
				rounds.Add(1)
			}
		}()
	}
	// Let the workers share the one free permit for a while, then kill
	// the children.
	lkWait(t, 30*time.Second, "a few rounds", func() bool { return rounds.Load() >= 16 })
	if m := maxWorking.Load(); m != 1 {
		t.Errorf("%d workers held at once beside the two children, want 1", m)
	}
	killed := time.Now()
	afterKills.Store(true)
	for _, c := range kids {
		c.Kill()
		inUse.Add(-1)
	}
	lkWait(t, 30*time.Second, "the workers to hold all the permits", func() bool { return maxWorking.Load() == n })
	t.Logf("the workers held all %d permits %v after the kills (lease %v, lock-delay %v)", n, time.Since(killed), lease, delay)
	stop.Store(true)
	wg.Wait()
	t.Logf("%d rounds; at most %d holders at once", rounds.Load(), maxInUse.Load())
	if m := maxInUse.Load(); m > n {
		t.Errorf("at most %d holders at once, N is %d", m, n)
	}
}

// TestSemaphoreFIFO: waiters get permits in the order they came (they
// queue at the gate).
func TestSemaphoreFIFO(t *testing.T) {
	addr := lkCell(t, 0)
	ctx := lkCtx(t, 60*time.Second)
	obs := lkSession(t, addr)
	const dir = "/sem/fifo"
	holder, _ := NewSemaphore(lkSession(t, addr), dir, 1)
	p, err := holder.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var order lkOrder
	var wg sync.WaitGroup
	names := []string{"w0", "w1", "w2"}
	for i, name := range names {
		sem, _ := NewSemaphore(lkSession(t, addr), dir, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := sem.Acquire(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			order.add(name)
			p.Release(ctx)
		}()
		if i == 0 {
			// The first holds the gate (and waits for a slot) ...
			lkWait(t, 30*time.Second, "w0 at the gate", func() bool { return lkLockInfo(t, obs, dir+"/gate").GetHolders() == 1 })
		} else {
			// ... the others queue behind it.
			lkWaiters(t, obs, dir+"/gate", int32(i))
		}
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := fmt.Sprint(order.list()); got != fmt.Sprint(names) {
		t.Errorf("order %s, want %v", got, names)
	}
}

// TestSemaphoreKillWaiter: a waiter killed while it holds the gate (the
// head of the queue) frees it when its session expires, with no
// lock-delay, and the next waiter goes on.
func TestSemaphoreKillWaiter(t *testing.T) {
	const lease = 5 * time.Second
	addr := lkCell(t, lease)
	ctx := lkCtx(t, 60*time.Second)
	obs := lkSession(t, addr)
	const dir = "/sem/killwaiter"
	holder, _ := NewSemaphore(lkSession(t, addr), dir, 1, client.LockOptions{LockDelay: client.NoLockDelay})
	p, err := holder.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := startChild(t, "lk-hold", addr, "sem", dir, "1")
	c.Expect("acquiring", 30*time.Second)
	lkWait(t, 30*time.Second, "the child at the gate", func() bool { return lkLockInfo(t, obs, dir+"/gate").GetHolders() == 1 })
	next, _ := NewSemaphore(lkSession(t, addr), dir, 1)
	got := make(chan time.Time, 1)
	go func() {
		p, err := next.Acquire(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		got <- time.Now()
		p.Release(ctx)
	}()
	lkWaiters(t, obs, dir+"/gate", 1)
	killed := time.Now()
	c.Kill()
	lkWait(t, 20*time.Second, "the gate to pass to the next waiter", func() bool {
		li := lkLockInfo(t, obs, dir+"/gate")
		return li.GetHolders() == 1 && li.GetWaiters() == 0
	})
	if took := time.Since(killed); took > lease+3*time.Second {
		t.Errorf("the gate passed %v after the kill (lease %v, no lock-delay)", took, lease)
	} else {
		t.Logf("the gate passed %v after the kill", took)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-ctx.Done():
		t.Fatal("the next waiter never got the permit")
	}
}

// TestSemaphoreFailover: holders keep their permits through a failover,
// and the waiter at the gate gets the first permit given back after it.
func TestSemaphoreFailover(t *testing.T) {
	rc := lkReplicas(t, 0)
	addrs := rc.Addrs()
	ctx := lkCtx(t, 120*time.Second)
	obs := lkSession(t, addrs...)
	const dir = "/sem/fo"
	var held []*Permit
	for i := 0; i < 2; i++ {
		sem, _ := NewSemaphore(lkSession(t, addrs...), dir, 2)
		p, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	w, _ := NewSemaphore(lkSession(t, addrs...), dir, 2)
	got := make(chan *Permit, 1)
	go func() {
		p, err := w.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	lkWait(t, 30*time.Second, "the waiter at the gate", func() bool { return lkLockInfo(t, obs, dir+"/gate").GetHolders() == 1 })

	m := rc.Master()
	rc.Stop(m)
	rc.Master(m)
	for i, p := range held {
		if !lkValid(t, obs, p.Sequencer()) {
			t.Fatalf("permit %d lost in the failover", i)
		}
	}
	select {
	case p := <-got:
		t.Fatalf("the waiter got permit %v with both held", p)
	case <-time.After(500 * time.Millisecond):
	}
	if err := held[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p == nil || p.Slot() != held[1].Slot() {
			t.Fatalf("the waiter got %v, want slot %d", p, held[1].Slot())
		}
	case <-ctx.Done():
		t.Fatal("the waiter never got the permit")
	}
}
