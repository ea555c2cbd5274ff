package recipe

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chubbygo/chubby/gen/chubby"
)

// TestRWMutexBasic: readers share, a writer excludes, mismatched and
// repeated calls fail.
func TestRWMutexBasic(t *testing.T) {
	addr := lkCell(t, 0)
	ctx := lkCtx(t, 60*time.Second)
	r1 := NewRWMutex(lkSession(t, addr), "/rw/basic")
	r2 := NewRWMutex(lkSession(t, addr), "/rw/basic")
	w := NewRWMutex(lkSession(t, addr), "/rw/basic")
	for _, r := range []*RWMutex{r1, r2} {
		if err := r.RLock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s1, s2 := r1.Sequencer(), r2.Sequencer()
	if s1.Mode != chubby.LockMode_SHARED || s1.LockGeneration != s2.LockGeneration {
		t.Errorf("readers' sequencers %v, %v: want one shared holding period", s1, s2)
	}
	if mode, ok := r1.Held(); !ok || mode != chubby.LockMode_SHARED {
		t.Errorf("Held = %v, %v", mode, ok)
	}
	if ok, err := w.TryLock(ctx); ok || err != nil {
		t.Fatalf("TryLock while read-held: %v, %v", ok, err)
	}
	if err := r1.RLock(ctx); !errors.Is(err, ErrHeld) {
		t.Errorf("RLock of a value that holds: %v", err)
	}
	if err := r1.Lock(ctx); !errors.Is(err, ErrHeld) {
		t.Errorf("Lock of a value that read-holds: %v", err)
	}
	if err := r1.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Unlock of a read hold: %v", err)
	}
	for _, r := range []*RWMutex{r1, r2} {
		if err := r.RUnlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := r1.RUnlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("RUnlock not held: %v", err)
	}
	if err := w.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if seq := w.Sequencer(); seq.Mode != chubby.LockMode_EXCLUSIVE || !lkValid(t, lkSession(t, addr), seq) {
		t.Errorf("writer's sequencer %v", seq)
	}
	if ok, err := r1.TryRLock(ctx); ok || err != nil {
		t.Fatalf("TryRLock while write-held: %v, %v", ok, err)
	}
	if err := w.RUnlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("RUnlock of a write hold: %v", err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := r1.TryRLock(ctx); !ok || err != nil {
		t.Fatalf("TryRLock of a free lock: %v, %v", ok, err)
	}
	if err := r1.Close(ctx); err != nil { // releases
		t.Fatal(err)
	}
	if ok, err := w.TryLock(ctx); !ok || err != nil {
		t.Fatalf("TryLock after the reader closed: %v, %v", ok, err)
	}
}

// TestRWMutexWriterBlocksLaterReaders: the queue is FIFO for both modes. A
// writer waiting behind a reader blocks a reader that comes after it (it
// does not join the shared holders), and when the writer releases, the
// readers queued behind it are granted together.
func TestRWMutexWriterBlocksLaterReaders(t *testing.T) {
	addr := lkCell(t, 0)
	ctx := lkCtx(t, 60*time.Second)
	obs := lkSession(t, addr)
	const path = "/rw/fifo"
	r1 := NewRWMutex(lkSession(t, addr), path)
	if err := r1.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	w := NewRWMutex(lkSession(t, addr), path)
	wGot := make(chan struct{})
	go func() {
		if err := w.Lock(ctx); err != nil {
			t.Error(err)
		}
		close(wGot)
	}()
	lkWaiters(t, obs, path, 1)

	r2 := NewRWMutex(lkSession(t, addr), path)
	if ok, err := r2.TryRLock(ctx); ok || err != nil {
		t.Fatalf("TryRLock with a writer waiting (the lock is held shared): %v, %v; it must not overtake the writer", ok, err)
	}
	r3 := NewRWMutex(lkSession(t, addr), path)
	var readersIn sync.WaitGroup
	var readersGot atomic.Int32
	for _, r := range []*RWMutex{r2, r3} {
		readersIn.Add(1)
		go func() {
			defer readersIn.Done()
			if err := r.RLock(ctx); err != nil {
				t.Error(err)
				return
			}
			readersGot.Add(1)
		}()
	}
	lkWaiters(t, obs, path, 3)
	time.Sleep(200 * time.Millisecond)
	if n := readersGot.Load(); n != 0 {
		t.Fatalf("%d later readers joined the read hold while a writer waited", n)
	}
	if li := lkLockInfo(t, obs, path); li.GetHolders() != 1 || li.GetMode() != chubby.LockMode_SHARED {
		t.Fatalf("lock %+v, want the first reader alone", li)
	}

	if err := r1.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	<-wGot
	time.Sleep(200 * time.Millisecond)
	if n := readersGot.Load(); n != 0 {
		t.Fatalf("%d readers got the lock while the writer holds it", n)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	readersIn.Wait()
	li := lkLockInfo(t, obs, path)
	if li.GetHolders() != 2 || li.GetMode() != chubby.LockMode_SHARED || li.GetWaiters() != 0 {
		t.Errorf("lock %+v, want both later readers holding together", li)
	}
	if r2.Sequencer().LockGeneration != r3.Sequencer().LockGeneration {
		t.Errorf("the readers granted together have generations %d and %d", r2.Sequencer().LockGeneration, r3.Sequencer().LockGeneration)
	}
}

// TestRWMutexExclusion: readers and writers in separate sessions: a writer
// is never inside with anyone, readers may be inside together.
func TestRWMutexExclusion(t *testing.T) {
	addr := lkCell(t, 0)
	ctx := lkCtx(t, 120*time.Second)
	const workers, rounds = 6, 8
	var readers, writers, maxReaders atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		rw := NewRWMutex(lkSession(t, addr), "/rw/excl")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				if (i+r)%3 == 0 {
					if err := rw.Lock(ctx); err != nil {
						t.Error(err)
						return
					}
					if n := writers.Add(1); n != 1 || readers.Load() != 0 {
						t.Errorf("writer %d inside with %d writers, %d readers", i, n-1, readers.Load())
					}
					time.Sleep(2 * time.Millisecond)
					writers.Add(-1)
					if err := rw.Unlock(ctx); err != nil {
						t.Error(err)
					}
					continue
				}
				if err := rw.RLock(ctx); err != nil {
					t.Error(err)
					return
				}
				n := readers.Add(1)
				for m := maxReaders.Load(); n > m && !maxReaders.CompareAndSwap(m, n); m = maxReaders.Load() {
				}
				if writers.Load() != 0 {
					t.Errorf("reader %d inside with a writer", i)
				}
				time.Sleep(5 * time.Millisecond)
				readers.Add(-1)
				if err := rw.RUnlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("at most %d readers inside together", maxReaders.Load())
}

// TestRWMutexKillReader: a killed reader keeps its share until its session
// expires; then the lock is in lock-delay: the reader still holding keeps
// holding, nobody new is granted (not even a reader), and the waiting
// writer gets the lock when the last reader leaves and the delay is over.
func TestRWMutexKillReader(t *testing.T) {
	const lease, delay = 5 * time.Second, 3 * time.Second
	addr := lkCell(t, lease)
	ctx := lkCtx(t, 60*time.Second)
	const path = "/rw/kill"
	c := startChild(t, "lk-hold", addr, "rlock", path, strconv.Itoa(int(delay/time.Millisecond)))
	lkHolding(c)
	obs := lkSession(t, addr)
	r := NewRWMutex(lkSession(t, addr), path)
	if err := r.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	w := NewRWMutex(lkSession(t, addr), path)
	wGot := make(chan time.Time, 1)
	go func() {
		if err := w.Lock(ctx); err != nil {
			t.Error(err)
		}
		wGot <- time.Now()
	}()
	lkWaiters(t, obs, path, 1)
	c.Kill()
	lkWait(t, 20*time.Second, "the killed reader's session to expire", func() bool {
		return lkLockInfo(t, obs, path).GetHolders() == 1
	})
	li := lkLockInfo(t, obs, path)
	if li.GetDelayRemainingMs() <= 0 {
		t.Fatalf("lock %+v: want lock-delay after the reader's expiry", li)
	}
	if !lkValid(t, obs, r.Sequencer()) {
		t.Error("the live reader lost its hold in the dead one's lock-delay")
	}
	if ok, _ := NewRWMutex(obs, path).TryRLock(ctx); ok {
		t.Error("a new reader was granted during the lock-delay")
	}
	released := time.Now()
	if err := r.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-wGot:
		t.Logf("writer got the lock %v after the live reader left (lock-delay remaining then: %d ms)", at.Sub(released), li.GetDelayRemainingMs())
	case <-ctx.Done():
		t.Fatal("the writer never got the lock")
	}
}

// TestRWMutexFailover: readers keep their shares through a failover of
// the master; the writer waiting behind them gets the lock once they
// leave, and readers that come after it wait for it.
func TestRWMutexFailover(t *testing.T) {
	rc := lkReplicas(t, 0)
	addrs := rc.Addrs()
	ctx := lkCtx(t, 120*time.Second)
	const path = "/rw/fo"
	obs := lkSession(t, addrs...)
	var readers []*RWMutex
	for i := 0; i < 2; i++ {
		r := NewRWMutex(lkSession(t, addrs...), path)
		if err := r.RLock(ctx); err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	var order lkOrder
	w := NewRWMutex(lkSession(t, addrs...), path)
	wDone := make(chan struct{})
	go func() {
		defer close(wDone)
		if err := w.Lock(ctx); err != nil {
			t.Error(err)
			return
		}
		order.add("writer")
		time.Sleep(50 * time.Millisecond)
		order.add("writer out")
		w.Unlock(ctx)
	}()
	lkWaiters(t, obs, path, 1)

	m := rc.Master()
	rc.Stop(m)
	rc.Master(m)
	lkWithdrawn(t, obs, path)
	lkWaiters(t, obs, path, 1) // the writer's Acquire, sent again
	for i, r := range readers {
		if !lkValid(t, obs, r.Sequencer()) {
			t.Fatalf("reader %d lost its share in the failover", i)
		}
	}
	late := NewRWMutex(lkSession(t, addrs...), path)
	lateDone := make(chan struct{})
	go func() {
		defer close(lateDone)
		if err := late.RLock(ctx); err != nil {
			t.Error(err)
			return
		}
		order.add("late reader")
		late.RUnlock(ctx)
	}()
	lkWaiters(t, obs, path, 2)
	for _, r := range readers {
		if err := r.RUnlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	<-wDone
	<-lateDone
	if got := fmt.Sprint(order.list()); got != "[writer writer out late reader]" {
		t.Errorf("order %s", got)
	}
}
