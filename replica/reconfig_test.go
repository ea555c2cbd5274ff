package replica

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chubbygo/chubby/replica/vr"
)

// Reconfiguration through the driver that ships, on the tiny cluster of
// cluster_test.go. The simulator (cell/sim) injects the same changes
// under every fault; these tests pin the steps down one at a time.

// addJoiner starts replica id with an empty disk (vr.Config.Join).
func (c *cluster) addJoiner(id uint64) *tnode {
	tn := &tnode{id: id}
	c.nodes[id] = tn
	c.ids = append(c.ids, id)
	cfg := c.cfg
	c.cfg.InitialMembers, c.cfg.Join = nil, true
	c.start(tn)
	c.cfg = cfg
	return tn
}

// reconfigure proposes next on the primary and runs until a primary has
// it in force with nothing pending, bounded.
func (c *cluster) reconfigure(next vr.Members) *tnode {
	c.t.Helper()
	p := c.primary()
	if p == nil {
		c.t.Fatal("no primary")
	}
	if _, err := p.d.ProposeConfig(next); err != nil {
		c.t.Fatalf("propose %v: %v", next, err)
	}
	for range 200 {
		c.run(10 * time.Millisecond)
		if p := c.primary(); p != nil {
			if i := p.n().Info(); i.PendingConfig == 0 && fmt.Sprint(i.Members) == fmt.Sprint(next) {
				return p
			}
		}
	}
	c.t.Fatalf("configuration %v not in force after 2 s", next)
	return nil
}

func members(spec ...string) vr.Members {
	var m vr.Members
	for _, s := range spec {
		var id uint64
		learner := s[0] == 'L'
		if learner {
			s = s[1:]
		}
		fmt.Sscan(s, &id)
		m = append(m, vr.Member{ID: id, ClientAddr: fmt.Sprintf("r%d", id), Learner: learner})
	}
	return m
}

// TestGrowReplaceShrink walks a cell through every kind of change: a
// replica that joins empty becomes a learner, catches up (here by
// snapshot), is promoted; a voter is replaced (learner, promote, remove);
// the primary removes itself. Every replica of the configuration applies
// the same log, and commands go on committing between the steps.
func TestGrowReplaceShrink(t *testing.T) {
	c := newClusterSnap(t, 3, 20, nil)
	c.run(200 * time.Millisecond)
	for i := range 50 {
		c.propose(fmt.Sprint("a", i))
		c.run(5 * time.Millisecond)
	}
	c.addJoiner(4)
	c.addJoiner(5)
	c.reconfigure(members("1", "2", "3", "L4"))
	c.run(300 * time.Millisecond)
	if got, want := c.nodes[4].d.Applied(), c.primary().d.Applied(); got != want {
		t.Fatalf("learner 4 applied %d, primary %d", got, want)
	}
	c.reconfigure(members("1", "2", "3", "4"))
	c.propose("b")
	c.reconfigure(members("1", "2", "3", "4", "L5"))
	c.reconfigure(members("1", "2", "3", "4", "5"))
	// Replace 2: it is gone; the cell keeps going with four of five.
	c.crash(2)
	c.propose("c")
	c.reconfigure(members("1", "3", "4", "5"))
	// The primary removes itself: it steps down once the change commits.
	old := c.primary()
	var next vr.Members
	for _, id := range []uint64{1, 3, 4, 5} {
		if id != old.id {
			next = append(next, vr.Member{ID: id, ClientAddr: fmt.Sprintf("r%d", id)})
		}
	}
	p := c.reconfigure(next)
	if p.id == old.id || old.n().IsPrimary() {
		t.Fatalf("replica %d removed itself and is still primary", old.id)
	}
	if i := old.n().Info(); i.Voter {
		t.Fatalf("the removed primary still counts itself a voter: %+v", i)
	}
	c.propose("d")
	c.run(300 * time.Millisecond)
	c.checkAgree()
	for _, id := range p.n().Info().Members.IDs() {
		if got, want := c.nodes[id].d.Applied(), p.d.Applied(); got != want {
			t.Errorf("member %d applied %d, primary %d", id, got, want)
		}
	}
}

