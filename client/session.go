package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cloudwego/kitex/client/callopt"
	"github.com/cloudwego/kitex/pkg/kerrors"

	"github.com/chubbygo/chubby/client/keepalive"
	"github.com/chubbygo/chubby/client/rid"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/rpc"
)

// closeDrain bounds how long Close waits for the KeepAlive loop to hear
// from the cell that the session it just closed has ended.
const closeDrain = time.Second

// Bounds of the jeopardy machinery (see the package documentation).
const (
	// maxSendRounds bounds how often one call of a session is sent anew
	// after it gave up because no master could be reached and the session
	// then reached one again (each round is itself up to maxCallAttempts
	// attempts).
	maxSendRounds = 3

	// maxStateWaits bounds how many state changes one call waits through
	// before it is sent (see Session.awaitSafe). Two suffice in the common
	// cases (safe → jeopardy → safe); past the bound the call is sent
	// anyway and the cell decides.
	maxStateWaits = 8
)

// Session is one client session with the cell: the unit that
// holds locks, owns ephemeral nodes and opens handles. A goroutine keeps it
// alive with KeepAlive calls until it is closed or expires; in between it
// may go through jeopardy (see the package documentation and State). A
// Session is safe for concurrent use.
type Session struct {
	c     *Client
	id    chubby.SessionID
	log   *slog.Logger
	grace time.Duration // Config.GracePeriod

	// ctx is cancelled when the session ends; Done returns its channel.
	// In-flight calls of the session are cancelled with it.
	ctx    context.Context
	cancel context.CancelFunc

	loopDone chan struct{} // closed when the KeepAlive loop has returned
	// cache holds file contents, Stats and listings (cache.go); it also
	// tracks invalidation acks, which are sent even when caching is off.
	cache   *cache
	caching bool // !Config.DisableCache
	events  *eventQueue[SessionEvent]
	ev      sessionEvents // events of the session's handles (events.go)

	// rids numbers the session's calls that change the cell (their
	// RequestID) by the rules of package client/rid: a number is kept
	// across every resend of one call, so the cell applies it once, and
	// the floor sent with it is the lowest number not finished yet.
	ridMu sync.Mutex
	rids  rid.Numbers

	mu sync.Mutex
	// k is the session's KeepAlive loop as a pure state machine (package
	// client/keepalive): it holds the local lease, kept by the rules of
	// package client/lease (safe until the send time of the request
	// answered + lease_ms, then jeopardy for the grace period), the highest
	// master epoch heard of and the renewals, and decides when the
	// KeepAlive loop sends, backs off and asks where the master is.
	k       *keepalive.Keeper
	ended   SessionState  // StateExpired or StateClosed once err is set
	changed chan struct{} // closed (and replaced) when state, renewals or err change
	err     error         // why the session ended; nil while it lives
	closing bool          // Close is under way: SESSION_EXPIRED is then expected
}

// NewSession creates a session (CreateSession) and starts its KeepAlive loop.
// CreateSession is retried on NOT_MASTER, UNAVAILABLE and transport errors
// other than timeouts (bounded): a session created by an attempt whose reply was lost is never
// kept alive and ends after one lease.
func (c *Client) NewSession(ctx context.Context) (*Session, error) {
	return await(ctx, c.NewSessionAsync(ctx))
}

