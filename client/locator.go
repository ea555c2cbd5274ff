package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cloudwego/kitex/client/callopt"
	"github.com/cloudwego/kitex/pkg/kerrors"

	"github.com/chubbygo/chubby/client/keepalive"
	"github.com/chubbygo/chubby/client/locate"
	"github.com/chubbygo/chubby/gen/chubby"
)

// locateReplyTimeout bounds the wait for one replica's GetMaster answer
// once connected: replicas answer it at once from memory.
const locateReplyTimeout = time.Second

// The member list a client keeps (see master).
const (
	// MaxReplicas bounds the replica addresses a client keeps from the
	// cell's answers (Client.Replicas): entries past it are ignored.
	MaxReplicas = 16

	// maxAddrBytes bounds one address taken from an answer (as the cell
	// bounds the addresses clients send).
	maxAddrBytes = 512

	// membersRefreshInterval is how often a client in use asks the master
	// for the configuration's members (GetMaster), to follow replicas
	// added and removed while the master stays where it is.
	membersRefreshInterval = 30 * time.Second
)

// askMasterFunc asks the replica at addr where the master is (GetMaster).
// suspect, if not empty, is the master this client just failed to reach:
// a replica that still believes in it holds its answer until its view
// changes (bounded). replicas are the client addresses of the members of
// the configuration the replica knows (GetMasterResponse.replicas), as
// sent: locator.adopt validates them.
type askMasterFunc func(ctx context.Context, addr, suspect string) (master string, epoch int64, replicas []string, err error)

// locator tracks which replica the client believes is the master, and the
// addresses of the cell's replicas, in a locate.Guess (the rules below are
// package client/locate's, shared with the simulator) under its mutex, and
// does the asking. Every call is sent to the master guess
// (callopt.WithHostPort). Where the guess moves:
//
//   - NOT_MASTER with a hint (master_address): to the hint.
//   - NOT_MASTER without one, or a replica that cannot be reached: to the
//     next known member, round-robin; and, with more than one address to
//     ask, a locate round asks every known member (GetMaster) and moves to
//     the answer with the highest epoch.
//   - An authoritative answer (GetMaster): there.
//
// The known members (addrs) follow the cell's configuration; the rule:
//
//   - They start as the configured addresses (the seeds).
//   - A GetMaster answer that names the configuration's members
//     (GetMasterResponse.replicas) replaces them: the configuration is the
//     truth, so replicas added are asked from then on and replicas removed
//     no longer are. Two addresses are kept even when the answer leaves
//     them out: the replica the answer came from (the client reached it
//     there, perhaps under another name than the one the cell advertises)
//     and the master it names. Entries that are not host:port, are longer
//     than maxAddrBytes, or repeat are dropped, and at most MaxReplicas are
//     kept (the two above first), so a hostile or broken replica can make
//     the client ask at most MaxReplicas wrong addresses, never allocate
//     without bound. An answer naming no usable member (an older cell)
//     changes nothing.
//   - The answers that count: a locate round's best one (the highest
//     epoch; on a tie, the master's own), Client.GetMaster's, and a
//     refresh — every membersRefreshInterval while the client is used (a
//     call or a KeepAlive is sent), one GetMaster to the master guess.
//   - The seeds are the fallback: a locate round in which no known member
//     named a master (every one unreachable, or refusing, as replicas
//     removed from the cell do) then asks the seeds it has not asked yet,
//     so a client whose members all moved away (or whose list a bad answer
//     spoiled) finds the cell again where it was told to look.
//
// With one address the guess never changes, but the calls are routed
// through here so that a multi-replica cell only needs to fill in
// NOT_MASTER's master_address and answer GetMaster on every replica.
type locator struct {
	ask     askMasterFunc // nil: no locate rounds or refreshes (unit tests)
	timeout time.Duration // bounds one locate round's asking (twice with the seeds' fallback)
	log     *slog.Logger  // debug: each round's answers; never nil
	// refreshEvery is membersRefreshInterval (tests shorten it).
	refreshEvery time.Duration

	mu sync.Mutex
	// g is the master guess and the known members, and the rules by which
	// they move (package client/locate): the seeds until an answer names
	// the configuration.
	g     *locate.Guess
	round chan struct{} // closed when the locate round in progress ends; nil if none
	last  located       // outcome of the last finished round
	// ended is closed (and replaced) when any locate round ends, after
	// last is set: a KeepAlive loop or a call waiting out a back-off
	// learns at once that a round found the master elsewhere.
	ended chan struct{}
	// refreshed is when addrs was last brought up to date from an answer,
	// or a refresh was last started (zero: never); refreshing says one is
	// in flight.
	refreshed  time.Time
	refreshing bool
	// stop ends a refresh in flight, and the master watch, when the
	// client closes.
	stop       context.Context
	stopCancel context.CancelFunc

	// inflight are the call attempts in flight (track), cancelled when a
	// newer master is heard of elsewhere.
	inflight map[*attempt]struct{}
	// watch parks master watches (nil: none, unit tests); watching says
	// the watch loop runs.
	watch    watchFunc
	watching bool
}

