package master

import (
	"cmp"
	"container/heap"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/replica/vr"
)

// Time is a reading of the master's monotonic clock, in nanoseconds.
type Time = int64

// LeaseConfig configures Leases. Zero fields take the defaults of
// DefaultLeaseConfig.
type LeaseConfig struct {
	// Lease is the session lease L. Default 12 s (Chubby's).
	Lease time.Duration
	// Margin: a parked KeepAlive is answered this long before the earliest
	// lease in it would end. It must leave room for the reply to cross the
	// network and for the 2ε·(lease) the client is told less than the
	// master holds (see the package documentation). Default L/4.
	Margin time.Duration
	// MaxDrift is ε, the bound on clock rate error. Default
	// vr.MaxClockDrift (the cell passes it in).
	MaxDrift float64
	// MaxParked bounds the KeepAlive calls parked at once. Default 20,000.
	MaxParked int
}

// DefaultLeaseConfig returns the defaults: Lease 12 s, Margin Lease/4
// (3 s), MaxDrift vr.MaxClockDrift, MaxParked 20,000. NewLeases gives a Lease at or below
// zero, a MaxDrift outside (0, 0.5) and a MaxParked at or below zero their
// value here, and a Margin outside (0, Lease) a quarter of the Lease.
func DefaultLeaseConfig() LeaseConfig {
	const lease = 12 * time.Second
	return LeaseConfig{Lease: lease, Margin: lease / 4, MaxDrift: vr.MaxClockDrift, MaxParked: 20000}
}

func (c *LeaseConfig) setDefaults() {
	d := DefaultLeaseConfig()
	if c.Lease <= 0 {
		c.Lease = d.Lease
	}
	if c.Margin <= 0 || c.Margin >= c.Lease {
		c.Margin = c.Lease / 4
	}
	if c.MaxDrift <= 0 || c.MaxDrift >= 0.5 {
		c.MaxDrift = d.MaxDrift
	}
	if c.MaxParked <= 0 {
		c.MaxParked = d.MaxParked
	}
}

// RecoveredLease is the lease a new master gives every session it recovers
// from the log, counted from when it starts serving: L·(1+ε)/(1−ε),
// rounded up, the longest any earlier master could have granted as this
// master's clock measures it (see the package documentation, (4)).
func (c LeaseConfig) RecoveredLease() time.Duration {
	return time.Duration(math.Ceil(float64(c.Lease) * (1 + c.MaxDrift) / (1 - c.MaxDrift)))
}

// ClientLease is how long a client may count, on its own clock from when
// it sent the request, a lease that ends at the master held (master clock)
// after the request arrived: held·(1−ε)/(1+ε), rounded down to a
// millisecond (see the package documentation, (3)).
func (c LeaseConfig) ClientLease(held time.Duration) time.Duration {
	if held <= 0 {
		return 0
	}
	d := time.Duration(float64(held) * (1 - c.MaxDrift) / (1 + c.MaxDrift))
	return d.Truncate(time.Millisecond)
}

// Errors of Leases.
var (
	// ErrNotServing: the table is closed (this replica is not serving as
	// master).
	ErrNotServing = errors.New("master: not serving as master")
	// ErrTooManyParked: MaxParked KeepAlives are parked already.
	ErrTooManyParked = errors.New("master: too many KeepAlives parked")
	// ErrLeaseLapsed: the master lease is not held now, so no session may
	// be extended.
	ErrLeaseLapsed = errors.New("master: the master lease lapsed")
)

// Leases is the master's session lease table and its parked KeepAlives.
// Leases are the master's own timers, not replicated state:
// only a session's creation and end are commands. It is not safe for
// concurrent use.
//
// A KeepAlive is registered (Register) and parked by the caller for the
// wait Register returns — until shortly (Margin) before the earliest lease
// in it ends, at once when one of its sessions has ended or is new to this
// master, or until the caller wakes it early (events, invalidations,
// Ended). Then Answer extends every live lease in it to now+L, if the
// master lease is held now, and builds the grants.
//
// The table also keeps what each session's client acknowledged of its
// events: the master trims the replicated queues lazily, in batches
// (TakeAcks), and does not log acks one by one.
type Leases struct {
	cfg LeaseConfig

	open     bool
	epoch    int64
	sessions map[chubby.SessionID]*sessionLease
	expiry   expiryHeap
	parked   int
	nextCall uint64
	// acked lists the sessions whose ack is ahead of what the queues were
	// trimmed to: the next TrimEvents batch.
	acked map[chubby.SessionID]struct{}
}

