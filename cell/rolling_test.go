package cell

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	chubbyclient "github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// TestRollingRestartUnderLoad restarts a three-replica cell one replica at
// a time, each on its own data directory and addresses, while writers
// keep writing through one session and lockers (a session each) take a
// lock in turn and add one to a counter under it: the sessions survive
// every restart, writers and lockers go on between restarts, the lock is
// never held by two, every acknowledged write and increment is still there
// at the end, and every replica ends with the same state.
func TestRollingRestartUnderLoad(t *testing.T) {
	const lease = 5 * time.Second
	const n = 3
	peers, lns, pls := loopbackPeers(t, n)
	dirs := make([]string, n)
	servers := make([]*Server, n)
	dones := make([]chan error, n)
	start := func(i int, ln, pl net.Listener) {
		t.Helper()
		srv, err := New(Config{ID: uint64(i + 1), Peers: peers, Listener: ln, PeerListener: pl, DataDir: dirs[i], Lease: lease, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(context.Background()) }()
		servers[i], dones[i] = srv, done
	}
	stop := func(i int) {
		servers[i].Stop()
		select {
		case err := <-dones[i]:
			if err != nil {
				t.Errorf("replica %d: %v", i+1, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("replica %d did not stop within a minute", i+1)
		}
		servers[i] = nil
	}
	for i := range n {
		dirs[i] = t.TempDir()
		start(i, lns[i], pls[i])
	}
	t.Cleanup(func() {
		for i := range n {
			if servers[i] != nil {
				stop(i)
			}
		}
	})

	addrs := make([]string, n)
	for i, p := range peers {
		addrs[i] = p.Addr
	}
	c, err := chubbyclient.Connect(ctx, chubbyclient.Config{Addrs: addrs, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const writers = 4
	var acked [writers]atomic.Int64 // the last value each writer had acknowledged
	var total atomic.Int64
	var gapMu sync.Mutex
	lastAck, maxGap := time.Now(), time.Duration(0) // the longest time without an acknowledged write
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range writers {
		h, err := sess.Open(ctx, fmt.Sprintf("/w%d", w), chubbyclient.OpenOptions{Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := int64(1); loadCtx.Err() == nil; {
				cctx, cancel := context.WithTimeout(loadCtx, 2*lease)
				_, err := h.SetContents(cctx, []byte(strconv.FormatInt(v, 10)))
				cancel()
				if err == nil {
					acked[w].Store(v)
					total.Add(1)
					v++
					gapMu.Lock()
					now := time.Now()
					maxGap, lastAck = max(maxGap, now.Sub(lastAck)), now
					gapMu.Unlock()
				} else {
					time.Sleep(20 * time.Millisecond) // unknown outcome or no master: the next value goes again
				}
			}
		}()
	}
	// The lock load: lockers, each with a session and a handle of its own
	// on /lock, take the lock in turn and, holding it, add one to the
	// counter in /counter (read, then write). Holders counts those that
	// believe they hold the lock: never more than one. An increment that
	// was acknowledged is counted in lockAcked; one whose outcome is
	// unknown (an error) in lockUnknown: at the end the counter is at
	// least the first and at most both.
	const lockers = 2
	var holders, lockAcked, lockUnknown, rounds atomic.Int64
	var lockGapMu sync.Mutex
	lastLock, maxLockGap := time.Now(), time.Duration(0) // the longest time without a completed lock round
	if _, err := sess.Mkdir(ctx, "/lockload", chubbyclient.MkdirOptions{}); err != nil {
		t.Fatal(err)
	}
	var lockSessions []*chubbyclient.Session
	for l := range lockers {
		ls, err := c.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lockSessions = append(lockSessions, ls)
		lh, err := ls.Open(ctx, "/lockload/lock", chubbyclient.OpenOptions{Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE})
		if err != nil {
			t.Fatal(err)
		}
		ch, err := ls.Open(ctx, "/lockload/counter", chubbyclient.OpenOptions{Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// release lets the lock go, trying until the cell says so (or
			// that it is not held: an Acquire whose outcome was unknown).
			release := func() {
				for loadCtx.Err() == nil {
					cctx, cancel := context.WithTimeout(loadCtx, 2*lease)
					err := lh.Release(cctx)
					cancel()
					if err == nil || chubbyclient.IsCode(err, chubby.ErrorCode_LOCK_NOT_HELD) {
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			for loadCtx.Err() == nil {
				cctx, cancel := context.WithTimeout(loadCtx, 4*lease)
				_, err := lh.Acquire(cctx, chubby.LockMode_EXCLUSIVE, 2*lease, chubbyclient.LockOptions{})
				cancel()
				if err != nil {
					release() // the cell may have granted it
					time.Sleep(20 * time.Millisecond)
					continue
				}
				if h := holders.Add(1); h != 1 {
					t.Errorf("locker %d holds the lock with %d others", l, h-1)
				}
				cctx, cancel = context.WithTimeout(loadCtx, 2*lease)
				b, _, err := ch.GetContentsAndStat(cctx)
				if err == nil {
					n, _ := strconv.ParseInt(string(b), 10, 64)
					_, err = ch.SetContents(cctx, []byte(strconv.FormatInt(n+1, 10)))
					if err == nil {
						lockAcked.Add(1)
					} else {
						lockUnknown.Add(1)
					}
				}
				cancel()
				holders.Add(-1)
				release()
				if err == nil {
					rounds.Add(1)
					lockGapMu.Lock()
					now := time.Now()
					maxLockGap, lastLock = max(maxLockGap, now.Sub(lastLock)), now
					lockGapMu.Unlock()
				}
			}
		}()
	}
	// progress waits until the writers have acknowledged more writes and
	// the lockers have completed more rounds.
	progress := func(what string) {
		t.Helper()
		from, fromRounds := total.Load(), rounds.Load()
		deadline := time.Now().Add(3 * lease)
		for total.Load() < from+50 || rounds.Load() < fromRounds+5 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d writes and %d lock rounds in %v", what, total.Load()-from, rounds.Load()-fromRounds, 3*lease)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	progress("before the restarts")
	for i := range n {
		stop(i)
		progress(fmt.Sprintf("with replica %d down", i+1))
		ln, err := net.Listen("tcp", peers[i].Addr)
		if err != nil {
			t.Fatal(err)
		}
		pl, err := net.Listen("tcp", peers[i].PeerAddr)
		if err != nil {
			t.Fatal(err)
		}
		start(i, ln, pl)
		// Caught up before the next one goes: a majority stays up.
		deadline := time.Now().Add(3 * lease)
		for {
			var master *Server
			for _, s := range servers {
				if s != nil && s.IsMaster() {
					master = s
				}
			}
			if master != nil && servers[i].log.Applied() >= master.log.Applied()-uint64(writers) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %d did not catch up within %v", i+1, 3*lease)
			}
			time.Sleep(10 * time.Millisecond)
		}
		progress(fmt.Sprintf("after replica %d restarted", i+1))
	}
	stopLoad()
	wg.Wait()
	for _, s := range append(lockSessions, sess) {
		if st := s.State(); st != chubbyclient.StateSafe {
			t.Fatalf("a session is %v after the restarts", st)
		}
	}
	// readInt reads the number a file holds.
	readInt := func(path string) int64 {
		h, err := sess.Open(ctx, path, chubbyclient.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := h.GetContentsAndStat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(string(b), 10, 64)
		return n
	}
	for w := range writers {
		if got := readInt(fmt.Sprintf("/w%d", w)); got < acked[w].Load() {
			t.Fatalf("/w%d holds %d, but %d was acknowledged", w, got, acked[w].Load())
		}
	}
	// Nothing the lockers did under the lock is lost or doubled.
	count := readInt("/lockload/counter")
	if count < lockAcked.Load() || count > lockAcked.Load()+lockUnknown.Load() {
		t.Fatalf("the counter kept under the lock is %d; %d increments were acknowledged and %d unknown", count, lockAcked.Load(), lockUnknown.Load())
	}
	t.Logf("%d writes acknowledged across 3 restarts; the longest time without one: %v", total.Load(), maxGap.Round(time.Millisecond))
	t.Logf("%d lock rounds (%d increments under the lock acknowledged, %d unknown, counter %d); the longest time without a completed round: %v",
		rounds.Load(), lockAcked.Load(), lockUnknown.Load(), count, maxLockGap.Round(time.Millisecond))
	// Every replica converges to the master's state.
	deadline := time.Now().Add(3 * lease)
	for {
		var want []byte
		same := true
		for _, s := range servers {
			b := stateBytes(s.m)
			if want == nil {
				want = b
			} else if string(b) != string(want) {
				same = false
			}
		}
		if same {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replicas' states differ after the restarts")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
