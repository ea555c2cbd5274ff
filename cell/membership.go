package cell

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chubbygo/chubby/cell/discovery"
	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/replica"
	"github.com/chubbygo/chubby/replica/vr"
)

// The membership surface of a replica: the configuration's members in
// GetMaster and GetStatus, the operator's forced removal, and the
// transport following the configuration. The policy that grows and heals
// the cell on its own is in autopilot.go.

// replicaAddrs returns the client addresses of the configuration's
// members (GetMaster's replicas).
func (s *Server) replicaAddrs() []string {
	ms := s.members.Load()
	if ms == nil {
		return nil
	}
	return memberAddrs(*ms)
}

// memberAddrs returns the client addresses of the configuration's members.
func memberAddrs(ms vr.Members) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		if m.ClientAddr != "" {
			out = append(out, m.ClientAddr)
		}
	}
	return out
}

// onConfig is the log's OnConfig: the peer transport follows the
// configuration's peer addresses (and, with discovery, those of spares
// being added come from their gossip). Called from the log's loop.
func (s *Server) onConfig(ms vr.Members, epoch uint64) {
	s.members.Store(&ms)
	if s.tr == nil {
		return
	}
	peers := map[uint64]string{}
	for _, m := range ms {
		if m.PeerAddr != "" {
			peers[m.ID] = m.PeerAddr
		}
	}
	if s.cfg.Peers != nil {
		for _, p := range s.cfg.Peers { // a static cell's addresses, for replicas its log does not name yet
			if _, ok := peers[p.ID]; !ok && p.PeerAddr != "" && ms.Contains(p.ID) {
				peers[p.ID] = p.PeerAddr
			}
		}
	}
	if err := s.tr.SetPeers(peers); err != nil {
		s.cfg.Logger.Error("replica transport: cannot follow the configuration", "epoch", epoch, "err", err)
	}
	// vr logs the configuration itself ("vr: configuration in force"); this
	// says only what the transport did with it.
	s.cfg.Logger.Debug("peer addresses follow the configuration", "epoch", epoch, "peers", len(peers))
}

// knownPeer reports whether replica traffic from id is taken: from a
// member of the configuration, or from anyone while this replica cannot
// judge (it is being added, or is behind its view's epoch).
func (s *Server) knownPeer(id uint64) bool {
	if ms := s.members.Load(); ms != nil && ms.Contains(id) {
		return true
	}
	i := s.log.Info()
	return !i.Voter || vr.EpochOf(i.View) != i.Epoch
}

// removedFrom says why replica self is out of the cell, or "" when it is
// not known to be, from the configuration its log holds (info) and those
// other replicas gossip. A replica taken out hears nothing more from the
// master: a learner never gets the entry that removes it, a voter
// usually gets it but not its commit, and one cut off in that instant
// neither; its own log goes on naming it. So it is out when its
// configuration does not name it, or when another replica holds a newer
// configuration without it: of a later epoch (a voter change commits
// before anyone enters its epoch), or of the same epoch in force at an
// index past this replica's whole log. A replica whose log holds no
// configuration (a spare, joining) is not out: it was never in.
func removedFrom(self uint64, info vr.Info, gossip map[uint64]discovery.Peer) string {
	if len(info.Members) == 0 {
		return ""
	}
	if !info.Members.Contains(self) {
		return fmt.Sprintf("removed from the cell: the configuration of epoch %d it holds does not name it", info.Epoch)
	}
	ids := make([]uint64, 0, len(gossip))
	for id := range gossip {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		c := gossip[id].Meta.Config
		if id == self || c.IsZero() || c.Holds(self) {
			continue
		}
		if c.Epoch > info.Epoch || (c.Epoch == info.Epoch && c.Index > info.LastOp) {
			return fmt.Sprintf("removed from the cell: replica %d holds a newer configuration without it (epoch %d, in force at index %d; this replica holds epoch %d, its log ends at %d)",
				id, c.Epoch, c.Index, info.Epoch, info.LastOp)
		}
	}
	return ""
}