// located is the outcome of one locate round.
type located struct {
	addr  string // the master's address; "" if no replica named one
	epoch int64  // its epoch, as the replica that named it said
}

func newLocator(addrs []string, ask askMasterFunc, timeout time.Duration) *locator {
	stop, cancel := context.WithCancel(context.Background())
	g := locate.New(locate.Config{Seeds: addrs, MaxMembers: MaxReplicas, MaxAddrBytes: maxAddrBytes,
		Valid: func(a string) bool { return ValidateAddr(a) == nil }})
	return &locator{g: g, ask: ask, timeout: timeout, refreshEvery: membersRefreshInterval,
		log: slog.New(slog.DiscardHandler), ended: make(chan struct{}), stop: stop, stopCancel: cancel}
}

// close ends a refresh in flight; none starts after it.
func (m *locator) close() { m.stopCancel() }

// addr returns the address the next call should go to.
func (m *locator) addr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.g.Addr()
}

// replicas returns the known members' addresses (a copy).
func (m *locator) replicas() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.g.Members()
}

// multi reports whether there is more than one address to ask where the
// master is: several known members, or a seed that is not the one.
func (m *locator) multi() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.g.Multi()
}

// adopt brings the known members up to date from a GetMaster answer that
// the replica at from gave, naming master and the configuration's members
// replicas (the rule is in master's doc). It reports whether the list
// changed.
func (m *locator) adopt(from, master string, replicas []string) (changed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refreshed = time.Now()
	debug := m.log.Enabled(context.Background(), slog.LevelDebug)
	var old []string
	if debug {
		old = m.g.Members()
	}
	if !m.g.Adopt(from, master, replicas) {
		return false
	}
	if debug {
		m.log.Debug("chubby: replica list follows the cell's configuration", "from", from, "was", old, "now", m.g.Members())
	}
	return true
}

// maybeRefresh starts a refresh of the known members (one GetMaster to the
// master guess, in the background) if none ran for refreshEvery and none
// is in flight. The client calls it whenever it sends something, so an
// idle client asks nothing.
func (m *locator) maybeRefresh() {
	if m.ask == nil || m.stop.Err() != nil {
		return
	}
	m.mu.Lock()
	if m.refreshing || (!m.refreshed.IsZero() && time.Since(m.refreshed) < m.refreshEvery) {
		m.mu.Unlock()
		return
	}
	m.refreshing = true
	m.refreshed = time.Now()
	addr := m.g.Addr()
	m.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(m.stop, m.timeout)
		defer cancel()
		master, _, replicas, err := m.ask(ctx, addr, "")
		if err == nil {
			m.adopt(addr, master, replicas)
		} else {
			m.log.Debug("chubby: refreshing the replica list failed", "addr", addr, "err", Describe(err))
		}
		m.mu.Lock()
		m.refreshing = false
		m.mu.Unlock()
	}()
}

// refreshSoon makes the next maybeRefresh ask at once (the configuration
// has just changed: RemoveMember).
func (m *locator) refreshSoon() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refreshed = time.Time{}
}

// redirect records that the replica at from is not the master. A valid
// hint (NOT_MASTER's master_address, or GetMaster's answer) that differs from
// from becomes the guess; otherwise the next configured address does. It
// reports whether the hint is one to follow: valid, and not the master this
// client just failed to reach (the suspect), which a replica that has not
// yet noticed its failure still names — a locate round, which the
// replicas hold until they know the new master, is then the way on.
func (m *locator) redirect(from, hint string) (followed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.g.Redirect(from, hint)
}

// unreachable records that the replica at from could not be reached.
func (m *locator) unreachable(from string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.g.Unreachable(from)
}

// learned records the master's address from an authoritative answer (GetMaster).
func (m *locator) learned(addr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.g.Learned(addr)
}

