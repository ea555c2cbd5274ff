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
	// unacked holds the sessions with invalidations not yet acknowledged:
	// every change waits for them.
	unacked map[chubby.SessionID]struct{}
}

// cacheSession is a caching session's part of the table. Only sessions
// created with CreateSessionRequest.cache have one: others never cache.
type cacheSession struct {
	cached  map[string]struct{}
	pending []string // invalidated paths not yet acknowledged
	all     bool     // an invalidate_all is pending
	seq     int64    // highest invalidation seq issued
	acked   int64    // highest seq acknowledged
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
	t.unacked = make(map[chubby.SessionID]struct{})
	for _, id := range recovered {
		t.sessions[id] = &cacheSession{cached: map[string]struct{}{}, all: true, seq: t.base + 1, acked: t.base}
		t.unacked[id] = struct{}{}
	}
}

// Declare adds a session created with CreateSessionRequest.cache.
func (t *Cache) Declare(id chubby.SessionID) {
	if _, ok := t.sessions[id]; !ok {
		t.sessions[id] = &cacheSession{cached: map[string]struct{}{}, seq: t.base, acked: t.base}
	}
}

// Register records that session id caches path, before the read looks at
// the state (so a change either sees the registration or has already made
// path uncachable). It reports whether the reply may say cacheable.
func (t *Cache) Register(id chubby.SessionID, path string) bool {
	if t.uncachable[path] > 0 || t.allChanges > 0 || t.underTree(path) {
		return false
	}
	cs, ok := t.sessions[id]
	if !ok {
		return false // the session did not declare it caches
	}
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
	cs.cached[path] = struct{}{}
	m := t.cachers[path]
	if m == nil {
		m = make(map[chubby.SessionID]struct{})
		t.cachers[path] = m
	}
	m[id] = struct{}{}
	t.total++
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
		t.uncache(id, p)
	}
	delete(t.sessions, id)
	delete(t.unacked, id)
}

func (t *Cache) uncache(id chubby.SessionID, p string) {
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
	epoch int64 // the master epoch of the table it was prepared in
	paths []string
	trees []string
	all   bool
	waits []cacheWait
	done  bool
}

// cacheWait is one session a change waits for: until acked reaches seq,
// or its lease (as it was when the change began) ends.
type cacheWait struct {
	id  chubby.SessionID
	seq int64
	end Time
}

// Invalidate prepares a change to paths, to everything under trees, or,
// when all is set, to every cached node (the reach of a command:
// fs.State.Reach): it makes them uncachable and queues invalidations for
// their cachers. It returns the change, to pass to Ready and Done, and the
// sessions to wake (answer their parked KeepAlives now). leaseEnd gives a
// session's lease end at this master (false when it has ended or is
// ending); it is read once, here: a lease extended later was extended by
// a reply that carried the invalidation, which the client applies first.
func (t *Cache) Invalidate(paths, trees []string, all bool, leaseEnd func(chubby.SessionID) (Time, bool)) (*Change, []chubby.SessionID) {
	ch := &Change{epoch: t.epoch, paths: slices.Clone(paths), trees: slices.Clone(trees), all: all}
	if all {
		t.allChanges++
	}
	for _, p := range paths {
		t.uncachable[p]++
	}
	for _, p := range trees {
		t.trees[p]++
	}
	var wake []chubby.SessionID
	touched := make(map[chubby.SessionID]bool)
	hit := func(id chubby.SessionID, p string) {
		cs := t.sessions[id]
		t.uncache(id, p)
		delete(cs.cached, p)
		if !touched[id] {
			touched[id] = true
			cs.seq++
			t.unacked[id] = struct{}{}
			wake = append(wake, id)
		}
		if !cs.all {
			cs.pending = append(cs.pending, p)
			if len(cs.pending) > maxPendingInvalidations {
				cs.pending, cs.all = nil, true
			}
		}
	}
	if all {
		for p, m := range t.cachers {
			for id := range m {
				hit(id, p)
			}
		}
	} else {
		for _, p := range paths {
			for id := range t.cachers[p] {
				hit(id, p)
			}
		}
		for _, tree := range trees {
			prefix := treePrefix(tree)
			for q, m := range t.cachers {
				if strings.HasPrefix(q, prefix) {
					for id := range m {
						hit(id, q)
					}
				}
			}
		}
	}
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
	slices.Sort(wake)
	return ch, wake
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

// Done ends the change: its paths become cachable again. Call it once the
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
