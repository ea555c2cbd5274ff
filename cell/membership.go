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
	s.cfg.Logger.Info("configuration in force", "epoch", epoch, "voters", ms.Voters(), "members", len(ms))
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

// removeMember is the operator's forced removal (RemoveMember): on the
// master only, one configuration change, never the last voter.
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
	return i, nil
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

// notMasterErr is NOT_MASTER with the master this replica believes in.
func (s *Server) notMasterErr() error { return s.notMasterError(s.log.NotMaster()) }

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
	if mb.PeerAddr != "" {
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
// that are not in the configuration, in id order.
func spares(ms vr.Members, gossip map[uint64]discovery.Peer) []*chubby.ReplicaStatus {
	ids := make([]uint64, 0, len(gossip))
	for id := range gossip {
		if !ms.Contains(id) {
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