// NewSessionAsync is the asynchronous form of NewSession. A caller that
// abandons the future must still Close the session it yields (see
// Future.Then), or the session lives on, kept alive by its loop.
func (c *Client) NewSessionAsync(ctx context.Context) *rpc.Future[*Session] {
	return rpc.Go(ctx, func(ctx context.Context) (*Session, error) {
		// The lease counts from before the request was sent; the time before
		// the first attempt is earlier still, so the local lease stays conservative.
		sent := time.Now()
		var at string
		r, err := call(ctx, c, callSpec{op: "create-session", class: retrySafe, timeout: c.cfg.CallTimeout, sentTo: &at},
			func(ctx context.Context, o ...callopt.Option) (*chubby.CreateSessionResponse, error) {
				req := &chubby.CreateSessionRequest{ClientName: c.cfg.ClientName}
				if !c.cfg.DisableCache {
					req.Cache = boolPtr(true)
				}
				return c.kc.CreateSession(ctx, req, o...)
			})
		if err != nil {
			return nil, err
		}
		s := &Session{
			c:        c,
			id:       r.GetSession(),
			log:      c.log.With("session", r.GetSession()),
			grace:    c.cfg.GracePeriod,
			loopDone: make(chan struct{}),
			events:   newEventQueue[SessionEvent](SessionEventBuffer),
			k:        keepalive.New(keepalive.DefaultConfig(c.cfg.GracePeriod), sent, time.Duration(r.GetLeaseMs())*time.Millisecond, r.GetEpoch()),
			changed:  make(chan struct{}),
			cache:    newCache(c.cfg.CacheMaxEntries),
			caching:  !c.cfg.DisableCache,
		}
		s.ctx, s.cancel = context.WithCancel(context.Background())
		if !c.addSession(s) {
			close(s.loopDone)
			s.end(ErrClientClosed)
			return nil, &OpError{Op: "create-session", Err: ErrClientClosed}
		}
		go s.keepAliveLoop()
		c.locator.heard(at, r.GetEpoch())
		c.locator.startWatch()
		if ctx.Err() != nil {
			// The caller gave up while the session was being created: do
			// not leave a session nobody knows of alive.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.CallTimeout)
			defer cancel()
			_ = s.Close(cctx)
			return nil, &OpError{Op: "create-session", Err: context.Cause(ctx)}
		}
		s.log.Debug("chubby: session created", "lease_ms", r.GetLeaseMs(), "epoch", r.GetEpoch())
		return s, nil
	})
}

// ID returns the session's id, as the cell knows it.
func (s *Session) ID() chubby.SessionID { return s.id }

// Client returns the client the session belongs to.
func (s *Session) Client() *Client { return s.c }

// Done returns a channel closed when the session ends for any reason
// (Close, expiry, Client.Close). Err then says why. Jeopardy does not end a
// session: watch Events or State for it.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Err returns nil while the session lives (safe or in jeopardy); afterwards
// ErrSessionClosed, ErrClientClosed, or an error wrapping ErrSessionExpired
// that says how it expired (the cell said so, or the grace period ran out).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// State returns where the session is now: StateSafe, StateJeopardy,
// StateExpired or StateClosed. It is exact to the moment: a session whose
// local lease has just run out reports StateJeopardy even if its
// EventJeopardy is still on its way.
func (s *Session) State() SessionState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stateLocked(time.Now())
}

// stateLocked is State; s.mu is held. A grace period that has just run
// out is still jeopardy until the KeepAlive loop ends the session.
func (s *Session) stateLocked(now time.Time) SessionState {
	if s.err != nil {
		return s.ended
	}
	if s.k.Safe(now) {
		return StateSafe
	}
	return StateJeopardy
}

// CacheStats returns the session cache's hit and miss counts.
func (s *Session) CacheStats() CacheStats { return s.cache.stats() }

// cacheUsable reports whether the cache may serve a read now: caching is
// on and the session is safe (its local lease has not run out), so the
// master still waits for this client's acks before changing what it holds.
func (s *Session) cacheUsable() bool {
	if !s.caching {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err == nil && s.stateLocked(time.Now()) == StateSafe
}

// Events returns the session's event channel: EventJeopardy, EventSafe,
// EventMasterChanged, EventLostEvents and, last, EventExpired, in the order
// they happened. (The events of handles come on Handle.Events.)
// It is the same channel on every call, and it is closed when the session
// ends (after EventExpired if it expired), so an application may range
// over it. The channel holds SessionEventBuffer events; when the
// application does not keep up, the oldest undelivered event is dropped,
// never the newest, and the KeepAlive loop never waits. State always tells
// the current state.
func (s *Session) Events() <-chan SessionEvent { return s.events.ch }

// Epoch returns the highest master epoch the session has heard of (from
// CreateSession and KeepAlive replies).
func (s *Session) Epoch() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.k.Epoch()
}

