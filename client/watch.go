package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/client/keepalive"
	"github.com/chubbygo/chubby/gen/chubby"
)

// The master watch.
//
// A master that falls silent — its process paused (SIGSTOP, a stalled VM,
// a long GC) or cut off — refuses nothing and resets nothing: calls sent
// to it just hang. The other replicas name a new master about a second
// later, but a client that only talks to the master would learn of it only
// when its calls time out, and a session's KeepAlive, parked at the master
// for most of a lease, times out a lease later: the
// session's calls, the parked Acquires and — because a new master holds
// every change until each recovered caching session has flushed on a
// KeepAlive — everyone's writes wait for it.
//
// So a client with a session keeps one GetMaster parked at a replica that
// is not its master, naming its master as unreachable with wait_ms
// (watchHold): that replica holds the answer until it knows another
// master, which it does as soon as it joins the new view. The answer moves
// the client at once (locator.heard): the master guess goes to the new
// master, every call attempt in flight elsewhere is cancelled and sent
// again there (callRetry; a parked Acquire carries its request number, so
// the cell keeps one request for it however often it is sent), and every
// session's KeepAlive is resent there (announce, which its Keeper hears as
// a round's end: kaLoop.roundOver, keepalive.Keeper.Located).
//
// Cost: one parked call per client at one replica that is not the master
// (nothing at the master), renewed every watchHold; a cell too old to hold
// (it answers at once) costs one GetMaster per watchMinInterval.

const (
	// watchHold is the wait_ms of a master watch: how long a replica
	// holds it while the master stays where it is.
	watchHold = 15 * time.Second

	// watchMinInterval spaces watches that were answered without news
	// (an old cell that does not hold them, a replica that believes in an
	// older master), so a watch never spins.
	watchMinInterval = time.Second

	// watchRetryMax bounds the pause after a watch that failed (the
	// replica unreachable, or without a master).
	watchRetryMax = 2 * time.Second
)

// errMasterMoved is the cause of a call attempt cancelled because a master
// of a newer epoch serves at another replica (master.heard).
var errMasterMoved = errors.New("chubby: the master moved to another replica")

// watchFunc parks a master watch at addr: GetMaster naming cur unreachable
// with wait_ms hold. It answers like askMasterFunc.
type watchFunc func(ctx context.Context, addr, cur string, hold time.Duration) (master string, epoch int64, replicas []string, err error)

// watchMaster is the client's watchFunc.
func (c *Client) watchMaster(ctx context.Context, addr, cur string, hold time.Duration) (string, int64, []string, error) {
	ms := hold.Milliseconds()
	req := &chubby.GetMasterRequest{Unreachable: &cur, WaitMs: &ms}
	r, err := c.kc.GetMaster(ctx, req, callopt.WithHostPort(addr), callopt.WithRPCTimeout(hold+c.cfg.CallTimeout))
	if err != nil {
		return "", 0, nil, err
	}
	return r.GetMasterAddress(), r.GetEpoch(), r.GetReplicas(), nil
}

// attempt is a call attempt in flight at a replica (master.track).
type attempt struct {
	addr   string
	cancel context.CancelCauseFunc
}

// trackCur records a call attempt about to be sent to the master guess,
// which it returns, and which cancel ends; untrack forgets it. An attempt
// at a replica other than a newer master heard of is cancelled with
// errMasterMoved (heard). Reading the guess and recording the attempt are
// one step, so no attempt can go to the old master unseen by heard.
func (m *locator) trackCur(cancel context.CancelCauseFunc) (addr string, untrack func()) {
	m.mu.Lock()
	a := &attempt{addr: m.g.Addr(), cancel: cancel}
	if m.inflight == nil {
		m.inflight = make(map[*attempt]struct{})
	}
	m.inflight[a] = struct{}{}
	m.mu.Unlock()
	return a.addr, func() {
		m.mu.Lock()
		delete(m.inflight, a)
		m.mu.Unlock()
	}
}

