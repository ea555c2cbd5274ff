package cell

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/chubbygo/chubby/cell/discovery"
	"github.com/chubbygo/chubby/replica/vr"
)

// The autopilot: the master's membership policy, run every
// autopilotInterval and whenever gossip changes. It decides at most one
// configuration change per round, from what gossip says of each replica
// and what the replication protocol says of each member's progress; the
// decision itself (nextChange) is a pure function, so that its rules read
// and test as a table:
//
//  1. A learner that is dead (see below) is removed.
//  2. A learner that has been healthy — alive in gossip, at most
//     maxBehind entries behind, heard from within healthyContact — for
//     PromoteAfter is promoted while the cell has fewer healthy voters
//     than TargetSize.
//  3. A dead voter is removed once the cell has more voters than
//     TargetSize (its replacement was promoted first, so a majority is
//     available at every step), and never below 3 voters by itself.
//  4. A learner left over once the cell has TargetSize voters that are
//     not dead (two were added while a voter was being replaced, say) is
//     removed, the highest id first: spares stay spare, and it is added
//     again when a voter dies (it was not removed as dead, so the
//     flapping rule below does not hold it back).
//  5. A spare — a replica of this cell that gossip has seen alive for
//     spareStable and that is in no configuration — is added as a learner
//     while voters and learners that are not dead number fewer than
//     TargetSize: a dead voter is replaced by one learner, since it no
//     longer counts once dead (counting it again, as one to replace, would
//     add a second learner for it). A replica the autopilot
//     removed as dead is not taken back until it has been alive for DeadAfter
//     (a flapping machine is not churned); nor is a replica that returns
//     on the data directory of an earlier member (its gossip names the
//     configuration its log holds, and that names it: so every master
//     knows, not only the one that removed it), and one an operator removed
//     (vr.Configuration.Retired, which every later master reads) not at
//     all: it comes back only as a new replica, on a fresh data
//     directory.
//
// Dead means: memberlist says dead (or left) for DeadAfter, and the
// master has had no replica traffic from it for DeadAfter either: since
// its last acknowledgement, which the autopilot remembers across the
// master's own views (the view change of an epoch change starts the
// protocol's progress afresh; a member not heard from in the new view is
// judged by its last acknowledgement once the view is healthyContact
// old), or, for a member this master never heard from, since it became
// master. A
// voter that only gossip thinks dead (a partition of the gossip port, a
// slow machine) stays.

const (
	autopilotInterval = 500 * time.Millisecond
	maxBehind         = 250 // entries, as Consul's autopilot
	healthyContact    = time.Second
	spareStable       = time.Second
	// removedMemory is how long the autopilot remembers a replica it
	// removed (for the flapping rule), or twice DeadAfter if that is longer.
	removedMemory = time.Hour
)

// apView is what one round of the autopilot sees.
type apView struct {
	now     time.Time
	self    uint64
	members vr.Members
	// gossip by replica id (the members' and the spares'); a replica
	// gossip does not know is absent.
	gossip map[uint64]discovery.Peer
	// progress by member id (not self): entries behind the master's
	// commit, and the time since its last acknowledgement (-1: none since
	// this master started, masterFor ago).
	behind    map[uint64]uint64
	sinceAck  map[uint64]time.Duration
	masterFor time.Duration
	// heard: when this replica, as master, last heard from each member in
	// an earlier view (kept by the caller across rounds, and across the
	// view change of an epoch change, which starts the protocol's progress
	// afresh).
	heard map[uint64]time.Time

	target       int
	deadAfter    time.Duration
	promoteAfter time.Duration
	// healthySince: when each learner last became healthy (kept by the
	// caller across rounds); removedAt: when the autopilot removed each
	// replica.
	healthySince map[uint64]time.Time
	removedAt    map[uint64]time.Time
	// retired: replicas an operator took out; never taken back.
	retired []uint64
}