// locate starts a locate round unless one is running, and returns a
// channel closed when the round in progress ends; lastLocated then has its
// outcome. A round asks every known member GetMaster at once, each bounded
// by m.timeout, waits for all answers (so at most m.timeout), and makes
// the named master with the highest epoch the guess: a deposed master that
// has not heard of its successor answers with an older epoch. If no member
// named a master, the seeds not asked yet are asked the same way (at most
// m.timeout more). The best answer's members become the known members
// (adopt). Rounds are shared: however many calls and sessions look for the
// master at the same time, each replica is asked once.
func (m *locator) locate() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.round != nil {
		return m.round
	}
	done := make(chan struct{})
	if m.ask == nil {
		close(done)
		return done
	}
	m.round = done
	go m.runRound(done)
	return done
}

// answer is one replica's answer in a locate round: what the round
// decides on (locate.Answer), and for the log the error and the time.
type answer struct {
	locate.Answer
	err  error
	took time.Duration
}

// askAll asks every address in addrs GetMaster at once, each bounded by
// m.timeout, and returns every answer.
func (m *locator) askAll(addrs []string, suspect string, start time.Time) []answer {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	answers := make(chan answer, len(addrs)) // buffered: no sender ever blocks
	for _, a := range addrs {
		go func() {
			addr, epoch, replicas, err := m.ask(ctx, a, suspect)
			var ce *chubby.ChubbyError
			an := answer{Answer: locate.Answer{From: a, Answered: err == nil || errors.As(err, &ce)}, err: err, took: time.Since(start)}
			if err == nil {
				an.Master, an.Epoch, an.Members = addr, epoch, replicas
			}
			answers <- an
		}()
	}
	out := make([]answer, 0, len(addrs))
	for range addrs {
		out = append(out, <-answers)
	}
	return out
}

// runRound is one locate round (see locate): it asks the known members,
// then the seeds if none of them named a master, and moves the guess to
// the best answer.
func (m *locator) runRound(done chan struct{}) {
	m.mu.Lock()
	suspect, members := m.g.RoundStart()
	m.mu.Unlock()
	start := time.Now()
	answers := m.askAll(members, suspect, start)
	m.mu.Lock()
	seeds := m.g.Fallback(members, plain(answers))
	m.mu.Unlock()
	if len(seeds) > 0 {
		// Nobody there knows: fall back on where the client was told to look.
		answers = append(answers, m.askAll(seeds, suspect, start)...)
	}
	m.mu.Lock()
	best, ok := m.g.Best(plain(answers))
	m.mu.Unlock()
	if ok {
		m.adopt(best.From, best.Master, best.Members)
		// A newer master than any heard: calls still in flight at the
		// old one are sent again to it (a parked Acquire would otherwise
		// wait at a master cut off from the cell until its wait ends).
		m.heard(best.Master, best.Epoch)
	}
	m.mu.Lock()
	m.g.RoundOver(suspect, best.Master)
	m.last = located{addr: best.Master, epoch: best.Epoch}
	m.round = nil
	ended := m.ended
	m.ended = make(chan struct{})
	m.mu.Unlock()
	close(done)
	close(ended)
	if m.log.Enabled(context.Background(), slog.LevelDebug) {
		var heard []string
		for _, a := range answers {
			if a.err != nil {
				heard = append(heard, fmt.Sprintf("%s: %v after %v", a.From, Describe(a.err), a.took.Round(time.Millisecond)))
			} else {
				heard = append(heard, fmt.Sprintf("%s: %s@%d after %v", a.From, a.Master, a.Epoch, a.took.Round(time.Millisecond)))
			}
		}
		m.log.Debug("chubby: locate round", "suspect", suspect, "master", best.Master, "epoch", best.Epoch,
			"took", time.Since(start), "answers", strings.Join(heard, "; "))
	}
}

// plain returns the answers as the round's rules see them.
func plain(as []answer) []locate.Answer {
	out := make([]locate.Answer, len(as))
	for i, a := range as {
		out[i] = a.Answer
	}
	return out
}

// roundEnded returns a channel closed when the next locate round to
// finish (one in progress, or a later one) has ended; lastLocated then has
// its outcome.
func (m *locator) roundEnded() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ended
}

