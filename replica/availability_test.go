package replica

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chubbygo/chubby/replica/vr"
)

// These tests are the availability half of the protocol's promise: fast on
// proof of death, patient on silence, and no replica that one peer's word
// can move. They run the Driver and the core on the in-memory cluster,
// with virtual time, so they hold on a busy machine.

// resume restarts a paused replica. tickFirst models a loop that runs its
// overdue timer before it reads the messages that waited (the worst order;
// the real loop drains its inbox first).
func (c *cluster) resume(id uint64, tickFirst bool) {
	tn := c.nodes[id]
	tn.paused = false
	if tickFirst {
		tn.d.Tick()
		c.settle(tn)
	}
	held := tn.held
	tn.held = nil
	for _, m := range held {
		tn.d.Step([]vr.Message{m})
		c.settle(tn)
	}
	c.deliver()
}

// views returns every replica's view.
func (c *cluster) views() []uint64 {
	var vs []uint64
	for _, id := range c.ids {
		vs = append(vs, c.nodes[id].n().View())
	}
	return vs
}

// TestStallKeepsTheView: a replica starved of CPU for a second — the
// primary or a backup, its overdue tick run before its waiting messages —
// changes no view, and the primary serves again within a few heartbeats of
// running again.
func TestStallKeepsTheView(t *testing.T) {
	def := vr.DefaultConfig()
	stall := def.ViewChangeTimeout - 2*def.HeartbeatInterval // "about a second"
	for _, size := range []int{3, 5} {
		for _, who := range []string{"primary", "backup"} {
			for _, tickFirst := range []bool{false, true} {
				t.Run(fmt.Sprint(size, who, tickFirst), func(t *testing.T) {
					c := newCluster(t, size, nil)
					c.run(200 * time.Millisecond)
					p := c.primary()
					id := p.id
					if who == "backup" {
						id = p.id%uint64(size) + 1
					}
					before := c.views()
					c.nodes[id].paused = true
					c.run(stall)
					c.resume(id, tickFirst)
					c.run(10 * def.HeartbeatInterval)
					if got := c.views(); fmt.Sprint(got) != fmt.Sprint(before) {
						t.Fatalf("views %v after a %v stall of replica %d, want %v", got, stall, id, before)
					}
					if q := c.primary(); q != p || !q.n().CanServeReads(c.now) {
						t.Fatalf("primary %d does not serve after the stall", p.id)
					}
				})
			}
		}
	}
}

// TestLongStallOfABackup: a backup starved far longer than the
// view-change timeout, whose overdue tick runs before the messages that
// waited, does not take its own stall for its primary's silence.
func TestLongStallOfABackup(t *testing.T) {
	def := vr.DefaultConfig()
	c := newCluster(t, 3, nil)
	c.run(200 * time.Millisecond)
	p := c.primary()
	id := p.id%3 + 1
	before := c.views()
	c.nodes[id].paused = true
	c.run(3 * def.ViewChangeTimeout)
	c.resume(id, true)
	c.run(10 * def.HeartbeatInterval)
	if got := c.views(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Fatalf("views %v after a long stall of backup %d, want %v", got, id, before)
	}
	if st := c.nodes[id].n().Stats(); st.Probes != 0 {
		t.Fatalf("the stalled backup probed %d times", st.Probes)
	}
}

// TestSilentPrimaryReplaced: a primary that is silent but not dead (cut
// off: no refusal ever comes back) is replaced after the view-change
// timeout, and well within 2 s.
func TestSilentPrimaryReplaced(t *testing.T) {
	def := vr.DefaultConfig()
	for _, size := range []int{3, 5} {
		for _, how := range []string{"partition", "pause"} {
			t.Run(fmt.Sprint(size, how), func(t *testing.T) {
				c := newCluster(t, size, nil)
				c.run(200 * time.Millisecond)
				old := c.primary()
				switch how {
				case "partition":
					for _, id := range c.ids {
						c.cut[[2]uint64{old.id, id}] = true
						c.cut[[2]uint64{id, old.id}] = true
					}
				case "pause":
					old.paused = true
				}
				start := c.now
				for {
					if p := c.primary(); p != nil && p != old && p.n().CanServeReads(c.now) {
						break
					}
					if c.now-start > int64(2*time.Second) {
						t.Fatalf("no new primary serving 2 s after the primary went silent: views %v", c.views())
					}
					c.run(5 * time.Millisecond)
				}
				took := time.Duration(c.now - start)
				t.Logf("a silent primary replaced in %v", took)
				if took < def.ViewChangeTimeout-def.HeartbeatInterval {
					t.Fatalf("replaced after %v, before the view-change timeout %v: silence alone was taken for death", took, def.ViewChangeTimeout)
				}
			})
		}
	}
}

