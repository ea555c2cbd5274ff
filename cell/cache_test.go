package cell

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	chubbyclient "github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Cache tests through the Go client library and real Kitex.

type regInput struct {
	key   string
	write bool
	value string
}

type regOutput struct {
	value string
}

// regModel is a register per key: a read returns the latest write.
var regModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(regInput).key
			by[k] = append(by[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(regInput)
		if in.write {
			return true, in.value
		}
		return output.(regOutput).value == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(regInput)
		if in.write {
			return fmt.Sprintf("write(%s, %q)", in.key, in.value)
		}
		return fmt.Sprintf("read(%s) -> %q", in.key, output.(regOutput).value)
	},
}

// TestCacheLinearizable: writers and caching readers in several sessions
// work on a few files at random; the history, cached reads included, is
// linearizable (porcupine), so no read is ever stale. Also with a 3-replica
// cell whose master is stopped midway (the new master knows no cachers:
// the clients flush on MASTER_FAILED_OVER and the master holds changes
// until they have). And for lock state: lockers take and release a few
// locks, with a lock-delay, and now and then die holding one (their
// session expires; the lock-delay's end grants the lock to a waiter, by a
// Tick or by whichever command comes first), while caching readers read
// the locks' Stats: the lock's holder and generation as read, cached or
// not, are linearizable too.
func TestCacheLinearizable(t *testing.T) {
	tests := []struct {
		name     string
		replicas int
		failover bool
		locks    bool // the lock workload (lockHistory) rather than contents
		lease    time.Duration
		dur      time.Duration
	}{
		{"one replica", 1, false, false, 3 * time.Second, 3 * time.Second},
		{"three replicas with failover", 3, true, false, 3 * time.Second, 6 * time.Second},
		{"lock state, lock-delays and session expiry", 1, false, true, 2 * time.Second, 8 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.failover && testing.Short() {
				t.Skip("fails over a 3-replica cell")
			}
			mc := startMultiCell(t, tt.replicas, Config{Lease: tt.lease})
			m := mc.master()
			var addrs []string
			for _, s := range mc.servers {
				addrs = append(addrs, s.Addr())
			}
			tctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			c, err := chubbyclient.Connect(tctx, chubbyclient.Config{Addrs: addrs, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if tt.locks {
				history := lockHistory(t, tctx, addrs, c, tt.dur)
				st := c.CacheStats()
				t.Logf("%d operations; cache: %d hits, %d misses (hit rate %.2f), %d invalidations",
					len(history), st.Hits, st.Misses, st.HitRate(), st.Invalidations)
				if st.Hits == 0 {
					t.Fatal("no cache hits: the test did not exercise the cache")
				}
				if res, _ := porcupine.CheckOperationsVerbose(lockModel, history, 60*time.Second); res != porcupine.Ok {
					t.Fatalf("lock history is not linearizable (%v): a stale read of a lock's Stat", res)
				}
				return
			}
			keys := []string{"/k0", "/k1", "/k2"}
			const writers, readers = 2, 4
			type worker struct {
				s  *chubbyclient.Session
				hs map[string]*chubbyclient.Handle
			}
			var ws []worker
			for i := range writers + readers {
				s, err := c.NewSession(tctx)
				if err != nil {
					t.Fatal(err)
				}
				w := worker{s: s, hs: map[string]*chubbyclient.Handle{}}
				for _, k := range keys {
					h, err := s.Open(tctx, k, chubbyclient.OpenOptions{Mode: chubby.OpenMode_READ_WRITE,
						Create: chubby.CreateMode_OPEN_OR_CREATE})
					if err != nil {
						t.Fatalf("worker %d open %s: %v", i, k, err)
					}
					w.hs[k] = h
				}
				ws = append(ws, w)
			}
			start := time.Now()
			now := func() int64 { return int64(time.Since(start)) }
			var (
				mu      sync.Mutex
				history []porcupine.Operation
				nextVal atomic.Int64
				stop    = make(chan struct{})
				wg      sync.WaitGroup
			)
			add := func(op porcupine.Operation) {
				mu.Lock()
				history = append(history, op)
				mu.Unlock()
			}
			for i, w := range ws {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(i), 7))
					for {
						select {
						case <-stop:
							return
						default:
						}
						k := keys[rng.IntN(len(keys))]
						h := w.hs[k]
						opctx, cancel := context.WithTimeout(tctx, 20*time.Second)
						if i < writers {
							v := fmt.Sprintf("v%d", nextVal.Add(1))
							call := now()
							_, err := h.SetContents(opctx, []byte(v))
							ret := now()
							if err != nil {
								// Unknown outcome: it may take effect at any time later.
								ret = math.MaxInt64
							}
							add(porcupine.Operation{ClientId: i, Input: regInput{key: k, write: true, value: v}, Call: call, Output: regOutput{}, Return: ret})
							time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
						} else {
							call := now()
							b, _, err := h.GetContentsAndStat(opctx)
							ret := now()
							if err == nil {
								add(porcupine.Operation{ClientId: i, Input: regInput{key: k}, Call: call, Output: regOutput{value: string(b)}, Return: ret})
							}
							time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond) // bounds the history
						}
						cancel()
					}
				}()
			}
			if tt.failover {
				time.Sleep(tt.dur / 3)
				m.Stop()
			}
			time.Sleep(tt.dur - time.Since(start))
			close(stop)
			wg.Wait()
			st := c.CacheStats()
			t.Logf("%d operations; cache: %d hits, %d misses (hit rate %.2f), %d invalidations",
				len(history), st.Hits, st.Misses, st.HitRate(), st.Invalidations)
			if st.Hits == 0 {
				t.Fatal("no cache hits: the test did not exercise the cache")
			}
			res, info := porcupine.CheckOperationsVerbose(regModel, history, 60*time.Second)
			if res != porcupine.Ok {
				_ = info
				t.Fatalf("history is not linearizable (%v): a stale read", res)
			}
		})
	}
}

