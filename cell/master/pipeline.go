package master

import (
	"fmt"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// Pipeline is the road every command the master proposes takes before
// the log sees it, as a pure state machine over the Writes and Cache
// tables. A change goes through these stages, in this order:
//
//  1. drain (an EndSession only): its session leaves the cache table (its
//     client no longer serves its cache) and is marked ending, so that its
//     new commands are refused; the EndSession waits until none of its
//     session's commands is in flight (Writes, condition 2), at most
//     DrainWait;
//  2. stamp and reach: Writes.Begin stamps the command, and the state
//     says what it may change of what clients cache (the Reacher), to which
//     the lock-delays of expired EndSessions in flight are added;
//  3. invalidate: Cache.InvalidateScope, and the change waits until every
//     caching session acknowledged or its lease ended, at most
//     InvalidateWait. A change that waited across a new master epoch
//     (Reset) is refused; one that goes ahead must be proposed only in the
//     view of the epoch it waited in (Verdict.View);
//  4. verdict: the caller hears, in Ready, that it may propose the stamped
//     command, or why the change is refused (nothing of it is held then);
//  5. finish: the caller says the command applied or can no longer apply
//     (Finished, certain), may still apply (uncertain: its write and its
//     nodes' uncachability are held UncertainHold longer, or until a new
//     master epoch settles it: Reset), or that it gave up before proposing
//     (Cancel).
//
// Inputs are the methods that take a Clock; what they decide accumulates
// in a Ready the caller takes and carries out (verdicts to deliver,
// sessions whose parked KeepAlive must be answered now), and Next says
// when to call Tick. No goroutine, no timer, no clock read: the cell runs
// it under one mutex with one timer (cell/changes.go), the simulator
// (cell/sim) in its single thread on simulated clocks. It is not safe for
// concurrent use.
type Pipeline struct {
	cfg      PipelineConfig
	writes   *Writes
	cache    *Cache
	reach    func(*fsm.Command) fs.Reach
	leaseEnd func(chubby.SessionID) (Time, bool)

	changes map[uint64]*change // every change submitted and not finished
	waiting []*change          // draining or invalidating, oldest first
	holds   []hold             // uncertain changes to release, by time
	epoch   int64              // the master epoch of the last Reset
	ready   Ready
}

// PipelineConfig bounds a change's waits. Each must be positive.
type PipelineConfig struct {
	// DrainWait bounds an EndSession's wait for its session's commands in
	// flight. The cell's is longer than a command can be in flight.
	DrainWait time.Duration
	// InvalidateWait bounds a change's wait for caching sessions. A
	// cacher's lease ends within a session lease, so the cell's is a lease
	// and a second.
	InvalidateWait time.Duration
	// UncertainHold is how long a change whose outcome is unknown keeps
	// its place in Writes and its nodes uncachable: longer than the
	// command could take to apply.
	UncertainHold time.Duration
}

// PipelineFor is the configuration for session lease lease and a bound
// commit on a command's wait for its commit: a change waits a lease and a
// second for cachers (a cacher's lease ends within a lease; the second is
// slack for a busy machine), an uncertain change is held twice commit, and
// an EndSession drains for as long as a command can be in flight (all
// three together).
func PipelineFor(lease, commit time.Duration) PipelineConfig {
	inv := lease + time.Second
	return PipelineConfig{InvalidateWait: inv, UncertainHold: 2 * commit, DrainWait: inv + commit + 2*commit}
}

// Clock is the time at one input, as the master reads it.
type Clock struct {
	Now    Time  // the master lease's monotonic clock: leases, waits, holds
	WallMs int64 // the wall clock, Unix ms: what commands are stamped from
	Mono   Time  // the monotonic clock stamps are bounded on (Writes.Anchor)
}

// Verdict is what becomes of a submitted change. With Err nil the caller
// proposes Cmd (stamped; it may add the request's session, number and
// principal), in View only when InView, and then calls Finished. With Err
// set the change is over: nothing was proposed and nothing is held.
type Verdict struct {
	ID     uint64
	Cmd    *fsm.Command
	View   uint64
	InView bool
	// Invalidated: the change reached cached nodes and waited Waited for
	// their cachers.
	Invalidated bool
	Waited      time.Duration
	Err         *chubby.ChubbyError
}

// Ready is what the pipeline decided since it was last taken.
type Ready struct {
	Verdicts []Verdict
	// Wake lists sessions given new invalidations: answer their parked
	// KeepAlives now, so that they carry them.
	Wake []chubby.SessionID
}

type stage int

const (
	draining stage = iota
	invalidating
	granted
)

// change is one submitted command on its way.
type change struct {
	id        uint64
	epoch     int64 // the master epoch it was submitted in
	stage     stage
	op        *fsm.Op
	notBefore int64
	ending    chubby.SessionID // an EndSession's session, while it is marked ending
	since     Time             // when its current wait began
	deadline  Time             // when its current wait gives up
	next      Time             // the cache's next lease end it waits for, 0 for none
	cmd       *fsm.Command
	wr        *Write
	inv       *Change
}

type hold struct {
	at Time
	c  *change
}

// NewPipeline returns a pipeline over writes and cache. reach computes a
// stamped command's reach against the state now (fs.State.Reach);
// leaseEnd is a session's lease end at this master (Leases.LeaseEnd).
func NewPipeline(cfg PipelineConfig, writes *Writes, cache *Cache, reach func(*fsm.Command) fs.Reach,
	leaseEnd func(chubby.SessionID) (Time, bool)) *Pipeline {
	if cfg.DrainWait <= 0 || cfg.InvalidateWait <= 0 || cfg.UncertainHold <= 0 {
		panic(fmt.Sprintf("master: PipelineConfig %+v has a wait that is not positive", cfg))
	}
	return &Pipeline{cfg: cfg, writes: writes, cache: cache, reach: reach, leaseEnd: leaseEnd,
		changes: map[uint64]*change{}}
}

// Writes is the pipeline's write table, for what does not go through a
// change (Anchor, Stamp).
func (p *Pipeline) Writes() *Writes { return p.writes }

// Cache is the pipeline's cache table, for reads and KeepAlives (Declare,
// RegisterRead, RegisterACL, HasPending, Attach, Stats). Ack, Forget and
// Reset go through the pipeline: they may let changes go.
func (p *Pipeline) Cache() *Cache { return p.cache }

// Submit starts change id (new: ids are the caller's and never reused
// while the change is known) for op, to be stamped no earlier than
// notBefore (Unix ms; 0 for none).
func (p *Pipeline) Submit(c Clock, id uint64, op *fsm.Op, notBefore int64) {
	if _, dup := p.changes[id]; dup {
		panic(fmt.Sprintf("master: change %d submitted twice", id))
	}
	ch := &change{id: id, epoch: p.epoch, op: op, notBefore: notBefore}
	p.changes[id] = ch
	es := op.GetEndSession()
	if es == nil {
		p.begin(c, ch)
		return
	}
	p.cache.Forget(es.Session)
	p.writes.Ending(es.Session)
	ch.ending = es.Session
	ch.stage, ch.since, ch.deadline = draining, c.Now, c.Now+Time(p.cfg.DrainWait)
	p.waiting = append(p.waiting, ch)
	p.poll(c) // the Forget may let changes go, and this one may drain at once
}

// begin stamps ch, computes its reach and invalidates what it reaches.
func (p *Pipeline) begin(c Clock, ch *change) {
	session, _ := fs.OpSession(ch.op)
	if ch.ending != 0 {
		session = 0 // an EndSession acts for no session: Ending covers it
	}
	wr, delayed := p.writes.Begin(session, c.WallMs, c.Mono, ch.notBefore)
	if wr == nil {
		p.refuse(ch, fs.Errorf(chubby.ErrorCode_SESSION_EXPIRED, "session %d is being ended", session))
		return
	}
	ch.wr = wr
	ch.cmd = &fsm.Command{TimeMs: wr.TimeMs, Op: ch.op}
	r := p.reach(ch.cmd)
	p.writes.Delays(wr, r.Delayed)
	if !r.All {
		r.Paths = append(r.Paths, delayed...)
	}
	if !reachesCache(r) {
		p.grant(c, ch)
		return
	}
	var wake []chubby.SessionID
	ch.inv, wake = p.cache.InvalidateScope(Scope{Paths: r.Paths, Trees: r.Trees, All: r.All, ACLs: r.ACLs, AllACLs: r.AllACLs}, p.leaseEnd)
	p.ready.Wake = append(p.ready.Wake, wake...)
	ch.stage, ch.since, ch.deadline = invalidating, c.Now, c.Now+Time(p.cfg.InvalidateWait)
	if !p.step(c, ch) {
		p.waiting = append(p.waiting, ch)
	}
}

// reachesCache reports whether a reach names anything a client may cache.
func reachesCache(r fs.Reach) bool {
	return r.All || len(r.Paths) > 0 || len(r.Trees) > 0 || len(r.ACLs) > 0 || r.AllACLs
}

// step moves a waiting change on if it can, and reports whether it left
// its wait (to the next stage, or refused).
func (p *Pipeline) step(c Clock, ch *change) bool {
	switch ch.stage {
	case draining:
		n := p.writes.Running(ch.ending)
		switch {
		case n == 0:
			p.begin(c, ch)
		case c.Now >= ch.deadline:
			p.refuse(ch, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "session %d still has %d commands in flight after %v; retry", ch.ending, n, p.cfg.DrainWait))
		default:
			return false
		}
		return true
	case invalidating:
		ready, next := p.cache.Ready(ch.inv, c.Now)
		switch {
		case ready:
			p.grant(c, ch)
		case !p.cache.Current(ch.inv):
			p.refuse(ch, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the master changed while the change waited for caching clients; retry"))
		case c.Now >= ch.deadline:
			p.refuse(ch, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "%d caching sessions did not acknowledge an invalidation within %v", ch.inv.Waiting(), p.cfg.InvalidateWait))
		default:
			ch.next = next
			return false
		}
		return true
	}
	panic(fmt.Sprintf("master: change %d steps in stage %d", ch.id, ch.stage))
}