// knownEpoch returns the highest master epoch the client has heard of (0:
// none yet).
func (m *locator) knownEpoch() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.g.Epoch()
}

// heard records that the replica at addr is master in epoch (a session's
// reply, a locate round's best answer, a master watch). An epoch newer
// than any heard before makes addr the master guess and cancels every call
// attempt in flight at another replica (errMasterMoved: callRetry sends it
// again to addr) — except the first epoch heard, before which nothing is
// known to be stale. It reports whether the epoch was news.
func (m *locator) heard(addr string, epoch int64) bool {
	m.mu.Lock()
	news, first := m.g.Heard(addr, epoch)
	if !news {
		m.mu.Unlock()
		return false
	}
	var stale []context.CancelCauseFunc
	if !first {
		for a := range m.inflight {
			if a.addr != addr {
				stale = append(stale, a.cancel)
			}
		}
	}
	m.mu.Unlock()
	if len(stale) > 0 {
		m.log.Debug("chubby: a newer master serves elsewhere; resending the calls in flight there",
			"master", addr, "epoch", epoch, "calls", len(stale))
	}
	for _, cancel := range stale {
		cancel(errMasterMoved)
	}
	return true
}

// startWatch starts the master watch unless it runs (or the client has no
// watch: unit tests). It runs until the client closes.
func (m *locator) startWatch() {
	if m.watch == nil || m.stop.Err() != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.watching {
		return
	}
	m.watching = true
	// Clients start at different replicas, so that their watches spread
	// over the backups.
	m.g.StartWatchAt(rand.IntN(len(m.g.Members())))
	go m.watchLoop()
}

// watchTarget picks the replica to park the next watch at: a known member
// other than the master guess, in turn ("" when there is none).
func (m *locator) watchTarget() (target, cur string, epoch int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.g.WatchTarget()
}

// watchLoop parks one master watch after another (see "The master
// watch"), each bounded by watchHold plus the call timeout, with pauses
// between watches that brought no news (watchMinInterval) or failed (a
// back-off up to watchRetryMax): it never spins.
func (m *locator) watchLoop() {
	failures := 0
	for m.stop.Err() == nil {
		target, cur, epoch := m.watchTarget()
		if target == "" {
			// One replica known: nothing to watch from. The list may grow
			// (a refresh, a locate round).
			m.sleep(watchMinInterval)
			continue
		}
		start := time.Now()
		addr, e, replicas, err := m.watch(m.stop, target, cur, watchHold)
		if m.stop.Err() != nil {
			return
		}
		if err != nil {
			failures++
			m.log.Debug("chubby: master watch failed", "at", target, "err", Describe(err))
			m.sleep(keepalive.Backoff(watchMinInterval/5, watchRetryMax, failures-1, jitter()))
			continue
		}
		failures = 0
		if ValidateAddr(addr) == nil && e > epoch {
			m.adopt(target, addr, replicas)
			if m.heard(addr, e) {
				m.log.Info("chubby: master watch: a new master serves", "master", addr, "epoch", e,
					"was", cur, "told_by", target, "after", time.Since(start).Round(time.Millisecond))
				m.announce(addr, e)
			}
			continue
		}
		if e == epoch && addr != cur && ValidateAddr(addr) == nil {
			// The same master (one primary per view), named as the cell
			// advertises it: call it that, so the next watch is held.
			m.learned(addr)
		}
		if wait := watchMinInterval - time.Since(start); wait > 0 {
			m.sleep(wait)
		}
	}
}

// announce tells everyone waiting for a locate round (sessions' KeepAlive
// loops, calls waiting out a back-off) that the master is at addr in
// epoch, as a round that found it would.
func (m *locator) announce(addr string, epoch int64) {
	m.mu.Lock()
	m.last = located{addr: addr, epoch: epoch}
	ended := m.ended
	m.ended = make(chan struct{})
	m.mu.Unlock()
	close(ended)
}

// sleep waits d or until the client closes.
func (m *locator) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-m.stop.Done():
	}
}
