package master

import (
	"slices"
	"strings"

	"github.com/chubbygo/chubby/gen/chubby"
)

// Cache limits. A read that would pass one is served uncachable instead of
// failing.
const (
	// DefaultMaxCachedPerSession bounds the nodes one session may cache.
	DefaultMaxCachedPerSession = 10000
	// DefaultMaxCachedPerCell bounds the (session, node) pairs the master
	// tracks in all.
	DefaultMaxCachedPerCell = 1000000
	// maxPendingInvalidations bounds the paths queued for one session; past
	// it they collapse into one invalidate_all.
	maxPendingInvalidations = 1024
)

// Cache is the master's in-memory table of which sessions cache which
// nodes. It is not replicated: a new master starts it empty
// (Reset) and asks every recovered caching session to flush its cache
// (invalidate_all) before any change commits. It is not safe for
// concurrent use.
//
// A change to nodes first calls Invalidate: the paths become uncachable
// (reads say so and register nobody), each caching session gets an
// invalidation on its KeepAlive (the caller wakes the sessions Invalidate
// names), and the change may commit once Ready says every session it waits
// for has acknowledged or its lease at this master has ended. Then Done
// makes the paths cachable again (once the change has applied, or a while
// after a change of unknown outcome).
//
// A cached copy is served without a rights check, so it must not outlive
// the read right that let the session read it: a change that may narrow
// what an ACL name grants (fs.Reach.ACLs) invalidates every cached node
// whose read right that name governs, as a change to the node would. The
// table knows those nodes from the reads themselves: a read registers its
// path before it looks at the state (Register) and, once it has, the read
// ACL name it saw (RegisterACL), which indexes the path under the name.
// Only cached nodes are indexed, never the state. The cost per cached
// (session, node) pair: the name with the pair (a string header), one
// index entry per (name, node) that some session caches under that name
// (a map entry): 44 bytes more per node in all, 345 against 301
// (BenchmarkIndexBytes); and a second short hold of the table's lock per
// cacheable read whose node names a read ACL (BenchmarkRegisterRead).
// Invalidating a name costs its cached nodes' cachers, like invalidating
// those paths: about 1 µs per node (BenchmarkACLInvalidate10k).
type Cache struct {
	maxPerSession, maxPerCell int

	epoch      int64                                    // the master epoch of the table
	base       int64                                    // seqs of this epoch are above it
	cachers    map[string]map[chubby.SessionID]struct{} // path → sessions caching it
	sessions   map[chubby.SessionID]*cacheSession       // sessions with cached or pending state
	uncachable map[string]int                           // path → changes in progress
	trees      map[string]int                           // path → changes in progress to everything under it
	allChanges int                                      // changes in progress that touch any node
	total      int                                      // registered (session, path) pairs
	// acls indexes the cached nodes by the read ACL name their reads saw:
	// name → path → sessions caching path under name.
	acls          map[string]map[string]int
	aclPending    map[string]int // ACL name → changes in progress that may narrow it
	allACLChanges int            // changes in progress that may remove every ACL file
	// aclSeq moves whenever a change to ACL names begins or ends: a read
	// that saw it move between Register and RegisterACL cannot tell
	// whether its rights check saw the change (see RegisterACL).
	aclSeq uint64
	// unacked holds the sessions with invalidations not yet acknowledged:
	// every change waits for them.
	unacked map[chubby.SessionID]struct{}
}

// cacheSession is a caching session's part of the table. Only sessions
// created with CreateSessionRequest.cache have one: others never cache.
type cacheSession struct {
	cached  map[string]string // path → the read ACL name its read saw ("" for none, or not known yet)
	pending []string          // invalidated paths not yet acknowledged
	all     bool              // an invalidate_all is pending
	seq     int64             // highest invalidation seq issued
	acked   int64             // highest seq acknowledged
}

// NewCache returns an empty table (epoch 0). Limits of 0 take the
// defaults.
func NewCache(perSession, perCell int) *Cache {
	if perSession <= 0 {
		perSession = DefaultMaxCachedPerSession
	}
	if perCell <= 0 {
		perCell = DefaultMaxCachedPerCell
	}
	t := &Cache{maxPerSession: perSession, maxPerCell: perCell}
	t.Reset(0, nil)
	return t
}

