package cell

import (
	"context"
	"sync"
	"time"

	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// Cache limits (see master.Cache).
const (
	DefaultMaxCachedPerSession = master.DefaultMaxCachedPerSession
	DefaultMaxCachedPerCell    = master.DefaultMaxCachedPerCell
)

// changes carries out the master's change pipeline (master.Pipeline, where
// the stages are argued) and its cache and write tables: one mutex over
// all three, one timer for the pipeline's waits, and callers that block
// until their change's verdict.
type changes struct {
	cfg   master.PipelineConfig
	m     *machine
	clock func() master.Clock
	wake  func([]chubby.SessionID) // answer these sessions' parked KeepAlives now

	mu      sync.Mutex
	p       *master.Pipeline
	seq     uint64                         // the last change id given
	calls   map[uint64]chan master.Verdict // callers waiting for a verdict
	timer   *time.Timer                    // armed for timerAt, when not 0
	timerAt master.Time
}

// newChanges makes the pipeline. drainWait bounds an EndSession's wait for
// its session's commands in flight, invalidateWait a change's wait for
// caching sessions.
func newChanges(m *machine, cfg master.PipelineConfig, perSession, perCell int, clock func() master.Clock,
	leaseEnd func(chubby.SessionID) (master.Time, bool), wake func([]chubby.SessionID)) *changes {
	c := &changes{cfg: cfg, m: m, clock: clock, wake: wake, calls: map[uint64]chan master.Verdict{}}
	reach := func(cmd *fsm.Command) (r fs.Reach) {
		m.read(func(st *fs.State) { r = st.Reach(cmd) })
		return r
	}
	c.p = master.NewPipeline(cfg, master.NewWrites(), master.NewCache(perSession, perCell), reach, leaseEnd)
	return c
}

// do runs f on the pipeline under the mutex, then carries out what it
// decided: verdicts go to their callers, woken sessions to wake, and the
// timer is armed for the next wait.
func (c *changes) do(f func(p *master.Pipeline, now master.Clock)) {
	c.mu.Lock()
	now := c.clock()
	f(c.p, now)
	rd := c.p.Ready()
	for _, v := range rd.Verdicts {
		if ch, ok := c.calls[v.ID]; ok {
			delete(c.calls, v.ID)
			ch <- v // buffered: never blocks
		}
	}
	c.armLocked(now.Now)
	c.mu.Unlock()
	if len(rd.Wake) > 0 {
		c.wake(rd.Wake)
	}
}

// armLocked sets the timer for the pipeline's next wait, if it is sooner
// than the one set.
func (c *changes) armLocked(now master.Time) {
	next, ok := c.p.Next()
	if !ok || (c.timerAt != 0 && c.timerAt <= next) {
		return
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timerAt = next
	c.timer = time.AfterFunc(time.Duration(max(next-now, 0)), func() {
		c.do(func(p *master.Pipeline, now master.Clock) {
			if c.timerAt == next {
				c.timerAt = 0
			}
			p.Tick(now)
		})
	})
}

// submit puts op through the pipeline and waits until it may be proposed
// (the verdict's Cmd, stamped no earlier than notBefore) or is refused
// (the error, typed). After a go-ahead the caller must call finished.
func (c *changes) submit(ctx context.Context, op *fsm.Op, notBefore int64) (master.Verdict, error) {
	ch := make(chan master.Verdict, 1)
	var id uint64
	c.do(func(p *master.Pipeline, now master.Clock) {
		c.seq++
		id = c.seq
		c.calls[id] = ch
		p.Submit(now, id, op, notBefore)
	})
	select {
	case v := <-ch:
		if v.Err != nil {
			return v, v.Err
		}
		return v, nil
	case <-ctx.Done():
	}
	var err *chubby.ChubbyError
	c.do(func(p *master.Pipeline, now master.Clock) {
		delete(c.calls, id)
		err = p.Cancel(now, id, ctx.Err())
	})
	if err == nil {
		// The verdict came first; it was a refusal (a go-ahead stays known
		// to the pipeline until finished, and Cancel ends it).
		v := <-ch
		return v, v.Err
	}
	return master.Verdict{}, err
}

// finished ends a change that was let go (master.Pipeline.Finished).
func (c *changes) finished(id uint64, uncertain bool) {
	c.do(func(p *master.Pipeline, now master.Clock) { p.Finished(now, id, uncertain) })
}

// stop refuses every waiting change with err: this replica stopped being
// the master.
func (c *changes) stop(err *chubby.ChubbyError) {
	c.do(func(p *master.Pipeline, _ master.Clock) { p.Stop(err) })
}

// reset starts the cache table of a new master epoch (see master.Cache.Reset).
func (c *changes) reset(epoch int64, recovered []chubby.SessionID) {
	c.do(func(p *master.Pipeline, now master.Clock) { p.Reset(now, epoch, recovered) })
}

// forget drops a session (it ended, or is ending) and lets go the changes
// that waited for it.
func (c *changes) forget(id chubby.SessionID) {
	c.do(func(p *master.Pipeline, now master.Clock) { p.Forget(now, id) })
}

// ack records the sessions' acknowledged invalidation seqs (from a
// KeepAlive naming master epoch epoch; see master.Cache.Ack).
func (c *changes) ack(epoch int64, ids []chubby.SessionID, acks []int64) {
	c.do(func(p *master.Pipeline, now master.Clock) { p.Ack(now, epoch, ids, acks) })
}

// anchor bounds the stamps of a new term of mastership by the state's
// clock and the instant this replica reached it (master.Writes.Anchor).
func (c *changes) anchor() {
	ms, at := c.m.clock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.p.Writes().Anchor(ms, at)
}

// stampNow is the time_ms a command begun now would get (master.Writes.Stamp).
func (c *changes) stampNow() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	return c.p.Writes().Stamp(now.WallMs, now.Mono)
}

// declare adds a session created with CreateSessionRequest.cache.
func (c *changes) declare(id chubby.SessionID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.p.Cache().Declare(id)
}

// register records that session id caches path, before the read looks at
// the state. It reports whether the reply may say cacheable so far, and the
// mark to pass to registerACL once the read has looked.
func (c *changes) register(id chubby.SessionID, path string) (bool, master.ReadMark) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.p.Cache().RegisterRead(id, path)
}

// registerACL records, after the read, the read ACL name the read saw
// (master.Cache.RegisterACL), so that a change narrowing it invalidates the
// copy. It reports whether the reply may still say cacheable.
func (c *changes) registerACL(id chubby.SessionID, path, name string, mark master.ReadMark) bool {
	if name == "" {
		return true // no ACL file governs the right (and no lock to take)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.p.Cache().RegisterACL(id, path, name, mark)
}

// hasPending reports whether one of the sessions has unacknowledged
// invalidations.
func (c *changes) hasPending(ids []chubby.SessionID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.p.Cache().HasPending(ids)
}

// attach adds to each live grant the session's unacknowledged
// invalidations.
func (c *changes) attach(results []*chubby.LeaseGrant) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.p.Cache().Attach(results)
}

// stats reports the sessions tracked and the (session, node) pairs cached.
func (c *changes) stats() (sessions, entries int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.p.Cache().Stats()
}
