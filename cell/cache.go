package cell

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
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
	// uncertainHold is how long a node stays uncachable after a change whose
	// outcome is unknown (it may still apply): longer than commitTimeout.
	uncertainHold = 2 * commitTimeout
)

// cacheTracker is the master's in-memory table of which sessions cache which
// nodes (DESIGN §4). It is not replicated: a new master starts it empty and
// asks every recovered caching session to flush its cache (invalidate_all)
// before any change commits.
//
// A change to a node first calls invalidate: the node's paths become
// uncachable (reads say so and register nobody), each caching session gets
// an invalidation on its KeepAlive (a parked one is answered at once), and
// the caller waits until each has acknowledged it or its lease has ended.
// Then the change is proposed, and done makes the paths cachable again once
// it has applied.
type cacheTracker struct {
	maxPerSession, maxPerCell int
	// leaseEnd reports a session's lease end, false when it has ended or is
	// ending (its client no longer serves its cache).
	leaseEnd func(chubby.SessionID) (time.Time, bool)
	wake     func([]chubby.SessionID)
	now      func() time.Time

	mu         sync.Mutex
	base       int64                                    // seqs of this epoch are above it
	cachers    map[string]map[chubby.SessionID]struct{} // path → sessions caching it
	sessions   map[chubby.SessionID]*cacheSession       // sessions with cached or pending state
	uncachable map[string]int                           // path → changes in progress
	allChanges int                                      // changes in progress that touch any node
	total      int                                      // registered (session, path) pairs
	changed    chan struct{}                            // closed and replaced on every ack or end
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

func newCacheTracker(perSession, perCell int, leaseEnd func(chubby.SessionID) (time.Time, bool),
	wake func([]chubby.SessionID), now func() time.Time) *cacheTracker {
	t := &cacheTracker{maxPerSession: perSession, maxPerCell: perCell, leaseEnd: leaseEnd, wake: wake, now: now}
	t.reset(0, nil)
	return t
}

// reset starts the table of a new master epoch: the recovered sessions may
// cache anything from the old master, so each must flush (invalidate_all)
// before a change commits. Seqs of an epoch start above epoch<<32, so an
// acknowledgement meant for an older master never counts for this one.
func (t *cacheTracker) reset(epoch int64, recovered []chubby.SessionID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.base = epoch << 32
	t.cachers = make(map[string]map[chubby.SessionID]struct{})
	t.sessions = make(map[chubby.SessionID]*cacheSession)
	t.uncachable = make(map[string]int)
	t.allChanges = 0
	t.total = 0
	if t.changed != nil {
		close(t.changed)
	}
	t.changed = make(chan struct{})
	for _, id := range recovered {
		t.sessions[id] = &cacheSession{cached: map[string]struct{}{}, all: true, seq: t.base + 1, acked: t.base}
	}
}

// declare adds a session created with CreateSessionRequest.cache.
func (t *cacheTracker) declare(id chubby.SessionID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.sessions[id]; !ok {
		t.sessions[id] = &cacheSession{cached: map[string]struct{}{}, seq: t.base, acked: t.base}
	}
}

// register records that session id caches path, before the read looks at
// the state (so a change either sees the registration or has already made
// path uncachable). It reports whether the reply may say cacheable.
func (t *cacheTracker) register(id chubby.SessionID, path string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.uncachable[path] > 0 || t.allChanges > 0 {
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

// forget drops a session (it ended, or is ending: its client no longer
// serves its cache) and wakes changes waiting for it.
func (t *cacheTracker) forget(id chubby.SessionID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropLocked(id)
	t.signalLocked()
}

func (t *cacheTracker) dropLocked(id chubby.SessionID) {
	cs, ok := t.sessions[id]
	if !ok {
		return
	}
	for p := range cs.cached {
		t.uncacheLocked(id, p)
	}
	delete(t.sessions, id)
}

func (t *cacheTracker) uncacheLocked(id chubby.SessionID, p string) {
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

func (t *cacheTracker) signalLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// ack records the sessions' acknowledged invalidation seqs (from a
// KeepAlive) and reports, per session, whether invalidations are still
// pending (then the KeepAlive is answered at once).
func (t *cacheTracker) ack(ids []chubby.SessionID, acks []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	moved := false
	for i, id := range ids {
		cs, ok := t.sessions[id]
		if !ok || acks[i] <= cs.acked || acks[i] > cs.seq {
			continue
		}
		cs.acked = acks[i]
		if cs.acked == cs.seq {
			cs.pending, cs.all = nil, false
		}
		moved = true
	}
	if moved {
		t.signalLocked()
	}
}

// hasPending reports whether one of the sessions has unacknowledged
// invalidations.
func (t *cacheTracker) hasPending(ids []chubby.SessionID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if cs, ok := t.sessions[id]; ok && cs.acked < cs.seq {
			return true
		}
	}
	return false
}

// attach adds to each live grant the session's unacknowledged
// invalidations (all of them again: a reply may have been lost).
func (t *cacheTracker) attach(results []*chubby.LeaseGrant) {
	t.mu.Lock()
	defer t.mu.Unlock()
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

// wait is one session's part in a change: done once acked reaches seq.
type cacheWait struct {
	id  chubby.SessionID
	seq int64
}

// invalidate prepares a change to paths (with their subtrees when subtree
// is set; every cached node when all is set): it makes them uncachable,
// sends invalidations to their cachers and waits until each has
// acknowledged, or its lease has ended. The returned done must be called
// once the change has been applied (uncertain: its outcome is unknown).
func (t *cacheTracker) invalidate(ctx context.Context, paths []string, subtree, all bool) (done func(uncertain bool), err error) {
	t.mu.Lock()
	epochBase := t.base
	if all {
		t.allChanges++
	}
	for _, p := range paths {
		t.uncachable[p]++
	}
	var waits []cacheWait
	var wakeIDs []chubby.SessionID
	touched := make(map[chubby.SessionID]bool)
	hit := func(id chubby.SessionID, p string) {
		cs := t.sessions[id]
		t.uncacheLocked(id, p)
		delete(cs.cached, p)
		if !touched[id] {
			touched[id] = true
			cs.seq++
			wakeIDs = append(wakeIDs, id)
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
		if subtree && len(paths) > 0 {
			prefix := strings.TrimSuffix(paths[0], "/") + "/"
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
	// acknowledged it before this change commits.
	for id, cs := range t.sessions {
		if cs.acked < cs.seq {
			waits = append(waits, cacheWait{id: id, seq: cs.seq})
		}
	}
	t.mu.Unlock()

	done = func(uncertain bool) {
		release := func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.base != epochBase {
				return // a new epoch reset the table
			}
			if all {
				t.allChanges--
			}
			for _, p := range paths {
				if t.uncachable[p]--; t.uncachable[p] <= 0 {
					delete(t.uncachable, p)
				}
			}
		}
		if uncertain {
			time.AfterFunc(uncertainHold, release)
			return
		}
		release()
	}
	if len(wakeIDs) > 0 {
		t.wake(wakeIDs)
	}
	if err := t.await(ctx, waits); err != nil {
		done(false)
		return nil, err
	}
	return done, nil
}

// await waits until every session in waits has acknowledged its seq or its
// lease has ended (its client stopped serving its cache by then). The
// lease ends are read once: a lease extended later was extended by a reply
// that carried the invalidation, which the client applies first.
func (t *cacheTracker) await(ctx context.Context, waits []cacheWait) error {
	type pending struct {
		cacheWait
		end time.Time
	}
	ps := make([]pending, 0, len(waits))
	for _, w := range waits {
		if end, live := t.leaseEnd(w.id); live {
			ps = append(ps, pending{w, end})
		}
	}
	for {
		t.mu.Lock()
		ch := t.changed
		now := t.now()
		var next time.Time
		rest := ps[:0]
		for _, p := range ps {
			cs, ok := t.sessions[p.id]
			if !ok || cs.acked >= p.seq || !p.end.After(now) {
				continue
			}
			if next.IsZero() || p.end.Before(next) {
				next = p.end
			}
			rest = append(rest, p)
		}
		ps = rest
		t.mu.Unlock()
		if len(ps) == 0 {
			return nil
		}
		timer := time.NewTimer(next.Sub(now))
		select {
		case <-ch:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "waiting for %d caching sessions to acknowledge an invalidation: %v", len(ps), ctx.Err())
		}
		timer.Stop()
	}
}

// stats reports the sessions tracked and the (session, node) pairs cached.
func (t *cacheTracker) stats() (sessions, entries int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sessions), t.total
}

// affected lists the paths a command may change the cached view of (a
// node's contents or Stat, and its parent's listing, which carries the
// children's Stats), whether their subtrees go too, and whether the
// command's reach is not known from the request (then every cached node is
// invalidated: session ends and lock-delay ticks, which touch the locks and
// ephemeral nodes of sessions the master does not index).
func affected(op *fsm.Op) (paths []string, subtree, all bool) {
	withParent := func(p string) []string {
		if p == "" {
			return nil
		}
		return []string{p, parentPath(p)}
	}
	withAncestors := func(p string) []string {
		out := []string{p}
		for p != "/" && p != "" {
			p = parentPath(p)
			out = append(out, p)
		}
		return out
	}
	switch {
	case op.EndSession != nil, op.Tick != nil:
		return nil, false, true
	case op.Open != nil:
		if op.Open.Create == chubby.CreateMode_OPEN_EXISTING {
			return nil, false, false
		}
		return withAncestors(op.Open.Path), false, false
	case op.Close != nil:
		return withParent(op.Close.GetHandle().GetPath()), false, false
	case op.SetContents != nil:
		return withParent(op.SetContents.GetHandle().GetPath()), false, false
	case op.DeleteNode != nil:
		// An ephemeral directory left empty goes too: ancestors.
		return withAncestors(op.DeleteNode.GetHandle().GetPath()), true, false
	case op.Mkdir != nil:
		return withAncestors(op.Mkdir.Path), false, false
	case op.CreateFile != nil:
		return withAncestors(op.CreateFile.Path), false, false
	case op.Acquire != nil:
		return withParent(op.Acquire.GetHandle().GetPath()), false, false
	case op.Release != nil:
		return withParent(op.Release.GetHandle().GetPath()), false, false
	case op.CancelWait != nil:
		return withParent(op.CancelWait.GetHandle().GetPath()), false, false
	}
	return nil, false, false // CreateSession, TrimEvents: no node changes
}

func parentPath(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}