// grant lets ch be proposed.
func (p *Pipeline) grant(c Clock, ch *change) {
	ch.stage = granted
	v := Verdict{ID: ch.id, Cmd: ch.cmd}
	if ch.inv != nil {
		v.Invalidated, v.Waited = true, time.Duration(c.Now-ch.since)
		if e := ch.inv.Epoch(); e > 0 {
			v.View, v.InView = uint64(e-1), true // Epoch's inverse
		}
	}
	p.ready.Verdicts = append(p.ready.Verdicts, v)
}

// refuse ends ch with err, releasing what it holds.
func (p *Pipeline) refuse(ch *change, err *chubby.ChubbyError) {
	p.release(ch)
	delete(p.changes, ch.id)
	p.ready.Verdicts = append(p.ready.Verdicts, Verdict{ID: ch.id, Err: err})
}

// release gives up what ch holds: its place in Writes, its ending mark,
// its nodes' uncachability. Releasing twice changes nothing.
func (p *Pipeline) release(ch *change) {
	if ch.inv != nil {
		p.cache.Done(ch.inv)
	}
	if ch.wr != nil {
		p.writes.Done(ch.wr)
	}
	if ch.ending != 0 {
		p.writes.Unending(ch.ending)
		ch.ending = 0
	}
}

// poll moves on every waiting change that can move, and releases the
// uncertain holds that are due, until nothing moves: a release may let an
// EndSession drain.
func (p *Pipeline) poll(c Clock) {
	for {
		moved := p.releaseDue(c.Now)
		old := p.waiting
		p.waiting = nil
		for _, ch := range old {
			if p.step(c, ch) {
				moved = true
			} else {
				p.waiting = append(p.waiting, ch)
			}
		}
		if !moved {
			return
		}
	}
}