// TestDeadPrimaryReplacedFast: a primary whose process is gone (its port
// refuses) is replaced within the lease plus a few heartbeats, not the
// view-change timeout.
func TestDeadPrimaryReplacedFast(t *testing.T) {
	def := vr.DefaultConfig()
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := newCluster(t, size, nil)
			c.run(200 * time.Millisecond)
			c.crash(c.primary().id)
			start := c.now
			for c.primary() == nil || !c.primary().n().CanServeReads(c.now) {
				c.run(5 * time.Millisecond)
				if c.now-start > int64(def.ViewChangeTimeout) {
					t.Fatalf("no new primary within the view-change timeout after the primary died: views %v", c.views())
				}
			}
			took := time.Duration(c.now - start)
			t.Logf("a dead primary replaced in %v", took)
			if bound := def.LeaseDuration + def.SuspectAfter + 4*def.HeartbeatInterval; took > bound {
				t.Fatalf("replaced after %v, over %v", took, bound)
			}
		})
	}
}

// TestOnePeerCannotDepose: a StartViewChange, DoViewChange or probe for
// the next view from one backup (a confused one, or a forged message)
// moves neither the primary nor another backup that still hears it.
func TestOnePeerCannotDepose(t *testing.T) {
	for _, size := range []int{3, 5} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			c := newCluster(t, size, nil)
			c.run(200 * time.Millisecond)
			p := c.primary()
			liar := p.id%uint64(size) + 1
			v := p.n().View()
			for _, id := range c.ids {
				if id == liar {
					continue
				}
				for _, m := range []vr.Message{
					{Type: vr.MsgStartViewChange, From: liar, To: id, View: v + 1},
					{Type: vr.MsgDoViewChange, From: liar, To: id, View: v + 1, PrevOp: 0, Commit: 0},
					{Type: vr.MsgProbe, From: liar, To: id, View: v + 1},
					{Type: vr.MsgStartViewChange, From: liar, To: id, View: v + 5},
				} {
					_ = c.nodes[id].d.Node()
					c.nodes[id].d.Step([]vr.Message{m})
					c.settle(c.nodes[id])
				}
			}
			c.deliver()
			c.run(300 * time.Millisecond)
			if q := c.primary(); q != p || q.n().View() != v {
				t.Fatalf("one replica's word moved the cell: views %v", c.views())
			}
		})
	}
}

// TestFarViewsRefused: a message naming a view near the end of its epoch
// (the outside tester's view 2^32−1) more than one ahead is refused, so no
// replica moves to a view the cell could not leave; the cell then still
// fails over.
func TestFarViewsRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.run(200 * time.Millisecond)
	p := c.primary()
	for _, id := range c.ids {
		if id == p.id {
			continue
		}
		for _, v := range []uint64{1<<32 - 1, 1<<32 - 1<<24, 1<<32 - 2} {
			m := vr.Message{Type: vr.MsgStartViewChange, From: p.id, To: id, View: v}
			var err error
			func() {
				d := c.nodes[id].d
				err = d.Node().Step(m)
				c.settle(c.nodes[id])
			}()
			if !errors.Is(err, vr.ErrInvalidMessage) {
				t.Fatalf("replica %d took a StartViewChange for view %d: %v", id, v, err)
			}
		}
	}
	c.crash(p.id)
	start := c.now
	for c.primary() == nil {
		c.run(5 * time.Millisecond)
		if c.now-start > int64(2*time.Second) {
			t.Fatalf("no failover after refusing far views: views %v", c.views())
		}
	}
	if v := c.primary().n().View(); vr.EpochOf(v) != 0 || v > 10 {
		t.Fatalf("new primary in view %d", v)
	}
}