// TestConfigChangeRules: one change at a time, no new voter that was not a
// learner, no change but from the primary that committed its start log.
func TestConfigChangeRules(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.run(200 * time.Millisecond)
	p := c.primary()
	if _, err := p.d.ProposeConfig(members("1", "2", "3", "4")); !errors.Is(err, vr.ErrBadConfigChange) {
		t.Fatalf("a new voter that was never a learner: %v", err)
	}
	if _, err := p.d.ProposeConfig(members("1")); !errors.Is(err, vr.ErrBadConfigChange) {
		t.Fatalf("two voters removed at once: %v", err)
	}
	if _, err := p.d.ProposeConfig(members("1", "2", "3")); !errors.Is(err, vr.ErrNoChange) {
		t.Fatalf("the same configuration: %v", err)
	}
	if _, err := p.d.ProposeConfig(members("1", "2")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.d.ProposeConfig(members("1", "2", "L3")); !errors.Is(err, vr.ErrConfigInProgress) {
		t.Fatalf("a second change while one is uncommitted: %v", err)
	}
	if r := c.proposeOn(p, "x")[0]; r.Err == nil || r.Err == errPending {
		t.Fatalf("a command after an uncommitted voter change was taken: %v", r.Err)
	}
	var backup *tnode
	for _, id := range c.ids {
		if id != p.id {
			backup = c.nodes[id]
		}
	}
	var np *NotMasterError
	if _, err := backup.d.ProposeConfig(members("1", "2")); !errors.As(err, &np) {
		t.Fatalf("a change proposed off the primary: %v", err)
	}
}

// TestVoterChangeWaitsForNewMajority: a voter change commits only once a
// majority of the new voters holds it too. With voters {1,2,3} and a
// learner 4 that hears nothing, promoting 4 gives four voters; the old
// majority {1,2} holds the change, the new majority needs three of four:
// it stays uncommitted until a third holds it.
func TestVoterChangeWaitsForNewMajority(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.addJoiner(4)
	c.run(200 * time.Millisecond)
	c.reconfigure(members("1", "2", "3", "L4"))
	c.run(200 * time.Millisecond)
	p := c.primary()
	for _, id := range c.ids {
		if id != p.id && id != 4 {
			c.cut[[2]uint64{p.id, id}] = true // only the learner hears the primary
			break
		}
	}
	cutOne := func() uint64 {
		for k := range c.cut {
			return k[1]
		}
		return 0
	}()
	c.cut[[2]uint64{p.id, 4}] = true
	i, err := p.d.ProposeConfig(members("1", "2", "3", "4"))
	if err != nil {
		t.Fatal(err)
	}
	c.run(100 * time.Millisecond)
	if got := p.n().Info().Commit; got >= i {
		t.Fatalf("the promotion committed at %d with only the old majority holding it (cut: %d and 4)", got, cutOne)
	}
	delete(c.cut, [2]uint64{p.id, 4})
	c.run(500 * time.Millisecond)
	if q := c.primary(); q == nil || q.n().Info().Commit < i || !q.n().Info().Members.IsVoter(4) {
		t.Fatalf("the promotion did not commit once the learner held it")
	}
}

// TestRetiredTravelsWithTheConfiguration: a replica an operator takes out
// is named in the configuration from then on — on every replica, through
// later changes and through a snapshot — so that no later master takes
// it back by itself.
func TestRetiredTravelsWithTheConfiguration(t *testing.T) {
	c := newClusterSnap(t, 3, 10, nil)
	c.run(200 * time.Millisecond)
	p := c.primary()
	var victim uint64
	for _, id := range c.ids {
		if id != p.id {
			victim = id
		}
	}
	if _, err := p.d.ProposeConfig(members("1", "2", "3").Without(victim), victim); err != nil {
		t.Fatal(err)
	}
	c.run(500 * time.Millisecond)
	for i := range 30 {
		c.propose(fmt.Sprint("x", i))
		c.run(5 * time.Millisecond)
	}
	c.run(300 * time.Millisecond)
	for _, id := range c.ids {
		if got := c.nodes[id].n().Info().Retired; id != victim && fmt.Sprint(got) != fmt.Sprint([]uint64{victim}) {
			t.Errorf("replica %d: retired %v, want [%d]", id, got, victim)
		}
	}
	q := c.primary()
	meta, err := q.n().SnapshotMeta(q.d.Applied())
	if err != nil || fmt.Sprint(meta.Retired) != fmt.Sprint([]uint64{victim}) {
		t.Fatalf("snapshot metadata retired %v (%v), want [%d]", meta.Retired, err, victim)
	}
	cfg, err := vr.DecodeConfig(vr.EncodeConfig(meta.Config()))
	if err != nil || fmt.Sprint(cfg.Retired) != fmt.Sprint([]uint64{victim}) {
		t.Fatalf("encoded configuration retired %v (%v)", cfg.Retired, err)
	}
}

// TestConfigIndex: Info.ConfigIndex names the entry that put the
// configuration in force, on every member, and a learner taken out (which
// hears nothing more from the primary) is left behind with an older one
// and a log that ends before the index the others report.
func TestConfigIndex(t *testing.T) {
	c := newClusterSnap(t, 3, 1000, nil)
	c.run(200 * time.Millisecond)
	c.addJoiner(4)
	p := c.reconfigure(members("1", "2", "3", "L4"))
	c.run(300 * time.Millisecond)
	added := p.n().Info().ConfigIndex
	if added == 0 {
		t.Fatal("ConfigIndex 0 after a change")
	}
	for _, id := range []uint64{1, 2, 3, 4} {
		if got := c.nodes[id].n().Info().ConfigIndex; got != added {
			t.Errorf("replica %d: ConfigIndex %d, want %d", id, got, added)
		}
	}
	c.reconfigure(members("1", "2", "3"))
	c.run(300 * time.Millisecond)
	removed := c.primary().n().Info().ConfigIndex
	if removed <= added {
		t.Fatalf("ConfigIndex %d after the learner's removal, not past %d", removed, added)
	}
	if i := c.nodes[4].n().Info(); i.ConfigIndex != added || i.LastOp >= removed || !i.Members.Contains(4) {
		t.Fatalf("removed learner: ConfigIndex %d, last op %d, members %v; want %d, below %d, with itself", i.ConfigIndex, i.LastOp, i.Members, added, removed)
	}
}

// TestPromotionKeepsPrimaryAndLease: a voter change the primary makes
// (it stays a voter) carries it into the new epoch as the primary with no
// view change: it never stops being the primary, its lease never lapses
// (it may answer reads throughout), no other replica starts a view
// change, and it commits in the new epoch at once. The same holds for
// removing a voter other than the primary.
func TestPromotionKeepsPrimaryAndLease(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.run(200 * time.Millisecond)
	c.addJoiner(4)
	c.reconfigure(members("1", "2", "3", "L4"))
	c.run(300 * time.Millisecond)
	for _, next := range []vr.Members{members("1", "2", "3", "4"), members("1", "2", "4")} {
		p := c.primary()
		before := map[uint64]uint64{}
		for _, id := range c.ids {
			if tn := c.nodes[id]; tn.up {
				before[id] = tn.n().Stats().ViewChanges
			}
		}
		epoch := p.n().Info().Epoch
		if _, err := p.d.ProposeConfig(next); err != nil {
			t.Fatal(err)
		}
		for step := 0; ; step++ {
			if step > 400 {
				t.Fatalf("configuration %v not in force after 2 s", next)
			}
			c.run(5 * time.Millisecond)
			if !p.n().IsPrimary() {
				t.Fatalf("replica %d stopped being the primary during the change to %v", p.id, next)
			}
			if !p.n().LeaseValid(c.now) {
				t.Fatalf("the primary's lease lapsed during the change to %v (step %d)", next, step)
			}
			if i := p.n().Info(); i.Epoch == epoch+1 && i.PendingConfig == 0 && p.d.Applied() >= i.Commit {
				break
			}
		}
		if p.n().Stats().CarriedOn == 0 {
			t.Fatal("the primary did not carry on into the new epoch")
		}
		c.propose(fmt.Sprint("after ", next))
		for _, id := range next.IDs() {
			if got := c.nodes[id].n().Stats().ViewChanges - before[id]; id != p.id && got != 1 {
				// A backup enters the new view once, on the primary's StartView.
				t.Errorf("replica %d moved through %d views in the change; want 1 (following the primary)", id, got)
			}
			if got := c.nodes[id].n().Stats().ViewChanges - before[id]; id == p.id && got != 0 {
				t.Errorf("the primary went through %d view changes; want none", got)
			}
		}
		c.run(200 * time.Millisecond)
		if q := c.primary(); q != p {
			t.Fatalf("primary is %v after the change; want %d", q, p.id)
		}
	}
	c.checkAgree()
}
