package recipe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Helpers shared by the lock recipes' tests (mutex, rwmutex, semaphore,
// seqlock); their names start with lk so as not to meet the other
// recipes' tests in this package.

func init() {
	children["lk-hold"] = lkHoldChild
}

// lkHoldChild is a child process that takes a lock and holds it until it
// is killed. args: kind (mutex, rlock, wlock, sem, seq), path, then for
// sem the permits, then the lock-delay in ms ("none": NoLockDelay, "0":
// the cell's default). It prints "session <id>", then "holding <what>".
func lkHoldChild(args []string) int {
	ctx := context.Background()
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "lk-hold %v: %s: %v\n", args, what, err)
		return 1
	}
	c, err := client.Connect(ctx, client.Config{})
	if err != nil {
		return fail("connect", err)
	}
	s, err := c.NewSession(ctx)
	if err != nil {
		return fail("session", err)
	}
	fmt.Println("session", s.ID())
	kind, path, rest := args[0], args[1], args[2:]
	n := 0
	if kind == "sem" {
		n, _ = strconv.Atoi(rest[0])
		rest = rest[1:]
	}
	var opts client.LockOptions
	if len(rest) > 0 {
		if rest[0] == "none" {
			opts.LockDelay = client.NoLockDelay
		} else {
			ms, _ := strconv.Atoi(rest[0])
			opts.LockDelay = time.Duration(ms) * time.Millisecond
		}
	}
	switch kind {
	case "mutex":
		m := NewMutex(s, path, opts)
		if err := m.Lock(ctx); err != nil {
			return fail("lock", err)
		}
		fmt.Println("holding", client.FormatSequencer(m.Sequencer()))
	case "rlock", "wlock":
		rw := NewRWMutex(s, path, opts)
		lock := rw.RLock
		if kind == "wlock" {
			lock = rw.Lock
		}
		if err := lock(ctx); err != nil {
			return fail("lock", err)
		}
		fmt.Println("holding", client.FormatSequencer(rw.Sequencer()))
	case "sem":
		sem, err := NewSemaphore(s, path, n, opts)
		if err != nil {
			return fail("semaphore", err)
		}
		fmt.Println("acquiring")
		p, err := sem.Acquire(ctx)
		if err != nil {
			return fail("acquire", err)
		}
		fmt.Println("holding", client.FormatSequencer(p.Sequencer()))
	case "seq":
		l := NewSeqLock(s, path)
		if err := l.Lock(ctx); err != nil {
			return fail("lock", err)
		}
		fmt.Println("holding", l.Node())
	default:
		return fail("kind", errors.New("unknown"))
	}
	select {}
}

// lkHolding reads a child's "holding <what>" line and returns what.
func lkHolding(c *child) string {
	return strings.TrimPrefix(c.Expect("holding", 60*time.Second), "holding ")
}

// lkCell starts a one-replica cell with the given lease (0: the default)
// and returns its address.
func lkCell(t *testing.T, lease time.Duration) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: starts a cell (skipped with -short)")
	}
	return celltest.Start(t, celltest.Options{Lease: lease, Logger: lkLogger("cell")}).Addr
}

// lkLogger is a debug logger to stderr when CHUBBY_TEST_DEBUG is set (to
// trace sessions and KeepAlives in a failing run), nil otherwise.
func lkLogger(who string) *slog.Logger {
	if os.Getenv("CHUBBY_TEST_DEBUG") == "" {
		return nil
	}
	h := slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(h).With("who", who)
}

// lkReplicas starts a three-replica cell.
func lkReplicas(t *testing.T, lease time.Duration) *celltest.Replicas {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: starts a cell (skipped with -short)")
	}
	return celltest.StartStaticWith(t, 3, func(cfg *cell.Config) { cfg.Lease = lease })
}