// TestStaleReplicaJoinsFarView: a replica that missed several view changes
// joins the view the others are changing to, however far ahead, through a
// probe a quorum grants — the cell needs it for a quorum.
func TestStaleReplicaJoinsFarView(t *testing.T) {
	c := newCluster(t, 5, nil)
	c.run(200 * time.Millisecond)
	// Replica 5 hears nothing while the others go through two failovers.
	for _, id := range c.ids {
		c.cut[[2]uint64{5, id}] = true
		c.cut[[2]uint64{id, 5}] = true
	}
	waitPrimary := func(not uint64) {
		t.Helper()
		start := c.now
		for p := c.primary(); p == nil || p.id == not; p = c.primary() {
			c.run(5 * time.Millisecond)
			if c.now-start > int64(3*time.Second) {
				t.Fatalf("no new primary: views %v", c.views())
			}
		}
	}
	first := c.primary().id
	c.crash(first)
	waitPrimary(first)
	second := c.primary().id
	c.crash(second)
	c.start(c.nodes[first]) // back, so the others have a quorum again
	waitPrimary(second)
	third := c.primary().id
	c.crash(third)
	// Now only two of the four are up: with replica 5 they are a quorum.
	for _, id := range c.ids {
		delete(c.cut, [2]uint64{5, id})
		delete(c.cut, [2]uint64{id, 5})
	}
	if v := c.nodes[5].n().View(); v != 0 {
		t.Fatalf("replica 5 in view %d, want 0", v)
	}
	waitPrimary(third)
	if v5, vp := c.nodes[5].n().View(), c.primary().n().View(); v5 != vp || vp < 3 {
		t.Fatalf("replica 5 in view %d, primary in %d", v5, vp)
	}
}

// TestHeartbeatCadenceWithLateTicks: with Ticks every half heartbeat
// interval (Replicated's default), each read up to 5 ms late by a busy
// loop, the primary still sends a round every interval: no gap between
// two Commits to a backup reaches one and a half intervals. (A round due
// exactly one interval after the last one waited for the Tick after a
// Tick read a hair earlier in its period than the last.)
func TestHeartbeatCadenceWithLateTicks(t *testing.T) {
	c := newCluster(t, 3, nil)
	c.run(2 * time.Second)
	p := c.primary()
	if p == nil {
		t.Fatal("no primary")
	}
	backup := c.ids[0]
	if backup == p.id {
		backup = c.ids[1]
	}
	hb := int64(vr.DefaultConfig().HeartbeatInterval)
	tick := hb / 2
	var sent []int64
	base := c.now
	for k := int64(1); k <= 80; k++ {
		late := (k * 7 % 11) * int64(500*time.Microsecond) // 0 to 5 ms, in no order
		c.now = base + k*tick + late
		for _, id := range c.ids {
			if tn := c.nodes[id]; tn.up {
				tn.d.Tick()
				c.settle(tn)
			}
		}
		for _, m := range c.queue {
			if m.Type == vr.MsgCommit && m.From == p.id && m.To == backup {
				sent = append(sent, c.now)
			}
		}
		c.deliver()
	}
	if len(sent) < 35 {
		t.Fatalf("%d heartbeats to one backup in %v; want about 40", len(sent), time.Duration(80*tick))
	}
	for i := 1; i < len(sent); i++ {
		if gap := sent[i] - sent[i-1]; gap >= hb+hb/2 {
			t.Fatalf("heartbeats %d and %d to one backup %v apart; want under %v", i-1, i, time.Duration(gap), time.Duration(hb+hb/2))
		}
	}
	if !p.n().IsPrimary() {
		t.Fatal("the primary lost its view")
	}
}
