"""Cell: the client's handle on one Chubby cell (its replicas), the calls
that need no session, and the retry rules every call follows.

Retry rules (the Go client's, client/master.go): a call goes to the
replica believed to be master and is sent again, at most MAX_CALL_ATTEMPTS
times with a backoff of 50 ms doubling to 1 s (jittered), only when that is
safe:

- reads and CreateSession (SAFE): on NOT_MASTER, UNAVAILABLE and transport
  failures other than timeouts;
- calls that change the cell and carry a RequestID (ONCE: Open, Close,
  SetContents, Delete, Mkdir, CreateFile, TryAcquire, Release): after any
  failure that may pass — NOT_MASTER, UNAVAILABLE, a lost reply, a timeout —
  because the cell applies a request number at most once and answers a
  resend with the first answer, on any master;
- other calls that change the cell (UNSENT: Acquire, CloseSession) only when
  the request certainly did nothing: NOT_MASTER, or no connection could be
  made.

A call's own timeout= and cancel= (see _ctx.py) bound all of it: the
attempts (each attempt's reply wait is cut to what is left), the pauses
and the search for the master between them.

NOT_MASTER with a usable hint sends the next attempt to the hint at once
(twice per call at most); failures that say nothing of where the master is
start a locate round (see _master.py) when more than one replica is known.
"""

import logging
import os
import random
import socket
import sys
import threading
import time

from thrift.protocol.TProtocol import TProtocolException
from thrift.Thrift import TApplicationException
from thrift.transport.TTransport import TTransportException

from . import _ctx, _wire, errors
from ._master import Master, ask_master
from ._cache import DEFAULT_CACHE_MAX_ENTRIES
from ._tls import TLSConfig
from ._transport import TRANSPORTS, ConnectFailed, Pool
from .errors import (CallTimeoutError, CellClosedError, ChubbyError, InvalidArgumentError, ProtocolError,
                     TransportError, UnreachableError)
from .types import (MAX_CLIENT_NAME_BYTES, MAX_TIMESTAMPS_PER_CALL, CellStatus, MasterInfo, ReplicaInfo,
                    Identity, Sequencer, check_seconds, parse_addrs)

log = logging.getLogger("chubbycell")

__all__ = ["Cell", "ENV_CELL", "DEFAULT_ADDR"]

#: The environment variable naming the cell's replicas when Cell gets none.
ENV_CELL = "CHUBBY_CELL"
#: The address used when neither Cell's addrs nor CHUBBY_CELL names one.
DEFAULT_ADDR = "127.0.0.1:7000"

# Retry classes (see the module doc).
SAFE, ONCE, UNSENT = "safe", "once", "unsent"

MAX_CALL_ATTEMPTS = 6
CALL_BACKOFF_BASE = 0.05
CALL_BACKOFF_MAX = 1.0
MAX_QUICK_REDIRECTS = 2


def backoff_delay(base, mx, attempt):
    """The pause before retry number attempt: min(mx, base*2^attempt),
    jittered into [d/2, d)."""
    d = min(mx, base * (2 ** min(attempt, 30)))
    return d / 2 + d / 2 * random.random()


def is_timeout(e):
    """True if a transport exception means the reply did not come in time."""
    if isinstance(e, (socket.timeout, TimeoutError)):
        return True
    return isinstance(e, TTransportException) and (
        e.type == TTransportException.TIMED_OUT or isinstance(getattr(e, "inner", None), (socket.timeout, TimeoutError)))


def default_client_name():
    """"<program>@<host>:<pid>", cut to MAX_CLIENT_NAME_BYTES."""
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    name = "%s@%s:%d" % (prog, socket.gethostname() or "unknown-host", os.getpid())
    return name.encode("utf-8")[:MAX_CLIENT_NAME_BYTES].decode("utf-8", "ignore")


def check_client_name(name):
    """Validate a session's client name (a str of at most MAX_CLIENT_NAME_BYTES UTF-8 bytes)."""
    if not isinstance(name, str):
        raise InvalidArgumentError("client_name must be a str, not %s" % type(name).__name__)
    n = len(name.encode("utf-8", "surrogatepass"))
    if n > MAX_CLIENT_NAME_BYTES:
        raise InvalidArgumentError("client_name is %d bytes, at most %d allowed" % (n, MAX_CLIENT_NAME_BYTES))
    return name


