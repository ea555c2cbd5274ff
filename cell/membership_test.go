package cell

import (
	"bytes"
	"context"
	"github.com/chubbygo/chubby/rpc/tlsconf"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/discovery"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/replica/vr"
)

// gossipReplica is one in-process replica that finds its cell by gossip.
type gossipReplica struct {
	s    *Server
	done chan error
	once sync.Once
}

// startGossipReplica starts a replica on loopback: bootstrap (1: alone),
// or join naming the gossip addresses given.
func startGossipReplica(t *testing.T, bootstrap int, join []string, dir string) *gossipReplica {
	t.Helper()
	return startGossipReplicaTLS(t, bootstrap, join, dir, nil)
}

// startGossipReplicaTLS is startGossipReplica with the replica's TLS
// material (nil: plaintext).
func startGossipReplicaTLS(t *testing.T, bootstrap int, join []string, dir string, tr *tlsconf.Reloader) *gossipReplica {
	t.Helper()
	ln, pl := loopbackPair(t)
	cfg := Config{Cell: "gossip-test", ID: 0, Listener: ln, PeerListener: pl, GossipListen: "127.0.0.1:0",
		Join: join, BootstrapExpect: bootstrap, TargetSize: 3, DeadAfter: 2 * time.Second, PromoteAfter: 300 * time.Millisecond,
		DataDir: dir, Logger: quietLogger(), Lease: 2 * time.Second, TLS: tr, HTTPListen: "127.0.0.1:0"}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &gossipReplica{s: s, done: make(chan error, 1)}
	go func() { r.done <- s.Serve(context.Background()) }()
	t.Cleanup(r.stop)
	return r
}

func (r *gossipReplica) stop() {
	r.once.Do(func() {
		r.s.Stop()
		<-r.done
	})
}

func (r *gossipReplica) gossipAddr() string { return r.s.disc.Local().Addr }

