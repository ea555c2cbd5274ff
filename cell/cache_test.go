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
// until they have).
func TestCacheLinearizable(t *testing.T) {
	tests := []struct {
		name     string
		replicas int
		failover bool
		dur      time.Duration
	}{
		{"one replica", 1, false, 3 * time.Second},
		{"three replicas with failover", 3, true, 6 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.failover && testing.Short() {
				t.Skip("fails over a 3-replica cell")
			}
			mc := startMultiCell(t, tt.replicas, Config{Lease: 3 * time.Second})
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
