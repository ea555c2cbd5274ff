package cell

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/rpc"
)

// leases is the master's session lease table. Leases are the master's own
// timers, not replicated state: a KeepAlive changes nothing in the log.
// Only the end of a session is a command (proposed through expire).
//
// A KeepAlive is parked (AMD) until the earliest lease in it is within
// margin of running out, then every lease in it is extended to now+lease and
// the call is answered; it is answered at once when one of its sessions has
// ended, and early when one of them gets events (wake). The client sends the
// next KeepAlive as soon as it has the reply, so the master holds one
// KeepAlive per client at a time.
//
// The table also keeps what each session's client acknowledged of its
// events (ack): the master trims the replicated queues lazily, in batches
// (takeAcks), and does not log acks one by one.
type leases struct {
	lease  time.Duration
	margin time.Duration
	now    func() time.Time
	max    int // parked KeepAlive calls
	expire func(chubby.SessionID)

	mu     sync.Mutex
	m      map[chubby.SessionID]*leaseState
	parked int
	closed bool // shutting down: no KeepAlive is parked or extended
	// acked lists the sessions whose ack is ahead of what the queues were
	// trimmed to: the next TrimEvents batch.
	acked map[chubby.SessionID]struct{}
}

// errShutdown answers KeepAlives parked when the replica stops.
var errShutdown = errors.New("cell: replica shutting down")

type leaseState struct {
	end    time.Time
	timer  *time.Timer
	gen    uint64 // bumped on every extension: a stale timer firing is ignored
	ending bool   // EndSession proposed; KeepAlives get SESSION_EXPIRED
	// greeted: the session's client has had a KeepAlive answer in this
	// epoch. A session recovered by a new master is not: its first
	// KeepAlive is answered at once, so the client learns of the failover
	// (the epoch in the reply) and renews without waiting a lease.
	greeted bool
	calls   map[*parkedKeepAlive]struct{}

	// Events: the highest seq the client acknowledged to this master, and
	// the highest ack a committed TrimEvents carried.
	ack, trimmed int64
}

type parkedKeepAlive struct {
	d       *rpc.Deferred[struct{}]
	arrived time.Time // lease_ms is counted from here: never later than when the client sent it
	// greet lists the sessions this call is the first of in this epoch:
	// their grants carry MASTER_FAILED_OVER.
	greet []chubby.SessionID
}

func newLeases(lease, margin time.Duration, now func() time.Time, maxParked int, expire func(chubby.SessionID)) *leases {
	return &leases{lease: lease, margin: margin, now: now, max: maxParked, expire: expire,
		m: make(map[chubby.SessionID]*leaseState), acked: make(map[chubby.SessionID]struct{})}
}

// add starts a lease for a new session (greeted: its client has the
// epoch from CreateSession) or one recovered by a new master (not greeted).
func (l *leases) add(id chubby.SessionID, greeted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.m[id]; ok {
		return
	}
	ls := &leaseState{end: l.now().Add(l.lease), calls: make(map[*parkedKeepAlive]struct{}), greeted: greeted}
	l.m[id] = ls
	l.arm(id, ls)
}

// arm (re)starts the expiry timer of a lease; l.mu is held.
func (l *leases) arm(id chubby.SessionID, ls *leaseState) {
	ls.gen++
	gen := ls.gen
	d := ls.end.Sub(l.now())
	if ls.timer != nil {
		ls.timer.Stop()
	}
	ls.timer = time.AfterFunc(max(d, 0), func() { l.fire(id, gen) })
}

func (l *leases) fire(id chubby.SessionID, gen uint64) {
	l.mu.Lock()
	ls, ok := l.m[id]
	if !ok || ls.gen != gen || ls.ending {
		l.mu.Unlock()
		return
	}
	if rest := ls.end.Sub(l.now()); rest > 0 { // the clock moved less than the timer thought
		l.arm(id, ls)
		l.mu.Unlock()
		return
	}
	ls.ending = true
	l.mu.Unlock()
	l.expire(id)
}

// ended forgets sessions the log has ended and answers their parked
// KeepAlives.
func (l *leases) ended(ids []chubby.SessionID) {
	l.mu.Lock()
	var wake []*parkedKeepAlive
	for _, id := range ids {
		ls, ok := l.m[id]
		if !ok {
			continue
		}
		if ls.timer != nil {
			ls.timer.Stop()
		}
		for c := range ls.calls {
			wake = append(wake, c)
		}
		delete(l.m, id)
		delete(l.acked, id)
	}
	l.mu.Unlock()
	for _, c := range wake {
		c.d.Resolve(struct{}{})
	}
}

// wake answers the parked KeepAlives of sessions that got events now.
func (l *leases) wake(ids []chubby.SessionID) {
	l.mu.Lock()
	var wake []*parkedKeepAlive
	for _, id := range ids {
		if ls, ok := l.m[id]; ok {
			for c := range ls.calls {
				wake = append(wake, c)
			}
		}
	}
	l.mu.Unlock()
	for _, c := range wake {
		c.d.Resolve(struct{}{})
	}
}

// takeAcks returns up to max acks ahead of what the queues were trimmed
// to, for one TrimEvents, and forgets them until trimmedTo or untake.
func (l *leases) takeAcks(max int) []*fsm.EventAck {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*fsm.EventAck
	for id := range l.acked {
		if len(out) == max {
			break
		}
		delete(l.acked, id)
		if ls, ok := l.m[id]; ok && ls.ack > ls.trimmed {
			out = append(out, &fsm.EventAck{Session: id, Acked: ls.ack})
		}
	}
	return out
}