type sessionLease struct {
	end    Time
	ending bool // EndSession proposed (expired or closed): KeepAlives get SESSION_EXPIRED
	// retryAt is when an expiry whose EndSession failed is due again
	// (Retry), 0 for none; tries counts the failures.
	retryAt Time
	tries   int
	// greeted: the session's client has had a KeepAlive answer in this
	// epoch. A session recovered by a new master is not: its first
	// KeepAlive is answered at once, so the client learns of the failover
	// (the epoch in the reply) and renews without waiting a lease.
	greeted bool
	calls   []*Call // parked on this session
	// Events: the highest seq the client acknowledged to this master, and
	// the highest ack a committed TrimEvents carried.
	ack, trimmed int64
}

// Call is one parked KeepAlive.
type Call struct {
	ids     []chubby.SessionID
	arrived Time // the lease the client counts is measured from here
	// greet lists the sessions this call is the first of in this epoch:
	// their grants carry MASTER_FAILED_OVER.
	greet  []chubby.SessionID
	token  any
	parked bool
	seq    uint64 // registration order: tokens come back in it
}

// Token is what the caller registered the call with (how to wake it).
func (c *Call) Token() any { return c.token }

// NewLeases returns a closed table: Start opens it.
func NewLeases(cfg LeaseConfig) *Leases {
	cfg.setDefaults()
	return &Leases{cfg: cfg, sessions: make(map[chubby.SessionID]*sessionLease), acked: make(map[chubby.SessionID]struct{})}
}

// Start opens the table for a new master epoch at now: every session the
// state holds (recovered) gets RecoveredLease from now, and none of them
// is greeted yet.
func (l *Leases) Start(now Time, epoch int64, recovered []chubby.SessionID) {
	l.reset()
	l.open, l.epoch = true, epoch
	end := now + int64(l.cfg.RecoveredLease())
	for _, id := range recovered {
		l.put(id, &sessionLease{end: end})
	}
}

// Stop closes the table (this replica stopped being the master) and
// returns the tokens of every parked call, which the caller must answer
// without a grant. Nothing is extended until the next Start.
func (l *Leases) Stop() []any {
	var calls []*Call
	for _, ls := range l.sessions {
		for _, c := range ls.calls {
			c.parked = false
			calls = append(calls, c)
		}
	}
	l.reset()
	return tokens(calls)
}

// tokens returns the tokens of calls, each once, in registration order
// (it reorders calls).
func tokens(calls []*Call) []any {
	if len(calls) == 0 {
		return nil
	}
	slices.SortFunc(calls, func(a, b *Call) int { return cmp.Compare(a.seq, b.seq) })
	calls = slices.CompactFunc(calls, func(a, b *Call) bool { return a == b })
	out := make([]any, len(calls))
	for i, c := range calls {
		out[i] = c.token
	}
	return out
}

func (l *Leases) reset() {
	l.open = false
	clear(l.sessions)
	clear(l.acked)
	l.expiry = l.expiry[:0]
	l.parked = 0
}

func (l *Leases) put(id chubby.SessionID, ls *sessionLease) {
	l.sessions[id] = ls
	heap.Push(&l.expiry, expiryItem{at: ls.end, end: ls.end, id: id})
}

// Open reports whether the table serves (between Start and Stop).
func (l *Leases) Open() bool { return l.open }

// Add starts the lease of a session just created (its client has the
// epoch from CreateSession), at now; until is when the master lease held
// now ends. It returns how long the client may count the lease from when
// it sent CreateSession (which arrived at arrived), and false when the
// master lease is not held now: then the session still gets its lease
// here (it exists in the log, and must end), but the caller must not
// tell the client it has one.
func (l *Leases) Add(now, until, arrived Time, id chubby.SessionID) (time.Duration, bool) {
	if !l.open {
		return 0, false
	}
	ls, ok := l.sessions[id]
	if !ok {
		ls = &sessionLease{end: now + int64(l.cfg.Lease), greeted: true}
		l.put(id, ls)
	}
	if now >= until {
		return 0, false
	}
	return l.cfg.ClientLease(time.Duration(ls.end - arrived)), true
}

