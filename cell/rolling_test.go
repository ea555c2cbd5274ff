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
// keep writing through one session: the session survives every restart,
// the writers go on between restarts, every acknowledged write is still
// there at the end, and every replica ends with the same state.
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
	// progress waits until the writers have acknowledged more writes.
	progress := func(what string) {
		t.Helper()
		from := total.Load()
		deadline := time.Now().Add(3 * lease)
		for total.Load() < from+50 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d writes in %v", what, total.Load()-from, 3*lease)
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
	if st := sess.State(); st != chubbyclient.StateSafe {
		t.Fatalf("the session is %v after the restarts", st)
	}
	for w := range writers {
		h, err := sess.Open(ctx, fmt.Sprintf("/w%d", w), chubbyclient.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := h.GetContentsAndStat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := strconv.ParseInt(string(b), 10, 64)
		if got < acked[w].Load() {
			t.Fatalf("/w%d holds %d, but %d was acknowledged", w, got, acked[w].Load())
		}
	}
	t.Logf("%d writes acknowledged across 3 restarts; the longest time without one: %v", total.Load(), maxGap.Round(time.Millisecond))
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
