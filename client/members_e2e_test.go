package client

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/gen/chubby"
)

// End-to-end tests of the member list against replicated cells of
// in-process replicas (cell.Server) on loopback.

// startStaticCell starts a cell of n replicas (ids 1..n) given their
// configuration up front (celltest.StartStatic).
func startStaticCell(t testing.TB, n int) *celltest.Replicas {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: starts a cell (skipped with -short)")
	}
	return celltest.StartStatic(t, n)
}

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
	m := rc.Master()
	first := rc.Addr(m)
	t.Setenv(EnvCell, first)
	c := connectCfg(t, Config{})
	c.locator.refreshEvery = 100 * time.Millisecond
	if got := c.Addrs(); !slices.Equal(got, []string{first}) {
		t.Fatalf("configured with %q", got)
	}
	ctx := testCtx(t)
	s := newSession(t, c)
	must[*chubby.Stat](t, "CreateFile")(s.CreateFile(ctx, "/before", []byte("1"), CreateOptions{}))
	waitForReplicas(t, c, rc.Addrs())
	if got := c.Addrs(); !slices.Equal(got, []string{first}) {
		t.Errorf("Addrs changed to %q: it names what the client was configured with", got)
	}

	rc.Stop(m)
	next := rc.Master(m)
	must[*chubby.Stat](t, "CreateFile after the failover")(s.CreateFile(ctx, "/after", []byte("2"), CreateOptions{}))
	h := must[*Handle](t, "Open")(s.Open(ctx, "/before", OpenOptions{}))
	if data, _, err := h.GetContentsAndStat(ctx); err != nil || string(data) != "1" {
		t.Fatalf("read after the failover: %q, %v", data, err)
	}
	if s.Err() != nil {
		t.Fatalf("session lost: %v", s.Err())
	}
	if got := c.locator.addr(); got != rc.Addr(next) {
		t.Errorf("client's master guess %s, the master is %s", got, rc.Addr(next))
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
	rest := slices.Delete(rc.Addrs(), m, m+1)
	waitForReplicas(t, c, rest)
	_, err := c.RemoveMember(ctx, strconv.Itoa(m+1))
	wantCode(t, "RemoveMember of a replica removed", err, chubby.ErrorCode_NOT_FOUND)
	_, err = c.RemoveMember(ctx, "x")
	wantCode(t, "RemoveMember of a malformed id", err, chubby.ErrorCode_INVALID_ARGUMENT)

	// A locate round asks the remaining members only.
	<-c.locator.locate()
	if got := c.locator.lastLocated(); got.addr != rc.Addr(next) {
		t.Errorf("round located %+v, want %s", got, rc.Addr(next))
	}
	if !sameSet(c.Replicas(), rest) {
		t.Errorf("after a round the client knows %q, want %q", c.Replicas(), rest)
	}
	must[*chubby.Stat](t, "CreateFile after the removal")(s.CreateFile(ctx, "/removed", nil, CreateOptions{}))
}

// addGossipReplica starts a replica that finds the cell by gossip: with
// join empty, the first replica of a new cell (growing to three voters);
// else one that joins the cell at the gossip address join. It returns the
// replica's index and gossip address.
func addGossipReplica(t testing.TB, rc *celltest.Replicas, join string) (int, string) {
	t.Helper()
	ln, pl, gossip := celltest.Listen(t), celltest.Listen(t), celltest.FreeAddr(t)
	cfg := cell.Config{Listener: ln, PeerListener: pl, PeerListen: pl.Addr().String(), GossipListen: gossip,
		TargetSize: 3, PromoteAfter: 200 * time.Millisecond}
	if join == "" {
		cfg.BootstrapExpect = 1
	} else {
		cfg.Join = []string{join}
	}
	return rc.Add(cfg), gossip
}

// TestE2EClientFollowsReplicasAdded: a client of a cell that grows (new
// replicas join by gossip and the master adds them) comes to know the new
// members without being told, and rides out the loss of the replica it
// was configured with once they are voters.
func TestE2EClientFollowsReplicasAdded(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: starts a cell (skipped with -short)")
	}
	rc := celltest.NewReplicas(t)
	first, gossip := addGossipReplica(t, rc, "")
	rc.Master()
	c := connectCfg(t, Config{Addrs: []string{rc.Addr(first)}})
	c.locator.refreshEvery = 100 * time.Millisecond
	ctx := testCtx(t)
	s := newSession(t, c)
	must[*chubby.Stat](t, "CreateFile")(s.CreateFile(ctx, "/grown", []byte("1"), CreateOptions{}))
	waitForReplicas(t, c, rc.Addrs())

	addGossipReplica(t, rc, gossip)
	addGossipReplica(t, rc, gossip)
	waitForReplicas(t, c, rc.Addrs())

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
	rc.Stop(first)
	rc.Master(first)
	h := must[*Handle](t, "Open after the first replica stopped")(s.Open(ctx, "/grown", OpenOptions{}))
	if data, _, err := h.GetContentsAndStat(ctx); err != nil || string(data) != "1" {
		t.Fatalf("read: %q, %v", data, err)
	}
	if s.Err() != nil {
		t.Fatalf("session lost: %v", s.Err())
	}
}
