package client

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/gen/chubby"
)

// End-to-end tests of the member list against replicated cells of
// in-process replicas (cell.Server) on loopback.

// replicatedCell is a cell of in-process replicas.
type replicatedCell struct {
	t       testing.TB
	mu      sync.Mutex
	servers []*cell.Server
	stops   []func()
}

// listen returns a listener on a free loopback port.
func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// startStaticCell starts a cell of n replicas (ids 1..n) given their
// configuration up front (cell.Config.Peers, chubbyd's --peers).
func startStaticCell(t testing.TB, n int) *replicatedCell {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: starts a cell (skipped with -short)")
	}
	var lns, pls []net.Listener
	var peers []cell.Peer
	for i := 1; i <= n; i++ {
		ln, pl := listen(t), listen(t)
		lns, pls = append(lns, ln), append(pls, pl)
		peers = append(peers, cell.Peer{ID: uint64(i), Addr: ln.Addr().String(), PeerAddr: pl.Addr().String()})
	}
	rc := &replicatedCell{t: t}
	for i := range n {
		rc.add(cell.Config{ID: uint64(i + 1), Peers: peers, Listener: lns[i], PeerListener: pls[i]})
	}
	return rc
}

// add starts one more replica with cfg (DataDir and Logger filled in) and
// returns its index.
func (rc *replicatedCell) add(cfg cell.Config) int {
	rc.t.Helper()
	cfg.DataDir = rc.t.TempDir()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := cell.New(cfg)
	if err != nil {
		rc.t.Fatalf("start replica %d: %v", cfg.ID, err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background()) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.Stop()
			select {
			case <-done:
			case <-time.After(time.Minute):
				rc.t.Errorf("replica at %s did not stop within a minute", s.Addr())
			}
		})
	}
	rc.t.Cleanup(stop)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.servers, rc.stops = append(rc.servers, s), append(rc.stops, stop)
	return len(rc.servers) - 1
}

func (rc *replicatedCell) addr(i int) string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.servers[i].Addr()
}

func (rc *replicatedCell) addrs() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []string
	for _, s := range rc.servers {
		out = append(out, s.Addr())
	}
	return out
}

func (rc *replicatedCell) stop(i int) {
	rc.mu.Lock()
	stop := rc.stops[i]
	rc.mu.Unlock()
	stop()
}

// master waits (bounded) for a serving master among the replicas not in
// except and returns its index.
func (rc *replicatedCell) master(except ...int) int {
	rc.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		rc.mu.Lock()
		servers := slices.Clone(rc.servers)
		rc.mu.Unlock()
		for i, s := range servers {
			if !slices.Contains(except, i) && s.IsMaster() {
				return i
			}
		}
	}
	rc.t.Fatal("no master within 20s")
	return -1
}