// Reset starts the table of a new master epoch: the recovered caching
// sessions may cache anything from the old master, so each must flush
// (invalidate_all) before a change commits. Seqs of an epoch start above
// (epoch mod 2^31)<<32, and an acknowledgement counts only when its
// KeepAlive names this epoch (or none: a client that never heard of one),
// so one meant for another master never counts for this one. (Master
// epochs follow views, which carry the configuration epoch in their high
// bits: past the first reconfiguration they exceed 2^31, and the modulus
// keeps seqs positive; the epoch check keeps them apart.)
func (t *Cache) Reset(epoch int64, recovered []chubby.SessionID) {
	t.epoch = epoch
	t.base = (epoch & (1<<31 - 1)) << 32
	t.cachers = make(map[string]map[chubby.SessionID]struct{})
	t.sessions = make(map[chubby.SessionID]*cacheSession)
	t.uncachable = make(map[string]int)
	t.trees = make(map[string]int)
	t.allChanges = 0
	t.total = 0
	t.acls = make(map[string]map[string]int)
	t.aclPending = make(map[string]int)
	t.allACLChanges = 0
	t.aclSeq++
	t.unacked = make(map[chubby.SessionID]struct{})
	for _, id := range recovered {
		t.sessions[id] = &cacheSession{cached: map[string]string{}, all: true, seq: t.base + 1, acked: t.base}
		t.unacked[id] = struct{}{}
	}
}

// Declare adds a session created with CreateSessionRequest.cache.
func (t *Cache) Declare(id chubby.SessionID) {
	if _, ok := t.sessions[id]; !ok {
		t.sessions[id] = &cacheSession{cached: map[string]string{}, seq: t.base, acked: t.base}
	}
}

// Register records that session id caches path, before the read looks at
// the state (so a change either sees the registration or has already made
// path uncachable). It reports whether the reply may say cacheable. It is
// RegisterRead for a read of a node no ACL file governs (its read ACL
// name is empty, as in a cell without ACLs).
func (t *Cache) Register(id chubby.SessionID, path string) bool {
	ok, _ := t.RegisterRead(id, path)
	return ok
}

// ReadMark is the table as a read registered, for RegisterACL to check.
type ReadMark struct {
	epoch  int64
	aclSeq uint64
	seq    int64 // the session's invalidation seq
}

// RegisterRead is Register, and returns the mark to pass to RegisterACL
// once the read has looked at the state.
func (t *Cache) RegisterRead(id chubby.SessionID, path string) (bool, ReadMark) {
	if t.uncachable[path] > 0 || t.allChanges > 0 || t.underTree(path) {
		return false, ReadMark{}
	}
	cs, ok := t.sessions[id]
	if !ok {
		return false, ReadMark{} // the session did not declare it caches
	}
	if !t.register(id, cs, path) {
		return false, ReadMark{}
	}
	return true, ReadMark{epoch: t.epoch, aclSeq: t.aclSeq, seq: cs.seq}
}

func (t *Cache) register(id chubby.SessionID, cs *cacheSession, path string) bool {
	if cs.all {
		// The session has not flushed what an older master let it cache;
		// it will drop this too when it does.
		return false
	}
	if _, ok := cs.cached[path]; ok {
		return true
	}
	if len(cs.cached) >= t.maxPerSession || t.total >= t.maxPerCell {
		return false
	}
	cs.cached[path] = ""
	m := t.cachers[path]
	if m == nil {
		m = make(map[chubby.SessionID]struct{})
		t.cachers[path] = m
	}
	m[id] = struct{}{}
	t.total++
	return true
}