// awaitConfig waits (bounded) until the master's configuration is want:
// voters and learners by replica.
func awaitConfig(t *testing.T, rs []*gossipReplica, what string, want func(vr.Members) bool) *Server {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range rs {
			if r.s.IsMaster() {
				if i := r.s.log.Info(); i.PendingConfig == 0 && want(i.Members) {
					return r.s
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, r := range rs {
		i := r.s.log.Info()
		t.Logf("replica %d: view %d status %v epoch %d members %+v decisions %q", r.s.cfg.ID, i.View, i.Status, i.Epoch, i.Members, r.s.recentDecisions())
	}
	t.Fatalf("no master with %s within 60 s", what)
	return nil
}

func voters(ids ...uint64) func(vr.Members) bool {
	return func(ms vr.Members) bool {
		if len(ms) != len(ids) {
			return false
		}
		for _, id := range ids {
			if !ms.IsVoter(id) {
				return false
			}
		}
		return true
	}
}

// TestGossipCellGrowsAndReplacesDeadVoter: one replica bootstraps alone,
// two join by gossip and become voters; a voter's process goes for good,
// a fresh replica joins, and the cell replaces the dead voter with it. A
// file written at the start is in the new voter's state.
func TestGossipCellGrowsAndReplacesDeadVoter(t *testing.T) {
	if testing.Short() {
		t.Skip("gossip timings")
	}
	r1 := startGossipReplica(t, 1, nil, t.TempDir())
	seed := []string{r1.gossipAddr()}
	m := awaitConfig(t, []*gossipReplica{r1}, "replica 1 alone", voters(r1.s.cfg.ID))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := m.submit(ctx, proposal{op: &fsm.Op{CreateSession: &chubby.CreateSessionRequest{}}}); err != nil {
		t.Fatalf("create a session: %v", err)
	}
	before := m.log.Applied()
	r2 := startGossipReplica(t, 0, seed, t.TempDir())
	r3 := startGossipReplica(t, 0, seed, t.TempDir())
	all := []*gossipReplica{r1, r2, r3}
	awaitConfig(t, all, "three voters", voters(r1.s.cfg.ID, r2.s.cfg.ID, r3.s.cfg.ID))

	// r3 goes for good (its gossip too); r4 is a fresh machine.
	r3.stop()
	r4 := startGossipReplica(t, 0, seed, t.TempDir())
	all = append(all, r4)
	m = awaitConfig(t, all, "r3 replaced by r4", voters(r1.s.cfg.ID, r2.s.cfg.ID, r4.s.cfg.ID))
	// r4 holds what was written before it existed: the same state as the
	// master once it has applied the master's commit.
	var want, got []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if r4.s.log.Applied() == m.log.Applied() {
			m.m.read(func(st *fs.State) { want = st.Snapshot() })
			r4.s.m.read(func(st *fs.State) { got = st.Snapshot() })
			if bytes.Equal(want, got) {
				break
			}
		}
	}
	if !bytes.Equal(want, got) {
		t.Fatal("the new voter's state differs from the master's")
	}
	if r4.s.log.Applied() <= before {
		t.Fatalf("the new voter applied up to %d, not past %d (written before it joined)", r4.s.log.Applied(), before)
	}
}

// TestSparesOmitsDeadSpares: the status lists a spare only while gossip
// has it alive or suspect. A dead or left spare is nothing the cell can use
// (the autopilot adds only live ones) nor anything members remove can act
// on (it is in no configuration), and memberlist keeps it for
// DeadRetention: listed, it stayed in chubbyfs members for ten minutes.
func TestSparesOmitsDeadSpares(t *testing.T) {
	now := time.Now()
	peer := func(id uint64, st discovery.State) discovery.Peer {
		return discovery.Peer{Meta: discovery.Meta{ID: id, ClientAddr: "c:1", PeerAddr: "p:1"}, State: st, Since: now}
	}
	ms := vr.Members{{ID: 1, ClientAddr: "c:1"}, {ID: 2, ClientAddr: "c:2"}}
	gossip := map[uint64]discovery.Peer{1: peer(1, discovery.Alive), 2: peer(2, discovery.Dead),
		4: peer(4, discovery.Alive), 5: peer(5, discovery.Suspect), 6: peer(6, discovery.Dead), 7: peer(7, discovery.Left)}
	var got []string
	for _, r := range spares(ms, gossip) {
		got = append(got, r.Id)
	}
	if want := []string{"4", "5"}; !slices.Equal(got, want) {
		t.Fatalf("spares listed %v, want %v (members and dead or left spares are not)", got, want)
	}
}

// TestRemovedFrom reads as the rule by which a replica learns it was
// taken out of the cell while it heard nothing: its own configuration, or
// another replica's newer one, does not name it.
func TestRemovedFrom(t *testing.T) {
	ms := func(ids ...uint64) vr.Members {
		var m vr.Members
		for _, id := range ids {
			m = append(m, vr.Member{ID: id, ClientAddr: "c:1"})
		}
		return m
	}
	conf := func(epoch, index uint64, ids ...uint64) discovery.Peer {
		c := discovery.ConfigMeta{Epoch: epoch, Index: index}
		copy(c.Members[:], ids)
		return discovery.Peer{Meta: discovery.Meta{ID: ids[0], Config: c}, State: discovery.Alive}
	}
	self := uint64(3)
	info := vr.Info{Members: ms(1, 2, 3), Epoch: 2, LastOp: 37, ConfigIndex: 20}
	tests := []struct {
		name   string
		info   vr.Info
		gossip []discovery.Peer
		want   bool
	}{
		{"a joining spare holds no configuration: never in, not out", vr.Info{}, []discovery.Peer{conf(3, 50, 1, 2)}, false},
		{"its own configuration does not name it", vr.Info{Members: ms(1, 2), Epoch: 3}, nil, true},
		{"the others hold what it holds", info, []discovery.Peer{conf(2, 20, 1, 2, 3)}, false},
		{"another holds a later epoch without it (a voter cut off as it was removed)", info, []discovery.Peer{conf(2, 20, 1, 2, 3), conf(3, 37, 1, 2)}, true},
		{"a later epoch that still names it", info, []discovery.Peer{conf(3, 37, 1, 2, 3)}, false},
		{"the same epoch, in force past its whole log, without it (a learner taken out)", info, []discovery.Peer{conf(2, 38, 1, 2)}, true},
		{"the same epoch, in force within its log: older, not evidence", info, []discovery.Peer{conf(2, 10, 1, 2)}, false},
		{"an earlier epoch without it", info, []discovery.Peer{conf(1, 5, 1, 2)}, false},
		{"a replica that holds no configuration says nothing", info, []discovery.Peer{{Meta: discovery.Meta{ID: 9}, State: discovery.Alive}}, false},
	}
	for _, tc := range tests {
		g := map[uint64]discovery.Peer{}
		for _, p := range tc.gossip {
			g[p.Meta.ID] = p
		}
		why := removedFrom(self, tc.info, g)
		if got := why != ""; got != tc.want {
			t.Errorf("%s: removed %v (%q), want %v", tc.name, got, why, tc.want)
		}
		if why != "" && !strings.Contains(why, "removed from the cell") {
			t.Errorf("%s: %q does not say removed from the cell", tc.name, why)
		}
	}
}

// TestRemovedReplicaSaysSo: a voter an operator takes out never learns
// from the master that the change committed (it is no longer sent
// anything); from the configuration the others gossip it learns it is
// out, says "removed" in its status and "removed from the cell" to a
// client, and names no master. Bounded by a few leases.
func TestRemovedReplicaSaysSo(t *testing.T) {
	if testing.Short() {
		t.Skip("gossip timings")
	}
	r1 := startGossipReplica(t, 1, nil, t.TempDir())
	seed := []string{r1.gossipAddr()}
	awaitConfig(t, []*gossipReplica{r1}, "replica 1 alone", voters(r1.s.cfg.ID))
	r2 := startGossipReplica(t, 0, seed, t.TempDir())
	r3 := startGossipReplica(t, 0, seed, t.TempDir())
	all := []*gossipReplica{r1, r2, r3}
	m := awaitConfig(t, all, "three voters", voters(r1.s.cfg.ID, r2.s.cfg.ID, r3.s.cfg.ID))
	var victim *gossipReplica
	for _, r := range all {
		if r.s != m {
			victim = r
		}
	}
	id := victim.s.cfg.ID
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := m.removeMember(ctx, strconv.FormatUint(id, 10)); err != nil {
		t.Fatalf("remove replica %d: %v", id, err)
	}
	bound := 5 * m.cfg.Lease
	start := time.Now()
	deadline := start.Add(bound)
	var membership string
	for ; time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		membership = ""
		st := victim.s.status()
		for _, r := range st.Replicas {
			if r.Id == strconv.FormatUint(id, 10) && r.Membership != nil {
				membership = *r.Membership
			}
		}
		if membership == "removed" {
			if st.MasterId != "" {
				t.Fatalf("the removed replica names master %s", st.MasterId)
			}
			for _, r := range st.Replicas {
				if r.Role == chubby.ReplicaRole_MASTER {
					t.Fatalf("the removed replica shows replica %s as master", r.Id)
				}
			}
			t.Logf("replica %d reports itself removed %v after its removal committed", id, time.Since(start).Round(time.Millisecond))
			break
		}
	}
	if membership != "removed" {
		i := victim.s.log.Info()
		t.Fatalf("replica %d still reports itself %q %v after its removal (epoch %d, pending %d)", id, membership, bound, i.Epoch, i.PendingConfig)
	}
	_, err := (&handler{victim.s}).GetMaster(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "removed from the cell") {
		t.Fatalf("GetMaster on the removed replica: %v, want a refusal saying removed from the cell", err)
	}
}