// LeaseRemaining returns how long the session is certainly alive at the
// master unless it is renewed: the local lease end (send time of the last
// answered KeepAlive + its lease) minus now. It is 0 in jeopardy and once
// the session ended.
func (s *Session) LeaseRemaining() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0
	}
	return max(0, time.Until(s.k.LeaseEnd()))
}

// broadcastLocked wakes every call waiting on the session's state; s.mu is held.
func (s *Session) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// emit queues an event; it never blocks.
func (s *Session) emit(kind SessionEventKind, epoch int64, err error) {
	if s.events.push(SessionEvent{Kind: kind, At: time.Now(), Epoch: epoch, Err: err}) {
		// Debug: an application may well never read its events.
		s.log.Debug("chubby: session event buffer full; dropped the oldest event",
			"buffer", SessionEventBuffer, "event", kind)
	}
}

// end ends the session locally with err (first reason wins): Done closes,
// in-flight calls and the KeepAlive loop are cancelled, EventExpired is
// sent if err wraps ErrSessionExpired, and the event channel is closed.
func (s *Session) end(err error) {
	expired := errors.Is(err, ErrSessionExpired)
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	if expired {
		s.k.Finish(keepalive.CellEnded)
	} else {
		s.k.Finish(keepalive.Closed)
	}
	if expired {
		s.ended = StateExpired
	} else {
		s.ended = StateClosed
	}
	epoch := s.k.Epoch()
	s.broadcastLocked()
	s.mu.Unlock()
	s.cache.flush()
	s.cancel()
	s.c.removeSession(s)
	if expired {
		s.log.Warn("chubby: session expired", "err", err)
		s.emit(EventExpired, epoch, err)
	} else {
		s.log.Debug("chubby: session ended", "err", err)
	}
	s.events.close()
	s.closeWatchers()
}

// Close ends the session at the cell (CloseSession: its locks are released
// without lock-delay, its handles closed, its ephemeral nodes deleted) and
// stops its KeepAlive loop. The session ends locally even when the call
// fails; the cell then ends it when its lease runs out, and Close returns
// the error. Closing a closed session returns nil; closing an expired one
// returns its Err.
func (s *Session) Close(ctx context.Context) error {
	_, err := await(ctx, s.CloseAsync(ctx))
	return err
}

// CloseAsync is the asynchronous form of Close.
func (s *Session) CloseAsync(ctx context.Context) *rpc.Future[struct{}] {
	return rpc.Go(ctx, func(ctx context.Context) (struct{}, error) {
		s.mu.Lock()
		if s.err != nil || s.closing {
			err, closing := s.err, s.closing
			s.mu.Unlock()
			if closing || errors.Is(err, ErrSessionClosed) {
				<-s.loopDone
				return struct{}{}, nil
			}
			return struct{}{}, &OpError{Op: "close-session", Err: err}
		}
		s.closing = true
		s.k.Closing()
		s.mu.Unlock()
		_, err := call(ctx, s.c, callSpec{op: "close-session", class: retryUnsent, timeout: s.c.cfg.CallTimeout},
			func(ctx context.Context, o ...callopt.Option) (struct{}, error) {
				return struct{}{}, s.c.kc.CloseSession(ctx, &chubby.CloseSessionRequest{Session: s.id}, o...)
			})
		switch {
		case err == nil:
			// The cell answers the parked KeepAlive at once when the
			// session ends; let the loop see that answer (it then ends the
			// session as closed) rather than abandon the call mid-flight.
			t := time.NewTimer(closeDrain)
			select {
			case <-s.loopDone:
			case <-t.C:
			}
			t.Stop()
		case IsCode(err, chubby.ErrorCode_SESSION_EXPIRED):
			s.end(fmt.Errorf("%w: the cell had ended it before Close", ErrSessionExpired))
		}
		s.end(ErrSessionClosed)
		<-s.loopDone
		return struct{}{}, err
	})
}

// kaAttempt is one KeepAlive in flight.
type kaAttempt struct {
	f       *rpc.Future[*chubby.KeepAliveResponse]
	cancel  context.CancelFunc
	addr    string    // the replica it was sent to
	sent    time.Time // before sending: the lease it renews counts from here
	attempt uint64    // its number in the session's keepalive.Keeper
}