// checkRemoved updates whether this replica is out of the cell, and logs
// the changes. A replica out of the cell answers no call as a member
// (notMasterErr, GetMaster) and says so in its status; it comes back as
// any replica does, when a master adds it again.
func (s *Server) checkRemoved(info vr.Info) {
	why := removedFrom(s.cfg.ID, info, s.gossipPeers())
	old := s.removed.Load()
	switch {
	case why != "" && old == nil:
		s.cfg.Logger.Warn("membership: this replica is "+why+"; it serves as nothing until a master adds it again", "id", s.cfg.ID)
	case why == "" && old != nil:
		s.cfg.Logger.Info("membership: this replica is in the cell's configuration again", "id", s.cfg.ID, "epoch", info.Epoch)
	}
	if why == "" {
		s.removed.Store(nil)
	} else if old == nil || *old != why {
		s.removed.Store(&why)
	}
}

// removedReason is why this replica is out of the cell ("" if it is not
// known to be).
func (s *Server) removedReason() string {
	if p := s.removed.Load(); p != nil {
		return *p
	}
	return ""
}

// markRemoved makes the status st of a replica out of the cell say so: its
// own entry's membership "removed" (an entry added if its configuration
// no longer lists it), nobody named master (what it believes is of a
// configuration that no longer holds it), and why, after its decisions.
func (s *Server) markRemoved(st *chubby.CellStatus, why string) {
	self := strconv.FormatUint(s.cfg.ID, 10)
	removed := "removed"
	found := false
	for _, r := range st.Replicas {
		if r.Role == chubby.ReplicaRole_MASTER {
			r.Role = chubby.ReplicaRole_REPLICA
		}
		if r.Id == self {
			r.Membership, found = &removed, true
		}
	}
	if !found {
		st.Replicas = append(st.Replicas, &chubby.ReplicaStatus{Id: self, Address: s.Addr(), Role: chubby.ReplicaRole_REPLICA,
			CommittedOp: int64(s.log.Applied()), Membership: &removed})
	}
	st.MasterId, st.MasterAddress = "", ""
	st.Decisions = append(st.Decisions, fmt.Sprintf("replica %d is %s", s.cfg.ID, why))
}

// removeMember is the operator's forced removal (RemoveMember): on the
// master only, one configuration change, never the last voter. It answers
// once the change has committed (awaitRemoved), so that "removed" means
// removed; an error says whether the change may still take effect.
func (s *Server) removeMember(ctx context.Context, idStr string) (uint64, error) {
	id, err := strconv.ParseUint(idStr, 10, 64)
	if err != nil || id == 0 {
		return 0, invalid("replica id %q is not a positive number", idStr)
	}
	if !s.serving.Load() {
		return 0, s.notMasterErr()
	}
	info := s.log.Info()
	m, ok := info.Members.Get(id)
	if !ok {
		if _, spare := s.gossipPeers()[id]; spare {
			return 0, fs.Errorf(chubby.ErrorCode_NOT_FOUND, "replica %d is a spare, not in the configuration (epoch %d): there is nothing to remove (stop it to keep the autopilot from adding it)", id, info.Epoch)
		}
		return 0, fs.Errorf(chubby.ErrorCode_NOT_FOUND, "replica %d is not in the configuration (epoch %d)", id, info.Epoch)
	}
	if !m.Learner && len(info.Members.Voters()) == 1 {
		return 0, fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "replica %d is the last voter; add another first", id)
	}
	next := info.Members.Without(id)
	i, err := s.proposeConfig(ctx, next, fmt.Sprintf("operator removes replica %d (retired: not taken back unless it starts again on a fresh data directory)", id), id)
	if err != nil {
		return 0, err
	}
	if err := s.awaitRemoved(ctx, id, i); err != nil {
		return 0, err
	}
	return i, nil
}

// configCommitWait bounds how long RemoveMember waits for its change to
// commit when the caller's deadline is later or absent (a plain Thrift
// client sends none). A change commits in milliseconds, and within about
// a second across a view change; past the bound the answer says the
// outcome is unknown.
const configCommitWait = 5 * time.Second

