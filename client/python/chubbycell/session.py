"""Session: one client session with the cell — the unit that holds locks,
owns ephemeral nodes and opens handles — kept alive by a KeepAlive thread.

States (see SessionState)::

           local lease ran out             grace period ran out
    SAFE ────────────────────▶ JEOPARDY ─────────────────────▶ EXPIRED
     ▲                            │
     └────── KeepAlive reply ─────┘
    SAFE or JEOPARDY ── the cell says SESSION_EXPIRED ──▶ EXPIRED
    SAFE or JEOPARDY ── Session.close, Cell.close ──────▶ CLOSED

The KeepAlive thread (the Go client's loop, client/session.go) sends one
KeepAlive at a time to the master guess; the master parks it until shortly
before the lease would end, and the reply extends the local lease to
(send time + lease granted). The next one goes out at once, acknowledging
the events the reply carried. Failures are retried with a backoff of 50 ms
doubling to 0.5 s, following NOT_MASTER hints and STALE_EPOCH's new epoch
at once, and asking every replica where the master is (a locate round)
when nothing says. When the local lease runs out with no reply the session
is in jeopardy: the thread goes on trying, and while its KeepAlive waits it
asks the replicas every 0.5 s and moves the KeepAlive to a master found
elsewhere, for the grace period; a reply makes the session safe again with
every handle, lock and ephemeral node it had.

Calls made in jeopardy wait (at most until the grace period ends) until the
session is safe again (then they are sent) or expired (then they raise
SessionExpiredError). A call that gave up because no master could be
reached waits until the session reaches one again and is sent again, at
most MAX_SEND_ROUNDS times in all, with the same request id.

With the cache on (the default; see _cache.py) the KeepAlive loop also
drops what a reply's invalidations name before the next KeepAlive
acknowledges them, and flushes the cache in jeopardy, when the session is
safe again and when it hears of a new master.
"""

import collections
import contextlib
import dataclasses
import logging
import threading
import time

from thrift.protocol.TProtocol import TProtocolException
from thrift.transport.TTransport import TTransportException

from . import _cache, _ctx, _lease, _wire
from ._transport import ConnectFailed
from .cell import ONCE, UNSENT, backoff_delay
from .errors import (ChubbyError, InvalidArgumentError, ProtocolError, SessionClosedError, SessionExpiredError,
                     TooLargeError)
from .types import (EVENT_MASK_ALL, MAX_MULTI_BYTES, MAX_MULTI_COMPARES, MAX_MULTI_OPS, Compare, CreateMode,
                    MultiResult, Op, EventKind, OpenMode, SessionState, check_content, check_enum,
                    check_flag, validate_path)

log = logging.getLogger("chubbycell")

__all__ = ["Session", "HeldLock"]

#: While a session in jeopardy has a KeepAlive in flight, the replicas are
#: asked where the master is this often.
JEOPARDY_PROBE_INTERVAL = 0.5
#: KeepAlives resent at once in a row after a failure that said where to go.
MAX_QUICK_KEEPALIVES = 3
KEEPALIVE_BACKOFF_BASE = 0.05
KEEPALIVE_BACKOFF_MAX = 0.5
#: How often one call is sent anew after it found no master and the session
#: then reached one again.
MAX_SEND_ROUNDS = 3
#: State changes one call waits through before it is sent anyway.
MAX_STATE_WAITS = 8
#: How long close() waits for the KeepAlive thread to hear the session end.
CLOSE_DRAIN = 1.0
#: Events kept for handles whose Open has not returned yet.
EARLY_EVENT_BUFFER = 1024
#: Undelivered events a handle keeps for a slow reader (oldest dropped).
HANDLE_EVENT_BUFFER = 256


@dataclasses.dataclass(frozen=True)
class HeldLock:
    """What ``with session.lock(path)`` yields: the handle holding the lock
    and the lock's sequencer (pass ``str(sequencer)`` to the servers you
    talk to, which check it with Cell.check_sequencer)."""
    handle: object
    sequencer: object

    @property
    def path(self):
        """The lock file's path."""
        return self.handle.path


class _Dispatcher:
    """Runs a session's callbacks one at a time, in order, on one thread, so
    that no callback can hold up the KeepAlive thread."""

    def __init__(self, name):
        self._q = collections.deque()
        self._cv = threading.Condition()
        self._closed = False
        self._thread = None
        self._name = name

    def submit(self, fn, *args):
        """Queue fn(*args) (dropped once closed)."""
        with self._cv:
            if self._closed:
                return
            self._q.append((fn, args))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cv.notify()

    def close(self):
        """Run what is queued, then stop."""
        with self._cv:
            self._closed = True
            self._cv.notify()

    def _run(self):
        while True:
            with self._cv:
                while not self._q and not self._closed:
                    self._cv.wait()
                if not self._q:
                    return
                fn, args = self._q.popleft()
            try:
                fn(*args)
            except Exception:
                log.exception("chubby: a session callback raised")


