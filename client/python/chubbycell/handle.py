"""Handle: an open node — a session's reference to one instance of the node
at its path. Once the node is deleted (or deleted and re-created), calls on
the handle raise HandleInvalidError. Thread-safe.
"""

import threading
import time

from . import _ctx, _wire
from .cell import ONCE, SAFE, UNSENT
from .errors import HandleInvalidError, InvalidArgumentError, ProtocolError, TimedOutError, UnavailableError
from .session import HANDLE_EVENT_BUFFER, _EventQueue

from .types import (ACLNames, DirEntry, LockMode, MAX_ACQUIRE_WAIT_MS, MAX_LOCK_DELAY_MS, check_content, check_flag,
                    check_seconds, ms_ceil)

__all__ = ["Handle"]

# READDIR_ATTEMPTS bounds how often readdir starts a paged listing again
# because the directory's children changed between its pages.
READDIR_ATTEMPTS = 8


def _lock_delay_ms(lock_delay):
    """None → unset (the cell's default, 15 s); else seconds in 0..60 → ms."""
    if lock_delay is None:
        return None
    check_seconds("lock_delay", lock_delay, lo=0.0, lo_open=False, hi=MAX_LOCK_DELAY_MS / 1000.0)
    return ms_ceil(lock_delay)


class Handle:
    """An open node (made by Session.open).

    Attributes:
        session: the Session it belongs to.
        path: the node's path (with the counter, for a node created sequential).
        created: True if the open created the node.

    Use it as a context manager to close it on exit.
    """

    def __init__(self, session, wire_handle, created, stat, event_mask, on_event):
        self.session = session
        self._wire = wire_handle
        self.path = wire_handle.path
        self.created = created
        self._mu = threading.Lock()
        self._stat = stat
        self._events = _EventQueue(HANDLE_EVENT_BUFFER)
        self._on_event = on_event
        self._closed = False
        if not event_mask:
            self._events.close()

    def __repr__(self):
        return "<chubbycell.Handle %s id=%d session=%d>" % (self.path, self._wire.id, self.session.id)

    @property
    def last_stat(self):
        """The latest Stat the client has seen for the node (from open or a
        later stat, read_with_stat or write on this handle). It makes no call,
        so it may be out of date; stat() asks the cell."""
        with self._mu:
            return self._stat

    def _remember(self, st):
        with self._mu:
            self._stat = st
        return st

    def _req(self, **kw):
        return _wire.ttypes.HandleRequest(handle=self._wire, **kw)

    # -- reading ---------------------------------------------------------------

    def _check_open(self, op):
        if self._closed:
            raise HandleInvalidError("the handle was closed", op=op, path=self.path)

    def read_with_stat(self, *, timeout=None, cancel=None):
        """Read the file's content and metadata in one call: (bytes, Stat).
        With the session's cache on, a cached copy answers while the
        session is safe (never stale: the master invalidates it before the
        file changes), and a miss is cached when the cell allows it."""
        ctx = _ctx.CallCtx(timeout, cancel)
        s = self.session
        cache = s._cache
        usable = s._cache_usable()
        if usable:
            self._check_open("read")
            hit = cache.file(self.path, self._wire.instance)
            if hit is not None:
                self._remember(hit[1])
                return hit
        elif cache is not None:
            cache.miss()
        gen = cache.generation() if cache is not None else 0
        req = self._req(cache=True if usable else None)
        r = s._call("read", self.path, SAFE, lambda c: c.fs.GetContentsAndStat(req), ctx=ctx)
        if r.content is None:
            raise ProtocolError("GetContentsAndStat reply lacks the content", op="read", path=self.path)
        st = self._remember(_wire.stat(r.stat))
        content = bytes(r.content)
        if r.cacheable and s._cache_usable():
            cache.fill_file(self.path, self._wire.instance, gen, content, st)
        return content, st

    def read(self, *, timeout=None, cancel=None):
        """Read the file's content (bytes)."""
        return self.read_with_stat(timeout=timeout, cancel=cancel)[0]

    def stat(self, *, timeout=None, cancel=None):
        """Read the node's metadata (a Stat); a file's from the cache when
        it holds it (see read_with_stat)."""
        s = self.session
        if s._cache_usable():
            self._check_open("stat")
            hit = s._cache.file(self.path, self._wire.instance, count_miss=False)
            if hit is not None:
                return self._remember(hit[1])
        req = self._req()
        return self._remember(_wire.stat(self.session._call("stat", self.path, SAFE, lambda c: c.fs.GetStat(req),
                                                            ctx=_ctx.CallCtx(timeout, cancel))))

    def readdir(self, *, timeout=None, cancel=None):
        """List the directory's children, sorted by name (a list of
        DirEntry): all of them. A directory too big for one reply is read in
        pages (ReadDirRequest.after); the set of names is one snapshot — the
        directory's content generation is the same on every page, or the
        listing starts again, at most READDIR_ATTEMPTS times, then
        UnavailableError — and each entry's Stat is as of its page. timeout
        bounds the whole listing, all pages. With the session's cache on, a
        listing of one page is cached as read_with_stat's content is."""
        ctx = _ctx.CallCtx(timeout, cancel)
        s = self.session
        cache = s._cache
        usable = s._cache_usable()
        if usable:
            self._check_open("readdir")
            hit = cache.dir(self.path, self._wire.instance)
            if hit is not None:
                return hit
        elif cache is not None:
            cache.miss()
        cgen = cache.generation() if cache is not None else 0
        for attempt in range(READDIR_ATTEMPTS):
            out, gen, after = [], None, None
            while True:
                r = self._readdir_page(after, ctx, cache=usable and attempt == 0 and after is None)
                if gen is None:
                    gen = r.content_generation
                elif r.content_generation != gen:
                    break  # a child was added or removed between pages
                out.extend(r.entries)
                if not r.more:
                    listing = [DirEntry(name=d.name, stat=_wire.stat(d.stat)) for d in out]
                    if after is None and r.cacheable and s._cache_usable():
                        cache.fill_dir(self.path, self._wire.instance, cgen, listing)
                    return listing
                if not r.entries:
                    raise ProtocolError("ReadDir page says more but holds no entry", op="readdir", path=self.path)
                after = r.entries[-1].name
        raise UnavailableError("the directory changed during every attempt to list it; retry",
                               op="readdir", path=self.path)

    # _readdir_limit: entries per ReadDir page asked for (None: the cell's
    # MAX_READDIR_ENTRIES); tests lower it to page small directories.
    _readdir_limit = None

    def _readdir_page(self, after, ctx, cache=False):
        req = _wire.ttypes.ReadDirRequest(handle=self._wire, after=after, limit=self._readdir_limit,
                                          cache=True if cache else None)
        r = self.session._call("readdir", self.path, SAFE, lambda c: c.fs.ReadDir(req), ctx=ctx)
        if r.entries is None:
            raise ProtocolError("ReadDir reply lacks its entries", op="readdir", path=self.path)
        for d in r.entries:
            if d is None or not d.name:
                raise ProtocolError("ReadDir reply has an entry without a name", op="readdir", path=self.path)
        return r

    # -- writing ---------------------------------------------------------------

    def write(self, data, *, if_generation=None, timeout=None, cancel=None):
        """Replace the file's content (the handle must be READ_WRITE) and
        return the new Stat. With if_generation it is a compare-and-swap:
        GenerationMismatchError unless the content generation is still that.
        Exactly-once: resent after a lost reply or a failover, it is applied
        once."""
        data = check_content("data", data)
        if if_generation is not None and (isinstance(if_generation, bool) or not isinstance(if_generation, int)
                                          or if_generation < 0):
            raise InvalidArgumentError("if_generation must be a non-negative int, not %r" % (if_generation,),
                                       op="write", path=self.path)
        ctx = _ctx.CallCtx(timeout, cancel)
        req = _wire.ttypes.SetContentsRequest(handle=self._wire, content=data, expected_generation=if_generation)
        with self.session._changing(self.path):
            st = self.session._call("write", self.path, ONCE, lambda c: c.fs.SetContents(req), rid_req=req, ctx=ctx)
        return self._remember(_wire.stat(st))

    def delete(self, *, recursive=False, timeout=None, cancel=None):
        """Delete the node (the handle must be READ_WRITE); a non-empty
        directory only when recursive. Exactly-once."""
        check_flag("recursive", recursive)
        ctx = _ctx.CallCtx(timeout, cancel)
        req = _wire.ttypes.DeleteRequest(handle=self._wire, recursive=True if recursive else None)
        with self.session._changing(self.path, tree=True):
            self.session._call("delete", self.path, ONCE, lambda c: c.fs.Delete(req), rid_req=req, ctx=ctx)

    def set_acl(self, acl, *, if_acl_generation=None, timeout=None, cancel=None):
        """Replace the node's ACL names with acl (an ACLNames) and return the
        new Stat (its acl_generation is one more). The session's principal
        needs the node's change_acl right (PermissionDeniedError). With
        if_acl_generation it is a compare-and-swap: GenerationMismatchError
        unless the node's acl_generation is still that. Exactly-once."""
        if not isinstance(acl, ACLNames):
            raise InvalidArgumentError("acl must be an ACLNames, not %s" % type(acl).__name__,
                                       op="set-acl", path=self.path)
        if if_acl_generation is not None and (isinstance(if_acl_generation, bool)
                                              or not isinstance(if_acl_generation, int) or if_acl_generation < 0):
            raise InvalidArgumentError("if_acl_generation must be a non-negative int, not %r" % (if_acl_generation,),
                                       op="set-acl", path=self.path)
        ctx = _ctx.CallCtx(timeout, cancel)
        req = _wire.ttypes.SetACLRequest(handle=self._wire, acl=_wire.acl_to_wire(acl),
                                         expected_acl_generation=if_acl_generation)
        with self.session._changing(self.path):
            st = self.session._call("set-acl", self.path, ONCE, lambda c: c.fs.SetACL(req), rid_req=req, ctx=ctx)
        return self._remember(_wire.stat(st))

    # -- locks -------------------------------------------------------------------

    def acquire(self, *, shared=False, timeout=None, lock_delay=None, cancel=None):
        """Take the node's lock, exclusive (or shared), waiting in FIFO order
        behind other waiters; return its Sequencer.

        timeout: seconds to wait (None: as long as it takes, in turns of at
        most MAX_ACQUIRE_WAIT_MS); TimedOutError when it passes.
        lock_delay: seconds (0..60) the lock stays unavailable to others if
        this session ends while holding it without releasing it (None: the
        cell's default, 15 s; 0: none).

        Acquire waits at the cell, so it is sent again only when the earlier
        attempt certainly did nothing (NOT_MASTER, no connection); a resend
        by a handle that already holds the lock gets its sequencer.

        cancel: a Cancel token that ends the wait (CallCancelledError). A
        cancelled acquire, or one whose reply was lost, may still have been
        granted: the handle's lock state is then unknown; release() it
        (LockNotHeldError is harmless) or close the handle to be sure."""
        check_flag("shared", shared)
        check_seconds("timeout", timeout, hi=None, allow_none=True)
        delay = _lock_delay_ms(lock_delay)
        mode = LockMode.SHARED if shared else LockMode.EXCLUSIVE
        deadline = None if timeout is None else time.monotonic() + timeout
        ctx = _ctx.CallCtx(None, cancel)
        while True:
            if deadline is None:
                wait_ms = MAX_ACQUIRE_WAIT_MS
            else:
                wait_ms = max(1, min(MAX_ACQUIRE_WAIT_MS, ms_ceil(deadline - time.monotonic())))
            req = _wire.ttypes.AcquireRequest(handle=self._wire, mode=int(mode), wait_ms=wait_ms,
                                              lock_delay_ms=delay)
            try:
                # The cell parks the call for up to wait_ms.
                with self.session._changing(self.path):
                    r = self.session._call("acquire", self.path, UNSENT, lambda c: c.lock.Acquire(req),
                                           timeout=wait_ms / 1000.0 + self.session.cell.call_timeout, ctx=ctx)
            except TimedOutError:
                if deadline is not None and time.monotonic() >= deadline - 0.001:
                    raise
                continue  # another turn
            return _wire.sequencer(r)

    def try_acquire(self, *, shared=False, lock_delay=None, timeout=None, cancel=None):
        """Take the node's lock if it is available now; LockHeldError
        otherwise. Returns its Sequencer. Exactly-once."""
        check_flag("shared", shared)
        delay = _lock_delay_ms(lock_delay)
        mode = LockMode.SHARED if shared else LockMode.EXCLUSIVE
        ctx = _ctx.CallCtx(timeout, cancel)
        req = _wire.ttypes.TryAcquireRequest(handle=self._wire, mode=int(mode), lock_delay_ms=delay)
        with self.session._changing(self.path):
            r = self.session._call("try-acquire", self.path, ONCE, lambda c: c.lock.TryAcquire(req), rid_req=req,
                                   ctx=ctx)
        return _wire.sequencer(r)

    def release(self, *, timeout=None, cancel=None):
        """Release the lock the handle holds (LockNotHeldError if none). Exactly-once."""
        ctx = _ctx.CallCtx(timeout, cancel)
        req = self._req()
        with self.session._changing(self.path):
            self.session._call("release", self.path, ONCE, lambda c: c.lock.Release(req), rid_req=req, ctx=ctx)

    def sequencer(self, *, timeout=None, cancel=None):
        """The Sequencer of the lock the handle holds (LockNotHeldError if none)."""
        ctx = _ctx.CallCtx(timeout, cancel)
        req = self._req()
        return _wire.sequencer(self.session._call("get-sequencer", self.path, SAFE,
                                                  lambda c: c.lock.GetSequencer(req), ctx=ctx))

    # -- events ----------------------------------------------------------------------

    def _deliver(self, ev):
        """Called by the session's KeepAlive thread; never blocks."""
        if self._on_event is not None:
            self.session._dispatch.submit(self._on_event, ev)
        else:
            self._events.push(ev)

    def events(self, timeout=None):
        """Iterate over the handle's events (the event_mask open asked for),
        in the order the cell applied the changes, each once (also across a
        failover), and EVENTS_LOST when the cell dropped some. The iteration
        ends when the handle is closed, after HANDLE_INVALID (the node was
        deleted: nothing follows), when the session ends — or, with timeout,
        when no event comes within timeout seconds. It is empty for a handle
        opened without an event mask or with on_event. At most
        HANDLE_EVENT_BUFFER undelivered events are kept; past it the oldest
        go (dropped_events counts them)."""
        check_seconds("timeout", timeout, allow_none=True)
        while True:
            ev = self._events.get(timeout)
            if ev is None:
                return
            yield ev

    @property
    def dropped_events(self):
        """How many events were dropped because nobody read them in time."""
        return self._events.dropped

    # -- lifetime --------------------------------------------------------------------------

    def close(self, *, timeout=None, cancel=None):
        """Close the handle: a lock it holds is released, a pending acquire on
        it fails, and its events end. Exactly-once."""
        ctx = _ctx.CallCtx(timeout, cancel)
        req = _wire.ttypes.CloseRequest(handle=self._wire)
        try:
            with self.session._changing(self.path):  # a lock it held is released
                self.session._call("close", self.path, ONCE, lambda c: c.fs.Close(req), rid_req=req, ctx=ctx)
            self._closed = True
        except HandleInvalidError:
            self._closed = True
            self.session._unwatch(self)  # the cell has no such handle: closed all the same
            raise
        self.session._unwatch(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        """Close the handle, unless its session has ended (then nothing is
        left to close) or it is closed already (HANDLE_INVALID: closed
        before, or its node is gone)."""
        if self.session.error is None:
            try:
                self.close()
            except HandleInvalidError:
                pass
        return False