// keepAliveLoop keeps the session alive until it ends. What it does and
// when is decided by the session's keepalive.Keeper (package
// client/keepalive, where the rules are): the loop carries out its Ready
// over Kitex and feeds it what happens. In short: one KeepAlive at a time
// goes to the replica believed to be master, which parks it until shortly
// before the lease would end; each reply extends the local lease and the
// next goes out at once; failures are retried with a bounded backoff,
// following NOT_MASTER hints and, with several replicas, asking them all
// where the master is (locator.locate); the session goes through jeopardy
// (EventJeopardy, then EventSafe or EventExpired) when the local lease runs
// out with no reply.
//
// The loop runs as long as the session: each turn ticks the Keeper, carries
// out its Ready and waits for a reply, a failure, the Keeper's wake time,
// a locate round (this loop's or anyone's: a call's, another session's,
// the master watch) or the session's end. Every wait is bounded by the
// lease end or, in jeopardy, by the end of the grace period (a locate
// round by its own timeout).
func (s *Session) keepAliveLoop() {
	defer close(s.loopDone)
	l := &kaLoop{s: s, timer: time.NewTimer(time.Hour)}
	defer l.timer.Stop()
	defer func() {
		if l.cur != nil {
			l.cur.cancel()
		}
	}()
	for l.turn() {
	}
}

// kaLoop is the I/O state of a session's keepAliveLoop; the decisions are
// the Keeper's (Session.k).
type kaLoop struct {
	s     *Session
	timer *time.Timer

	cur      *kaAttempt      // the KeepAlive in flight, or nil
	locating <-chan struct{} // the locate round the Keeper asked for, or nil
	lastErr  error           // the latest KeepAlive failure, for the session's end
}

// turn is one turn of the loop. It returns false when the loop is over.
func (l *kaLoop) turn() bool {
	s := l.s
	if s.ctx.Err() != nil {
		return false
	}
	// Taken before anything is decided: a round that ends from here on
	// wakes this turn.
	ended := s.c.locator.roundEnded()
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return false // ended
	}
	s.k.Tick(time.Now())
	rd := s.k.Ready()
	s.mu.Unlock()
	again, ok := l.carryOut(rd)
	if !ok {
		return false
	}
	if again {
		return true
	}
	l.timer.Reset(max(time.Until(rd.Wake), 0))
	var replied <-chan struct{}
	if l.cur != nil {
		replied = l.cur.f.Done()
	}
	select {
	case <-s.ctx.Done():
		return false
	case <-l.timer.C:
	case <-l.locating:
		l.roundOver()
	case <-ended:
		l.roundOver()
	case <-replied:
		l.replied()
	}
	return true
}

// carryOut does what rd says. ok is false when the session is over;
// again asks for another turn at once (the Keeper has more to decide).
func (l *kaLoop) carryOut(rd keepalive.Ready) (again, ok bool) {
	s := l.s
	s.tell(rd.Events)
	if rd.End != keepalive.NotEnded {
		s.end(l.endErr(rd.End))
		return false, false
	}
	if rd.Cancel && l.cur != nil {
		s.log.Debug("chubby: master located elsewhere; resending KeepAlive",
			"from", l.cur.addr, "to", s.c.locator.lastLocated().addr)
		l.cur.cancel()
		l.cur = nil
		again = true
	}
	if rd.Send {
		l.cur = s.sendKeepAlive()
	}
	if rd.Locate {
		if s.c.locator.multi() {
			l.locating = s.c.locator.locate()
		} else {
			// Nobody else to ask: the round is over before it began.
			s.mu.Lock()
			s.k.Located(time.Now(), "", 0, true)
			s.mu.Unlock()
			again = true
		}
	}
	return again, true
}