type lockInput struct {
	key  string
	kind string // "acquire", "release", "expire" (the holder died) or "read"
	gen  int64  // release, expire: the generation held
}

// lockOutput is what an acquire or a read saw: the lock's generation, and
// whether it is held.
type lockOutput struct {
	gen  int64
	held bool
}

// lockModel is an exclusive lock per key: an acquire takes a free lock
// into the next generation, a release or the holder's expiry frees the
// generation held, and a read sees the generation and whether it is held
// (free during a lock-delay).
var lockModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(lockInput).key
			by[k] = append(by[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return lockOutput{} },
	Step: func(state, input, output any) (bool, any) {
		s, in := state.(lockOutput), input.(lockInput)
		switch in.kind {
		case "acquire":
			out := output.(lockOutput)
			return !s.held && out.gen == s.gen+1, lockOutput{gen: out.gen, held: true}
		case "release", "expire":
			return s.held && s.gen == in.gen, lockOutput{gen: s.gen}
		}
		return output.(lockOutput) == s, s
	},
	DescribeOperation: func(input, output any) string {
		in := input.(lockInput)
		switch in.kind {
		case "acquire":
			return fmt.Sprintf("acquire(%s) -> %d", in.key, output.(lockOutput).gen)
		case "read":
			out := output.(lockOutput)
			return fmt.Sprintf("read(%s) -> %d held=%v", in.key, out.gen, out.held)
		}
		return fmt.Sprintf("%s(%s, %d)", in.kind, in.key, in.gen)
	},
}

