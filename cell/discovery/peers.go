package discovery

import (
	"cmp"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// State is a member's health as this node sees it.
type State int

// The states of a member. A member is Alive when it joined or refuted a
// suspicion, Suspect from a failed probe until it is refuted or declared
// Dead, Dead when its suspicion timed out, and Left when it called Leave.
// A Dead or Left member that comes back is Alive again.
const (
	Alive State = iota + 1
	Suspect
	Dead
	Left
)

func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Suspect:
		return "suspect"
	case Dead:
		return "dead"
	case Left:
		return "left"
	}
	return "unknown"
}

// Peer is a member of the cell as this node sees it.
type Peer struct {
	Meta  Meta
	Addr  string    // gossip address, host:port
	State State     // health
	Since time.Time // when State last changed, by this node's clock
}

// member is one entry of the table.
type member struct {
	peer    Peer
	leaving bool        // its last meta said it was about to leave
	timer   *time.Timer // ends a suspicion memberlist refuted; see suspect
	round   uint64      // of suspicion, counted from 1: which one timer ends
}

// table is this node's view of the members, fed by memberlist's
// delegates (delegate.go) and the suspicions in its log (log.go).
// memberlist calls the event delegate one call at a time, with its node
// lock held: table never calls memberlist.
type table struct {
	local  string // memberlist name of this node
	cell   string
	retain time.Duration // of dead and left members
	// suspectFor bounds how long memberlist can keep a member of a cell
	// of n members suspect before it declares it dead.
	suspectFor func(n int) time.Duration
	now        func() time.Time
	log        *slog.Logger

	mu      sync.Mutex
	members map[string]*member // by memberlist name
	changed chan struct{}      // closed and replaced on every change
}

func newTable(local, cell string, retain time.Duration, suspectFor func(int) time.Duration, log *slog.Logger) *table {
	return &table{
		local: local, cell: cell, retain: retain, suspectFor: suspectFor, now: time.Now, log: log,
		members: make(map[string]*member), changed: make(chan struct{}),
	}
}

// alive records a member that joined, came back or changed its meta.
func (t *table) alive(n *memberlist.Node) {
	meta, leaving, err := decodeMeta(n.Meta)
	if err == nil && meta.Cell != t.cell {
		err = errOtherCell(meta.Cell, t.cell)
	}
	if err != nil { // NotifyAlive refuses these; never list one all the same
		t.log.Warn("discovery: ignoring member", "node", n.Name, "addr", n.Address(), "err", err)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.members[n.Name]
	if !ok {
		m = &member{}
		t.members[n.Name] = m
	}
	old := m.peer
	m.peer.Meta, m.peer.Addr, m.leaving = meta, n.Address(), leaving
	t.setState(m, Alive)
	if !ok || m.peer != old {
		t.notify()
	}
}

// gone records a member that memberlist declared dead or that left.
// memberlist's Node does not say which (its State is not kept up to
// date), so a member whose last meta said it was leaving has Left.
func (t *table) gone(n *memberlist.Node) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.members[n.Name]
	if !ok {
		return
	}
	if _, leaving, err := decodeMeta(n.Meta); err == nil && leaving {
		m.leaving = true
	}
	state := Dead
	if m.leaving {
		state = Left
	}
	if t.setState(m, state) {
		t.notify()
	}
}

// suspect records that a probe of a member failed: memberlist suspects it
// now. memberlist says nothing when a suspicion is refuted, so the member
// is Alive again on its next acknowledged probe, when it changes its
// meta, or when the suspicion would have made it dead by now.
func (t *table) suspect(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.members[name]
	if !ok || (m.peer.State != Alive && m.peer.State != Suspect) {
		return
	}
	changed := t.setState(m, Suspect)
	if m.timer != nil {
		m.timer.Stop()
	}
	m.round++
	round := m.round
	m.timer = time.AfterFunc(t.suspectFor(len(t.members)), func() { t.unsuspect(name, round) })
	if changed {
		t.notify()
	}
}

// acked records an acknowledged probe of a member.
func (t *table) acked(name string) { t.unsuspect(name, 0) }

// unsuspect makes a Suspect member Alive: if round is not 0, only if its
// suspicion is still that round.
func (t *table) unsuspect(name string, round uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.members[name]
	if !ok || m.peer.State != Suspect || (round != 0 && m.round != round) {
		return
	}
	t.setState(m, Alive)
	t.notify()
}

// setState moves m to state s, if it is not already there, and reports
// whether it moved.
func (t *table) setState(m *member, s State) bool {
	if s != Suspect && m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	if m.peer.State == s {
		return false
	}
	m.peer.State, m.peer.Since = s, t.now()
	return true
}

func (t *table) notify() {
	close(t.changed)
	t.changed = make(chan struct{})
}

func (t *table) changedCh() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// peers returns the members, sorted by ID then DataID, after dropping the
// dead and left ones older than the retention.
func (t *table) peers() []Peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prune()
	out := make([]Peer, 0, len(t.members))
	for _, m := range t.members {
		out = append(out, m.peer)
	}
	slices.SortFunc(out, func(a, b Peer) int {
		return cmp.Or(cmp.Compare(a.Meta.ID, b.Meta.ID), cmp.Compare(a.Meta.DataID, b.Meta.DataID))
	})
	return out
}

func (t *table) prune() {
	now := t.now()
	for name, m := range t.members {
		gone := m.peer.State == Dead || m.peer.State == Left
		if gone && name != t.local && now.Sub(m.peer.Since) > t.retain {
			delete(t.members, name)
		}
	}
}

// deadAddrs returns the gossip addresses of the members that are dead
// (not left), sorted, each once: not an address that this node or a member
// not dead has now (a replica that rejoined there under a new name, after
// its disk was wiped, leaves its old name dead for good).
func (t *table) deadAddrs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prune()
	taken := map[string]bool{}
	for name, m := range t.members {
		if name == t.local || (m.peer.State != Dead && m.peer.State != Left) {
			taken[m.peer.Addr] = true
		}
	}
	var out []string
	for _, m := range t.members {
		if m.peer.State == Dead && m.peer.Addr != "" && !taken[m.peer.Addr] {
			out = append(out, m.peer.Addr)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// peer returns the member called name.
func (t *table) peer(name string) (Peer, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.members[name]
	if !ok {
		return Peer{}, false
	}
	return m.peer, true
}

// stop stops the suspicion timers.
func (t *table) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range t.members {
		if m.timer != nil {
			m.timer.Stop()
			m.timer = nil
		}
	}
}