// outcomeUnknown starts the message of the error RemoveMember answers when
// its change was proposed but is not known committed: the change may still
// take effect. idl/chubby.thrift documents it; chubbyfs exits 3 on it.
const outcomeUnknown = "outcome unknown: "

// awaitRemoved waits until the configuration change at index that takes
// replica id out is known committed here, or is known lost (cut by a view
// change before it committed: nothing changed), or until shortly before
// the caller's deadline, at most configCommitWait; then the outcome is
// unknown, and so is the error's text.
func (s *Server) awaitRemoved(ctx context.Context, id, index uint64) error {
	wctx, cancel := context.WithDeadline(ctx, answerBy(ctx, time.Now(), configCommitWait))
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		info := s.log.Info()
		switch master.RemovalOutcome(info, id, index) {
		case master.ChangeCommitted:
			s.decide(fmt.Sprintf("the removal of replica %d (configuration change at index %d) committed", id, index))
			return nil
		case master.ChangeLost:
			return s.removalLost(info, id, index)
		}
		select {
		case <-tick.C:
			continue
		case <-wctx.Done():
		case <-s.closed:
		}
		s.decide(fmt.Sprintf("the removal of replica %d (configuration change at index %d) is not known committed", id, index))
		return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "%sthe removal of replica %d (configuration change at log index %d) was proposed but is not known committed: it may still take effect; check with chubbyfs members", outcomeUnknown, id, index)
	}
}

// removalLost is RemoveMember's answer when its change was lost in a view
// change: another entry committed at its index. That entry may have taken
// the replica out too (the next master's autopilot removing a dead voter),
// but without retiring it.
func (s *Server) removalLost(info vr.Info, id, index uint64) error {
	s.decide(fmt.Sprintf("the removal of replica %d (configuration change at index %d) was lost in a view change before it committed", id, index))
	if !info.Members.Contains(id) {
		return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the removal of replica %d (configuration change at log index %d) was lost in a view change before it committed; another change took replica %d out of the configuration, but did not retire it: should it start again, the autopilot may take it back (stop it, or start it on a fresh data directory)", id, index, id)
	}
	return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the removal of replica %d (configuration change at log index %d) was lost in a view change before it committed: nothing changed; retry", id, index)
}

// answerBy is when a call that waits should give up to be answered in
// time: at most wait from now, and before ctx's deadline (the caller's
// RPC timeout) by a fifth of the time left, at most a second, so that
// the answer reaches the caller before it stops listening.
func answerBy(ctx context.Context, now time.Time, wait time.Duration) time.Time {
	until := now.Add(wait)
	if dl, ok := ctx.Deadline(); ok {
		if d := dl.Add(-min(dl.Sub(now)/5, time.Second)); d.Before(until) {
			until = d
		}
	}
	return until
}

// proposeConfig proposes a configuration change and records the decision;
// retire names replicas an operator takes out (vr.Configuration.Retired).
func (s *Server) proposeConfig(ctx context.Context, next vr.Members, why string, retire ...uint64) (uint64, error) {
	i, err := s.log.ProposeConfig(ctx, next, retire...)
	var nm *replica.NotMasterError
	switch {
	case errors.As(err, &nm):
		return 0, s.notMasterErr()
	case errors.Is(err, vr.ErrConfigInProgress):
		return 0, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "a configuration change is in progress; retry shortly")
	case errors.Is(err, vr.ErrBadConfigChange), errors.Is(err, vr.ErrNoChange):
		return 0, fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "%v", err)
	case err != nil:
		return 0, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "%v", err)
	}
	s.decide(fmt.Sprintf("%s (configuration change at index %d)", why, i))
	return i, nil
}

// decide logs a membership decision and keeps it for the status page.
func (s *Server) decide(msg string) {
	s.cfg.Logger.Info("membership: " + msg)
	s.decisionCount.Add(1)
	s.decMu.Lock()
	defer s.decMu.Unlock()
	line := s.cfg.Now().UTC().Format(time.RFC3339) + " " + msg
	s.decisions = append(s.decisions, line)
	if len(s.decisions) > maxDecisions {
		s.decisions = slices.Delete(s.decisions, 0, len(s.decisions)-maxDecisions)
	}
}