// RegisterACL records, after a read that Register let say cacheable, the
// read ACL name of the node as the read saw it (the name its rights check
// used; "" when the right is everybody's), so that a change that may
// narrow that name invalidates the session's copy. It reports whether the
// reply may still say cacheable: not when a change that may narrow the
// name is in progress, nor when any change to ACL names began or ended or
// the session was sent an invalidation since Register (mark), since the
// read may then have been checked against an ACL file that a change
// already past this table's notice rewrote. A change to the name that
// begins after RegisterACL finds the path in the index; one that ended
// before Register applied before the read looked.
func (t *Cache) RegisterACL(id chubby.SessionID, path, name string, mark ReadMark) bool {
	if name == "" {
		return true // no ACL file governs the right: nothing can narrow it
	}
	cs, ok := t.sessions[id]
	if !ok || mark.epoch != t.epoch || mark.aclSeq != t.aclSeq || mark.seq != cs.seq ||
		t.aclPending[name] > 0 || t.allACLChanges > 0 {
		return false
	}
	old, ok := cs.cached[path]
	switch {
	case !ok:
		return false // uncached since (the seq would have moved): defensive
	case old == name:
		return true
	case old != "":
		// Another read of the session saw another name with no
		// invalidation in between: a SetACL, which invalidates the path,
		// changes a node's names, so this does not happen; keep the
		// name indexed and serve this read uncachable.
		return false
	}
	cs.cached[path] = name
	m := t.acls[name]
	if m == nil {
		m = make(map[string]int)
		t.acls[name] = m
	}
	m[path]++
	return true
}

// underTree reports whether path is under a tree a change in progress
// may remove.
func (t *Cache) underTree(path string) bool {
	for tree := range t.trees {
		if strings.HasPrefix(path, treePrefix(tree)) {
			return true
		}
	}
	return false
}

func treePrefix(tree string) string { return strings.TrimSuffix(tree, "/") + "/" }

// Forget drops a session (it ended, or is ending: its client no longer
// serves its cache). Changes waiting for it may be Ready now.
func (t *Cache) Forget(id chubby.SessionID) {
	cs, ok := t.sessions[id]
	if !ok {
		return
	}
	for p := range cs.cached {
		t.uncache(id, cs, p)
	}
	delete(t.sessions, id)
	delete(t.unacked, id)
}

// uncache drops the session's registration of p.
func (t *Cache) uncache(id chubby.SessionID, cs *cacheSession, p string) {
	name, ok := cs.cached[p]
	if !ok {
		return
	}
	delete(cs.cached, p)
	if m := t.acls[name]; name != "" && m != nil {
		if m[p]--; m[p] <= 0 {
			delete(m, p)
		}
		if len(m) == 0 {
			delete(t.acls, name)
		}
	}
	if m := t.cachers[p]; m != nil {
		if _, ok := m[id]; ok {
			delete(m, id)
			t.total--
		}
		if len(m) == 0 {
			delete(t.cachers, p)
		}
	}
}

// Ack records the sessions' acknowledged invalidation seqs (from a
// KeepAlive that named the master epoch epoch, 0 for none) and reports
// whether any moved (changes waiting may be Ready).
func (t *Cache) Ack(epoch int64, ids []chubby.SessionID, acks []int64) bool {
	if epoch != 0 && epoch != t.epoch {
		return false
	}
	moved := false
	for i, id := range ids {
		cs, ok := t.sessions[id]
		if !ok || acks[i] <= cs.acked || acks[i] > cs.seq {
			continue
		}
		cs.acked = acks[i]
		if cs.acked == cs.seq {
			cs.pending, cs.all = nil, false
			delete(t.unacked, id)
		}
		moved = true
	}
	return moved
}

// HasPending reports whether one of the sessions has unacknowledged
// invalidations (then its KeepAlive is answered at once).
func (t *Cache) HasPending(ids []chubby.SessionID) bool {
	for _, id := range ids {
		if cs, ok := t.sessions[id]; ok && cs.acked < cs.seq {
			return true
		}
	}
	return false
}

// Attach adds to each live grant the session's unacknowledged
// invalidations (all of them again: a reply may have been lost).
func (t *Cache) Attach(results []*chubby.LeaseGrant) {
	for _, g := range results {
		if g.Error != nil {
			continue
		}
		cs, ok := t.sessions[g.Session]
		if !ok || cs.acked >= cs.seq {
			continue
		}
		seq := cs.seq
		g.InvalidationSeq = &seq
		if cs.all {
			all := true
			g.InvalidateAll = &all
		} else {
			g.Invalidations = append([]string(nil), cs.pending...)
		}
	}
}