// sameSet reports whether a and b hold the same addresses.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// waitForReplicas waits (bounded) until c's member list is want, making
// a call now and then so that the client refreshes it.
func waitForReplicas(t *testing.T, c *Client, want []string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !sameSet(c.Replicas(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("client knows %q, want %q", c.Replicas(), want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c.Status(ctx)
		cancel()
	}
}

// TestE2EClientFollowsMembership: a client told of one replica of a
// three-replica cell (in CHUBBY_CELL) learns the other two, rides out the
// loss of the replica it was told of (the master: a failover), and stops
// asking a replica the operator removed.
func TestE2EClientFollowsMembership(t *testing.T) {
	rc := startStaticCell(t, 3)
	m := rc.master()
	first := rc.addr(m)
	t.Setenv(EnvCell, first)
	c := connectCfg(t, Config{})
	c.master.refreshEvery = 100 * time.Millisecond
	if got := c.Addrs(); !slices.Equal(got, []string{first}) {
		t.Fatalf("configured with %q", got)
	}
	ctx := testCtx(t)
	s := newSession(t, c)
	must[*chubby.Stat](t, "CreateFile")(s.CreateFile(ctx, "/before", []byte("1"), CreateOptions{}))
	waitForReplicas(t, c, rc.addrs())
	if got := c.Addrs(); !slices.Equal(got, []string{first}) {
		t.Errorf("Addrs changed to %q: it names what the client was configured with", got)
	}

	rc.stop(m)
	next := rc.master(m)
	must[*chubby.Stat](t, "CreateFile after the failover")(s.CreateFile(ctx, "/after", []byte("2"), CreateOptions{}))
	h := must[*Handle](t, "Open")(s.Open(ctx, "/before", OpenOptions{}))
	if data, _, err := h.GetContentsAndStat(ctx); err != nil || string(data) != "1" {
		t.Fatalf("read after the failover: %q, %v", data, err)
	}
	if s.Err() != nil {
		t.Fatalf("session lost: %v", s.Err())
	}
	if got := c.master.addr(); got != rc.addr(next) {
		t.Errorf("client's master guess %s, the master is %s", got, rc.addr(next))
	}

	// The operator removes the stopped replica: the client stops asking it.
	var index int64
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		i, err := c.RemoveMember(ctx, strconv.Itoa(m+1))
		if err == nil {
			index = i
			break
		}
		if code, _ := Code(err); code != chubby.ErrorCode_UNAVAILABLE || time.Now().After(deadline) {
			t.Fatalf("RemoveMember(%d): %v", m+1, err)
		}
	}
	if index <= 0 {
		t.Errorf("RemoveMember index %d", index)
	}
	rest := slices.Delete(rc.addrs(), m, m+1)
	waitForReplicas(t, c, rest)
	_, err := c.RemoveMember(ctx, strconv.Itoa(m+1))
	wantCode(t, "RemoveMember of a replica removed", err, chubby.ErrorCode_NOT_FOUND)
	_, err = c.RemoveMember(ctx, "x")
	wantCode(t, "RemoveMember of a malformed id", err, chubby.ErrorCode_INVALID_ARGUMENT)

	// A locate round asks the remaining members only.
	<-c.master.locate()
	if got := c.master.lastLocated(); got.addr != rc.addr(next) {
		t.Errorf("round located %+v, want %s", got, rc.addr(next))
	}
	if !sameSet(c.Replicas(), rest) {
		t.Errorf("after a round the client knows %q, want %q", c.Replicas(), rest)
	}
	must[*chubby.Stat](t, "CreateFile after the removal")(s.CreateFile(ctx, "/removed", nil, CreateOptions{}))
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t testing.TB) string {
	ln := listen(t)
	defer ln.Close()
	return ln.Addr().String()
}

// addGossipReplica starts a replica that finds the cell by gossip: with
// join empty, the first replica of a new cell (growing to three voters);
// else one that joins the cell at the gossip address join. It returns the
// replica's index and gossip address.
func (rc *replicatedCell) addGossipReplica(join string) (int, string) {
	rc.t.Helper()
	ln, pl, gossip := listen(rc.t), listen(rc.t), freeAddr(rc.t)
	cfg := cell.Config{Listener: ln, PeerListener: pl, PeerListen: pl.Addr().String(), GossipListen: gossip,
		TargetSize: 3, PromoteAfter: 200 * time.Millisecond}
	if join == "" {
		cfg.BootstrapExpect = 1
	} else {
		cfg.Join = []string{join}
	}
	return rc.add(cfg), gossip
}

// TestE2EClientFollowsReplicasAdded: a client of a cell that grows (new
// replicas join by gossip and the master adds them) comes to know the new
// members without being told, and rides out the loss of the replica it
// was configured with once they are voters.
func TestE2EClientFollowsReplicasAdded(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: starts a cell (skipped with -short)")
	}
	rc := &replicatedCell{t: t}
	first, gossip := rc.addGossipReplica("")
	rc.master()
	c := connectCfg(t, Config{Addrs: []string{rc.addr(first)}})
	c.master.refreshEvery = 100 * time.Millisecond
	ctx := testCtx(t)
	s := newSession(t, c)
	must[*chubby.Stat](t, "CreateFile")(s.CreateFile(ctx, "/grown", []byte("1"), CreateOptions{}))
	waitForReplicas(t, c, rc.addrs())

	rc.addGossipReplica(gossip)
	rc.addGossipReplica(gossip)
	waitForReplicas(t, c, rc.addrs())

	// Once the new replicas vote, the first one can go.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err := c.Status(ctx)
		voters := 0
		for _, r := range st.GetReplicas() {
			if r.GetMembership() == "voter" {
				voters++
			}
		}
		if err == nil && voters == 3 && st.GetPendingConfig() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not three voters after 30s: %v %+v", err, st)
		}
	}
	rc.stop(first)
	rc.master(first)
	h := must[*Handle](t, "Open after the first replica stopped")(s.Open(ctx, "/grown", OpenOptions{}))
	if data, _, err := h.GetContentsAndStat(ctx); err != nil || string(data) != "1" {
		t.Fatalf("read: %q, %v", data, err)
	}
	if s.Err() != nil {
		t.Fatalf("session lost: %v", s.Err())
	}
}
