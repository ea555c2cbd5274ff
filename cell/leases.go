package cell

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/rpc"
)

// leases is the master's session lease table (master.Leases, where the
// lease rule is argued) with what the process adds around it: a mutex,
// one expiry timer, and the parked KeepAlive calls (rpc.Deferred). Times
// are on the replicated log's clock (Replicated.Now), the clock its master
// lease is measured on; until tells when the master lease held now ends.
type leases struct {
	now    func() master.Time
	until  func() master.Time
	expire func(chubby.SessionID) // propose EndSession(expired); from a timer goroutine

	mu      sync.Mutex
	t       *master.Leases
	timer   *time.Timer
	timerAt master.Time
	closed  bool // the replica is stopping: nothing is started again
}

// parkedKeepAlive is the token of a KeepAlive parked in the table.
type parkedKeepAlive struct {
	d *rpc.Deferred[struct{}]
	c *master.Call
}

// errShutdown answers KeepAlives parked when the replica stops.
var errShutdown = errors.New("cell: replica shutting down")

func newLeases(cfg master.LeaseConfig, now, until func() master.Time, expire func(chubby.SessionID)) *leases {
	return &leases{t: master.NewLeases(cfg), now: now, until: until, expire: expire}
}

// start opens the table for a new master epoch: every recovered session
// gets the recovered lease from now.
func (l *leases) start(epoch int64, sessions []chubby.SessionID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.t.Start(l.now(), epoch, sessions)
	l.armLocked()
}

// stop closes the table (this replica is no longer, or not yet, the
// master): every parked KeepAlive is answered with err, nothing extended,
// and the expiry timer stops (the new master owns leases now).
func (l *leases) stop(err error) {
	l.mu.Lock()
	toks := l.t.Stop()
	if l.timer != nil {
		l.timer.Stop()
		l.timer, l.timerAt = nil, 0
	}
	l.mu.Unlock()
	for _, tok := range toks {
		tok.(*parkedKeepAlive).d.Reject(err)
	}
}

// shutdown stops the table for good (the replica is stopping).
func (l *leases) shutdown() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.stop(errShutdown)
}

// armLocked sets the expiry timer to the next lease end; l.mu is held.
func (l *leases) armLocked() {
	next, ok := l.t.NextDue()
	if !ok || l.closed {
		return
	}
	if l.timer != nil && l.timerAt == next {
		return
	}
	if l.timer != nil {
		l.timer.Stop()
	}
	l.timerAt = next
	l.timer = time.AfterFunc(time.Duration(max(next-l.now(), 0)), l.fire)
}

// fire ends the sessions whose lease is over, answers at once the
// KeepAlives parked on those it spares (master.Leases.Due: a timer that
// fires late says this process was starved, not that its clients went),
// and re-arms.
func (l *leases) fire() {
	l.mu.Lock()
	now := l.now()
	due, wake := l.t.Due(now, max(now-l.timerAt, 0))
	l.timer, l.timerAt = nil, 0
	l.armLocked()
	l.mu.Unlock()
	resolve(wake)
	for _, id := range due {
		l.expire(id)
	}
}

// add starts the lease of a session just created from a request that
// arrived at arrived; it returns the lease the client may count, false
// when the master lease is not held now.
func (l *leases) add(id chubby.SessionID, arrived master.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.t.Add(l.now(), l.until(), arrived, id)
	l.armLocked()
	return d, ok
}

// register parks a KeepAlive on the given sessions, whose clients
// acknowledged their events up to acks[i]. It returns how long to park
// (0: answer now).
func (l *leases) register(ids []chubby.SessionID, acks []int64) (*parkedKeepAlive, time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := &parkedKeepAlive{d: rpc.NewDeferred[struct{}]()}
	c, wait, err := l.t.Register(l.now(), ids, acks, p)
	if err != nil {
		return nil, 0, err
	}
	p.c = c
	return p, wait, nil
}

// answer unparks p and builds its reply if the master lease is held now;
// otherwise it fails with master.ErrLeaseLapsed and p stays parked.
func (l *leases) answer(p *parkedKeepAlive, nowMs int64) ([]*chubby.LeaseGrant, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.t.Answer(p.c, l.now(), l.until(), nowMs)
}

// abandon unparks p without extending anything.
func (l *leases) abandon(p *parkedKeepAlive) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Abandon(p.c)
}

// ended forgets sessions the log has ended and answers their parked
// KeepAlives (with SESSION_EXPIRED).
func (l *leases) ended(ids []chubby.SessionID) {
	l.mu.Lock()
	toks := l.t.Ended(ids)
	l.mu.Unlock()
	resolve(toks)
}

// wake answers the parked KeepAlives of sessions that got events or
// invalidations now.
func (l *leases) wake(ids []chubby.SessionID) {
	l.mu.Lock()
	toks := l.t.Wake(ids)
	l.mu.Unlock()
	resolve(toks)
}

func resolve(toks []any) {
	for _, tok := range toks {
		tok.(*parkedKeepAlive).d.Resolve(struct{}{})
	}
}

// markEnding marks a session as being ended (CloseSession) so KeepAlives
// stop extending it. It reports whether the session was live.
func (l *leases) markEnding(id chubby.SessionID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.t.MarkEnding(id)
}

