package cell

import (
	"cmp"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/discovery"
	"github.com/chubbygo/chubby/replica/vr"
)

// TestAutopilotPolicy reads as the autopilot's rules: each case is a cell
// as the master sees it and the one change the rules make of it.
func TestAutopilotPolicy(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	voter := func(id uint64) vr.Member { return vr.Member{ID: id, ClientAddr: "c", PeerAddr: "p"} }
	learner := func(id uint64) vr.Member { m := voter(id); m.Learner = true; return m }
	alive := func(id uint64, since time.Duration) discovery.Peer {
		return discovery.Peer{Meta: discovery.Meta{ID: id, ClientAddr: "c", PeerAddr: "p"}, State: discovery.Alive, Since: now.Add(-since)}
	}
	// returning: a spare whose own log names it a member of an earlier
	// configuration (restarted on its data directory after its removal).
	returning := func(id uint64, since time.Duration) discovery.Peer {
		p := alive(id, since)
		p.Meta.Config = discovery.ConfigMeta{Epoch: 2, Index: 40, Members: [discovery.MaxConfigMembers]uint64{1, id}}
		return p
	}
	dead := func(id uint64, since time.Duration) discovery.Peer {
		p := alive(id, since)
		p.State = discovery.Dead
		return p
	}
	type view struct {
		members vr.Members
		gossip  []discovery.Peer
		silent  map[uint64]time.Duration // since the last ack; absent: heard 10 ms ago
		behind  map[uint64]uint64
		healthy map[uint64]time.Duration // learner healthy for
		removed map[uint64]time.Duration // removed by the autopilot that long ago
		retired []uint64                 // removed by an operator
		// masterFor: since this master started (its view; 0: an hour);
		// heard: members it last heard from that long ago in an earlier
		// view, and not since (their sinceAck is "none").
		masterFor time.Duration
		heard     map[uint64]time.Duration
		target    int
		wantNone  bool
		want      string // substring of the decision
	}
	tests := []struct {
		name string
		v    view
	}{
		{"a lone voter adds a spare that has been alive a while", view{
			members: vr.Members{voter(1)}, gossip: []discovery.Peer{alive(1, time.Hour), alive(2, 5*time.Second)}, target: 3,
			want: "add replica 2"}},
		{"a spare alive for less than spareStable waits", view{
			members: vr.Members{voter(1)}, gossip: []discovery.Peer{alive(1, time.Hour), alive(2, 100*time.Millisecond)}, target: 3,
			wantNone: true}},
		{"a learner healthy for PromoteAfter is promoted", view{
			members: vr.Members{voter(1), learner(2)}, gossip: []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour)},
			healthy: map[uint64]time.Duration{2: 4 * time.Second}, target: 3, want: "promote learner 2"}},
		{"a learner healthy for less is not promoted, and no spare is needed", view{
			members: vr.Members{voter(1), voter(3), learner(2)}, gossip: []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), alive(3, time.Hour)},
			healthy: map[uint64]time.Duration{2: time.Second}, target: 3, wantNone: true}},
		{"at the target size nothing changes", view{
			members: vr.Members{voter(1), voter(2), voter(3)}, gossip: []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), alive(3, time.Hour), alive(4, time.Hour)},
			target: 3, wantNone: true}},
		{"a voter dead by gossip and silent for DeadAfter gets a replacement learner first", view{
			members: vr.Members{voter(1), voter(2), voter(3)}, gossip: []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), dead(3, time.Minute), alive(4, time.Hour)},
			silent: map[uint64]time.Duration{3: time.Minute}, target: 3, want: "to replace voter 3"}},
		{"a voter gossip calls dead but that still acknowledges stays", view{
			members: vr.Members{voter(1), voter(2), voter(3)}, gossip: []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), dead(3, time.Minute), alive(4, time.Hour)},
			target: 3, wantNone: true}},
		{"a voter dead for less than DeadAfter stays", view{
			members: vr.Members{voter(1), voter(2), voter(3)}, gossip: []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), dead(3, 10*time.Second), alive(4, time.Hour)},
			silent: map[uint64]time.Duration{3: 10 * time.Second}, target: 3, wantNone: true}},
		{"the replacement, once healthy, is promoted before the dead voter goes", view{
			members: vr.Members{voter(1), voter(2), voter(3), learner(4)}, gossip: []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), dead(3, time.Minute), alive(4, time.Hour)},
			silent: map[uint64]time.Duration{3: time.Minute}, healthy: map[uint64]time.Duration{4: 5 * time.Second}, target: 3, want: "promote learner 4"}},
		{"then the dead voter is removed", view{
			members: vr.Members{voter(1), voter(2), voter(3), voter(4)}, gossip: []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), dead(3, time.Minute), alive(4, time.Hour)},
			silent: map[uint64]time.Duration{3: time.Minute}, target: 3, want: "remove voter 3"}},
		{"without a spare a dead voter of three is kept: never below 3 by itself", view{
			members: vr.Members{voter(1), voter(2), voter(3)}, gossip: []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), dead(3, time.Minute)},
			silent: map[uint64]time.Duration{3: time.Minute}, target: 3, wantNone: true}},
		{"a dead learner is removed", view{
			members: vr.Members{voter(1), learner(2)}, gossip: []discovery.Peer{alive(1, time.Hour), dead(2, time.Minute)},
			silent: map[uint64]time.Duration{2: time.Minute}, target: 3, want: "remove learner 2"}},
		{"a replica removed as dead comes back only after DeadAfter of life", view{
			members: vr.Members{voter(1)}, gossip: []discovery.Peer{alive(1, time.Hour), alive(2, 5*time.Second)},
			removed: map[uint64]time.Duration{2: time.Minute}, target: 3, wantNone: true}},
		{"and is taken back then", view{
			members: vr.Members{voter(1)}, gossip: []discovery.Peer{alive(1, time.Hour), alive(2, 40*time.Second)},
			removed: map[uint64]time.Duration{2: time.Minute}, target: 3, want: "add replica 2"}},
		{"a replica returning on its data directory comes back only after DeadAfter of life, though this master did not remove it", view{
			members: vr.Members{voter(1)}, gossip: []discovery.Peer{alive(1, time.Hour), returning(2, 5*time.Second)},
			target: 3, wantNone: true}},
		{"and is taken back then, by any master", view{
			members: vr.Members{voter(1)}, gossip: []discovery.Peer{alive(1, time.Hour), returning(2, 40*time.Second)},
			target: 3, want: "add replica 2"}},
		{"a replica an operator removed is never taken back", view{
			members: vr.Members{voter(1)}, gossip: []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour)},
			retired: []uint64{2}, target: 3, wantNone: true}},
		{"one dead voter gets one replacement: a second spare is not added beside the learner", view{
			members: vr.Members{voter(1), voter(2), voter(3), voter(4), voter(5), learner(6)},
			gossip:  []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), dead(3, time.Minute), alive(4, time.Hour), alive(5, time.Hour), alive(6, time.Hour), alive(7, time.Hour)},
			silent:  map[uint64]time.Duration{3: time.Minute}, target: 5, wantNone: true}},
		{"two dead voters get two replacements", view{
			members: vr.Members{voter(1), voter(2), voter(3), voter(4), voter(5), learner(6)},
			gossip:  []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), dead(3, time.Minute), dead(4, time.Minute), alive(5, time.Hour), alive(6, time.Hour), alive(7, time.Hour)},
			silent:  map[uint64]time.Duration{3: time.Minute, 4: time.Minute}, target: 5, want: "add replica 7"}},
		{"a learner left over once the cell has its voters is removed: spares stay spare", view{
			members: vr.Members{voter(1), voter(2), voter(4), voter(5), voter(6), learner(7)},
			gossip:  []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), alive(4, time.Hour), alive(5, time.Hour), alive(6, time.Hour), alive(7, time.Hour)},
			healthy: map[uint64]time.Duration{7: time.Minute}, target: 5, want: "remove learner 7"}},
		{"the dead voter goes before the left-over learner", view{
			members: vr.Members{voter(1), voter(2), voter(3), voter(4), voter(5), voter(6), learner(7)},
			gossip:  []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), dead(3, time.Minute), alive(4, time.Hour), alive(5, time.Hour), alive(6, time.Hour), alive(7, time.Hour)},
			silent:  map[uint64]time.Duration{3: time.Minute}, target: 5, want: "remove voter 3"}},
		{"a learner still needed to reach the target stays", view{
			members: vr.Members{voter(1), voter(2), voter(3), voter(4), learner(7)},
			gossip:  []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), alive(3, time.Hour), alive(4, time.Hour), alive(7, time.Hour)},
			healthy: map[uint64]time.Duration{7: time.Second}, target: 5, wantNone: true}},
		{"a dead voter's silence survives the epoch change that promoted its replacement", view{
			members: vr.Members{voter(1), voter(2), voter(3), voter(4), voter(5), voter(6)},
			gossip:  []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), dead(3, time.Minute), alive(4, time.Hour), alive(5, time.Hour), alive(6, time.Hour)},
			silent:  map[uint64]time.Duration{3: -1}, heard: map[uint64]time.Duration{3: time.Minute},
			masterFor: 2 * time.Second, target: 5, want: "remove voter 3"}},
		{"but not before the members had time to answer the new view", view{
			members: vr.Members{voter(1), voter(2), voter(3), voter(4), voter(5), voter(6)},
			gossip:  []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), dead(3, time.Minute), alive(4, time.Hour), alive(5, time.Hour), alive(6, time.Hour)},
			silent:  map[uint64]time.Duration{3: -1}, heard: map[uint64]time.Duration{3: time.Minute},
			masterFor: healthyContact / 2, target: 5, wantNone: true}},
		{"a voter never heard from by this master is silent only for as long as it has been master", view{
			members: vr.Members{voter(1), voter(2), voter(3), voter(4), voter(5), voter(6)},
			gossip:  []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour), dead(3, time.Minute), alive(4, time.Hour), alive(5, time.Hour), alive(6, time.Hour)},
			silent:  map[uint64]time.Duration{3: -1}, masterFor: 2 * time.Second, target: 5, wantNone: true}},
		{"a lagging learner is not promoted", view{
			members: vr.Members{voter(1), learner(2)}, gossip: []discovery.Peer{alive(1, time.Hour), alive(2, time.Hour)},
			behind: map[uint64]uint64{2: 10_000}, target: 3, wantNone: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := &apView{now: now, self: 1, members: tc.v.members, gossip: map[uint64]discovery.Peer{},
				behind: map[uint64]uint64{}, sinceAck: map[uint64]time.Duration{}, masterFor: cmp.Or(tc.v.masterFor, time.Hour), heard: map[uint64]time.Time{},
				target: tc.v.target, deadAfter: 30 * time.Second, promoteAfter: 3 * time.Second,
				healthySince: map[uint64]time.Time{}, removedAt: map[uint64]time.Time{}, retired: tc.v.retired}
			for _, g := range tc.v.gossip {
				v.gossip[g.Meta.ID] = g
			}
			for _, m := range tc.v.members {
				if m.ID != 1 {
					v.sinceAck[m.ID] = 10 * time.Millisecond
				}
			}
			for id, d := range tc.v.silent {
				v.sinceAck[id] = d
			}
			for id, d := range tc.v.heard {
				v.heard[id] = now.Add(-d)
			}
			for id, b := range tc.v.behind {
				v.behind[id] = b
			}
			for id, d := range tc.v.healthy {
				v.healthySince[id] = now.Add(-d)
			}
			for id, d := range tc.v.removed {
				v.removedAt[id] = now.Add(-d)
			}
			next, why := nextChange(v)
			if tc.v.wantNone {
				if next != nil {
					t.Fatalf("changed: %s", why)
				}
				return
			}
			if next == nil || !strings.Contains(why, tc.v.want) {
				t.Fatalf("decision %q, want %q", why, tc.v.want)
			}
			if _, err := vr.Classify(tc.v.members, next); err != nil {
				t.Fatalf("not a single change: %v", err)
			}
		})
	}
}