// releaseDue releases the uncertain holds due at now.
func (p *Pipeline) releaseDue(now Time) bool {
	n := 0
	for n < len(p.holds) && p.holds[n].at <= now {
		p.release(p.holds[n].c)
		n++
	}
	clear(p.holds[:n])
	p.holds = p.holds[n:]
	return n > 0
}

// Tick looks again at every waiting change: call it at Next.
func (p *Pipeline) Tick(c Clock) { p.poll(c) }

// Ack records acknowledged invalidations from a KeepAlive (Cache.Ack).
func (p *Pipeline) Ack(c Clock, epoch int64, ids []chubby.SessionID, acks []int64) {
	if p.cache.Ack(epoch, ids, acks) {
		p.poll(c)
	}
}

// Forget drops a session from the cache table: it ended, or is ending.
func (p *Pipeline) Forget(c Clock, id chubby.SessionID) {
	p.cache.Forget(id)
	p.poll(c)
}

// Reset starts the cache table of a new master epoch (Cache.Reset): the
// changes waiting in the old one are refused. Call it once the view that
// began the epoch has applied what it started with: that view settled
// every command proposed in an earlier epoch (applied now, or never to
// be), so the uncertain holds of earlier epochs are released. Held on,
// an EndSession of an earlier term that never committed would keep its
// live session's commands refused as "being ended" (simulator seed 7163).
func (p *Pipeline) Reset(c Clock, epoch int64, recovered []chubby.SessionID) {
	p.cache.Reset(epoch, recovered)
	p.epoch = epoch
	kept := p.holds[:0]
	for _, h := range p.holds {
		if h.c.epoch < epoch {
			p.release(h.c)
		} else {
			kept = append(kept, h)
		}
	}
	clear(p.holds[len(kept):])
	p.holds = kept
	p.poll(c)
}