// Register parks a KeepAlive that arrived at now for the sessions ids,
// whose clients acknowledged their events up to acks[i]. token is handed
// back to wake the call. It returns how long to park (0: answer now).
func (l *Leases) Register(now Time, ids []chubby.SessionID, acks []int64, token any) (*Call, time.Duration, error) {
	if !l.open {
		return nil, 0, ErrNotServing
	}
	if l.parked >= l.cfg.MaxParked {
		return nil, 0, ErrTooManyParked
	}
	wait := l.cfg.Lease
	l.nextCall++
	c := &Call{ids: slices.Clone(ids), arrived: now, token: token, parked: true, seq: l.nextCall}
	for i, id := range ids {
		ls, ok := l.sessions[id]
		if !ok || ls.ending {
			wait = 0 // answer at once: that session is over
			continue
		}
		wait = min(wait, time.Duration(ls.end-now)-l.cfg.Margin)
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
		ls.calls = append(ls.calls, c)
	}
	l.parked++
	return c, max(wait, 0), nil
}

// Answer unparks c at now and builds its reply: every live session gets
// its lease extended to now+L and a grant of what the client may count;
// an ended one gets SESSION_EXPIRED; a session greeted by this reply (the
// first of this master's epoch) gets MASTER_FAILED_OVER first in its
// events. until is when the master lease held now ends: when it is not
// held (now >= until) nothing is extended and Answer fails with
// ErrLeaseLapsed, leaving c parked (the caller may wait for the lease and
// try again, or Abandon it). nowMs stamps the failover event.
func (l *Leases) Answer(c *Call, now, until Time, nowMs int64) ([]*chubby.LeaseGrant, error) {
	if !l.open || !c.parked {
		return nil, ErrNotServing
	}
	if now >= until {
		return nil, ErrLeaseLapsed
	}
	l.unpark(c)
	out := make([]*chubby.LeaseGrant, 0, len(c.ids))
	for _, id := range c.ids {
		ls, ok := l.sessions[id]
		if !ok || ls.ending {
			out = append(out, &chubby.LeaseGrant{Session: id,
				Error: &chubby.ChubbyError{Code: chubby.ErrorCode_SESSION_EXPIRED, Message: "session has ended"}})
			continue
		}
		if end := now + int64(l.cfg.Lease); end > ls.end {
			ls.end = end
			heap.Push(&l.expiry, expiryItem{at: end, end: end, id: id})
		}
		g := &chubby.LeaseGrant{Session: id, LeaseMs: l.cfg.ClientLease(time.Duration(ls.end - c.arrived)).Milliseconds()}
		if !ls.greeted && slices.Contains(c.greet, id) {
			ls.greeted = true
			ep := l.epoch
			g.Events = []*chubby.Event{{Kind: chubby.EventKind_MASTER_FAILED_OVER, TimeMs: nowMs, Epoch: &ep}}
		}
		out = append(out, g)
	}
	return out, nil
}

// Abandon unparks c without extending anything (its caller went away, or
// the master lease did not come back in time).
func (l *Leases) Abandon(c *Call) {
	if c.parked {
		l.unpark(c)
	}
}

func (l *Leases) unpark(c *Call) {
	c.parked = false
	l.parked--
	for _, id := range c.ids {
		if ls, ok := l.sessions[id]; ok {
			ls.calls = slices.DeleteFunc(ls.calls, func(x *Call) bool { return x == c })
		}
	}
}