// TestAutopilotHealth: a learner is healthy when gossip says alive, it
// acknowledged within healthyContact and is at most maxBehind behind.
func TestAutopilotHealth(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	g := discovery.Peer{Meta: discovery.Meta{ID: 2}, State: discovery.Alive, Since: now.Add(-time.Hour)}
	tests := []struct {
		name   string
		state  discovery.State
		ack    time.Duration
		behind uint64
		want   bool
	}{
		{"caught up and in contact", discovery.Alive, 20 * time.Millisecond, 0, true},
		{"at the lag bound", discovery.Alive, 20 * time.Millisecond, maxBehind, true},
		{"past the lag bound", discovery.Alive, 20 * time.Millisecond, maxBehind + 1, false},
		{"silent", discovery.Alive, 2 * time.Second, 0, false},
		{"never acknowledged", discovery.Alive, -1, 0, false},
		{"suspect by gossip", discovery.Suspect, 20 * time.Millisecond, 0, false},
	}
	for _, tc := range tests {
		g.State = tc.state
		v := &apView{now: now, gossip: map[uint64]discovery.Peer{2: g}, sinceAck: map[uint64]time.Duration{2: tc.ack},
			behind: map[uint64]uint64{2: tc.behind}}
		if got := v.healthy(2); got != tc.want {
			t.Errorf("%s: healthy %v, want %v", tc.name, got, tc.want)
		}
	}
}