// Stop refuses every waiting change with err: this replica stopped being
// the master. The changes already granted stay until their callers finish
// them.
func (p *Pipeline) Stop(err *chubby.ChubbyError) {
	for _, ch := range p.waiting {
		p.refuse(ch, err)
	}
	clear(p.waiting)
	p.waiting = p.waiting[:0]
}

// Finished ends a granted change: its command applied or can no longer
// apply, or, uncertain, may still apply (it is then held UncertainHold,
// unless it was submitted in an earlier master epoch than the current
// one, which settled it).
func (p *Pipeline) Finished(c Clock, id uint64, uncertain bool) {
	ch, ok := p.changes[id]
	if !ok || ch.stage != granted {
		panic(fmt.Sprintf("master: change %d finished without a grant", id))
	}
	delete(p.changes, id)
	if uncertain && ch.epoch >= p.epoch { // an earlier epoch's is settled (Reset)
		p.holds = append(p.holds, hold{at: c.Now + Time(p.cfg.UncertainHold), c: ch})
		return
	}
	p.release(ch)
	p.poll(c)
}

// Cancel ends change id, whose caller gave up (cause) before proposing
// it, and returns the refusal to answer with; nil when the change is not
// known (it was refused meanwhile: the caller has that verdict).
func (p *Pipeline) Cancel(c Clock, id uint64, cause error) *chubby.ChubbyError {
	ch, ok := p.changes[id]
	if !ok {
		return nil
	}
	var err *chubby.ChubbyError
	switch ch.stage {
	case draining:
		err = fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "waiting for session %d's %d commands in flight: %v", ch.ending, p.writes.Running(ch.ending), cause)
	case invalidating:
		err = fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "waiting for %d caching sessions to acknowledge an invalidation: %v", ch.inv.Waiting(), cause)
	default:
		err = fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "gave up before proposing the command: %v", cause)
	}
	for i, w := range p.waiting {
		if w == ch {
			p.waiting = append(p.waiting[:i], p.waiting[i+1:]...)
			break
		}
	}
	p.release(ch)
	delete(p.changes, id)
	p.poll(c)
	return err
}

// Next is when Tick must be called next: the earliest wait deadline, lease
// end a change waits for, or uncertain hold; false when nothing waits on
// time.
func (p *Pipeline) Next() (Time, bool) {
	var next Time
	ok := false
	at := func(t Time) {
		if t > 0 && (!ok || t < next) {
			next, ok = t, true
		}
	}
	for _, ch := range p.waiting {
		at(ch.deadline)
		at(ch.next)
	}
	if len(p.holds) > 0 {
		at(p.holds[0].at)
	}
	return next, ok
}

// HasReady reports whether Ready has something to carry out.
func (p *Pipeline) HasReady() bool { return len(p.ready.Verdicts) > 0 || len(p.ready.Wake) > 0 }

// Ready takes what the pipeline decided since the last Ready.
func (p *Pipeline) Ready() Ready {
	rd := p.ready
	p.ready = Ready{}
	return rd
}

// Len is the number of changes submitted and not finished, and of those
// waiting on a drain or an invalidation.
func (p *Pipeline) Len() (changes, waiting int) { return len(p.changes), len(p.waiting) }
