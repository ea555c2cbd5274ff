package cell

import (
	"context"
	"sync"
	"time"

	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Cache limits (see master.Cache).
const (
	DefaultMaxCachedPerSession = master.DefaultMaxCachedPerSession
	DefaultMaxCachedPerCell    = master.DefaultMaxCachedPerCell
	// uncertainHold is how long a node stays uncachable after a change whose
	// outcome is unknown (it may still apply): longer than commitTimeout.
	uncertainHold = 2 * commitTimeout
)

// cacheTracker is the master's table of which sessions cache which nodes
// (master.Cache) with what the process adds: a mutex, and changes that
// wait (bounded by their context) until the table says they may commit.
type cacheTracker struct {
	leaseEnd func(chubby.SessionID) (master.Time, bool)
	wake     func([]chubby.SessionID)
	now      func() master.Time

	mu      sync.Mutex
	t       *master.Cache
	changed chan struct{} // closed and replaced on every ack or end
}

func newCacheTracker(perSession, perCell int, leaseEnd func(chubby.SessionID) (master.Time, bool),
	wake func([]chubby.SessionID), now func() master.Time) *cacheTracker {
	return &cacheTracker{t: master.NewCache(perSession, perCell), leaseEnd: leaseEnd, wake: wake, now: now,
		changed: make(chan struct{})}
}

// reset starts the table of a new master epoch (see master.Cache.Reset).
func (t *cacheTracker) reset(epoch int64, recovered []chubby.SessionID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.t.Reset(epoch, recovered)
	t.signalLocked()
}

// declare adds a session created with CreateSessionRequest.cache.
func (t *cacheTracker) declare(id chubby.SessionID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.t.Declare(id)
}

// register records that session id caches path, before the read looks at
// the state. It reports whether the reply may say cacheable so far, and the
// mark to pass to registerACL once the read has looked.
func (t *cacheTracker) register(id chubby.SessionID, path string) (bool, master.ReadMark) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.RegisterRead(id, path)
}

// registerACL records, after the read, the read ACL name the read saw
// (master.Cache.RegisterACL), so that a change narrowing it invalidates the
// copy. It reports whether the reply may still say cacheable.
func (t *cacheTracker) registerACL(id chubby.SessionID, path, name string, mark master.ReadMark) bool {
	if name == "" {
		return true // no ACL file governs the right (and no lock to take)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.RegisterACL(id, path, name, mark)
}

// forget drops a session (it ended, or is ending) and wakes changes
// waiting for it.
func (t *cacheTracker) forget(id chubby.SessionID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.t.Forget(id)
	t.signalLocked()
}

func (t *cacheTracker) signalLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// ack records the sessions' acknowledged invalidation seqs (from a
// KeepAlive naming master epoch epoch; see master.Cache.Ack).
func (t *cacheTracker) ack(epoch int64, ids []chubby.SessionID, acks []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.t.Ack(epoch, ids, acks) {
		t.signalLocked()
	}
}

// hasPending reports whether one of the sessions has unacknowledged
// invalidations.
func (t *cacheTracker) hasPending(ids []chubby.SessionID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.HasPending(ids)
}

// attach adds to each live grant the session's unacknowledged
// invalidations.
func (t *cacheTracker) attach(results []*chubby.LeaseGrant) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.t.Attach(results)
}

// invalidate prepares a change to what a command's reach touches (its
// paths, everything under its trees, every cached node when All is set,
// and the cached nodes whose read right its ACL names govern; Delayed is
// the caller's to add to Paths), and waits until it may commit: every
// caching session has acknowledged or its lease has ended.
// The returned done must be called once the change has been applied
// (uncertain: its outcome is unknown), and the command proposed only in
// the view of the master epoch returned (Replicated.ProposeInView): a
// change that waited across a new master epoch is refused (UNAVAILABLE),
// as one whose master went away.
func (t *cacheTracker) invalidate(ctx context.Context, r fs.Reach) (done func(uncertain bool), epoch int64, err error) {
	t.mu.Lock()
	ch, wake := t.t.InvalidateScope(master.Scope{Paths: r.Paths, Trees: r.Trees, All: r.All, ACLs: r.ACLs, AllACLs: r.AllACLs}, t.leaseEnd)
	epoch = ch.Epoch()
	t.mu.Unlock()
	done = func(uncertain bool) {
		release := func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.t.Done(ch)
		}
		if uncertain {
			time.AfterFunc(uncertainHold, release)
			return
		}
		release()
	}
	if len(wake) > 0 {
		t.wake(wake)
	}
	for {
		t.mu.Lock()
		now := t.now()
		ready, next := t.t.Ready(ch, now)
		current := t.t.Current(ch)
		changed := t.changed
		waiting := ch.Waiting()
		t.mu.Unlock()
		if ready {
			return done, epoch, nil
		}
		if !current {
			done(false)
			return nil, 0, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the master changed while the change waited for caching clients; retry")
		}
		timer := time.NewTimer(time.Duration(next - now))
		select {
		case <-changed:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			done(false)
			return nil, 0, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "waiting for %d caching sessions to acknowledge an invalidation: %v", waiting, ctx.Err())
		}
		timer.Stop()
	}
}

// stats reports the sessions tracked and the (session, node) pairs cached.
func (t *cacheTracker) stats() (sessions, entries int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.Stats()
}
