package cell

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
)

// multiCell is a replicated cell of n in-process replicas on loopback.
type multiCell struct {
	t       testing.TB
	servers []*Server
	done    []chan error
}

func startMultiCell(t testing.TB, n int, cfg Config) *multiCell {
	t.Helper()
	peers, lns, pls := loopbackPeers(t, n)
	return startServers(t, cfg, peers, lns, pls)
}

// startServers starts a replica of cfg for each of peers on its listeners
// (lns[i] for clients, pls[i] for peers) and stops them all when the test
// ends.
func startServers(t testing.TB, cfg Config, peers []Peer, lns, pls []net.Listener) *multiCell {
	n := len(peers)
	mc := &multiCell{t: t}
	for i := range n {
		c := cfg
		c.ID, c.Peers, c.Listener, c.PeerListener = uint64(i+1), peers, lns[i], pls[i]
		c.DataDir = t.TempDir()
		if c.Logger == nil {
			c.Logger = quietLogger()
		}
		s, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Serve(context.Background()) }()
		mc.servers, mc.done = append(mc.servers, s), append(mc.done, done)
	}
	t.Cleanup(func() {
		for i, s := range mc.servers {
			s.Stop()
			select {
			case <-mc.done[i]:
			case <-time.After(time.Minute):
				t.Errorf("replica %d did not stop within a minute", i+1)
			}
		}
	})
	return mc
}

// master waits (bounded) for the serving master.
func (mc *multiCell) master() *Server {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		for _, s := range mc.servers {
			if s.IsMaster() {
				return s
			}
		}
	}
	mc.t.Fatal("no master within 10s")
	return nil
}

// TestReplicatedCellRedirects: any replica answers; the others say
// NOT_MASTER with the master's address and epoch, and GetMaster names it.
func TestReplicatedCellRedirects(t *testing.T) {
	mc := startMultiCell(t, 3, Config{})
	m := mc.master()
	for _, s := range mc.servers {
		cli := newRawClient(t, s.Addr())
		r, err := cli.GetMaster(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.MasterAddress != m.Addr() || r.Epoch != m.Epoch() {
			t.Fatalf("replica %s says the master is %s epoch %d; it is %s epoch %d", s.Addr(), r.MasterAddress, r.Epoch, m.Addr(), m.Epoch())
		}
		_, err = cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: "x"})
		if s == m {
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		var ce *chubby.ChubbyError
		wantCode(t, err, chubby.ErrorCode_NOT_MASTER)
		if ce = err.(*chubby.ChubbyError); ce.GetMasterAddress() != m.Addr() || ce.GetEpoch() != m.Epoch() {
			t.Fatalf("NOT_MASTER hint %q epoch %d, want %s epoch %d", ce.GetMasterAddress(), ce.GetEpoch(), m.Addr(), m.Epoch())
		}
	}
}

// BenchmarkCommittedWrites: SetContents of a small file, each client on its
// own file and session, through the master of a 1-, 3- or 5-replica cell
// (all in this process, fsync on). Reports writes/s, p50/p99, and the view
// changes that happened during the run (there should be none: a loaded
// machine must not look like a dead primary).
func BenchmarkCommittedWrites(b *testing.B) {
	for _, replicas := range []int{1, 3, 5} {
		for _, clients := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("replicas=%d/clients=%d", replicas, clients), func(b *testing.B) {
				mc := startMultiCell(b, replicas, Config{})
				m := mc.master()
				cli := newRawClient(b, m.Addr())
				hs := make([]*chubby.Handle, clients)
				for i := range hs {
					s, err := cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: "bench"})
					if err != nil {
						b.Fatal(err)
					}
					o, err := cli.Open(ctx, &chubby.OpenRequest{Session: s.Session, Path: fmt.Sprintf("/w%d", i),
						Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE})
					if err != nil {
						b.Fatal(err)
					}
					hs[i] = o.Handle
				}
				view := m.log.Info().View
				var lat latencies
				var wg sync.WaitGroup
				per := (b.N + clients - 1) / clients
				payload := []byte("0123456789abcdef0123456789abcdef")
				b.ResetTimer()
				for i := range clients {
					wg.Add(1)
					go func(h *chubby.Handle, c combineservice.Client) {
						defer wg.Done()
						for range per {
							t0 := time.Now()
							if _, err := c.SetContents(ctx, &chubby.SetContentsRequest{Handle: h, Content: payload}, callopt.WithRPCTimeout(10*time.Second)); err != nil {
								b.Error(err)
								return
							}
							lat.add(time.Since(t0))
						}
					}(hs[i], cli)
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(per*clients)/b.Elapsed().Seconds(), "writes/s")
				lat.report(b)
				b.ReportMetric(float64(m.log.Info().View-view), "view-changes")
			})
		}
	}
}