// dead reports whether replica id is dead by both gossip and traffic.
func (v *apView) dead(id uint64) bool {
	g, ok := v.gossip[id]
	if !ok || (g.State != discovery.Dead && g.State != discovery.Left) || v.now.Sub(g.Since) < v.deadAfter {
		return false
	}
	silent := v.masterFor
	if d, ok := v.sinceAck[id]; ok && d >= 0 {
		silent = d
	} else if at, ok := v.heard[id]; ok && v.masterFor >= healthyContact {
		// Heard from in an earlier view of this master (before the view
		// change of an epoch change, say), not yet in this one: silent
		// since then, once a member in contact would have answered.
		silent = v.now.Sub(at)
	}
	return silent >= v.deadAfter
}

// healthy reports whether member id is caught up and in contact now.
func (v *apView) healthy(id uint64) bool {
	g, ok := v.gossip[id]
	d, heard := v.sinceAck[id]
	return ok && g.State == discovery.Alive && heard && d >= 0 && d < healthyContact && v.behind[id] <= maxBehind
}

// nextChange returns the next configuration to propose, and why, or nil.
func nextChange(v *apView) (vr.Members, string) {
	var voters, learners, deadVoters, deadLearners []uint64
	for _, m := range v.members {
		switch {
		case m.Learner && v.dead(m.ID):
			deadLearners = append(deadLearners, m.ID)
		case m.Learner:
			learners = append(learners, m.ID)
		case m.ID != v.self && v.dead(m.ID):
			deadVoters = append(deadVoters, m.ID)
		default:
			voters = append(voters, m.ID)
		}
	}
	if len(deadLearners) > 0 {
		id := deadLearners[0]
		return v.members.Without(id), fmt.Sprintf("remove learner %d: dead for %v", id, v.deadAfter)
	}
	if len(voters) < v.target {
		for _, id := range learners {
			if since, ok := v.healthySince[id]; ok && v.now.Sub(since) >= v.promoteAfter {
				return v.members.WithRole(id, false), fmt.Sprintf("promote learner %d: caught up and healthy for %v", id, v.promoteAfter)
			}
		}
	}
	total := len(voters) + len(deadVoters)
	if len(deadVoters) > 0 && total > v.target && total > 3 {
		id := deadVoters[0]
		return v.members.Without(id), fmt.Sprintf("remove voter %d: dead for %v and replaced", id, v.deadAfter)
	}
	if len(learners) > 0 && len(voters) >= v.target {
		id := learners[len(learners)-1]
		return v.members.Without(id), fmt.Sprintf("remove learner %d: the cell has its %d voters, so it is a spare again", id, v.target)
	}
	if len(voters)+len(learners) < v.target && len(v.members) < vr.MaxMembers {
		if sp, ok := v.spare(); ok {
			next := append(v.members.Clone(), vr.Member{ID: sp.Meta.ID, ClientAddr: sp.Meta.ClientAddr, PeerAddr: sp.Meta.PeerAddr, Learner: true})
			slices.SortFunc(next, func(a, b vr.Member) int { return cmp.Compare(a.ID, b.ID) })
			why := fmt.Sprintf("add replica %d (%s) as a learner", sp.Meta.ID, sp.Meta.ClientAddr)
			if len(deadVoters) > 0 {
				why += fmt.Sprintf(", to replace voter %d", deadVoters[0])
			}
			return next, why
		}
	}
	return nil, ""
}

// spare returns the spare with the lowest id that may be added now.
func (v *apView) spare() (discovery.Peer, bool) {
	ids := make([]uint64, 0, len(v.gossip))
	for id := range v.gossip {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		g := v.gossip[id]
		if v.members.Contains(id) || g.State != discovery.Alive || v.now.Sub(g.Since) < spareStable || slices.Contains(v.retired, id) {
			continue
		}
		at, removed := v.removedAt[id]
		returning := g.Meta.Config.Holds(id) // its own log names it a member: not a fresh spare
		if (removed && g.Since.Before(at)) || ((removed || returning) && v.now.Sub(g.Since) < v.deadAfter) {
			continue // removed as dead, or back on an old data directory: only after DeadAfter of life
		}
		if g.Meta.ClientAddr == "" || g.Meta.PeerAddr == "" {
			continue
		}
		return g, true
	}
	return discovery.Peer{}, false
}

// autopilot runs the policy on the master until the server stops.
type autopilot struct {
	healthySince map[uint64]time.Time
	removedAt    map[uint64]time.Time
	heard        map[uint64]time.Time // apView.heard
	masterSince  time.Time
	wasMaster    bool
}