class Cell:
    """A connection to one cell: its replicas, the master guess, a pool of
    connections, and the calls that need no session. Thread-safe: any
    number of threads may use one Cell and its sessions at once.

    Args:
        addrs: the replicas, as a list of "host:port" or a comma-separated
            str. None: the CHUBBY_CELL environment variable, else
            127.0.0.1:7000. One replica is enough: the Cell learns the others
            from the cell (see ``replicas``).
        transport: "framed" (default) or "buffered" Thrift transport.
        connect_timeout: seconds to establish one connection (default 1).
        call_timeout: seconds one call that the cell answers at once may take
            (default 10); parked calls (KeepAlive, Acquire) get what they wait
            for plus this.
        client_name: the default name of this Cell's sessions in the cell's
            status (default "<program>@<host>:<pid>").
        tls: a TLSConfig (mutual TLS to a cell started with --tls-*; its
            certificate names this client's principal), or False for
            plaintext. None (the default): a TLSConfig from CHUBBY_TLS_CA,
            CHUBBY_TLS_CERT, CHUBBY_TLS_KEY and CHUBBY_TLS_SERVER_NAME when
            CHUBBY_TLS_CA is set (as the Go client reads them), else
            plaintext.

    Raises InvalidArgumentError for malformed arguments (before connecting:
    a Cell connects lazily, on its first call).
    """

    def __init__(self, addrs=None, *, transport="framed", connect_timeout=1.0, call_timeout=10.0,
                 client_name=None, tls=None):
        if addrs is None:
            env = os.environ.get(ENV_CELL, "").strip()
            try:
                addrs = parse_addrs(env) if env else [DEFAULT_ADDR]
            except InvalidArgumentError as e:
                raise InvalidArgumentError("%s: %s" % (ENV_CELL, e.message)) from None
        else:
            addrs = parse_addrs(addrs)
        if transport not in TRANSPORTS:
            raise InvalidArgumentError("transport must be one of %s, not %r" % (", ".join(TRANSPORTS), transport))
        self.connect_timeout = check_seconds("connect_timeout", connect_timeout)
        self.call_timeout = check_seconds("call_timeout", call_timeout)
        self.client_name = check_client_name(client_name) if client_name is not None else default_client_name()
        self.transport = transport
        if tls is None:
            tls = TLSConfig.from_env()
        elif tls is False:
            tls = None
        elif not isinstance(tls, TLSConfig):
            raise InvalidArgumentError("tls must be a TLSConfig, False or None, not %s" % type(tls).__name__)
        #: The TLSConfig of the connections, or None (plaintext).
        self.tls = tls
        self._pool = Pool(transport, self.connect_timeout, tls)
        self._master = Master(addrs, ask_master(self._pool), self.connect_timeout)
        self._mu = threading.Lock()
        self._closed = False
        self._sessions = set()

    # -- properties ---------------------------------------------------------

    @property
    def master_address(self):
        """The replica the next call goes to (the master, as far as the Cell knows)."""
        return self._master.addr()

    @property
    def replicas(self):
        """The replica addresses the Cell knows (the configured ones until the
        cell names its configuration's members)."""
        return self._master.replicas()

    @property
    def closed(self):
        """True once close() was called."""
        with self._mu:
            return self._closed

    # -- the call machinery -------------------------------------------------

    def _call(self, op, path, cls, fn, timeout=None, ctx=None):
        """Run fn(conn) at the master guess with the retries cls allows (see
        the module doc); return its result or raise a typed ChubbyError. An
        error raised after the attempts ran out on failures cls may retry
        has ``retryable_giveup`` set: sending the call again once a master is
        found is as safe as the retries were. timeout bounds one attempt
        (default call_timeout); ctx (a _ctx.CallCtx) bounds the whole call
        by its deadline and ends it when its Cancel token is cancelled."""
        timeout = self.call_timeout if timeout is None else timeout
        ctx = ctx or _ctx.NONE
        redirects = 0
        m = self._master
        m.maybe_refresh()
        for attempt in range(MAX_CALL_ATTEMPTS):
            if self.closed:
                raise CellClosedError("the Cell is closed", op=op, path=path)
            ctx.check(op, path)
            addr = m.addr()
            hinted = refused = False
            try:
                conn = self._pool.get(addr)
            except ConnectFailed as e:
                m.unreachable(addr)
                err = UnreachableError("cannot reach %s: %s" % (addr, e.err), op=op, path=path, address=addr)
                retry = True
            else:
                # Errors are turned into ours after the except clauses: the
                # generated ChubbyError is immutable, and an exception raised
                # while handling it would chain it (__context__), which
                # traceback handling then tries to modify.
                refusal = broken = None
                hook = None
                try:
                    conn.set_timeout(ctx.bound(timeout))
                    if ctx.cancel is not None:
                        hook = ctx.cancel._add(conn.abort)
                    v = fn(conn)
                except _wire.ttypes.ChubbyError as we:
                    refusal = we
                except TApplicationException as e:
                    conn.close()
                    broken = ProtocolError("%s answered a Thrift application error: %s" % (addr, e),
                                           op=op, path=path)
                except (TTransportException, TProtocolException, OSError, EOFError) as e:
                    conn.close()
                    if is_timeout(e):
                        err = CallTimeoutError("no reply from %s within %.3gs" % (addr, timeout),
                                               op=op, path=path, address=addr)
                        retry = cls == ONCE
                    else:
                        err = TransportError("connection to %s failed during the call: %s" % (addr, e),
                                             op=op, path=path, address=addr)
                        retry = cls in (SAFE, ONCE)
                    if retry and not ctx.ended():  # a cancel or the deadline says nothing of the replica
                        m.unreachable(addr)
                except BaseException:
                    conn.close()  # interrupted mid-call: what is left on it is unknown
                    raise
                else:
                    if ctx.cancel is not None and ctx.cancel.cancelled:
                        conn.close()  # perhaps aborted by the cancel after the reply came
                    else:
                        self._pool.put(conn)
                    return v
                finally:
                    if hook is not None:
                        ctx.cancel._remove(hook)
                if broken is None and refusal is None:
                    ctx.check(op, path)  # a cancel or the deadline, not the replica, ended the attempt
                if broken is not None:
                    raise broken
                if refusal is not None:
                    self._pool.put(conn)  # a refusal leaves the connection clean
                    err = errors.from_wire(refusal, op, path)
                    if err.code == errors.ErrorCode.NOT_MASTER:
                        retry, refused = True, True
                        hinted = m.redirect(addr, refusal.master_address)
                        log.debug("chubby: %s: NOT_MASTER from %s (hint %r, followed: %s)",
                                  op, addr, refusal.master_address, hinted)
                    elif err.code == errors.ErrorCode.UNAVAILABLE:
                        retry = cls in (SAFE, ONCE)
                    else:
                        raise err
            if not retry:
                log.debug("chubby: %s %s at %s failed; not retried: %s", op, path, addr, err)
                raise err
            ctx.check(op, path)
            if attempt + 1 >= MAX_CALL_ATTEMPTS:
                log.debug("chubby: %s %s failed; attempts used up: %s", op, path, err)
                err.retryable_giveup = True
                raise err
            resend_at = time.monotonic() + backoff_delay(CALL_BACKOFF_BASE, CALL_BACKOFF_MAX, attempt)
            multi = m.multi()
            known = m.last[1]
            if not hinted and multi:
                m.locate(ctx.left())  # nobody said where the master is: ask every replica
                ctx.check(op, path)
            loc_addr, loc_epoch = m.last
            if loc_addr and loc_epoch > known and redirects < MAX_QUICK_REDIRECTS:
                redirects += 1
                log.debug("chubby: %s: retrying at the new master %s (epoch %d)", op, loc_addr, loc_epoch)
                continue
            nxt = m.addr()
            if (nxt != addr or (refused and not hinted and multi)) and redirects < MAX_QUICK_REDIRECTS:
                redirects += 1
                log.debug("chubby: %s: retrying at %s after %s", op, nxt, err)
                continue
            log.debug("chubby: %s: retrying at %s after %s", op, nxt, err)
            if ctx.deadline is not None:
                resend_at = min(resend_at, ctx.deadline)
            hook = ctx.cancel._add(m.wake) if ctx.cancel is not None else None
            try:
                m.pause(resend_at, addr, refused, known,
                        stop=None if ctx.cancel is None else lambda: ctx.cancel.cancelled)
            finally:
                if hook is not None:
                    ctx.cancel._remove(hook)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- sessions ------------------------------------------------------------

    def session(self, *, client_name=None, grace_period=45.0, on_jeopardy=None, on_safe=None,
                on_expired=None, on_master_changed=None, cache=True, cache_max_entries=DEFAULT_CACHE_MAX_ENTRIES,
                timeout=None, cancel=None):
        """Create a session (CreateSession) and start its KeepAlive thread.

        Args:
            client_name: the session's name in the cell's status (default:
                the Cell's client_name).
            grace_period: seconds a session in jeopardy keeps looking for a
                master before it expires, counted from the end of its local
                lease (default 45, Chubby's).
            on_jeopardy(session), on_safe(session), on_expired(session, error),
            on_master_changed(session, epoch): callbacks, run one at a time,
                in order, on the session's callback thread (never on the
                KeepAlive thread, which they therefore cannot hold up).
            cache: cache file contents, Stats and directory listings
                (default True; see _cache.py: a cached read is never stale,
                and is served only while the session is safe).
            cache_max_entries: the nodes the session caches at most.
            timeout, cancel: bound CreateSession (see Handle.read).

        CreateSession is retried on NOT_MASTER, UNAVAILABLE and transport
        failures: a session created by an attempt whose reply was lost is
        never kept alive and ends after one lease. Returns a Session.
        """
        from .session import Session
        name = check_client_name(client_name) if client_name is not None else self.client_name
        grace = check_seconds("grace_period", grace_period)
        if not isinstance(cache, bool):
            raise InvalidArgumentError("cache must be True or False, not %r" % (cache,))
        if isinstance(cache_max_entries, bool) or not isinstance(cache_max_entries, int) or cache_max_entries < 1:
            raise InvalidArgumentError("cache_max_entries must be a positive int, not %r" % (cache_max_entries,))
        for cb_name, cb in (("on_jeopardy", on_jeopardy), ("on_safe", on_safe), ("on_expired", on_expired),
                            ("on_master_changed", on_master_changed)):
            if cb is not None and not callable(cb):
                raise InvalidArgumentError("%s must be callable" % cb_name)
        ctx = _ctx.CallCtx(timeout, cancel)
        sent = time.monotonic()  # the lease counts from before the request was sent
        r = self._call("create-session", "", SAFE,
                       lambda c: c.session.CreateSession(_wire.ttypes.CreateSessionRequest(
                           client_name=name, cache=True if cache else None)),
                       ctx=ctx)
        if r.session is None or r.lease_ms is None or r.lease_ms <= 0 or r.epoch is None:
            raise ProtocolError("CreateSession reply lacks session, lease_ms or epoch", op="create-session")
        s = Session(self, r.session, sent, r.lease_ms / 1000.0, r.epoch, grace,
                    on_jeopardy=on_jeopardy, on_safe=on_safe, on_expired=on_expired,
                    on_master_changed=on_master_changed, cache=cache_max_entries if cache else 0)
        with self._mu:
            closed = self._closed
            if not closed:
                self._sessions.add(s)
        if closed:
            s._end(CellClosedError("the Cell is closed"))
            raise CellClosedError("the Cell is closed", op="create-session")
        s._start()
        log.debug("chubby: session %d created (lease %d ms, epoch %d)", r.session, r.lease_ms, r.epoch)
        return s

    def _remove_session(self, s):
        with self._mu:
            self._sessions.discard(s)

    # -- calls without a session ----------------------------------------------

    def get_master(self, *, timeout=None, cancel=None):
        """Ask the cell where its master is (GetMaster, retried like a read);
        the answer's members become the known replicas. Returns MasterInfo."""
        sent_to = []

        def fn(c):
            sent_to.append(c.addr)
            return c.cell.GetMaster(_wire.ttypes.GetMasterRequest())

        r = self._call("get-master", "", SAFE, fn, ctx=_ctx.CallCtx(timeout, cancel))
        if not r.master_address or r.epoch is None:
            raise ProtocolError("GetMaster reply names no master", op="get-master")
        self._master.adopt(sent_to[-1], r.master_address, r.replicas)
        self._master.learned(r.master_address)
        return MasterInfo(address=r.master_address, epoch=r.epoch, master_id=r.master_id or "",
                          replicas=tuple(r.replicas or ()))

    def status(self, *, timeout=None, cancel=None):
        """The cell's status (GetStatus), as CellStatus."""
        r = self._call("status", "", SAFE, lambda c: c.cell.GetStatus(), ctx=_ctx.CallCtx(timeout, cancel))
        reps = tuple(ReplicaInfo(id=x.id or "", address=x.address or "",
                                 role=_wire.ttypes.ReplicaRole._VALUES_TO_NAMES.get(x.role, str(x.role)),
                                 committed_op=x.committed_op or 0) for x in (r.replicas or ()))
        return CellStatus(cell=r.cell or "", master_id=r.master_id or "", master_address=r.master_address or "",
                          epoch=r.epoch or 0, replicas=reps, sessions=r.sessions or 0, nodes=r.nodes or 0,
                          handles=r.handles or 0, locks_held=r.locks_held or 0, version=r.version or "")

    def who_am_i(self, *, timeout=None, cancel=None):
        """Whom the cell takes this client for: an Identity (principal,
        tls), the principal being its certificate's common name ("anonymous"
        without a client certificate), tls whether the call came over TLS."""
        r = self._call("whoami", "", SAFE, lambda c: c.cell.WhoAmI(), ctx=_ctx.CallCtx(timeout, cancel))
        if r.principal is None:
            raise ProtocolError("WhoAmI reply lacks the principal", op="whoami")
        return Identity(principal=r.principal, tls=bool(r.tls))

    #: The Go client's and chubbyfs's name of who_am_i.
    whoami = who_am_i

    def check_sequencer(self, seq, *, timeout=None, cancel=None):
        """Check a lock's sequencer (a Sequencer or its printable form) with
        the cell, as a server receiving a lock holder's request does.
        Returns (valid, reason): reason says why not when not valid."""
        if isinstance(seq, str):
            seq = Sequencer.parse(seq)
        elif not isinstance(seq, Sequencer):
            raise InvalidArgumentError("check_sequencer wants a Sequencer or its printable form")
        req = _wire.ttypes.CheckSequencerRequest(sequencer=_wire.sequencer_to_wire(seq))
        r = self._call("check-sequencer", seq.path, SAFE, lambda c: c.lock.CheckSequencer(req),
                       ctx=_ctx.CallCtx(timeout, cancel))
        return bool(r.valid), r.reason or ""

    def remove_member(self, replica_id, *, timeout=None, cancel=None):
        """Ask the master to take the replica replica_id (its id as
        ``chubbyfs members`` shows it) out of the cell's configuration, an
        operator's forced removal (the change_acl right on "/" when the
        cell has ACLs), and return the log index of the configuration
        change once it has committed. NotFoundError: no such member;
        InvalidArgumentError: a malformed id or the last voter;
        UnavailableError: another change is in progress (retry) — or, with
        a message starting "outcome unknown: ", the change was proposed but
        is not known committed, and may still take effect (status() shows
        whether it did), as may a call whose reply was lost. Sent again only
        when the earlier attempt certainly did nothing. The Cell's replica
        list follows at its next call."""
        if not isinstance(replica_id, str) or not replica_id:
            raise InvalidArgumentError("replica_id must be a non-empty str, not %r" % (replica_id,),
                                       op="remove-member")
        req = _wire.ttypes.RemoveMemberRequest(id=replica_id)
        r = self._call("remove-member", replica_id, UNSENT, lambda c: c.cell.RemoveMember(req),
                       ctx=_ctx.CallCtx(timeout, cancel))
        self._master.refresh_soon()
        if r.index is None:
            raise ProtocolError("RemoveMember reply lacks the index", op="remove-member", path=replica_id)
        return r.index

    def get_timestamps(self, count=1, *, timeout=None, cancel=None):
        """count (1..MAX_TIMESTAMPS_PER_CALL) strictly increasing timestamps
        from the cell's oracle, each larger than every one handed out before
        the call; returns them as a range. Not retried after a lost reply
        (a retry is harmless but would skip the lost ones)."""
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_TIMESTAMPS_PER_CALL:
            raise InvalidArgumentError("count must be an int in 1..%d, not %r" % (MAX_TIMESTAMPS_PER_CALL, count))
        r = self._call("timestamps", "", UNSENT,
                       lambda c: c.oracle.GetTimestamps(_wire.ttypes.GetTimestampsRequest(count=count)),
                       ctx=_ctx.CallCtx(timeout, cancel))
        if r.first is None or r.count != count:
            raise ProtocolError("GetTimestamps answered %r timestamps, asked %d" % (r.count, count), op="timestamps")
        return range(r.first, r.first + r.count)

    # -- lifetime ------------------------------------------------------------

    def close(self):
        """Close every session of this Cell (CloseSession) and the
        connections. Later calls raise CellClosedError. Idempotent."""
        with self._mu:
            if self._closed:
                return
            sessions = list(self._sessions)
        for s in sessions:
            try:
                s.close()
            except ChubbyError as e:
                log.debug("chubby: closing session %d: %s", s.id, e)
        with self._mu:
            self._closed = True
            left = list(self._sessions)
        for s in left:  # created meanwhile
            s._end(CellClosedError("the Cell is closed"))
        self._master.close()
        self._pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "<chubbycell.Cell master=%s replicas=%s>" % (self.master_address, self.replicas)