// lkSession returns a session of a client of its own (closed when the
// test ends) on the cell at addrs.
func lkSession(t testing.TB, addrs ...string) *client.Session {
	t.Helper()
	c, err := client.Connect(context.Background(), client.Config{Addrs: addrs, ClientName: t.Name(), Logger: lkLogger("client")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

// lkCtx is a test's context, bounded.
func lkCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// lkWait waits (bounded) until cond holds.
func lkWait(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
	}
}

// lkLockInfo reads the lock state of the node at path through s.
func lkLockInfo(t testing.TB, s *client.Session, path string) *chubby.LockInfo {
	t.Helper()
	ctx := lkCtx(t, 20*time.Second)
	h, err := s.Open(ctx, path, client.OpenOptions{})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer h.Close(ctx)
	st, err := h.GetStat(ctx)
	if err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.GetLock()
}

// lkWaiters waits until the lock at path has n waiters.
func lkWaiters(t testing.TB, s *client.Session, path string, n int32) {
	t.Helper()
	lkWait(t, 30*time.Second, fmt.Sprintf("%d waiters on %s", n, path), func() bool {
		return lkLockInfo(t, s, path).GetWaiters() == n
	})
}

// lkWithdrawn returns once the master has withdrawn the Acquires left
// waiting at the one before it (after a failover): it serves an Acquire,
// of the held lock at path, only then. The lock must be held; reads of
// its state before that may still count the old requests.
func lkWithdrawn(t testing.TB, s *client.Session, path string) {
	t.Helper()
	ctx := lkCtx(t, 60*time.Second)
	h, err := s.Open(ctx, path, client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	for {
		_, err := h.Acquire(ctx, chubby.LockMode_EXCLUSIVE, 200*time.Millisecond, client.LockOptions{})
		if client.IsCode(err, chubby.ErrorCode_TIMED_OUT) {
			return
		}
		if err == nil {
			t.Fatalf("probe Acquire of %s was granted: the lock is not held", path)
		}
		if !lkTransient(err) || ctx.Err() != nil {
			t.Fatalf("probe Acquire of %s: %v", path, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lkValid reports whether the cell finds seq valid.
func lkValid(t testing.TB, s *client.Session, seq *chubby.Sequencer) bool {
	t.Helper()
	ok, _, err := s.Client().CheckSequencer(lkCtx(t, 30*time.Second), seq)
	if err != nil {
		t.Fatalf("CheckSequencer: %v", err)
	}
	return ok
}

// lkOrder records the order in which goroutines got a lock.
type lkOrder struct {
	mu  sync.Mutex
	got []string
}

func (o *lkOrder) add(name string) {
	o.mu.Lock()
	o.got = append(o.got, name)
	o.mu.Unlock()
}

func (o *lkOrder) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.got...)
}

// lkExclusive is a critical-section check: enter fails the test if anyone
// else is inside.
type lkExclusive struct {
	t      testing.TB
	inside atomic.Int32
}

func (x *lkExclusive) enter(who string) {
	if n := x.inside.Add(1); n != 1 {
		x.t.Errorf("%s entered with %d inside", who, n-1)
	}
}

func (x *lkExclusive) leave() { x.inside.Add(-1) }

// ---------------------------------------------------------------------------

// TestMutexBasic: re-entrant holds of one value, the sequencer, TryLock
// against another session, Unlock of a mutex not held.
func TestMutexBasic(t *testing.T) {
	addr := lkCell(t, 0)
	ctx := lkCtx(t, 60*time.Second)
	s1, s2 := lkSession(t, addr), lkSession(t, addr)

	m := NewMutex(s1, "/locks/a/m") // the parents are created
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	seq := m.Sequencer()
	if seq == nil || seq.Path != "/locks/a/m" || seq.Mode != chubby.LockMode_EXCLUSIVE {
		t.Fatalf("sequencer %v", seq)
	}
	if !lkValid(t, s2, seq) {
		t.Fatal("the holder's sequencer is not valid")
	}
	if err := m.Lock(ctx); err != nil { // re-entrant
		t.Fatal(err)
	}
	if ok, err := m.TryLock(ctx); !ok || err != nil {
		t.Fatalf("TryLock by the holder: %v, %v", ok, err)
	}
	other := NewMutex(s2, "/locks/a/m")
	same := NewMutex(s1, "/locks/a/m") // same session, another value: another handle
	for _, x := range []*Mutex{other, same} {
		if ok, err := x.TryLock(ctx); ok || err != nil {
			t.Fatalf("TryLock of a held mutex: %v, %v", ok, err)
		}
	}
	for i := 0; i < 2; i++ {
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if !m.Held() || m.Sequencer() != seq {
			t.Fatalf("after %d of 3 Unlocks: not held", i+1)
		}
		if ok, _ := other.TryLock(ctx); ok {
			t.Fatalf("another session took the mutex after %d of 3 Unlocks", i+1)
		}
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if m.Held() || m.Sequencer() != nil {
		t.Fatal("held after the last Unlock")
	}
	if lkValid(t, s2, seq) {
		t.Error("the sequencer is still valid after the release")
	}
	err := m.Unlock(ctx)
	var nh *NotHeldError
	if !errors.Is(err, ErrNotHeld) || !errors.As(err, &nh) || nh.Path != "/locks/a/m" {
		t.Fatalf("Unlock of an unheld mutex: %v", err)
	}
	if ok, err := other.TryLock(ctx); !ok || err != nil {
		t.Fatalf("TryLock of a free mutex: %v, %v", ok, err)
	}
	if s := other.Sequencer(); s.LockGeneration <= seq.LockGeneration {
		t.Errorf("new generation %d, old %d", s.LockGeneration, seq.LockGeneration)
	}
	if err := other.Close(ctx); err != nil { // releases
		t.Fatal(err)
	}
	if ok, err := same.TryLock(ctx); !ok || err != nil {
		t.Fatalf("TryLock after the holder closed: %v, %v", ok, err)
	}
	if err := same.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMutexSharedValue: goroutines that share one Mutex value share its
// hold: a Lock while another goroutine's Lock of the value waits in the
// cell waits for it and then adds a hold; the last Unlock releases.
func TestMutexSharedValue(t *testing.T) {
	addr := lkCell(t, 0)
	ctx := lkCtx(t, 60*time.Second)
	obs := lkSession(t, addr)
	other := NewMutex(lkSession(t, addr), "/shared")
	if err := other.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	m := NewMutex(lkSession(t, addr), "/shared")
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Lock(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	lkWaiters(t, obs, "/shared", 1) // one Acquire for the three
	time.Sleep(100 * time.Millisecond)
	if m.Held() {
		t.Fatal("held while another session holds the lock")
	}
	if ok, err := m.TryLock(ctx); ok || err != nil {
		t.Fatalf("TryLock while the value's Lock waits: %v, %v", ok, err)
	}
	if err := other.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i := 0; i < 3; i++ {
		if !m.Held() || lkLockInfo(t, obs, "/shared").GetHolders() != 1 {
			t.Fatalf("not held after %d of 3 Unlocks", i)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if m.Held() || lkLockInfo(t, obs, "/shared").GetHolders() != 0 {
		t.Fatal("held after the last Unlock")
	}
}

// TestMutexFIFO: waiters get the mutex in the order they queued.
func TestMutexFIFO(t *testing.T) {
	addr := lkCell(t, 0)
	ctx := lkCtx(t, 60*time.Second)
	obs := lkSession(t, addr)
	holder := NewMutex(lkSession(t, addr), "/fifo")
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	var order lkOrder
	var wg sync.WaitGroup
	names := []string{"w0", "w1", "w2", "w3"}
	for i, name := range names {
		m := NewMutex(lkSession(t, addr), "/fifo")
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Lock(ctx); err != nil {
				t.Error(err)
				return
			}
			order.add(name)
			m.Unlock(ctx)
		}()
		lkWaiters(t, obs, "/fifo", int32(i+1))
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := order.list(); strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("order %v, want %v", got, names)
	}
}

// TestMutexCancel: a Lock whose context ends returns its error and leaves
// the queue: it does not get the lock later behind the caller's back.
func TestMutexCancel(t *testing.T) {
	addr := lkCell(t, 0)
	ctx := lkCtx(t, 60*time.Second)
	obs := lkSession(t, addr)
	holder := NewMutex(lkSession(t, addr), "/cancel")
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	w := NewMutex(lkSession(t, addr), "/cancel")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := w.Lock(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline: %v", err)
	}
	if w.Held() {
		t.Fatal("held after a failed Lock")
	}
	if n := lkLockInfo(t, obs, "/cancel").GetWaiters(); n != 0 {
		t.Errorf("%d waiters left after the cancelled Lock", n)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	third := NewMutex(lkSession(t, addr), "/cancel")
	if ok, err := third.TryLock(ctx); !ok || err != nil {
		t.Fatalf("TryLock after the cancelled waiter: %v, %v", ok, err)
	}
	// And the cancelled value works again.
	third.Unlock(ctx)
	if err := w.Lock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMutexExclusion: holders in separate sessions never overlap.
func TestMutexExclusion(t *testing.T) {
	lkExclusion(t, "/excl", func(s *client.Session) lkLocker { return NewMutex(s, "/excl/lock") })
}

// lkExclusion runs holders of locks made by newLock in separate sessions
// and checks that they never overlap: by an in-test flag, and by a
// counter file (dir/counter) each holder increments under the lock with a
// generation check, so that a lost update would fail the write.
func lkExclusion(t *testing.T, dir string, newLock func(*client.Session) lkLocker) {
	addr := lkCell(t, 0)
	ctx := lkCtx(t, 120*time.Second)
	const workers, rounds = 6, 8
	x := &lkExclusive{t: t}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		s := lkSession(t, addr)
		l := newLock(s)
		wg.Go(func() {
			for r := 0; r < rounds; r++ {
				if err := l.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				x.enter(fmt.Sprintf("worker %d", w))
				if err := lkIncrement(ctx, s, dir+"/counter"); err != nil {
					t.Error(err)
				}
				x.leave()
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := lkCounter(t, lkSession(t, addr), dir+"/counter"); got != workers*rounds {
		t.Errorf("counter %d, want %d", got, workers*rounds)
	}
}

// lkIncrement adds one to the decimal counter in the file at path, with a
// compare-and-swap on its content generation.
func lkIncrement(ctx context.Context, s *client.Session, path string) error {
	h, err := s.Open(ctx, path, client.OpenOptions{Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE})
	if err != nil {
		return err
	}
	defer h.Close(ctx)
	b, st, err := h.GetContentsAndStat(ctx)
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(string(b))
	_, err = h.SetContents(ctx, []byte(strconv.Itoa(n+1)), client.IfGeneration(st.GetContentGeneration()))
	return err
}

func lkCounter(t *testing.T, s *client.Session, path string) int {
	t.Helper()
	ctx := lkCtx(t, 20*time.Second)
	h, err := s.Open(ctx, path, client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	b, _, err := h.GetContentsAndStat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(string(b))
	return n
}

// TestMutexKillHolder: a holder killed with SIGKILL keeps the mutex until
// its session expires (a 5 s lease) and then for its lock-delay (1 s
// here); the waiter gets it then, with a new lock generation, and the dead
// holder's sequencer is no longer valid.
func TestMutexKillHolder(t *testing.T) {
	const lease, delay = 5 * time.Second, time.Second
	addr := lkCell(t, lease)
	ctx := lkCtx(t, 60*time.Second)
	c := startChild(t, "lk-hold", addr, "mutex", "/kill/m", strconv.Itoa(int(delay/time.Millisecond)))
	dead, err := client.ParseSequencer(lkHolding(c))
	if err != nil {
		t.Fatal(err)
	}
	s := lkSession(t, addr)
	m := NewMutex(s, "/kill/m", client.LockOptions{LockDelay: client.NoLockDelay})
	if ok, _ := m.TryLock(ctx); ok {
		t.Fatal("took a mutex the child holds")
	}
	got := make(chan time.Time, 1)
	go func() {
		if err := m.Lock(ctx); err != nil {
			t.Error(err)
		}
		got <- time.Now()
	}()
	lkWaiters(t, s, "/kill/m", 1)
	killed := time.Now()
	c.Kill()
	var at time.Time
	select {
	case at = <-got:
	case <-ctx.Done():
		t.Fatal("the waiter never got the mutex")
	}
	took := at.Sub(killed)
	t.Logf("the waiter got the mutex %v after the kill (lease %v, lock-delay %v)", took, lease, delay)
	if took < delay || took > lease+delay+5*time.Second {
		t.Errorf("got it %v after the kill; want between the lock-delay %v and lease+delay+5s", took, delay)
	}
	if lkValid(t, s, dead) {
		t.Error("the dead holder's sequencer is still valid")
	}
	if seq := m.Sequencer(); seq == nil || seq.LockGeneration <= dead.LockGeneration || !lkValid(t, s, seq) {
		t.Errorf("new holder's sequencer %v (dead one's %v)", seq, dead)
	}
}

// TestMutexDefaultLockDelay: without LockOptions the cell's default
// lock-delay (15 s) applies once a killed holder's session has expired.
func TestMutexDefaultLockDelay(t *testing.T) {
	addr := lkCell(t, 5*time.Second)
	ctx := lkCtx(t, 60*time.Second)
	c := startChild(t, "lk-hold", addr, "mutex", "/delay/m") // no lock-delay given: the default
	lkHolding(c)
	s := lkSession(t, addr)
	c.Kill()
	var li *chubby.LockInfo
	lkWait(t, 20*time.Second, "the dead holder's session to expire", func() bool {
		li = lkLockInfo(t, s, "/delay/m")
		return li.GetHolders() == 0
	})
	d := time.Duration(li.GetDelayRemainingMs()) * time.Millisecond
	t.Logf("lock-delay remaining after expiry: %v", d)
	if d <= 10*time.Second || d > time.Duration(chubby.DEFAULT_LOCK_DELAY_MS)*time.Millisecond {
		t.Errorf("lock-delay remaining %v, want about %d ms", d, chubby.DEFAULT_LOCK_DELAY_MS)
	}
	if ok, _ := NewMutex(s, "/delay/m").TryLock(ctx); ok {
		t.Error("TryLock succeeded during the lock-delay")
	}
}

// TestMutexFailover: on a three-replica cell, the holder keeps the mutex
// (and its sequencer stays valid) through a failover of the master; the
// waiters queued before it all get the mutex afterwards, one at a time
// (in the order their Acquires reached the new master), and the waiters
// queued after the failover get it in FIFO order behind them.
func TestMutexFailover(t *testing.T) {
	rc := lkReplicas(t, 0)
	addrs := rc.Addrs()
	ctx := lkCtx(t, 120*time.Second)
	obs := lkSession(t, addrs...)
	hs := lkSession(t, addrs...)
	holder := NewMutex(hs, "/fo/m")
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	seq := holder.Sequencer()
	x := &lkExclusive{t: t}
	var order lkOrder
	var wg sync.WaitGroup
	wait := func(name string) *Mutex {
		m := NewMutex(lkSession(t, addrs...), "/fo/m")
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Lock(ctx); err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			x.enter(name)
			order.add(name)
			time.Sleep(20 * time.Millisecond)
			x.leave()
			if err := m.Unlock(ctx); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
		return m
	}
	var before []*Mutex
	for i, name := range []string{"before0", "before1"} {
		before = append(before, wait(name))
		lkWaiters(t, obs, "/fo/m", int32(i+1))
	}
	sent := before[0].stats.calls.Load() + before[1].stats.calls.Load()

	m := rc.Master()
	rc.Stop(m)
	next := rc.Master(m)
	t.Logf("master %d stopped, %d is master now", m, next)

	// The waiters have sent their Acquires again.
	lkWithdrawn(t, obs, "/fo/m")
	lkWaiters(t, obs, "/fo/m", 2)
	if now := before[0].stats.calls.Load() + before[1].stats.calls.Load(); now < sent+2 {
		t.Errorf("the waiters made %d calls since the failover, want their Acquires resent", now-sent)
	}
	if !holder.Held() || !lkValid(t, obs, seq) {
		t.Fatal("the holder lost the mutex in the failover")
	}
	if hs.Err() != nil {
		t.Fatalf("holder's session: %v", hs.Err())
	}
	for i, name := range []string{"after0", "after1"} {
		wait(name)
		lkWaiters(t, obs, "/fo/m", int32(i+3))
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	got := order.list()
	t.Logf("order after the failover: %v", got)
	if len(got) != 4 || !strings.HasPrefix(got[0], "before") || !strings.HasPrefix(got[1], "before") ||
		got[2] != "after0" || got[3] != "after1" {
		t.Errorf("order %v: want the two waiters from before the failover, then after0, after1", got)
	}
}