// endErr is the session's Err for how the Keeper ended it.
func (l *kaLoop) endErr(why keepalive.End) error {
	s := l.s
	switch why {
	case keepalive.Closed:
		return ErrSessionClosed
	case keepalive.CellEnded:
		return fmt.Errorf("%w: the cell ended it: %s", ErrSessionExpired, Describe(l.lastErr))
	}
	s.mu.Lock()
	leaseEnd := s.k.LeaseEnd()
	s.mu.Unlock()
	return fmt.Errorf("%w: no KeepAlive reply within the grace period (%v) after the local lease ended at %s",
		ErrSessionExpired, s.grace, leaseEnd.Format(time.RFC3339Nano))
}

// roundOver tells the Keeper that a locate round ended: ours (the one it
// asked for) or anyone's.
func (l *kaLoop) roundOver() {
	ours := false
	if l.locating != nil {
		select {
		case <-l.locating:
			l.locating, ours = nil, true
		default:
		}
	}
	loc := l.s.c.locator.lastLocated()
	l.s.mu.Lock()
	l.s.k.Located(time.Now(), loc.addr, loc.epoch, ours)
	l.s.mu.Unlock()
}

// replied feeds the Keeper the outcome of the KeepAlive in flight.
func (l *kaLoop) replied() {
	s := l.s
	a := l.cur
	l.cur = nil
	a.cancel()
	r, err, _ := a.f.Result()
	if err == nil {
		err = s.applyKeepAlive(a, r)
	}
	if err == nil {
		s.log.Debug("chubby: KeepAlive answered", "addr", a.addr, "epoch", r.GetEpoch(),
			"took", time.Since(a.sent))
		s.c.locator.heard(a.addr, r.GetEpoch())
		return
	}
	if s.ctx.Err() != nil {
		return
	}
	l.lastErr = err
	f, epoch := s.classifyKeepAlive(a.addr, err)
	s.mu.Lock()
	s.k.Failed(time.Now(), a.attempt, f, epoch)
	s.mu.Unlock()
	s.log.Debug("chubby: KeepAlive failed", "addr", a.addr, "next", s.c.locator.addr(),
		"failure", f, "err", Describe(err))
}

// sendKeepAlive sends one KeepAlive for the session to the current master
// guess and tells the Keeper. The master parks it for up to the lease;
// Kitex gets the lease plus CallTimeout before it gives up on it.
func (s *Session) sendKeepAlive() *kaAttempt {
	s.c.locator.maybeRefresh()
	ctx, cancel := context.WithCancel(s.ctx)
	addr := s.c.locator.addr()
	s.mu.Lock()
	epoch, granted := s.k.Epoch(), s.k.Lease()
	s.mu.Unlock()
	item := &chubby.KeepAliveItem{Session: s.id}
	if acked := s.acked(); acked > 0 {
		// What the previous replies delivered: the cell may forget it.
		item.AckedEvent = &acked
	}
	if inv := s.cache.ackSeq(); inv > 0 {
		// The invalidations applied so far: the master may let the changes
		// that sent them commit.
		item.AckedInvalidation = &inv
	}
	req := &chubby.KeepAliveRequest{
		Sessions: []*chubby.KeepAliveItem{item},
		Epoch:    &epoch,
	}
	timeout := granted + s.c.cfg.CallTimeout
	s.log.Debug("chubby: KeepAlive sent", "addr", addr, "epoch", epoch)
	sent := time.Now()
	s.mu.Lock()
	attempt := s.k.Sent(sent, addr)
	s.mu.Unlock()
	f := rpc.Go(ctx, func(ctx context.Context) (*chubby.KeepAliveResponse, error) {
		return s.c.kc.KeepAlive(ctx, req, callopt.WithHostPort(addr), callopt.WithRPCTimeout(timeout))
	})
	return &kaAttempt{f: f, cancel: cancel, addr: addr, sent: sent, attempt: attempt}
}