// trimmedTo records that a TrimEvents with acks committed.
func (l *leases) trimmedTo(acks []*fsm.EventAck) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range acks {
		if ls, ok := l.m[a.Session]; ok {
			ls.trimmed = max(ls.trimmed, a.Acked)
		}
	}
}

// untake puts back acks whose TrimEvents did not commit.
func (l *leases) untake(acks []*fsm.EventAck) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range acks {
		if ls, ok := l.m[a.Session]; ok && ls.ack > ls.trimmed {
			l.acked[a.Session] = struct{}{}
		}
	}
}

// ending marks a session as being ended (CloseSession) so KeepAlives stop
// extending it. It reports whether the session was live.
func (l *leases) markEnding(id chubby.SessionID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ls, ok := l.m[id]
	if !ok || ls.ending {
		return false
	}
	ls.ending = true
	return true
}

// unmarkEnding undoes markEnding when the EndSession command failed to commit.
func (l *leases) unmarkEnding(id chubby.SessionID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ls, ok := l.m[id]; ok {
		ls.ending = false
		l.arm(id, ls)
	}
}

func (l *leases) count() (sessions, parked int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m), l.parked
}

// register parks a KeepAlive on the given sessions, whose clients
// acknowledged their events up to acks[i]. It returns how long to park (0:
// answer now) or false when too many calls are parked.
func (l *leases) register(ids []chubby.SessionID, acks []int64) (*parkedKeepAlive, time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.parked >= l.max || l.closed {
		return nil, 0, false
	}
	now := l.now()
	wait := l.lease
	c := &parkedKeepAlive{d: rpc.NewDeferred[struct{}](), arrived: now}
	for i, id := range ids {
		ls, ok := l.m[id]
		if !ok || ls.ending {
			wait = 0 // answer at once: that session is over
			continue
		}
		wait = min(wait, ls.end.Sub(now)-l.margin)
		if !ls.greeted {
			c.greet = append(c.greet, id)
			wait = 0
		}
		if a := acks[i]; a > ls.ack {
			ls.ack = a
			if a > ls.trimmed {
				l.acked[id] = struct{}{}
			}
		}
		ls.calls[c] = struct{}{}
	}
	l.parked++
	return c, max(wait, 0), true
}

// answer unparks c and builds the reply: live sessions get a new lease of
// now+lease (only when extend is set, i.e. the caller is still there),
// ended ones SESSION_EXPIRED. A session greeted by this reply (the first of
// this master's epoch) gets MASTER_FAILED_OVER first in its events.
func (l *leases) answer(c *parkedKeepAlive, ids []chubby.SessionID, extend bool, epoch int64) ([]*chubby.LeaseGrant, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.parked--
	if l.closed {
		return nil, false // not the master any more: the table says nothing
	}
	now := l.now()
	out := make([]*chubby.LeaseGrant, 0, len(ids))
	for _, id := range ids {
		ls, ok := l.m[id]
		if ok {
			delete(ls.calls, c)
		}
		if !ok || ls.ending {
			out = append(out, &chubby.LeaseGrant{Session: id,
				Error: &chubby.ChubbyError{Code: chubby.ErrorCode_SESSION_EXPIRED, Message: "session has ended"}})
			continue
		}
		if extend {
			if end := now.Add(l.lease); end.After(ls.end) {
				ls.end = end
				l.arm(id, ls)
			}
		}
		// The client counts lease_ms from when it sent the request, so it is
		// measured from the request's arrival: the client's idea of the lease
		// end is then never later than the master's.
		g := &chubby.LeaseGrant{Session: id, LeaseMs: ls.end.Sub(c.arrived).Milliseconds()}
		if extend && !ls.greeted && slices.Contains(c.greet, id) {
			ls.greeted = true
			ep := epoch
			g.Events = []*chubby.Event{{Kind: chubby.EventKind_MASTER_FAILED_OVER, TimeMs: now.UnixMilli(), Epoch: &ep}}
		}
		out = append(out, g)
	}
	return out, true
}

// leaseEnd reports a session's lease end at the master, false when the
// session is unknown or being ended.
func (l *leases) leaseEnd(id chubby.SessionID) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ls, ok := l.m[id]
	if !ok || ls.ending {
		return time.Time{}, false
	}
	return ls.end, true
}

// alive reports whether a session exists and is not being ended.
func (l *leases) alive(id chubby.SessionID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ls, ok := l.m[id]
	return ok && !ls.ending
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// shutdown answers every parked KeepAlive now (the replica is stopping).
func (l *leases) shutdown() { l.shutdownWith(errShutdown) }

// shutdownWith answers every parked KeepAlive with err, without extending
// anything, stops every lease timer and forgets the leases: this replica is
// no longer (or not yet) the master, and refuses KeepAlives until reset.
func (l *leases) shutdownWith(err error) {
	l.mu.Lock()
	l.closed = true
	var wake []*parkedKeepAlive
	for id, ls := range l.m {
		for c := range ls.calls {
			wake = append(wake, c)
		}
		if ls.timer != nil {
			ls.timer.Stop()
		}
		delete(l.m, id)
	}
	clear(l.acked)
	l.mu.Unlock()
	for _, c := range wake {
		c.d.Reject(err)
	}
}

// reset starts an empty lease table for a new master epoch.
func (l *leases) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, ls := range l.m {
		if ls.timer != nil {
			ls.timer.Stop()
		}
		delete(l.m, id)
	}
	clear(l.acked)
	l.closed = false
}