func (s *Server) runAutopilot() {
	defer s.backgroundW.Done()
	ap := &autopilot{healthySince: map[uint64]time.Time{}, removedAt: map[uint64]time.Time{}, heard: map[uint64]time.Time{}}
	t := time.NewTicker(autopilotInterval)
	defer t.Stop()
	var refused discovery.Meta // the last meta gossip refused, not tried again
	for {
		changed := s.disc.Changed()
		select {
		case <-s.closed:
			return
		case <-t.C:
		case <-changed:
		}
		info := s.log.Info()
		if len(info.Members) > 0 {
			refused = s.publishMeta(info, refused)
		}
		s.checkRemoved(info)
		s.autopilotRound(ap)
	}
}

// publishMeta tells gossip whether this replica is a spare and which
// configuration it holds; it returns the meta gossip refused (refused if
// that is the one it would publish again).
func (s *Server) publishMeta(info vr.Info, refused discovery.Meta) discovery.Meta {
	m := s.disc.Local().Meta
	want := m
	want.Spare = !info.Members.Contains(s.cfg.ID)
	want.Config = configMeta(info)
	if want == m || want == refused {
		return refused
	}
	if err := s.disc.UpdateMeta(want, time.Second); err != nil {
		s.cfg.Logger.Warn("discovery: cannot gossip this replica's role and configuration", "err", err)
		return want
	}
	return discovery.Meta{}
}

// configMeta is the configuration info holds, as gossip carries it (zero
// for none).
func configMeta(info vr.Info) discovery.ConfigMeta {
	var c discovery.ConfigMeta
	if len(info.Members) == 0 || len(info.Members) > discovery.MaxConfigMembers {
		return c
	}
	c.Epoch, c.Index = info.Epoch, info.ConfigIndex
	for i, m := range info.Members {
		c.Members[i] = m.ID
	}
	return c
}

func (s *Server) autopilotRound(ap *autopilot) {
	now := s.cfg.Now()
	if !s.serving.Load() {
		ap.wasMaster = false
		return
	}
	if !ap.wasMaster {
		ap.wasMaster, ap.masterSince = true, now
		clear(ap.healthySince)
	}
	for id, at := range ap.removedAt {
		if now.Sub(at) > max(removedMemory, 2*s.cfg.DeadAfter) {
			delete(ap.removedAt, id) // bounded: a machine removed long ago is a spare like any
		}
	}
	info := s.log.Info()
	if info.PendingConfig != 0 {
		return
	}
	v := &apView{now: now, self: s.cfg.ID, members: info.Members, gossip: s.gossipPeers(),
		behind: map[uint64]uint64{}, sinceAck: map[uint64]time.Duration{}, masterFor: now.Sub(ap.masterSince),
		target: s.cfg.TargetSize, deadAfter: s.cfg.DeadAfter, promoteAfter: s.cfg.PromoteAfter,
		healthySince: ap.healthySince, removedAt: ap.removedAt, retired: info.Retired, heard: ap.heard}
	for id, p := range s.progress() {
		v.behind[id], v.sinceAck[id] = uint64(p.Match), p.SinceAck
		if p.SinceAck >= 0 {
			ap.heard[id] = now.Add(-p.SinceAck)
		}
	}
	for id := range ap.heard {
		if !info.Members.Contains(id) {
			delete(ap.heard, id) // bounded by the configuration
		}
	}
	for _, m := range info.Members {
		switch {
		case !m.Learner || !v.healthy(m.ID):
			delete(ap.healthySince, m.ID)
		case ap.healthySince[m.ID].IsZero():
			ap.healthySince[m.ID] = now
		}
	}
	next, why := nextChange(v)
	if next == nil {
		return
	}
	for _, m := range info.Members {
		if !next.Contains(m.ID) && v.dead(m.ID) {
			ap.removedAt[m.ID] = now // for the flapping rule: only what was removed as dead
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := s.proposeConfig(ctx, next, "autopilot: "+why); err != nil {
		s.cfg.Logger.Warn("membership: autopilot change refused", "change", why, "err", err)
	}
}