// tell carries out the Keeper's events: the cache goes at jeopardy and at
// a new master; the application hears of each.
func (s *Session) tell(evs []keepalive.Event) {
	for _, e := range evs {
		switch e.Kind {
		case keepalive.Jeopardy:
			s.cache.flush() // the master may stop waiting for our acks at any moment now
			s.mu.Lock()
			leaseEnd, graceEnd := s.k.LeaseEnd(), s.k.GraceEnd()
			s.broadcastLocked()
			s.mu.Unlock()
			s.log.Warn("chubby: session in jeopardy: local lease ran out with no KeepAlive reply; looking for the master",
				"lease_end", leaseEnd, "grace_period", s.grace, "expires_at", graceEnd)
			s.emit(EventJeopardy, e.Epoch, nil)
		case keepalive.Safe:
			s.log.Info("chubby: session safe again", "epoch", e.Epoch)
			s.emit(EventSafe, e.Epoch, nil)
		case keepalive.MasterChanged:
			s.cache.flush() // the new master knows no cachers
			s.log.Info("chubby: master epoch changed", "to", e.Epoch)
			s.emit(EventMasterChanged, e.Epoch, nil)
		}
	}
}

// noteEpoch records a master epoch heard for the session (a reply, a
// MASTER_FAILED_OVER event); a higher one than known is reported at once
// as EventMasterChanged.
func (s *Session) noteEpoch(epoch int64) {
	s.mu.Lock()
	var evs []keepalive.Event
	if s.err == nil && s.k.NoteEpoch(epoch) {
		evs = s.k.Events()
	}
	s.mu.Unlock()
	s.tell(evs)
}

// applyKeepAlive records the reply to KeepAlive a. It returns an error
// when the reply does not renew this session; classifyKeepAlive decides
// what that error means. A reply in jeopardy makes the session safe again
// (EventSafe, after EventMasterChanged if the reply names a new epoch).
func (s *Session) applyKeepAlive(a *kaAttempt, r *chubby.KeepAliveResponse) error {
	s.noteEpoch(r.GetEpoch())
	for _, res := range r.GetResults() {
		if res.GetSession() != s.id {
			continue
		}
		if res.Error != nil {
			return res.Error
		}
		if res.GetLeaseMs() <= 0 {
			return fmt.Errorf("KeepAlive reply grants no lease (lease_ms=%d)", res.GetLeaseMs())
		}
		granted := time.Duration(res.GetLeaseMs()) * time.Millisecond
		// Invalidations first: the lease this reply extends covers only a
		// cache without what they name.
		s.cache.apply(res)
		s.mu.Lock()
		if s.err != nil {
			s.mu.Unlock()
			return nil
		}
		// A reply so late that its lease is already over renews nothing
		// the client can rely on: the session stays where it is.
		s.k.Answered(time.Now(), a.attempt, granted, r.GetEpoch())
		evs := s.k.Events()
		s.broadcastLocked()
		s.mu.Unlock()
		s.tell(evs)
		s.deliverEvents(res.GetEvents())
		return nil
	}
	return fmt.Errorf("KeepAlive reply has no result for session %d", s.id)
}

// classifyKeepAlive maps a failed KeepAlive sent to addr onto the
// Keeper's Failure, with the master epoch it named, and updates the master
// guess as the error says (a NOT_MASTER hint, an unreachable replica).
func (s *Session) classifyKeepAlive(addr string, err error) (keepalive.Failure, int64) {
	var ce *chubby.ChubbyError
	if errors.As(err, &ce) {
		switch ce.Code {
		case chubby.ErrorCode_SESSION_EXPIRED:
			return keepalive.Expired, 0
		case chubby.ErrorCode_NOT_MASTER:
			if s.c.locator.redirect(addr, ce.GetMasterAddress()) {
				return keepalive.Redirected, ce.GetEpoch()
			}
			// No hint, or one naming the master just found unreachable.
			return keepalive.Refused, ce.GetEpoch()
		case chubby.ErrorCode_STALE_EPOCH:
			// A new master refused the old epoch. (Flushing caches and
			// re-validating handles come with the cell's failover event.)
			return keepalive.Stale, ce.GetEpoch()
		case chubby.ErrorCode_UNAVAILABLE:
			// A replica shutting down or overloaded: perhaps the master
			// has moved.
			return keepalive.Lost, 0
		}
		return keepalive.Other, 0
	}
	if errors.Is(err, kerrors.ErrGetConnection) || errors.Is(err, kerrors.ErrRemoteOrNetwork) ||
		kerrors.IsTimeoutError(err) {
		s.c.locator.unreachable(addr)
		return keepalive.Lost, 0
	}
	return keepalive.Other, 0
}