// Change is one change's part in the table: the paths it made uncachable
// and the sessions it waits for.
type Change struct {
	epoch   int64 // the master epoch of the table it was prepared in
	paths   []string
	trees   []string
	all     bool
	acls    []string
	allACLs bool
	waits   []cacheWait
	done    bool
}

// cacheWait is one session a change waits for: until acked reaches seq,
// or its lease (as it was when the change began) ends.
type cacheWait struct {
	id  chubby.SessionID
	seq int64
	end Time
}

// Scope is what a change may touch of what sessions cache: the paths, the
// trees and the ACL names of a command's reach (fs.Reach).
type Scope struct {
	// Paths whose cached copies change; Trees everything strictly under
	// which may go; All: every cached node.
	Paths, Trees []string
	All          bool
	// ACLs whose grant may narrow: every cached node whose read right one
	// of them governs; AllACLs: every name's.
	ACLs    []string
	AllACLs bool
}

// Invalidate is InvalidateScope of paths, trees and all, with no ACL name.
func (t *Cache) Invalidate(paths, trees []string, all bool, leaseEnd func(chubby.SessionID) (Time, bool)) (*Change, []chubby.SessionID) {
	return t.InvalidateScope(Scope{Paths: paths, Trees: trees, All: all}, leaseEnd)
}

// InvalidateScope prepares a change to s's paths, to everything under its
// trees, or, when All is set, to every cached node, and to the cached
// nodes whose read right its ACL names govern (the reach of a command:
// fs.State.Reach): it makes them uncachable (the paths, and reads that
// saw one of the names) and queues invalidations for their cachers. It
// returns the change, to pass to Ready and Done, and the sessions to wake
// (answer their parked KeepAlives now). leaseEnd gives a session's lease
// end at this master (false when it has ended or is ending); it is read
// once, here: a lease extended later was extended by a reply that carried
// the invalidation, which the client applies first.
func (t *Cache) InvalidateScope(s Scope, leaseEnd func(chubby.SessionID) (Time, bool)) (*Change, []chubby.SessionID) {
	ch := &Change{epoch: t.epoch, paths: slices.Clone(s.Paths), trees: slices.Clone(s.Trees), all: s.All,
		acls: slices.Clone(s.ACLs), allACLs: s.AllACLs}
	if s.All {
		t.allChanges++
	}
	t.beginACLs(ch)
	for _, p := range s.Paths {
		t.uncachable[p]++
	}
	for _, p := range s.Trees {
		t.trees[p]++
	}
	inv := &invalidation{t: t, touched: make(map[chubby.SessionID]bool)}
	inv.nodes(s)
	inv.acls(ch)
	// Every session with anything unacknowledged (this change's
	// invalidations, an older change's, or a new master's flush) must have
	// acknowledged it before this change commits. (Sorted, here and for
	// wake, so that a simulation replays the same.)
	for _, id := range sortedIDs(t.unacked) {
		cs := t.sessions[id]
		if end, live := leaseEnd(id); live {
			ch.waits = append(ch.waits, cacheWait{id: id, seq: cs.seq, end: end})
		}
	}
	slices.Sort(inv.wake)
	return ch, inv.wake
}

// invalidation is one InvalidateScope's walk over the cachers.
type invalidation struct {
	t       *Cache
	touched map[chubby.SessionID]bool // sessions given an invalidation by this change
	wake    []chubby.SessionID        // the same, in the order touched
}

// hit invalidates session id's cached p: p is uncached there, and queued
// for its next KeepAlive (past maxPendingInvalidations, the whole cache
// is); the session's invalidation seq moves once per change.
func (inv *invalidation) hit(id chubby.SessionID, p string) {
	t := inv.t
	cs := t.sessions[id]
	t.uncache(id, cs, p)
	if !inv.touched[id] {
		inv.touched[id] = true
		cs.seq++
		t.unacked[id] = struct{}{}
		inv.wake = append(inv.wake, id)
	}
	if !cs.all {
		cs.pending = append(cs.pending, p)
		if len(cs.pending) > maxPendingInvalidations {
			cs.pending, cs.all = nil, true
		}
	}
}