// Due returns the sessions whose lease has ended at now, marked ending:
// the caller proposes their EndSession (expired) and reports Ended once it
// applied, or Retry if it could not be committed (Due returns the session
// again after a pause). lag is how late the
// caller looks (now minus the time NextDue gave; 0 when unknown).
//
// A master that was not running when a lease ended (its process starved
// of CPU, paused, swapped out) must not blame the client for its own
// lateness. So Due ends no session of which it cannot tell that the
// client failed its part:
//
//   - A session with a KeepAlive parked is not ended: its client asked
//     in time, and only the master's lateness kept the answer back. The
//     calls parked on it are returned in wake (answer them now: Answer
//     extends the session if the master lease is held); the session is
//     looked at again after Margin/4, and ended then if no answer
//     extended it (the call was abandoned: its caller went, or the master
//     lease did not come back).
//   - After a late look (lag above Margin/8), a session with nothing
//     parked is looked at again after min(lag, Margin) instead of ended:
//     a KeepAlive that arrived while the master was not running waits
//     unread in a socket, and the master reads it in that time. This
//     defers an end by at most a lease past the session's lease end; a
//     session whose lease ended longer ago is ended at once.
//
// Both only delay an end, which is always safe: no other client gets a
// session's locks before its EndSession commits, and a session extended
// past its old end got a grant the lease rule covers like any other (see
// the package documentation).
func (l *Leases) Due(now, lag Time) (due []chubby.SessionID, wake []any) {
	if !l.open {
		return nil, nil
	}
	late := lag > int64(l.cfg.Margin/8)
	var calls []*Call
	for len(l.expiry) > 0 && l.expiry[0].at <= now {
		it := heap.Pop(&l.expiry).(expiryItem)
		ls, ok := l.sessions[it.id]
		if !ok || !it.valid(ls) {
			continue // gone, being ended, or extended since
		}
		if it.retry {
			ls.retryAt = 0
			due = append(due, it.id) // its EndSession failed: again
			continue
		}
		switch {
		case len(ls.calls) > 0:
			calls = append(calls, ls.calls...)
			l.recheck(it, now+int64(l.cfg.Margin/4))
		case late && now-ls.end < int64(l.cfg.Lease):
			l.recheck(it, now+min(lag, int64(l.cfg.Margin)))
		default:
			ls.ending = true
			due = append(due, it.id)
		}
	}
	return due, tokens(calls)
}

// recheck queues it to be looked at again at at.
func (l *Leases) recheck(it expiryItem, at Time) {
	it.at = at
	heap.Push(&l.expiry, it)
}

// NextDue returns when to call Due next (the next lease end, or a look
// again that Due queued), false when no session is live.
func (l *Leases) NextDue() (Time, bool) {
	for len(l.expiry) > 0 {
		it := l.expiry[0]
		if ls, ok := l.sessions[it.id]; ok && it.valid(ls) {
			return it.at, true
		}
		heap.Pop(&l.expiry)
	}
	return 0, false
}

// ExpiryRetryFirst and ExpiryRetryMax bound the pause before an expired
// session's EndSession, which failed, is proposed again (Retry): it
// doubles from the first to the most.
const (
	ExpiryRetryFirst = 10 * time.Millisecond
	ExpiryRetryMax   = time.Second
)

// Retry says that the EndSession of a session Due returned did not
// commit (the log was overloaded, or the change pipeline refused it). The
// session stays marked ending — its lease is over, so nothing extends it
// — and Due returns it again after a pause that doubles with every
// failure, from ExpiryRetryFirst to ExpiryRetryMax. It returns the pause.
func (l *Leases) Retry(id chubby.SessionID, now Time) time.Duration {
	ls, ok := l.sessions[id]
	if !ok || !ls.ending {
		return 0
	}
	pause := min(ExpiryRetryFirst<<min(ls.tries, 16), ExpiryRetryMax)
	ls.tries++
	ls.retryAt = now + Time(pause)
	heap.Push(&l.expiry, expiryItem{at: ls.retryAt, id: id, retry: true})
	return pause
}

// Expired takes the outcome of the EndSession proposed for a session Due
// returned: nil when it applied, else the error or the state's refusal. A
// session the state had ended already (SESSION_EXPIRED) is ended too.
// Ended sessions are forgotten, and toks are their parked calls to answer
// (Ended); otherwise the EndSession is due again after pause (Retry).
func (l *Leases) Expired(id chubby.SessionID, now Time, err error) (ended bool, toks []any, pause time.Duration) {
	var ce *chubby.ChubbyError
	if err == nil || (errors.As(err, &ce) && ce.Code == chubby.ErrorCode_SESSION_EXPIRED) {
		return true, l.Ended([]chubby.SessionID{id}), 0
	}
	return false, nil, l.Retry(id, now)
}

// MarkEnding marks a session as being ended (CloseSession) so that
// KeepAlives stop extending it. It reports whether the session was live.
func (l *Leases) MarkEnding(id chubby.SessionID) bool {
	ls, ok := l.sessions[id]
	if !ok || ls.ending {
		return false
	}
	ls.ending = true
	return true
}