// expired takes the outcome of an expired session's EndSession
// (master.Leases.Expired): an ended session's parked KeepAlives are
// answered; one whose EndSession failed to commit is put off for the
// pause returned, after which the expiry timer proposes it again.
func (l *leases) expired(id chubby.SessionID, err error) (ended bool, pause time.Duration) {
	l.mu.Lock()
	ended, toks, pause := l.t.Expired(id, l.now(), err)
	l.armLocked()
	l.mu.Unlock()
	resolve(toks)
	return ended, pause
}

// unmarkEnding undoes markEnding when the EndSession of a CloseSession
// failed to commit.
func (l *leases) unmarkEnding(id chubby.SessionID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Unmark(id)
	l.armLocked()
}

// leaseEnd reports a session's lease end at the master, false when the
// session is unknown or being ended.
func (l *leases) leaseEnd(id chubby.SessionID) (master.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.t.LeaseEnd(id)
}

// alive reports whether a session exists and is not being ended.
func (l *leases) alive(id chubby.SessionID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.t.Alive(id)
}

func (l *leases) count() (sessions, parked int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.t.Count()
}

func (l *leases) takeAcks(max int) []*fsm.EventAck {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.t.TakeAcks(max)
}

func (l *leases) trimmedTo(acks []*fsm.EventAck) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.TrimmedTo(acks)
}

func (l *leases) untake(acks []*fsm.EventAck) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Untake(acks)
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// leaseHold bounds how long a call waits for a lapsed master lease to come
// back before it is refused (UNAVAILABLE). A healthy primary under load
// loses its lease only between two heartbeats; one that no quorum answers
// steps down a view-change timeout after its lease ended (vr), and then
// every call hears NOT_MASTER.
const leaseHold = 500 * time.Millisecond

// awaitLease waits, at most leaseHold, until this replica serves as master
// under a master lease held now. It returns nil then, else the error to
// answer with: NOT_MASTER when it is not the master, UNAVAILABLE when the
// lease did not come back.
func (s *Server) awaitLease(ctx context.Context) error {
	if err := s.serveCheck(); err != nil {
		return err
	}
	if s.log.CanServeReads() {
		return nil
	}
	if err := s.leaseBack(ctx, s.log.Now()+int64(leaseHold)); err != nil {
		return err
	}
	if err := s.serveCheck(); err != nil {
		return err
	}
	if s.log.CanServeReads() {
		return nil
	}
	s.metrics.leaseRefusals.Inc()
	return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "replica %d is the master but its master lease lapsed (a majority has not acknowledged it for %v); retry, or find the master", s.cfg.ID, leaseHold)
}

// leaseBack waits until this replica holds a master lease again, or
// until (the log's clock) passes. It fails when this replica stops
// serving as master (NOT_MASTER) or ctx ends first.
func (s *Server) leaseBack(ctx context.Context, until master.Time) error {
	hold := time.NewTimer(time.Duration(max(until-s.log.Now(), 0)))
	defer hold.Stop()
	for {
		renewed, changed := s.log.LeaseRenewed(), s.log.Changed()
		if err := s.serveCheck(); err != nil {
			return err
		}
		if s.log.CanServeReads() {
			return nil
		}
		select {
		case <-renewed:
		case <-changed:
		case <-hold.C:
			return nil
		case <-ctx.Done():
			return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the master lease lapsed and the call ended: %v", context.Cause(ctx))
		}
	}
}

// hasNews reports whether the sessions of a KeepAlive have something to
// hear at once: events after the client's acks, or invalidations queued.
func (s *Server) hasNews(ids []chubby.SessionID, acks []int64) bool {
	news := false
	s.m.read(func(st *fs.State) {
		for i, id := range ids {
			if st.HasEventsAfter(id, acks[i]) {
				news = true
				return
			}
		}
	})
	return news || s.changes.hasPending(ids)
}

// keepAlive carries out a KeepAlive's master.KeepAliveCall from st on
// (parked call c) and returns its grants. The call is parked on c's
// Deferred, whose bound is the answer time itself: a KeepAlive never
// outlives the lease it renews, whatever the client does. Leases are
// extended only under the master lease held at the moment of the answer
// (see package master), never from a reading of the clock taken before:
// after a pause of the process, the lease is found lapsed.
func (s *Server) keepAlive(ctx context.Context, k *master.KeepAliveCall, c *parkedKeepAlive, st master.KeepAliveStep) ([]*chubby.LeaseGrant, error) {
	var grants []*chubby.LeaseGrant
	for {
		switch st.Do {
		case master.KAPark:
			if _, err := c.d.Park(ctx, st.Wait); err != nil && !errors.Is(err, rpc.ErrBoundExceeded) {
				st = k.Gone(err) // the caller is gone, or this replica stopped being the master
			} else {
				st = k.ParkOver()
			}
		case master.KAAnswer:
			var err error
			grants, err = s.leases.answer(c, s.cfg.Now().UnixMilli())
			st = k.Answered(err, s.log.Now())
		case master.KAAwaitLease:
			if err := s.leaseBack(ctx, st.Until); err != nil {
				st = k.Gone(err)
			} else {
				st = k.LeaseBack()
			}
		case master.KAReply:
			return grants, nil
		case master.KAFail:
			if st.Abandon {
				s.leases.abandon(c)
			}
			if st.Lapsed {
				s.metrics.leaseRefusals.Inc()
			}
			if st.NotMaster {
				return nil, s.notMasterErr()
			}
			return nil, st.Err
		default:
			return nil, fs.Errorf(chubby.ErrorCode_INTERNAL, "KeepAlive: step %v out of turn", st.Do)
		}
	}
}