// sessionCall runs a call of session s:
//
//   - It fails at once when the session has ended, and waits (bounded by
//     ctx) while the session is in jeopardy, until it is safe again or
//     expires.
//   - It cancels the call when the session ends meanwhile (reporting the
//     session's Err), and ends the session when the cell says SESSION_EXPIRED.
//   - When the call gives up because no master could be reached (its
//     attempts ran out on failures its retry class allows to resend), it
//     waits until the session has renewed its lease after that — the
//     KeepAlive loop found the master — and sends the call again, at most
//     maxSendRounds times in all. A call whose fate is unknown (a write
//     whose reply was lost) is never resent.
func sessionCall[T any](ctx context.Context, s *Session, spec callSpec,
	fn func(context.Context, ...callopt.Option) (T, error)) (T, error) {
	var zero T
	if spec.setRID != nil {
		// One number per call, the same on every resend; the floor says
		// which earlier calls are finished.
		seq, floor := s.beginRequest()
		defer s.endRequest(seq)
		spec.setRID(&chubby.RequestID{Seq: int64(seq), Floor: int64(floor)})
	}
	var needRenewal bool
	var after uint64
	for round := 0; ; round++ {
		renewals, err := s.awaitSafe(ctx, needRenewal, after)
		if err != nil {
			return zero, &OpError{Op: spec.op, Path: spec.path, Err: err}
		}
		v, err, retryable := sessionCallOnce(ctx, s, spec, fn)
		if err == nil {
			return v, nil
		}
		if IsCode(err, chubby.ErrorCode_SESSION_EXPIRED) {
			s.end(fmt.Errorf("%w: the cell ended it: %s", ErrSessionExpired, Describe(err)))
			return zero, err
		}
		if !retryable || round+1 >= maxSendRounds || s.Err() != nil {
			return zero, err
		}
		s.log.Debug("chubby: call found no master; waiting for the session to reach one",
			"op", spec.op, "path", spec.path, "round", round+1, "err", Describe(err))
		needRenewal, after = true, renewals
	}
}

// sessionCallOnce is one round of sessionCall: callRetry, cancelled when
// the session ends.
func sessionCallOnce[T any](ctx context.Context, s *Session, spec callSpec,
	fn func(context.Context, ...callopt.Option) (T, error)) (T, error, bool) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.ctx, func() { cancel(s.Err()) })
	defer stop()
	return callRetry(ctx, s.c, spec, fn)
}

// awaitSafe waits until the session is safe — and, when needRenewal is
// set, has renewed its lease more than after times — or has ended, or ctx
// ends. It returns the session's renewal count, or why the call cannot go
// on (the session's Err, or ctx's cause). It waits through at most
// maxStateWaits changes of state, then lets the call go.
func (s *Session) awaitSafe(ctx context.Context, needRenewal bool, after uint64) (uint64, error) {
	for range maxStateWaits {
		s.mu.Lock()
		st, renewals, changed, err := s.stateLocked(time.Now()), s.k.Renewals(), s.changed, s.err
		s.mu.Unlock()
		if err != nil {
			return 0, err
		}
		if st == StateSafe && (!needRenewal || renewals > after) {
			return renewals, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.k.Renewals(), s.err
}

// await waits for f. The call behind f is bounded by the same ctx, so
// waiting without ctx's cancellation returns promptly once ctx ends, and a
// blocking call reports exactly what happened — never "cancelled" for a lock
// that was in fact granted.
func await[T any](ctx context.Context, f *rpc.Future[T]) (T, error) {
	return f.Wait(context.WithoutCancel(ctx))
}

// beginRequest numbers a call and returns its number and the floor to
// send with it (rid.Numbers.Begin).
func (s *Session) beginRequest() (seq, floor uint64) {
	s.ridMu.Lock()
	defer s.ridMu.Unlock()
	return s.rids.Begin()
}

// endRequest records that a numbered call is finished (answered or given
// up): it will not be resent.
func (s *Session) endRequest(seq uint64) {
	s.ridMu.Lock()
	defer s.ridMu.Unlock()
	s.rids.End(seq)
}