// lockHistory runs the lock workload of TestCacheLinearizable for dur:
// lockers, each a client of its own so that it can die (Client.Close
// leaves its session to expire), take the locks of a few files with a
// lock-delay, hold them briefly, and release them or, one time in six,
// die; readers of c, caching, read the files' Stats. Readers stop first,
// so that an Acquire cut short at the end, which may still be granted,
// comes after every read.
func lockHistory(t *testing.T, tctx context.Context, addrs []string, c *chubbyclient.Client, dur time.Duration) []porcupine.Operation {
	keys := []string{"/lk0", "/lk1"}
	const lockers, readers = 3, 3
	const lockDelay = 300 * time.Millisecond
	open := func(s *chubbyclient.Session) map[string]*chubbyclient.Handle {
		hs := map[string]*chubbyclient.Handle{}
		for _, k := range keys {
			h, err := s.Open(tctx, k, chubbyclient.OpenOptions{Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE})
			if err != nil {
				t.Errorf("open %s: %v", k, err)
				return nil
			}
			hs[k] = h
		}
		return hs
	}
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var (
		mu      sync.Mutex
		history []porcupine.Operation
	)
	add := func(op porcupine.Operation) {
		mu.Lock()
		history = append(history, op)
		mu.Unlock()
	}
	stopReads, stopLocks := make(chan struct{}), make(chan struct{})
	lctx, lcancel := context.WithCancel(tctx)
	defer lcancel()
	stopped := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	var rwg, lwg sync.WaitGroup
	for i := range lockers {
		lwg.Add(1)
		go func() {
			defer lwg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 11))
			for !stopped(stopLocks) {
				lc, err := chubbyclient.Connect(lctx, chubbyclient.Config{Addrs: addrs, Logger: quietLogger()})
				if err != nil {
					t.Errorf("locker %d: %v", i, err)
					return
				}
				s, err := lc.NewSession(lctx)
				if err != nil {
					lc.Close()
					t.Errorf("locker %d: %v", i, err)
					return
				}
				hs := open(s)
				for hs != nil && !stopped(stopLocks) {
					k := keys[rng.IntN(len(keys))]
					call := now()
					seq, err := hs[k].Acquire(lctx, chubby.LockMode_EXCLUSIVE, 20*time.Second, chubbyclient.LockOptions{LockDelay: lockDelay})
					ret := now()
					if err != nil {
						if !stopped(stopLocks) {
							t.Errorf("locker %d acquire %s: %v", i, k, err)
						}
						break
					}
					add(porcupine.Operation{ClientId: i, Input: lockInput{key: k, kind: "acquire"}, Call: call, Output: lockOutput{gen: seq.LockGeneration}, Return: ret})
					time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
					if rng.IntN(6) == 0 {
						// Dies holding the lock: it is freed once the session
						// has expired, at an unknown time after this.
						add(porcupine.Operation{ClientId: i, Input: lockInput{key: k, kind: "expire", gen: seq.LockGeneration}, Call: now(), Return: math.MaxInt64})
						break
					}
					call = now()
					if err := hs[k].Release(lctx); err != nil {
						if !stopped(stopLocks) {
							t.Errorf("locker %d release %s: %v", i, k, err)
						}
						break
					}
					add(porcupine.Operation{ClientId: i, Input: lockInput{key: k, kind: "release", gen: seq.LockGeneration}, Call: call, Return: now()})
				}
				lc.Close()
			}
		}()
	}
	for i := range readers {
		s, err := c.NewSession(tctx)
		if err != nil {
			t.Fatal(err)
		}
		hs := open(s)
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 13))
			for hs != nil && !stopped(stopReads) {
				k := keys[rng.IntN(len(keys))]
				call := now()
				_, st, err := hs[k].GetContentsAndStat(tctx)
				ret := now()
				if err != nil {
					t.Errorf("reader %d read %s: %v", i, k, err)
					return
				}
				add(porcupine.Operation{ClientId: lockers + i, Input: lockInput{key: k, kind: "read"},
					Call: call, Output: lockOutput{gen: st.LockGeneration, held: st.Lock.GetMode() != 0}, Return: ret})
				time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond) // bounds the history
			}
		}()
	}
	time.Sleep(dur)
	close(stopReads)
	rwg.Wait()
	close(stopLocks)
	lcancel()
	lwg.Wait()
	var expired int
	for _, op := range history {
		if op.Input.(lockInput).kind == "expire" {
			expired++
		}
	}
	t.Logf("%d holders died holding their lock", expired)
	if expired == 0 {
		t.Error("no holder died: the test did not exercise session expiry and lock-delay")
	}
	return history
}