// nodes hits the cachers of s's paths, of every node under its trees, or,
// with All, of every cached node.
func (inv *invalidation) nodes(s Scope) {
	t := inv.t
	if s.All {
		for p, m := range t.cachers {
			for id := range m {
				inv.hit(id, p)
			}
		}
		return
	}
	for _, p := range s.Paths {
		for id := range t.cachers[p] {
			inv.hit(id, p)
		}
	}
	for _, tree := range s.Trees {
		prefix := treePrefix(tree)
		for q, m := range t.cachers {
			if strings.HasPrefix(q, prefix) {
				for id := range m {
					inv.hit(id, q)
				}
			}
		}
	}
}

// acls hits the cachers whose cached read of a node was governed by one
// of ch's ACL names (every name's with allACLs).
func (inv *invalidation) acls(ch *Change) {
	t := inv.t
	names := ch.acls
	if ch.allACLs {
		names = nil
		for name := range t.acls {
			names = append(names, name)
		}
	}
	for _, name := range names {
		for p := range t.acls[name] {
			for id := range t.cachers[p] {
				if t.sessions[id].cached[p] == name {
					inv.hit(id, p)
				}
			}
		}
	}
}

// beginACLs marks ch's ACL names as changing.
func (t *Cache) beginACLs(ch *Change) {
	if !ch.allACLs && len(ch.acls) == 0 {
		return
	}
	t.aclSeq++
	if ch.allACLs {
		t.allACLChanges++
	}
	for _, name := range ch.acls {
		t.aclPending[name]++
	}
}

// endACLs ends beginACLs.
func (t *Cache) endACLs(ch *Change) {
	if !ch.allACLs && len(ch.acls) == 0 {
		return
	}
	t.aclSeq++
	if ch.allACLs {
		t.allACLChanges--
	}
	for _, name := range ch.acls {
		if t.aclPending[name]--; t.aclPending[name] <= 0 {
			delete(t.aclPending, name)
		}
	}
}

// Ready reports whether the change may commit at now: every session it
// waits for has acknowledged, ended, or reached its lease end. When not,
// next is the earliest lease end it still waits for (look again then, or
// on an Ack or Forget). A change of another master epoch (Current is
// false) is never ready: the table it was prepared in is gone, and with
// it the marks that kept its paths uncachable.
func (t *Cache) Ready(ch *Change, now Time) (ready bool, next Time) {
	if !t.Current(ch) {
		return false, 0
	}
	rest := ch.waits[:0]
	for _, w := range ch.waits {
		cs, ok := t.sessions[w.id]
		if !ok || cs.acked >= w.seq || w.end <= now {
			continue
		}
		if next == 0 || w.end < next {
			next = w.end
		}
		rest = append(rest, w)
	}
	ch.waits = rest
	return len(rest) == 0, next
}

// Current reports whether ch was prepared in this master epoch's table. A
// change that waited across a Reset must not commit: it must be prepared
// again in the new table (or refused), or a session that cached one of its
// paths from the new master would keep the old value.
func (t *Cache) Current(ch *Change) bool { return ch.epoch == t.epoch }

// Epoch is the master epoch ch was prepared in.
func (ch *Change) Epoch() int64 { return ch.epoch }

// Waiting is how many sessions the change still waits for (as of the last
// Ready).
func (ch *Change) Waiting() int { return len(ch.waits) }

// Done ends the change: its paths (and ACL names) become cachable again. Call it once the
// change has been applied; after one of unknown outcome, only once it can
// no longer apply. Done twice, or after Reset, changes nothing.
func (t *Cache) Done(ch *Change) {
	if ch.done {
		return
	}
	ch.done = true
	if !t.Current(ch) {
		return // a new epoch reset the table
	}
	if ch.all {
		t.allChanges--
	}
	for _, p := range ch.paths {
		if t.uncachable[p]--; t.uncachable[p] <= 0 {
			delete(t.uncachable, p)
		}
	}
	for _, p := range ch.trees {
		if t.trees[p]--; t.trees[p] <= 0 {
			delete(t.trees, p)
		}
	}
	t.endACLs(ch)
}

// Stats reports the sessions tracked and the (session, node) pairs cached.
func (t *Cache) Stats() (sessions, entries int) { return len(t.sessions), t.total }

func sortedIDs[V any](m map[chubby.SessionID]V) []chubby.SessionID {
	out := make([]chubby.SessionID, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