// Unmark undoes MarkEnding when the EndSession of a CloseSession did not
// commit: the session lives on with the lease it had, and is due again at
// once if that is over.
func (l *Leases) Unmark(id chubby.SessionID) {
	if ls, ok := l.sessions[id]; ok && ls.ending {
		ls.ending, ls.retryAt = false, 0
		heap.Push(&l.expiry, expiryItem{at: ls.end, end: ls.end, id: id})
	}
}

// Ended forgets sessions the log has ended and returns the tokens of the
// calls parked on them, to be woken (their answer says SESSION_EXPIRED).
func (l *Leases) Ended(ids []chubby.SessionID) []any {
	var calls []*Call
	for _, id := range ids {
		ls, ok := l.sessions[id]
		if !ok {
			continue
		}
		calls = append(calls, ls.calls...)
		delete(l.sessions, id)
		delete(l.acked, id)
	}
	return tokens(calls)
}

// Wake returns the tokens of the calls parked on the given sessions (they
// got events or invalidations: answer them now).
func (l *Leases) Wake(ids []chubby.SessionID) []any {
	var calls []*Call
	for _, id := range ids {
		if ls, ok := l.sessions[id]; ok {
			calls = append(calls, ls.calls...)
		}
	}
	return tokens(calls)
}

// LeaseEnd returns a session's lease end at this master, false when the
// session is unknown or being ended.
func (l *Leases) LeaseEnd(id chubby.SessionID) (Time, bool) {
	ls, ok := l.sessions[id]
	if !ok || ls.ending {
		return 0, false
	}
	return ls.end, true
}

// Alive reports whether a session exists and is not being ended.
func (l *Leases) Alive(id chubby.SessionID) bool {
	ls, ok := l.sessions[id]
	return ok && !ls.ending
}

// Count returns the sessions in the table and the calls parked.
func (l *Leases) Count() (sessions, parked int) { return len(l.sessions), l.parked }

// TakeAcks returns up to max acks ahead of what the queues were trimmed
// to, for one TrimEvents, and forgets them until TrimmedTo or Untake.
func (l *Leases) TakeAcks(max int) []*fsm.EventAck {
	var out []*fsm.EventAck
	ids := make([]chubby.SessionID, 0, len(l.acked))
	for id := range l.acked {
		ids = append(ids, id)
	}
	slices.Sort(ids) // deterministic batches
	for _, id := range ids {
		if len(out) == max {
			break
		}
		delete(l.acked, id)
		if ls, ok := l.sessions[id]; ok && ls.ack > ls.trimmed {
			out = append(out, &fsm.EventAck{Session: id, Acked: ls.ack})
		}
	}
	return out
}

// TrimmedTo records that a TrimEvents with acks committed.
func (l *Leases) TrimmedTo(acks []*fsm.EventAck) {
	for _, a := range acks {
		if ls, ok := l.sessions[a.Session]; ok {
			ls.trimmed = max(ls.trimmed, a.Acked)
		}
	}
}

// Untake puts back acks whose TrimEvents did not commit.
func (l *Leases) Untake(acks []*fsm.EventAck) {
	for _, a := range acks {
		if ls, ok := l.sessions[a.Session]; ok && ls.ack > ls.trimmed {
			l.acked[a.Session] = struct{}{}
		}
	}
}

// expiryItem is one look at a lease end, which expiryHeap orders by time:
// at is when (the lease end, or later when Due put a look off), end the
// lease end it was queued for. An entry is stale once its session was extended, ended or
// forgotten, and is dropped when it comes up.
type expiryItem struct {
	at, end Time
	id      chubby.SessionID
	retry   bool // a failed expiry's next try (Retry), not a lease end
}

// valid reports whether it still stands for ls: a lease end not extended
// since, of a session not being ended, or ls's pending Retry.
func (it expiryItem) valid(ls *sessionLease) bool {
	if it.retry {
		return ls.ending && ls.retryAt == it.at
	}
	return !ls.ending && ls.end == it.end
}

type expiryHeap []expiryItem

func (h expiryHeap) Len() int { return len(h) }
func (h expiryHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].id < h[j].id
}
func (h expiryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)   { *h = append(*h, x.(expiryItem)) }
func (h *expiryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