// other returns a replica of the cell other than s.
func (mc *multiCell) other(s *Server) *Server {
	for _, o := range mc.servers {
		if o != s {
			return o
		}
	}
	return nil
}

// TestNoMasterAnswersAreHeld: a client that cannot reach the master asks
// the others GetMaster naming it unreachable; a replica that still believes
// in it, or knows no master (a view change is under way), holds the answer
// until it knows a new master, at most noMasterHold, instead of answering
// at once: clients hear of the new master when it exists rather than by
// polling with back-off. So every answer that does not name a new master
// must have been held the whole bound (a lower bound on time, which a slow
// machine only lengthens), and the answers end with the new master.
func TestNoMasterAnswersAreHeld(t *testing.T) {
	mc := startMultiCell(t, 3, Config{})
	old := mc.master()
	backup := mc.other(old)
	cli := newRawClient(t, backup.Addr())
	old.Stop()
	gone := old.Addr()
	req := &chubby.GetMasterRequest{Unreachable: &gone}
	held := 0
	for deadline := time.Now().Add(20 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatalf("no new master named within 20 s (%d held answers)", held)
		}
		t0 := time.Now()
		r, err := cli.GetMaster(ctx, req, callopt.WithRPCTimeout(5*time.Second))
		took := time.Since(t0)
		if err == nil && r.MasterAddress != gone {
			t.Logf("new master %s named after %d held answers (the last call took %v)", r.MasterAddress, held, took.Round(time.Millisecond))
			return
		}
		if err != nil {
			wantCode(t, err, chubby.ErrorCode_UNAVAILABLE)
		}
		if took < noMasterHold-10*time.Millisecond {
			t.Fatalf("answer %v / %v came after %v, not held for %v", r, err, took, noMasterHold)
		}
		held++
	}
}

// TestMasterWatchHeldUntilTheMasterMoves: a master watch — GetMaster
// naming the current master unreachable, with wait_ms — parked at a backup
// is held while the backup believes in that master (for far longer than
// noMasterHold), and answered with the new master once the old one stops.
func TestMasterWatchHeldUntilTheMasterMoves(t *testing.T) {
	mc := startMultiCell(t, 3, Config{})
	old := mc.master()
	backup := mc.other(old)
	cli := newRawClient(t, backup.Addr())
	cur := old.Addr()
	wait := int64(chubby.MAX_GET_MASTER_WAIT_MS)
	type reply struct {
		r   *chubby.GetMasterResponse
		err error
	}
	got := make(chan reply, 1)
	go func() {
		r, err := cli.GetMaster(ctx, &chubby.GetMasterRequest{Unreachable: &cur, WaitMs: &wait},
			callopt.WithRPCTimeout(time.Duration(wait)*time.Millisecond+5*time.Second))
		got <- reply{r, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("the watch was answered while the master stayed: %+v, %v", r.r, r.err)
	case <-time.After(5 * noMasterHold):
	}
	old.Stop()
	select {
	case r := <-got:
		if r.err != nil || r.r.MasterAddress == cur || r.r.MasterAddress == "" {
			t.Fatalf("the watch answered %+v, %v; want the new master", r.r, r.err)
		}
		if r.r.Epoch <= old.Epoch() {
			t.Fatalf("new master at epoch %d, the old one had %d", r.r.Epoch, old.Epoch())
		}
	case <-time.After(time.Duration(wait) * time.Millisecond):
		t.Fatal("the watch was not answered within wait_ms of the master stopping")
	}
}

// loopbackPeers listens on two loopback ports (client, peer) for each of n
// replicas with ids 1..n and returns their Peers and listeners.
func loopbackPeers(t testing.TB, n int) (peers []Peer, lns, pls []net.Listener) {
	t.Helper()
	for i := 1; i <= n; i++ {
		ln, pl := loopbackPair(t)
		lns, pls = append(lns, ln), append(pls, pl)
		peers = append(peers, Peer{ID: uint64(i), Addr: ln.Addr().String(), PeerAddr: pl.Addr().String()})
	}
	return peers, lns, pls
}

// loopbackPair listens on two loopback ports: a replica's client and peer
// listeners.
func loopbackPair(t testing.TB) (ln, pl net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if pl, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	return ln, pl
}