// maxDecisions bounds the decisions kept for the status page.
const maxDecisions = 50

func (s *Server) recentDecisions() []string {
	s.decMu.Lock()
	defer s.decMu.Unlock()
	return slices.Clone(s.decisions)
}

// notMasterErr is NOT_MASTER with the master this replica believes in,
// or, on a replica out of the cell, UNAVAILABLE saying so: the master it
// believes in is of a configuration that no longer holds it.
func (s *Server) notMasterErr() error {
	if why := s.removedReason(); why != "" {
		return s.removedErr(why)
	}
	return s.notMasterError(s.log.NotMaster())
}

// removedErr is the answer of a replica out of the cell to a call for a
// member.
func (s *Server) removedErr(why string) error {
	return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "replica %d is %s: ask a member", s.cfg.ID, why)
}

// progress returns the members' progress as the master sees it (nil off
// the master), by id.
func (s *Server) progress() map[uint64]replica.MemberProgress {
	if !s.serving.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	ps, commit, err := s.log.Progress(ctx)
	if err != nil {
		return nil
	}
	out := make(map[uint64]replica.MemberProgress, len(ps))
	for _, p := range ps {
		p.Match = commit - min(p.Match, commit) // now: how far behind
		out[p.ID] = p
	}
	return out
}

// describeMember fills a member's membership fields of its status.
func (s *Server) describeMember(rs *chubby.ReplicaStatus, mb vr.Member, gossip map[uint64]discovery.Peer, progress map[uint64]replica.MemberProgress) {
	role := "voter"
	if mb.Learner {
		role = "learner"
	}
	rs.Membership = &role
	// A one-replica cell without discovery has no peer port (cells made
	// before this wrote "127.0.0.1:0" in its place): it has no peer address.
	if mb.PeerAddr != "" && s.tr != nil {
		pa := mb.PeerAddr
		rs.PeerAddress = &pa
	}
	if p, ok := gossip[mb.ID]; ok {
		g := gossipState(p)
		rs.GossipState = &g
	}
	if p, ok := progress[mb.ID]; ok {
		behind, since := int64(p.Match), int64(-1)
		if p.SinceAck >= 0 {
			since = p.SinceAck.Milliseconds()
		}
		rs.Behind, rs.LastContactMs = &behind, &since
	} else if mb.ID == s.cfg.ID && s.serving.Load() {
		zero := int64(0)
		rs.Behind, rs.LastContactMs = &zero, &zero
	}
}

// gossipPeers returns what gossip knows of each replica of this cell: its
// newest incarnation (nil without gossip).
func (s *Server) gossipPeers() map[uint64]discovery.Peer {
	if s.disc == nil {
		return nil
	}
	out := map[uint64]discovery.Peer{}
	for _, p := range s.disc.Members() {
		if old, ok := out[p.Meta.ID]; !ok || p.Since.After(old.Since) {
			out[p.Meta.ID] = p
		}
	}
	return out
}

func gossipState(p discovery.Peer) string { return strings.ToLower(p.State.String()) }

// spares returns the status of the replicas gossip knows of in this cell
// that are not in the configuration and that it has alive or suspect, in
// id order. A dead or left spare is not listed: the autopilot adds only
// live ones, RemoveMember has nothing to act on (it is in no
// configuration), and gossip keeps it for its DeadRetention (ten minutes).
func spares(ms vr.Members, gossip map[uint64]discovery.Peer) []*chubby.ReplicaStatus {
	ids := make([]uint64, 0, len(gossip))
	for id, p := range gossip {
		if !ms.Contains(id) && p.State != discovery.Dead && p.State != discovery.Left {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := make([]*chubby.ReplicaStatus, 0, len(ids))
	for _, id := range ids {
		p := gossip[id]
		role, state, pa := "spare", gossipState(p), p.Meta.PeerAddr
		out = append(out, &chubby.ReplicaStatus{Id: strconv.FormatUint(id, 10), Address: p.Meta.ClientAddr,
			Role: chubby.ReplicaRole_REPLICA, CommittedOp: -1, Membership: &role, GossipState: &state, PeerAddress: &pa})
	}
	return out
}