// lastLocated returns the outcome of the last finished locate round.
func (m *locator) lastLocated() located {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// locateWait runs (or joins) a locate round and waits for it, or for ctx.
func (m *locator) locateWait(ctx context.Context) {
	select {
	case <-m.locate():
	case <-ctx.Done():
	}
}

// askMaster is the client's askMasterFunc: GetMaster sent to addr alone.
func (c *Client) askMaster(ctx context.Context, addr, suspect string) (string, int64, []string, error) {
	req := &chubby.GetMasterRequest{}
	if suspect != "" {
		req.Unreachable = &suspect
	}
	r, err := c.kc.GetMaster(ctx, req, callopt.WithHostPort(addr), callopt.WithRPCTimeout(locateReplyTimeout))
	if err != nil {
		return "", 0, nil, err
	}
	return r.GetMasterAddress(), r.GetEpoch(), r.GetReplicas(), nil
}

// retryClass says which failures of a call may be answered by sending the
// call again (to the same or another replica).
type retryClass int

const (
	// retrySafe: the call may be sent again whatever became of an earlier
	// attempt. Reads (GetContentsAndStat, GetStat, ReadDir, GetSequencer,
	// CheckSequencer, GetMaster, GetStatus, WhoAmI, SnapshotRead) change
	// nothing; GetTimestamps hands a resend fresh timestamps (those of a
	// lost reply go to nobody); CreateSession is safe too, because a
	// session created by an attempt whose reply was lost is never kept
	// alive and ends after one lease. Retried on NOT_MASTER, UNAVAILABLE
	// and transport errors other than timeouts.
	retrySafe retryClass = iota

	// retryUnsent: the call changes the cell, which keeps no answer of it
	// to give a resend (Acquire, whose request number only lets a resend
	// take its parked call's place; CloseSession; RemoveMember). It is
	// sent again only when the earlier attempt certainly did nothing: the
	// connection could not be made (the request never left), or the
	// replica answered NOT_MASTER (a refused call changes nothing). A reply
	// lost after the request was sent, a timeout, or UNAVAILABLE is
	// reported, never retried: the caller decides (e.g. re-reading before
	// writing again). This holds across jeopardy too: a write that found no
	// master is resent once the session is safe again, one whose fate is
	// unknown is not. (Acquire is also resent when the master moves while
	// it is parked: callSpec.resendOnMove.)
	retryUnsent

	// retryOnce: the call changes the cell and carries a RequestID
	// (Open, Close, SetContents, Delete, Mkdir, CreateFile, TryAcquire,
	// Release, SetACL, Multi). The cell applies a request number at most
	// once and answers a resend with the first answer, across failovers
	// too, so the call is resent after any failure that may be passing:
	// NOT_MASTER, UNAVAILABLE, a lost reply, a timeout.
	retryOnce
)

// callSpec describes one call for call().
type callSpec struct {
	op      string        // for OpError and logs
	path    string        // for OpError and logs; may be ""
	class   retryClass    // which failures are retried
	timeout time.Duration // per-attempt RPC timeout

	// setRID, for a retryOnce call (and Acquire), puts the call's
	// RequestID into its request before the first send (sessionCall
	// numbers the call).
	setRID func(*chubby.RequestID)

	// resendOnMove lets a retryUnsent call be abandoned and resent when a
	// newer master is heard of elsewhere (trackable): the cell makes that
	// resend safe (Acquire: its request number makes the resend take the
	// parked call's place; a granted lock is answered with its sequencer).
	resendOnMove bool

	// sentTo, if set, receives the address of the replica that answered
	// (GetMaster: the answer's members are adopted as that replica's).
	sentTo *string
}

// call sends fn to the current master guess, retrying as spec.class allows,
// at most maxCallAttempts times with a bounded backoff. It returns the
// result, or an *OpError whose cause is the cell's *chubby.ChubbyError, the
// context's error, an ErrUnreachable wrap, or the transport error.
func call[T any](ctx context.Context, c *Client, spec callSpec,
	fn func(context.Context, ...callopt.Option) (T, error)) (T, error) {
	v, err, _ := callRetry(ctx, c, spec, fn)
	return v, err
}

// callRetry is call, and also reports whether the call gave up only because
// its attempts ran out on failures spec.class allows to retry (no master
// could be reached, or it refused): sending the call again later, once a
// master is found, is then as safe as the retries were.
func callRetry[T any](ctx context.Context, c *Client, spec callSpec,
	fn func(context.Context, ...callopt.Option) (T, error)) (v T, err error, retryable bool) {
	var zero T
	redirects := 0
	c.locator.maybeRefresh()
	for attempt := 0; ; attempt++ {
		if c.isClosed() {
			return zero, &OpError{Op: spec.op, Path: spec.path, Err: ErrClientClosed}, false
		}
		if err := ctx.Err(); err != nil {
			return zero, &OpError{Op: spec.op, Path: spec.path, Err: context.Cause(ctx)}, false
		}
		addr, v, err, moved := attemptAt(ctx, c, spec, fn)
		if err == nil {
			if spec.sentTo != nil {
				*spec.sentTo = addr
			}
			return v, nil, false
		}
		if moved {
			// A master of a newer epoch serves elsewhere (the master
			// watch, a locate round or a session's reply said so) and the
			// guess is there now: this attempt would only have hung at
			// the old one. Resending is safe for this call (trackable).
			if attempt+1 >= maxCallAttempts {
				return zero, &OpError{Op: spec.op, Path: spec.path, Err: errMasterMoved}, true
			}
			c.log.Debug("chubby: the master moved; resending the call there", "op", spec.op, "path", spec.path,
				"from", addr, "to", c.locator.addr(), "attempt", attempt+1)
			continue
		}
		retry, hinted, refused, cause := c.classify(ctx, err, addr, spec.class)
		if !retry {
			c.log.Debug("chubby: call failed; not retried", "op", spec.op, "path", spec.path,
				"addr", addr, "attempt", attempt+1, "err", Describe(cause))
			return zero, &OpError{Op: spec.op, Path: spec.path, Err: cause}, false
		}
		if attempt+1 >= maxCallAttempts {
			c.log.Debug("chubby: call failed; attempts used up", "op", spec.op, "path", spec.path,
				"addr", addr, "attempt", attempt+1, "err", Describe(cause))
			return zero, &OpError{Op: spec.op, Path: spec.path, Err: explainUnreachable(cause, addr)}, true
		}
		if err := c.awaitResend(ctx, spec, addr, attempt, hinted, refused, cause, &redirects); err != nil {
			return zero, &OpError{Op: spec.op, Path: spec.path, Err: explainUnreachable(cause, addr)}, false
		}
	}
}

// awaitResend waits until attempt (counted from 0) of a call, which failed
// at addr in a way its class retries, may be sent again. At once when the
// master is known to be elsewhere — named by a hint, found by a locate
// round (asked when nobody said where it is), or of a newer epoch — at
// most maxQuickRedirects times per call (*redirects counts them); else
// after the back-off, which a locate round naming another master ends
// early (locator.pause). It returns ctx's cause if ctx ends first.
func (c *Client) awaitResend(ctx context.Context, spec callSpec, addr string, attempt int,
	hinted, refused bool, cause error, redirects *int) error {
	// The back-off counts from the failure: a locate round (which
	// replicas in a view change hold until they know the new master)
	// is part of the pause, not added to it.
	resendAt := time.Now().Add(keepalive.Backoff(callBackoffBase, callBackoffMax, attempt, jitter()))
	multi := c.locator.multi()
	known := c.locator.lastLocated().epoch
	if !hinted && multi {
		// Nobody said where the master is: ask every replica (a
		// replica in a view change answers once it knows).
		c.locator.locateWait(ctx)
	}
	if loc := c.locator.lastLocated(); loc.addr != "" && loc.epoch > known && *redirects < maxQuickRedirects {
		// A master of a newer epoch serves — perhaps the same replica,
		// after a configuration change moved it to a new view: go at
		// once rather than sleep out the back-off.
		*redirects++
		c.log.Debug("chubby: retrying call at the new master", "op", spec.op, "path", spec.path,
			"addr", addr, "next", loc.addr, "epoch", loc.epoch, "attempt", attempt+1, "err", Describe(cause))
		return nil
	}
	// Told (or found) where the master is now: go there at once (the
	// replicas hold their answers during a view change, and redirects
	// without a pause are bounded, so this cannot spin). A replica
	// that refused (NOT_MASTER) and that the locate round then names
	// has become the master meanwhile (a replica's own GetMaster
	// answer waits until it serves).
	next := c.locator.addr()
	found := next != addr || (refused && !hinted && multi)
	if found && *redirects < maxQuickRedirects {
		*redirects++
		c.log.Debug("chubby: retrying call at the master", "op", spec.op, "path", spec.path,
			"addr", addr, "next", next, "attempt", attempt+1, "err", Describe(cause))
		return nil
	}
	c.log.Debug("chubby: retrying call", "op", spec.op, "path", spec.path,
		"addr", addr, "next", c.locator.addr(), "attempt", attempt+1, "delay", max(time.Until(resendAt), 0),
		"err", Describe(cause))
	return c.locator.pause(ctx, resendAt, addr, refused, known)
}

// attemptAt sends one attempt of a call to the master guess. A call that
// may be resent after any failure of the attempt (trackable) is tracked
// while in flight, so that a newer master heard of elsewhere cancels it;
// moved reports that this is why it failed.
func attemptAt[T any](ctx context.Context, c *Client, spec callSpec,
	fn func(context.Context, ...callopt.Option) (T, error)) (addr string, v T, err error, moved bool) {
	if !spec.trackable() {
		addr = c.locator.addr()
		v, err = fn(ctx, callopt.WithHostPort(addr), callopt.WithRPCTimeout(spec.timeout))
		return addr, v, err, false
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	addr, untrack := c.locator.trackCur(cancel)
	v, err = fn(actx, callopt.WithHostPort(addr), callopt.WithRPCTimeout(spec.timeout))
	untrack()
	moved = err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), errMasterMoved)
	return addr, v, err, moved
}