class _EventQueue:
    """A handle's bounded event queue: pushing never blocks (the oldest
    event is dropped when full); closing ends the readers' iteration after
    what is queued."""

    def __init__(self, size):
        self._q = collections.deque()
        self._size = size
        self._cv = threading.Condition()
        self.closed = False
        self.dropped = 0

    def push(self, ev):
        with self._cv:
            if self.closed:
                return
            if len(self._q) >= self._size:
                self._q.popleft()
                self.dropped += 1
            self._q.append(ev)
            self._cv.notify_all()

    def close(self):
        with self._cv:
            self.closed = True
            self._cv.notify_all()

    def unget(self, ev):
        """Put ev back at the front (a reader that took it could not deliver it)."""
        with self._cv:
            self._q.appendleft(ev)
            self._cv.notify_all()

    def drained(self):
        """True when closed and empty: no event will come."""
        with self._cv:
            return self.closed and not self._q

    def get(self, timeout):
        """The next event; None when closed and drained or after timeout seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while not self._q:
                if self.closed:
                    return None
                if deadline is None:
                    self._cv.wait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    self._cv.wait(left)
            return self._q.popleft()


class _KAAttempt:
    """One KeepAlive in flight, on its own thread."""

    def __init__(self, addr, sent):
        self.addr = addr
        self.sent = sent
        self.done = False
        self.result = None
        self.error = None
        self.conn = None
        self.aborted = False
        self.mu = threading.Lock()

    def abort(self):
        """Abandon the attempt: the call on its connection fails at once."""
        with self.mu:
            self.aborted = True
            c = self.conn
        if c is not None:
            c.abort()


class _Verdict:
    def __init__(self, fatal=False, resend_now=False, locate=False, refused=False):
        self.fatal, self.resend_now, self.locate, self.refused = fatal, resend_now, locate, refused


class Session:
    """A session with the cell (made by Cell.session). Thread-safe.

    Attributes:
        id: the session's id, as the cell knows it.
        cell: the Cell it belongs to.

    Use it as a context manager to close it on exit.
    """

    def __init__(self, cell, sid, sent, lease, epoch, grace, *, on_jeopardy=None, on_safe=None,
                 on_expired=None, on_master_changed=None, cache=0):
        self.cell = cell
        # The cache (cache: its bound; 0: off). The KeepAlive loop drops
        # what the master invalidates before it acknowledges it.
        self._cache = _cache.Cache(cache) if cache else None
        self.id = sid
        self._m = cell._master
        self._cv = threading.Condition()  # guards the lease and the end
        self._ll = _lease.LocalLease(sent, lease, epoch, grace)
        self._err = None
        self._ended = None
        self._closing = False
        self._callbacks = dict(on_jeopardy=on_jeopardy, on_safe=on_safe, on_expired=on_expired,
                               on_master_changed=on_master_changed)
        self._dispatch = _Dispatcher("chubbycell-callbacks-%d" % sid)
        # Exactly-once request numbers (RequestID): one per mutating call,
        # kept across its resends; the floor is the lowest still in flight.
        self._rid_mu = threading.Lock()
        self._rid_seq = 0
        self._inflight = set()
        # Events: the highest seq received (acknowledged on every
        # KeepAlive), the handles that receive events, the events that
        # overtook their Open's reply.
        self._ev_mu = threading.Lock()
        self._last_event = 0
        self._watchers = {}
        self._opening = 0
        self._early = []
        self._inv_ack = 0
        # The KeepAlive thread's wake-ups.
        self._ka_cv = threading.Condition()
        self._ka_signal = 0
        self._ka_thread = None

    # -- state ----------------------------------------------------------------

    @property
    def state(self):
        """SessionState.SAFE, JEOPARDY, EXPIRED or CLOSED, exact to the moment."""
        with self._cv:
            return self._state_locked(time.monotonic())

    def _state_locked(self, now):
        if self._err is not None:
            return self._ended
        return SessionState.SAFE if self._ll.state(now) == _lease.SAFE else SessionState.JEOPARDY

    def _cache_usable(self):
        """True if the cache may serve a read now: caching is on and the
        session is safe (so the master still waits for its acknowledgements)."""
        if self._cache is None:
            return False
        with self._cv:
            return self._err is None and self._state_locked(time.monotonic()) == SessionState.SAFE

    def _cache_drop(self, path, tree=False):
        """Forget what the cache holds of path (a change of this session): write-through."""
        if self._cache is not None:
            if tree:
                self._cache.drop_tree(path)
            else:
                self._cache.drop(path)

    @contextlib.contextmanager
    def _changing(self, *paths, tree=False):
        """Around a call of this session that changes paths: the cache's
        copies go before it and again after it (write-through; the cell
        invalidates them too)."""
        for p in paths:
            self._cache_drop(p, tree)
        try:
            yield
        finally:
            for p in paths:
                self._cache_drop(p, tree)

    def cache_stats(self):
        """The cache's counts (a CacheStats; all 0 with the cache off)."""
        if self._cache is None:
            return _cache.CacheStats(0, 0, 0, 0)
        return self._cache.stats()

    @property
    def epoch(self):
        """The highest master epoch the session has heard of."""
        with self._cv:
            return self._ll.epoch

    @property
    def error(self):
        """None while the session lives; afterwards why it ended
        (SessionClosedError, CellClosedError or SessionExpiredError)."""
        with self._cv:
            return self._err

    def lease_remaining(self):
        """Seconds the session is certainly alive at the master unless
        renewed: 0 in jeopardy and once ended."""
        with self._cv:
            if self._err is not None:
                return 0.0
            return max(0.0, self._ll.end - time.monotonic())

    def wait_ended(self, timeout=None):
        """Wait until the session ends (or timeout seconds); True if it has."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._err is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(left)
            return True

    # -- lifetime ---------------------------------------------------------------

    def _start(self):
        self._m.add_listener(self._ka_wake)
        self._ka_thread = threading.Thread(target=self._ka_loop, name="chubbycell-keepalive-%d" % self.id,
                                           daemon=True)
        self._ka_thread.start()

    def _emit(self, name, *args):
        cb = self._callbacks.get(name)
        if cb is not None:
            self._dispatch.submit(cb, self, *args)

    def _end(self, err):
        """End the session locally with err (the first reason wins)."""
        expired = isinstance(err, SessionExpiredError)
        with self._cv:
            if self._err is not None:
                return
            self._err = err
            if self._cache is not None:
                self._cache.flush()
            self._ll.ended = True
            self._ended = SessionState.EXPIRED if expired else SessionState.CLOSED
            self._cv.notify_all()
        self._ka_wake()
        self._m.remove_listener(self._ka_wake)
        self.cell._remove_session(self)
        if expired:
            log.warning("chubby: session %d expired: %s", self.id, err)
            self._emit("on_expired", err)
        else:
            log.debug("chubby: session %d ended: %s", self.id, err)
        with self._ev_mu:
            ws, self._watchers, self._early = list(self._watchers.values()), {}, []
        for h in ws:
            h._events.close()
        self._dispatch.close()

    def close(self):
        """End the session at the cell (CloseSession: its locks are released
        without lock-delay, its handles closed, its ephemeral nodes deleted)
        and stop its KeepAlive thread. The session ends locally even when
        the call fails (the cell then ends it when its lease runs out), and
        the failure is raised. Closing a closed or expired session does
        nothing."""
        with self._cv:
            if self._err is not None or self._closing:
                closing = self._closing and self._err is None
            else:
                closing = None
                self._closing = True
        if closing is not None:
            if closing:
                self.wait_ended(CLOSE_DRAIN + self.cell.call_timeout)
            return
        err = None
        try:
            self.cell._call("close-session", "", UNSENT,
                            lambda c: c.session.CloseSession(_wire.ttypes.CloseSessionRequest(session=self.id)))
        except SessionExpiredError:
            self._end(SessionExpiredError("the cell had ended the session before close"))
        except ChubbyError as e:
            err = e
        else:
            # The cell answers the parked KeepAlive at once when the session
            # ends; let the loop see that answer rather than abandon it.
            self.wait_ended(CLOSE_DRAIN)
        self._end(SessionClosedError("the session was closed"))
        if self._ka_thread is not None and self._ka_thread is not threading.current_thread():
            self._ka_thread.join(CLOSE_DRAIN + 1)
        if err is not None:
            raise err

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "<chubbycell.Session %d %s epoch=%d>" % (self.id, self.state.value, self.epoch)

    # -- the KeepAlive thread ----------------------------------------------------

    def _ka_wake(self):
        with self._ka_cv:
            self._ka_signal += 1
            self._ka_cv.notify_all()

    def _ka_loop(self):
        self._ka_cur = None  # the KeepAlive in flight
        try:
            self._ka_turns()
        except Exception:
            log.exception("chubby: session %d: KeepAlive thread failed", self.id)
            self._end(SessionExpiredError("the KeepAlive thread failed"))
        finally:
            if self._ka_cur is not None:
                self._ka_cur.abort()

    def _ka_turns(self):
        m = self._m
        retry_at = 0.0
        failures = quick = wakes = 0
        locating = None          # a locate round the loop waits for
        round_wait = False       # the next KeepAlive waits for that round
        lost, lost_refused = "", False
        probe_at = 0.0
        rounds_seen = m.rounds()
        while True:
            with self._ka_cv:
                signal = self._ka_signal
            now = time.monotonic()
            with self._cv:
                if self._err is not None:
                    return
                tr = self._ll.step(now)
                state = self._state_locked(now)
                lease_end, grace_end, granted = self._ll.end, self._ll.grace_end(), self._ll.lease
            if tr == _lease.ENTERED_JEOPARDY:
                self._enter_jeopardy(lease_end, grace_end)
                probe_at = now
            elif tr == _lease.GRACE_OVER:
                self._end(SessionExpiredError(
                    "no KeepAlive reply within the grace period (%.3gs) after the local lease ended"
                    % self._ll.grace))
                return
            jeopardy = state == SessionState.JEOPARDY
            held = round_wait and locating is not None
            cur = self._ka_cur
            if cur is None and not held and now >= retry_at:
                cur = self._ka_cur = self._send_keepalive(granted)
            if jeopardy and cur is not None and locating is None and now >= probe_at:
                locating = m.locate_async()
                probe_at = now + JEOPARDY_PROBE_INTERVAL
            wake = grace_end if jeopardy else lease_end
            if cur is None and not held:
                wake = min(wake, retry_at)
            if jeopardy and cur is not None and locating is None:
                wake = min(wake, probe_at)
            with self._ka_cv:
                while (self._ka_signal == signal and not (cur is not None and cur.done)
                       and not (locating is not None and locating.is_set())):
                    left = wake - time.monotonic()
                    if left <= 0:
                        break
                    self._ka_cv.wait(left)
            with self._cv:
                if self._err is not None:
                    return
            # A locate round ended: ours, or anyone's.
            ours = locating is not None and locating.is_set()
            if ours or m.rounds() != rounds_seen:
                rounds_seen = m.rounds()
                if ours:
                    locating, round_wait = None, False
                loc_addr, loc_epoch = m.last
                if not loc_addr:
                    pass
                elif cur is not None and not cur.done and ours and loc_addr != cur.addr:
                    # The replicas say the master is elsewhere: go there
                    # rather than wait for a reply that may never come.
                    log.debug("chubby: session %d: master located at %s; moving the KeepAlive from %s",
                              self.id, loc_addr, cur.addr)
                    cur.abort()
                    cur = self._ka_cur = None
                    retry_at = 0.0
                elif (cur is None and lost and (loc_addr != lost or lost_refused or loc_epoch > self.epoch)
                      and retry_at > time.monotonic() and wakes < MAX_QUICK_KEEPALIVES):
                    wakes += 1
                    retry_at = 0.0
            if cur is None or not cur.done:
                continue
            a, cur = cur, None
            self._ka_cur = None
            err = a.error
            if err is None:
                err = self._apply_keepalive(a.sent, a.result)
            if err is None:
                failures = quick = wakes = 0
                retry_at, lost = 0.0, ""
                continue
            with self._cv:
                if self._err is not None:
                    return
            v = self._keepalive_failed(a.addr, err)
            if v.fatal:
                return
            if v.resend_now and quick < MAX_QUICK_KEEPALIVES:
                log.debug("chubby: session %d: KeepAlive failed at %s (%s); resending at once to %s",
                          self.id, a.addr, err, m.addr())
                quick += 1
                retry_at = 0.0
                continue
            quick = 0
            retry_at = time.monotonic() + backoff_delay(KEEPALIVE_BACKOFF_BASE, KEEPALIVE_BACKOFF_MAX, failures)
            failures += 1
            lost, lost_refused, round_wait = "", False, False
            if v.locate and m.multi():
                if locating is None:
                    locating = m.locate_async()
                lost, lost_refused, round_wait = a.addr, v.refused, True
            log.debug("chubby: session %d: KeepAlive failed at %s; retrying at %s: %s", self.id, a.addr,
                      m.addr(), err)

    def _send_keepalive(self, granted):
        """Send one KeepAlive to the master guess on a thread of its own; the
        master parks it for up to the lease, so the socket waits the lease
        plus the call timeout."""
        self._m.maybe_refresh()
        addr = self._m.addr()
        with self._ev_mu:
            acked = self._last_event
            inv = self._inv_ack
        if self._cache is not None:
            inv = self._cache.ack_seq()
        item = _wire.ttypes.KeepAliveItem(session=self.id, acked_event=acked or None,
                                          acked_invalidation=inv or None)
        req = _wire.ttypes.KeepAliveRequest(sessions=[item], epoch=self.epoch)
        a = _KAAttempt(addr, time.monotonic())
        timeout = granted + self.cell.call_timeout
        threading.Thread(target=self._ka_attempt, args=(a, req, timeout),
                         name="chubbycell-keepalive-call-%d" % self.id, daemon=True).start()
        return a

    def _ka_attempt(self, a, req, timeout):
        pool = self.cell._pool
        try:
            conn = pool.get(a.addr)
        except ConnectFailed as e:
            a.error = e
        else:
            with a.mu:
                a.conn = conn
                aborted = a.aborted
            if aborted:
                conn.close()
                a.error = ConnectionAbortedError("abandoned")
            else:
                try:
                    conn.set_timeout(timeout)
                    a.result = conn.session.KeepAlive(req)
                    pool.put(conn)
                except _wire.ttypes.ChubbyError as e:
                    a.error = e
                    pool.put(conn)
                except BaseException as e:
                    a.error = e
                    conn.close()
        a.done = True
        self._ka_wake()

    def _enter_jeopardy(self, lease_end, grace_end):
        if self._cache is not None:
            self._cache.flush()  # the master may stop waiting for our acknowledgements now
        log.warning("chubby: session %d in jeopardy: local lease ran out with no KeepAlive reply; "
                    "looking for the master for %.3gs", self.id, grace_end - lease_end)
        with self._cv:
            self._cv.notify_all()
        self._emit("on_jeopardy")

    def _note_epoch(self, epoch):
        with self._cv:
            if self._err is not None or not self._ll.note_epoch(epoch):
                return
        if self._cache is not None:
            self._cache.flush()  # the new master knows no cachers
        log.info("chubby: session %d: master epoch is now %d", self.id, epoch)
        self._emit("on_master_changed", epoch)

    def _apply_keepalive(self, sent, r):
        """Record a KeepAlive reply to a request sent at sent; return None,
        or the error saying why it does not renew this session."""
        if r is None or r.results is None:
            return ProtocolError("KeepAlive reply without results", op="keepalive")
        if r.epoch is not None:
            self._note_epoch(r.epoch)
        for res in r.results:
            if res is None or res.session != self.id:
                continue
            if res.error is not None:
                return res.error
            if res.lease_ms is None or res.lease_ms <= 0:
                return ProtocolError("KeepAlive reply grants no lease (lease_ms=%r)" % res.lease_ms,
                                     op="keepalive")
            if self._cache is not None:
                self._cache.apply(res)  # before the next KeepAlive acknowledges it
            elif res.invalidation_seq:
                # Not caching: acknowledging is all there is to do.
                with self._ev_mu:
                    self._inv_ack = max(self._inv_ack, res.invalidation_seq)
            now = time.monotonic()
            with self._cv:
                if self._err is not None:
                    return None
                _, safe_again = self._ll.renew(sent, res.lease_ms / 1000.0, now)
                epoch = self._ll.epoch
                self._cv.notify_all()
            if safe_again:
                if self._cache is not None:
                    self._cache.flush()  # what it held before the jeopardy may have changed since
                log.info("chubby: session %d safe again (epoch %d)", self.id, epoch)
                self._emit("on_safe")
            self._deliver_events(res.events or ())
            return None
        return ProtocolError("KeepAlive reply has no result for session %d" % self.id, op="keepalive")

    def _keepalive_failed(self, addr, err):
        """Decide what a failed KeepAlive sent to addr means (the Go
        client's keepAliveFailed)."""
        m = self._m
        if isinstance(err, _wire.ttypes.ChubbyError):
            code = err.code
            if code == _wire.ttypes.ErrorCode.SESSION_EXPIRED:
                with self._cv:
                    closing = self._closing
                if closing:
                    self._end(SessionClosedError("the session was closed"))
                else:
                    self._end(SessionExpiredError("the cell ended the session: %s" % (err.message or "")))
                return _Verdict(fatal=True)
            if code == _wire.ttypes.ErrorCode.NOT_MASTER:
                if err.epoch is not None:
                    self._note_epoch(err.epoch)
                if m.redirect(addr, err.master_address):
                    return _Verdict(resend_now=True)
                return _Verdict(locate=True, refused=True)
            if code == _wire.ttypes.ErrorCode.STALE_EPOCH:
                # A new master refused the old epoch: adopt its epoch, resend.
                if err.epoch is not None and err.epoch > self.epoch:
                    self._note_epoch(err.epoch)
                    return _Verdict(resend_now=True)
                return _Verdict(locate=True)
            if code == _wire.ttypes.ErrorCode.UNAVAILABLE:
                return _Verdict(locate=True)
            return _Verdict()
        if isinstance(err, (ConnectFailed, OSError, EOFError, TTransportException, TProtocolException)):
            m.unreachable(addr)
            return _Verdict(locate=True)
        return _Verdict()

    # -- calls ------------------------------------------------------------------------

    def _begin_request(self):
        with self._rid_mu:
            self._rid_seq += 1
            seq = self._rid_seq
            self._inflight.add(seq)
            return seq, min(self._inflight)

    def _end_request(self, seq):
        with self._rid_mu:
            self._inflight.discard(seq)

    def _await_safe(self, need_renewal, after, op, path, ctx):
        """Wait until the session is safe (and, with need_renewal, has
        renewed its lease more than after times) or has ended, or ctx ends
        the call; return its renewal count or raise why the call cannot go
        on."""
        hook = ctx.cancel._add(self._wake_callers) if ctx.cancel is not None else None
        try:
            with self._cv:
                waits = 0
                while True:
                    if self._err is not None:
                        raise self._err.with_context(op, path)
                    now = time.monotonic()
                    if self._state_locked(now) == SessionState.SAFE and (
                            not need_renewal or self._ll.renewals > after):
                        return self._ll.renewals
                    if waits >= MAX_STATE_WAITS:
                        return self._ll.renewals
                    ctx.check(op, path)
                    until = self._ll.end if self._state_locked(now) == SessionState.SAFE else self._ll.grace_end()
                    self._cv.wait(ctx.bound(max(0.01, until - now + 0.01)))
                    waits += 1
        finally:
            if hook is not None:
                ctx.cancel._remove(hook)

    def _wake_callers(self):
        with self._cv:
            self._cv.notify_all()

    def _call(self, op, path, cls, fn, *, rid_req=None, timeout=None, ctx=None):
        """Run a call of this session: it waits while the session is in
        jeopardy, fails when it has ended, ends it when the cell says
        SESSION_EXPIRED, and sends it again (same request id) once the
        session has reached a master again when it found none. rid_req, if
        given, is the request that carries the call's RequestID. timeout
        bounds one attempt; ctx (a _ctx.CallCtx) the whole call."""
        ctx = ctx or _ctx.NONE
        seq = None
        if rid_req is not None:
            seq, floor = self._begin_request()
            rid_req.rid = _wire.ttypes.RequestID(seq=seq, floor=floor)
        try:
            need_renewal, after = False, 0
            for rnd in range(MAX_SEND_ROUNDS):
                renewals = self._await_safe(need_renewal, after, op, path, ctx)
                try:
                    return self.cell._call(op, path, cls, fn, timeout, ctx)
                except SessionExpiredError as e:
                    self._end(SessionExpiredError("the cell ended the session: %s" % e.message))
                    raise
                except ChubbyError as e:
                    if not getattr(e, "retryable_giveup", False) or rnd + 1 >= MAX_SEND_ROUNDS or self.error:
                        raise
                    log.debug("chubby: %s %s found no master; waiting for the session to reach one", op, path)
                    need_renewal, after = True, renewals
        finally:
            if seq is not None:
                self._end_request(seq)

    # -- events -------------------------------------------------------------------------

    def _begin_open(self):
        with self._ev_mu:
            self._opening += 1

    def _end_open(self, h):
        with self._ev_mu:
            self._opening -= 1
            if h is not None and self.error is None:
                self._watchers[h._wire.id] = h
                keep = []
                for e in self._early:
                    if e.handle == h._wire.id:
                        self._push_locked(h, e)
                    else:
                        keep.append(e)
                self._early = keep
            elif h is not None:
                h._events.close()
            if self._opening == 0:
                self._early = []

    def _unwatch(self, h):
        with self._ev_mu:
            if self._watchers.get(h._wire.id) is h:
                del self._watchers[h._wire.id]
        h._events.close()

    def _push_locked(self, h, e):
        ev = _wire.event(e)
        if ev is not None:
            h._deliver(ev)
        if e.kind == EventKind.HANDLE_INVALID:
            h._events.close()

    def _lost_locked(self, seq, lost_from, time_ms):
        log.warning("chubby: session %d: the cell dropped events %d..%d (its queue overflowed)",
                    self.id, lost_from, seq)
        e = _wire.ttypes.Event(seq=seq, kind=EventKind.EVENTS_LOST, time_ms=time_ms, lost_from=lost_from)
        for h in list(self._watchers.values()):
            self._push_locked(h, e)

    def _deliver_events(self, evs):
        """Deliver a KeepAlive reply's events in order, each seq once (a new
        master may send again what the old one sent)."""
        for e in evs:
            if e is None or e.kind is None:
                continue
            if e.kind == EventKind.MASTER_FAILED_OVER:
                if e.epoch is not None:
                    self._note_epoch(e.epoch)
                continue
            with self._ev_mu:
                if e.seq is None or e.seq <= self._last_event:
                    continue  # had it already
                nxt = self._last_event + 1
                self._last_event = e.seq
                first = e.seq
                if e.kind == EventKind.EVENTS_LOST:
                    first = max(e.lost_from or nxt, nxt)
                if first > nxt:
                    # A gap the cell did not mark: say so as the cell would have.
                    self._lost_locked(first - 1, nxt, e.time_ms or 0)
                if e.kind == EventKind.EVENTS_LOST:
                    self._lost_locked(e.seq, first, e.time_ms or 0)
                    continue
                h = self._watchers.get(e.handle)
                if h is not None:
                    self._push_locked(h, e)
                    if e.kind == EventKind.HANDLE_INVALID:
                        del self._watchers[e.handle]  # nothing follows it
                elif self._opening > 0:
                    if len(self._early) >= EARLY_EVENT_BUFFER:
                        self._early.pop(0)
                    self._early.append(e)
                else:
                    log.debug("chubby: session %d: event %d for an unknown handle %r dropped",
                              self.id, e.seq, e.handle)

    # -- the file system ------------------------------------------------------------------

    def open(self, path, *, mode=OpenMode.READ, create=CreateMode.OPEN_EXISTING, ephemeral=False,
             sequential=False, initial_content=None, event_mask=0, on_event=None, timeout=None, cancel=None):
        """Open the node at path and return a Handle.

        Args:
            mode: OpenMode.READ (read, take locks) or READ_WRITE (also write
                and delete).
            create: CreateMode.OPEN_EXISTING (NotFoundError if missing),
                OPEN_OR_CREATE (create a file if missing) or CREATE_NEW
                (ExistsError if present; always creates with sequential).
            ephemeral: on create, the file is deleted when the session ends.
            sequential: on create, a 10-digit per-parent counter is appended
                to the name (Handle.path tells the name created).
            initial_content: on create, the file's first content (bytes).
            event_mask: EVENT_MASK_* bits of the events the handle receives
                (0: none); read them with Handle.events() or pass on_event.
            on_event(event): if given, the handle's events go to it (on the
                session's callback thread) instead of Handle.events().

        Exactly-once: resent after a lost reply or a failover, it is
        applied once.
        """
        validate_path(path)
        mode = check_enum("mode", OpenMode, mode)
        create = check_enum("create", CreateMode, create)
        check_flag("ephemeral", ephemeral)
        check_flag("sequential", sequential)
        if initial_content is not None:
            initial_content = check_content("initial_content", initial_content)
        if isinstance(event_mask, bool) or not isinstance(event_mask, int) or event_mask & ~EVENT_MASK_ALL \
                or event_mask < 0:
            raise InvalidArgumentError("event_mask must be an int of EVENT_MASK_* bits (at most %d), not %r"
                                       % (EVENT_MASK_ALL, event_mask), op="open", path=path)
        if on_event is not None and not callable(on_event):
            raise InvalidArgumentError("on_event must be callable", op="open", path=path)
        from .handle import Handle
        ctx = _ctx.CallCtx(timeout, cancel)
        req = _wire.ttypes.OpenRequest(session=self.id, path=path, mode=int(mode), create=int(create),
                                       ephemeral=True if ephemeral else None,
                                       sequential=True if sequential else None,
                                       initial_content=initial_content,
                                       event_mask=event_mask or None)
        if event_mask:
            self._begin_open()  # an event may overtake the reply
        h = None
        try:
            with self._changing(path):  # it may create the node
                r = self._call("open", path, ONCE, lambda c: c.fs.Open(req), rid_req=req, ctx=ctx)
            w = r.handle
            if w is None or w.id is None or w.instance is None or not w.path:
                raise ProtocolError("Open reply lacks its handle", op="open", path=path)
            h = Handle(self, w, bool(r.created), _wire.stat(r.stat), event_mask, on_event)
        finally:
            if event_mask:
                self._end_open(h)
        return h

    def mkdir(self, path, *, parents=False, ephemeral=False, timeout=None, cancel=None):
        """Create the directory path (with parents: missing parents too, and
        an existing directory is no error) and return its Stat.
        Exactly-once."""
        validate_path(path)
        check_flag("parents", parents)
        check_flag("ephemeral", ephemeral)
        ctx = _ctx.CallCtx(timeout, cancel)
        req = _wire.ttypes.MkdirRequest(session=self.id, path=path, parents=True if parents else None,
                                        ephemeral=True if ephemeral else None)
        with self._changing(path):
            return _wire.stat(self._call("mkdir", path, ONCE, lambda c: c.fs.Mkdir(req), rid_req=req, ctx=ctx))

    def create_file(self, path, content=b"", *, ephemeral=False, sequential=False, make_parents=False,
                    timeout=None, cancel=None):
        """Create the file path with content in one call, without a handle,
        and return its Stat (whose path has the counter when sequential).
        Exactly-once: a sequential create resent after a lost reply names
        the file the first attempt created."""
        validate_path(path)
        content = check_content("content", content)
        check_flag("ephemeral", ephemeral)
        check_flag("sequential", sequential)
        check_flag("make_parents", make_parents)
        ctx = _ctx.CallCtx(timeout, cancel)
        req = _wire.ttypes.CreateFileRequest(session=self.id, path=path, content=content,
                                             ephemeral=True if ephemeral else None,
                                             sequential=True if sequential else None,
                                             make_parents=True if make_parents else None)
        with self._changing(path):
            return _wire.stat(self._call("create", path, ONCE, lambda c: c.fs.CreateFile(req), rid_req=req,
                                         ctx=ctx))

    def multi(self, compares=(), ops=(), *, timeout=None, cancel=None):
        """Check compares and, if every one holds, apply ops in order, all
        or nothing, as one command of the cell (idl/chubby.thrift
        MultiRequest)::

            r = s.multi([Compare.generation("/cfg", 7)],
                        [Op.set("/cfg", b"v8"), Op.create("/cfg.done")])
            if not r.succeeded: ...  # r.failed_compare says which compare

        compares: Compare values (at most MAX_MULTI_COMPARES); ops: Op values
        (1..MAX_MULTI_OPS, their contents at most MAX_MULTI_BYTES together).
        A compare that does not hold is an answer (MultiResult.succeeded
        False); an op that cannot be applied raises that op's error (its
        message names the op's index); either way nothing changed. Later
        ops see the effects of earlier ones. Returns a MultiResult.
        Exactly-once, like write."""
        compares, ops = list(compares), list(ops)
        if len(compares) > MAX_MULTI_COMPARES:
            raise InvalidArgumentError("a Multi has at most %d compares, not %d" % (MAX_MULTI_COMPARES, len(compares)),
                                       op="multi")
        if not 1 <= len(ops) <= MAX_MULTI_OPS:
            raise InvalidArgumentError("a Multi has 1..%d ops, not %d" % (MAX_MULTI_OPS, len(ops)), op="multi")
        for i, c in enumerate(compares):
            if not isinstance(c, Compare):
                raise InvalidArgumentError("compare %d is a %s, not a Compare" % (i, type(c).__name__), op="multi")
        size = 0
        for i, o in enumerate(ops):
            if not isinstance(o, Op):
                raise InvalidArgumentError("op %d is a %s, not an Op" % (i, type(o).__name__), op="multi")
            size += len(o.content or b"")
        if size > MAX_MULTI_BYTES:
            raise TooLargeError("the Multi's contents are %d bytes, at most %d allowed" % (size, MAX_MULTI_BYTES),
                                op="multi")
        ctx = _ctx.CallCtx(timeout, cancel)
        req = _wire.ttypes.MultiRequest(session=self.id, compares=[_wire.compare_to_wire(c) for c in compares],
                                        ops=[_wire.op_to_wire(o) for o in ops])
        path = ops[0].path
        with self._changing(*[o.path for o in ops if o.kind != Op.DELETE]), \
                self._changing(*[o.path for o in ops if o.kind == Op.DELETE], tree=True):
            r = self._call("multi", path, ONCE, lambda c: c.fs.Multi(req), rid_req=req, ctx=ctx)
        if r.succeeded is None:
            raise ProtocolError("Multi reply lacks succeeded", op="multi", path=path)
        if not r.succeeded:
            if r.failed_compare is None or not 0 <= r.failed_compare < len(compares):
                raise ProtocolError("Multi reply names no compare that failed (%r)" % (r.failed_compare,),
                                    op="multi", path=path)
            return MultiResult(succeeded=False, failed_compare=r.failed_compare, stats=())
        stats = tuple(_wire.stat(x) for x in (r.stats or ()))
        if len(stats) != len(ops):
            raise ProtocolError("Multi reply has %d stats for %d ops" % (len(stats), len(ops)), op="multi", path=path)
        return MultiResult(succeeded=True, failed_compare=-1, stats=stats)

    @contextlib.contextmanager
    def lock(self, path, *, shared=False, timeout=None, lock_delay=None, cancel=None):
        """Hold the lock of the file path (created if missing; its parent must
        exist) for the body of a with statement::

            with session.lock("/locks/job") as held:
                do_work(str(held.sequencer))

        Exclusive by default, shared with shared=True. timeout: seconds to
        wait for the lock (None: as long as it takes; TimedOutError when it
        passes). lock_delay: see Handle.acquire. cancel: a Cancel token
        that ends the wait (CallCancelledError). Yields a HeldLock. On exit
        the lock is released and the handle closed; if the body raised, a
        failure to release is logged and the body's exception propagates.
        A release that finds the session expired raises SessionExpiredError:
        the lock may have been lost while the body ran. (A holder that must
        know at once should watch on_jeopardy.)"""
        h = self.open(path, create=CreateMode.OPEN_OR_CREATE, cancel=cancel)
        try:
            seq = h.acquire(shared=shared, timeout=timeout, lock_delay=lock_delay, cancel=cancel)
        except BaseException:
            _quietly(h.close, "close after a failed acquire")  # also ends a pending Acquire
            raise
        try:
            yield HeldLock(handle=h, sequencer=seq)
        except BaseException:
            _quietly(h.release, "release")
            _quietly(h.close, "close")
            raise
        try:
            h.release()
        finally:
            _quietly(h.close, "close")


def _quietly(fn, what):
    try:
        fn()
    except ChubbyError as e:
        log.warning("chubby: %s: %s", what, e)