// TestCacheInvalidation: a caching session sees another session's write at
// once; its own write is never hidden by its cache; DisableCache and the
// per-session limit make reads uncached rather than failing.
func TestCacheInvalidation(t *testing.T) {
	tests := []struct {
		name       string
		cellCfg    Config
		clientCfg  chubbyclient.Config
		wantHits   bool
		secondHits bool // the second file is cached too
	}{
		{"cached", Config{}, chubbyclient.Config{}, true, true},
		{"disabled", Config{}, chubbyclient.Config{DisableCache: true}, false, false},
		{"per-session limit", Config{MaxCachedPerSession: 1}, chubbyclient.Config{}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cellCfg
			cfg.InMemory = true
			tc := startCell(t, cfg)
			ccfg := tt.clientCfg
			ccfg.Addrs, ccfg.Logger = []string{tc.s.Addr()}, quietLogger()
			c, err := chubbyclient.Connect(ctx, ccfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			reader, _ := c.NewSession(ctx)
			writer, _ := c.NewSession(ctx)
			open := func(s *chubbyclient.Session, p string) *chubbyclient.Handle {
				h, err := s.Open(ctx, p, chubbyclient.OpenOptions{Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE})
				if err != nil {
					t.Fatal(err)
				}
				return h
			}
			rf, rg, wf := open(reader, "/f"), open(reader, "/g"), open(writer, "/f")
			read := func(h *chubbyclient.Handle, want string) {
				t.Helper()
				b, _, err := h.GetContentsAndStat(ctx)
				if err != nil || string(b) != want {
					t.Fatalf("read %s = %q, %v; want %q", h.Path(), b, err, want)
				}
			}
			read(rf, "")
			read(rf, "")
			read(rg, "")
			read(rg, "")
			hits := reader.CacheStats().Hits
			switch {
			case !tt.wantHits && hits != 0:
				t.Fatalf("%d hits with the cache off", hits)
			case tt.wantHits && tt.secondHits && hits != 2:
				t.Fatalf("%d hits, want 2", hits)
			case tt.wantHits && !tt.secondHits && hits != 1:
				t.Fatalf("%d hits, want 1 (the second file is over the limit)", hits)
			}
			for i := range 5 {
				v := fmt.Sprint("w", i)
				if _, err := wf.SetContents(ctx, []byte(v)); err != nil {
					t.Fatal(err)
				}
				read(rf, v) // the write waited for the reader's ack: never stale
				read(rf, v)
				if _, err := rf.SetContents(ctx, []byte(v+"own")); err != nil {
					t.Fatal(err)
				}
				read(rf, v+"own")
			}
			// A directory listing is invalidated by a child's creation.
			root, err := reader.Open(ctx, "/", chubbyclient.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			es, _ := root.ReadDir(ctx)
			es2, _ := root.ReadDir(ctx)
			if len(es) != len(es2) {
				t.Fatalf("listings differ: %d, %d", len(es), len(es2))
			}
			if _, err := writer.CreateFile(ctx, "/new", nil, chubbyclient.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if es3, err := root.ReadDir(ctx); err != nil || len(es3) != len(es)+1 {
				t.Fatalf("listing after a create: %d entries (%v), want %d", len(es3), err, len(es)+1)
			}
		})
	}
}

// TestPoison: Poison fails an Acquire parked at the cell and every later
// call on the handle, without closing it; Close still works, and other
// handles are not touched.
func TestPoison(t *testing.T) {
	tc := startCell(t, Config{InMemory: true})
	c, err := chubbyclient.Connect(ctx, chubbyclient.Config{Addrs: []string{tc.s.Addr()}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s1, _ := c.NewSession(ctx)
	s2, _ := c.NewSession(ctx)
	opts := chubbyclient.OpenOptions{Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE}
	h1, err := s1.Open(ctx, "/l", opts)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := s2.Open(ctx, "/l", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h1.Acquire(ctx, chubby.LockMode_EXCLUSIVE, time.Second, chubbyclient.LockOptions{}); err != nil {
		t.Fatal(err)
	}
	f := h2.AcquireAsync(ctx, chubby.LockMode_EXCLUSIVE, time.Minute, chubbyclient.LockOptions{})
	time.Sleep(100 * time.Millisecond) // parked at the cell
	start := time.Now()
	h2.Poison()
	if _, err := f.Wait(ctx); !errors.Is(err, chubbyclient.ErrPoisoned) {
		t.Fatalf("parked Acquire after Poison: %v, want ErrPoisoned", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Poison took %v to fail the call", d)
	}
	if _, err := h2.GetStat(ctx); !errors.Is(err, chubbyclient.ErrPoisoned) {
		t.Fatalf("GetStat after Poison: %v, want ErrPoisoned", err)
	}
	if _, _, err := h1.GetContentsAndStat(ctx); err != nil {
		t.Fatalf("another handle: %v", err)
	}
	if err := h2.Close(ctx); err != nil {
		t.Fatalf("Close after Poison: %v", err)
	}
}

// TestCacheLockDelayEnd: a lock-delay that ends grants the lock to its
// waiter without a command on the lock's node — by the Tick the master
// schedules for it, or by the clock of any other command that comes
// first — and a caching reader's Stat of the lock (its holder, its
// generation) is not stale afterwards.
func TestCacheLockDelayEnd(t *testing.T) {
	tests := []struct {
		name    string
		delayMs int64
		// other: after the reader cached the delayed lock, an unrelated
		// write comes as the delay ends, so that either it (the first
		// command stamped after the end) or the Tick ends the delay. (A
		// wall clock that jumps can no longer end it early: command times
		// advance with the master's monotonic clock, cell/master.Writes.)
		other bool
	}{
		// Delays of seconds: the reader must see the lock delayed and
		// then hit its cached copy before the delay ends, and on a busy
		// machine a poll and a read took more than a second.
		{"a tick ends the delay", 4000, false},
		{"another command's clock ends the delay", 4500, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := startCell(t, Config{InMemory: true, Lease: 2 * time.Second})
			// The holder: a raw session that never sends a KeepAlive, so
			// that its lease runs out and it ends expired, holding the lock.
			cs := must[*chubby.CreateSessionResponse](t)(tc.cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: "holder"}))
			or := must[*chubby.OpenResponse](t)(tc.cli.Open(ctx, &chubby.OpenRequest{Session: cs.Session, Path: "/l",
				Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE}))
			delay := tt.delayMs
			if _, err := tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: or.Handle, Mode: chubby.LockMode_EXCLUSIVE, LockDelayMs: &delay}); err != nil {
				t.Fatal(err)
			}
			c, err := chubbyclient.Connect(ctx, chubbyclient.Config{Addrs: []string{tc.s.Addr()}, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			waiter, reader := must[*chubbyclient.Session](t)(c.NewSession(ctx)), must[*chubbyclient.Session](t)(c.NewSession(ctx))
			wl := must[*chubbyclient.Handle](t)(waiter.Open(ctx, "/l", chubbyclient.OpenOptions{}))
			wo := must[*chubbyclient.Handle](t)(waiter.Open(ctx, "/other", chubbyclient.OpenOptions{Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE}))
			rl := must[*chubbyclient.Handle](t)(reader.Open(ctx, "/l", chubbyclient.OpenOptions{}))
			granted := wl.AcquireAsync(ctx, chubby.LockMode_EXCLUSIVE, 2*time.Minute, chubbyclient.LockOptions{})

			// The holder's session expires: the lock goes into lock-delay
			// with the waiter queued. The reader caches that.
			var st *chubby.Stat
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				_, st, err = rl.GetContentsAndStat(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if st.Lock.Mode == nil && st.Lock.DelayRemainingMs > 0 && st.Lock.Waiters == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the lock never went into lock-delay with a waiter: %v", st.Lock)
				}
			}
			hits := reader.CacheStats().Hits
			if _, err := rl.GetStat(ctx); err != nil || reader.CacheStats().Hits == hits {
				t.Fatalf("the delayed lock's Stat is not cached (err %v)", err)
			}

			if tt.other {
				time.Sleep(time.Duration(st.Lock.DelayRemainingMs) * time.Millisecond)
				if _, err := wo.SetContents(ctx, []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			seq, err := granted.Wait(ctx)
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
			st, err = rl.GetStat(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.LockGeneration != seq.LockGeneration || st.Lock.Mode == nil || st.Lock.Waiters != 0 {
				t.Fatalf("stale cached Stat: lock generation %d, lock %v; the waiter holds generation %d",
					st.LockGeneration, st.Lock, seq.LockGeneration)
			}
		})
	}
}

// TestCacheSessionEndExact: a session's end invalidates what it changes —
// the locks it held, its ephemeral nodes and their directory — and nothing
// else: a caching reader's copy of an unrelated file survives it.
func TestCacheSessionEndExact(t *testing.T) {
	tests := []struct {
		name    string
		expires bool // the lease runs out (else CloseSession)
	}{
		{"closed", false},
		{"expired", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := startCell(t, Config{InMemory: true, Lease: 2 * time.Second})
			c, err := chubbyclient.Connect(ctx, chubbyclient.Config{Addrs: []string{tc.s.Addr()}, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			reader := must[*chubbyclient.Session](t)(c.NewSession(ctx))
			rw := chubbyclient.OpenOptions{Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE}
			ra := must[*chubbyclient.Handle](t)(reader.Open(ctx, "/a", rw))
			rl := must[*chubbyclient.Handle](t)(reader.Open(ctx, "/l", rw))

			// The ending session (raw: no KeepAlive unless asked) holds /l
			// and owns the ephemeral /e.
			cs := must[*chubby.CreateSessionResponse](t)(tc.cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: "ending"}))
			or := must[*chubby.OpenResponse](t)(tc.cli.Open(ctx, &chubby.OpenRequest{Session: cs.Session, Path: "/l",
				Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_EXISTING}))
			noDelay := int64(0)
			if _, err := tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: or.Handle, Mode: chubby.LockMode_EXCLUSIVE, LockDelayMs: &noDelay}); err != nil {
				t.Fatal(err)
			}
			eph := true
			if _, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: cs.Session, Path: "/e", Ephemeral: &eph}); err != nil {
				t.Fatal(err)
			}

			// The reader caches all three.
			root := must[*chubbyclient.Handle](t)(reader.Open(ctx, "/", chubbyclient.OpenOptions{}))
			for range 2 {
				if _, _, err := ra.GetContentsAndStat(ctx); err != nil {
					t.Fatal(err)
				}
				if _, _, err := rl.GetContentsAndStat(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := root.ReadDir(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if _, st, _ := rl.GetContentsAndStat(ctx); st.Lock.Mode == nil {
				t.Fatalf("the reader does not see /l held: %v", st.Lock)
			}

			if tt.expires {
				for deadline := time.Now().Add(10 * time.Second); tc.s.leases.alive(cs.Session); time.Sleep(20 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the session never expired")
					}
				}
			} else if err := tc.cli.CloseSession(ctx, &chubby.CloseSessionRequest{Session: cs.Session}); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				var gone bool
				tc.s.m.read(func(st *fs.State) { gone = !st.SessionExists(cs.Session) })
				if gone {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the session never ended")
				}
			}

			hits := reader.CacheStats().Hits
			if _, _, err := ra.GetContentsAndStat(ctx); err != nil {
				t.Fatal(err)
			}
			if reader.CacheStats().Hits == hits {
				t.Error("the session's end invalidated /a, which it did not touch")
			}
			if _, st, _ := rl.GetContentsAndStat(ctx); st.Lock.Mode != nil {
				t.Errorf("stale /l after its holder's session ended: %v", st.Lock)
			}
			es, err := root.ReadDir(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				if e.Name == "e" {
					t.Errorf("stale listing of /: the ended session's ephemeral /e is still there")
				}
			}
		})
	}
}

// TestMadeUpHandleCostsCachersNothing: a session that names a path it
// caches nothing of through a handle that is not its own — one no Open
// has answered, or another session's — is refused (HANDLE_INVALID), and
// a client caching that path keeps its copy: before, every such call made
// the master invalidate the path's cachers and wait for them.
func TestMadeUpHandleCostsCachersNothing(t *testing.T) {
	tc := startCell(t, Config{InMemory: true})
	c, err := chubbyclient.Connect(ctx, chubbyclient.Config{Addrs: []string{tc.s.Addr()}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reader := must[*chubbyclient.Session](t)(c.NewSession(ctx))
	rh := must[*chubbyclient.Handle](t)(reader.Open(ctx, "/x", chubbyclient.OpenOptions{Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE}))
	if _, _, err := rh.GetContentsAndStat(ctx); err != nil {
		t.Fatal(err)
	}
	before := reader.CacheStats()
	if _, _, err := rh.GetContentsAndStat(ctx); err != nil || reader.CacheStats().Hits == before.Hits {
		t.Fatalf("/x is not cached (err %v)", err)
	}

	other := tc.session("other")
	own := tc.open(other, "/x", chubby.CreateMode_OPEN_EXISTING, false)
	// Handle ids count up: the one before other's own is the reader's.
	theirs := &chubby.Handle{Session: other, Id: own.Id - 1, Path: "/x", Instance: own.Instance}
	made := &chubby.Handle{Session: other, Id: 1 << 40, Path: "/x", Instance: own.Instance}
	for _, h := range []*chubby.Handle{made, theirs} {
		for _, call := range []func() error{
			func() error { return tc.cli.Release(ctx, &chubby.HandleRequest{Handle: h}) },
			func() error {
				_, err := tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: h, Content: []byte("forged")})
				return err
			},
			func() error { return tc.cli.Close(ctx, &chubby.CloseRequest{Handle: h}) },
		} {
			if err := call(); codeOf(err) != chubby.ErrorCode_HANDLE_INVALID {
				t.Fatalf("a call through handle %+v: %v, want HANDLE_INVALID", h, err)
			}
		}
	}
	st := reader.CacheStats()
	if st.Invalidations != before.Invalidations {
		t.Fatalf("the reader got %d invalidations from calls through handles not theirs", st.Invalidations-before.Invalidations)
	}
	if b, _, err := rh.GetContentsAndStat(ctx); err != nil || reader.CacheStats().Hits == st.Hits || len(b) != 0 {
		t.Fatalf("the reader's cached /x: %q, err %v (hits %d, were %d)", b, err, reader.CacheStats().Hits, st.Hits)
	}
}