// trackable reports whether an attempt of the call may be abandoned and
// the call sent again at a new master whatever became of the attempt:
// reads (retrySafe), calls the cell applies at most once (retryOnce), and
// calls the cell makes safe to resend themselves (resendOnMove: Acquire).
func (sp callSpec) trackable() bool { return sp.class != retryUnsent || sp.resendOnMove }

// pause waits until until, or until a locate round (this call's or anyone
// else's: a session's KeepAlive loop, another call) ends naming a master
// other than from, where the call just failed — or naming from itself when
// from refused the call (NOT_MASTER: it was alive but not the master, and
// is now named master), or naming a master of an epoch after known (the
// same replica may be master again in a newer view) — or until ctx ends
// (then it returns ctx's cause).
// Each wake-up costs the caller an attempt, so the retries stay bounded by
// maxCallAttempts.
func (m *locator) pause(ctx context.Context, until time.Time, from string, refused bool, known int64) error {
	d := time.Until(until)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		ended := m.roundEnded()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-ended:
			if loc := m.lastLocated(); loc.addr != "" && (loc.addr != from || refused || loc.epoch > known) {
				return nil
			}
		}
	}
}

// classify decides whether a failed attempt sent to addr may be retried
// under class, updates the master guess, and returns the error to report.
// hinted says the failure named where the master is (NOT_MASTER with a
// master_address to follow: see redirect), so no locate round is needed;
// refused says addr answered NOT_MASTER (it is alive, and was not the
// master then).
func (c *Client) classify(ctx context.Context, err error, addr string, class retryClass) (retry, hinted, refused bool, cause error) {
	var ce *chubby.ChubbyError
	if errors.As(err, &ce) {
		switch ce.Code {
		case chubby.ErrorCode_NOT_MASTER:
			// A refused call did nothing: safe to send again, whatever it is.
			return true, c.locator.redirect(addr, ce.GetMasterAddress()), true, err
		case chubby.ErrorCode_UNAVAILABLE:
			return class == retrySafe || class == retryOnce, false, false, err
		}
		return false, false, false, err
	}
	if dl, ok := ctx.Deadline(); ok && kerrors.IsTimeoutError(err) && time.Until(dl) < 50*time.Millisecond {
		// Kitex turns the context's deadline into its RPC timeout and may
		// fire a hair before the context itself expires: it was the
		// context's deadline, so report that once it has passed.
		<-ctx.Done()
	}
	if ctx.Err() != nil {
		// Kitex reports a cancelled or expired context as an RPC timeout;
		// the context's own error says what happened.
		return false, false, false, context.Cause(ctx)
	}
	switch {
	case errors.Is(err, kerrors.ErrGetConnection):
		// No connection: the request never left, so any call may be resent.
		c.locator.unreachable(addr)
		return true, false, false, fmt.Errorf("%w at %s: %w", ErrUnreachable, addr, err)
	case kerrors.IsTimeoutError(err):
		// No answer in time: a master that is paused or cut off looks like
		// this. Whatever the class, the guess moves on, so that the next
		// call (and this one's retry, where its class allows one) asks
		// another replica, which names the new master once there is one;
		// a master that was merely slow is named again. (Before, only a
		// retryOnce call moved it, and a session's other calls kept going
		// to a stopped master until its KeepAlive gave up, a lease later.)
		c.locator.unreachable(addr)
		if class == retryOnce {
			return true, false, false, err
		}
		return false, false, false, err
	case errors.Is(err, kerrors.ErrRemoteOrNetwork):
		if class == retrySafe || class == retryOnce {
			c.locator.unreachable(addr)
			return true, false, false, err
		}
		return false, false, false, err
	}
	return false, false, false, err
}
