"""chubbycell.aio — the library for asyncio programs.

This is not a native asyncio client: it wraps the threaded one. Every
coroutine runs the threaded call on a thread of the AsyncCell's own thread
pool (``loop.run_in_executor``), and the session's KeepAlive loop stays on
its own thread, as in the threaded library; so the behaviour (retries,
jeopardy, exactly-once request ids, events) is the threaded library's,
unchanged. What it costs: each call in progress occupies a pool thread
(``max_workers``, default 64, bounds how many run at once — a parked
``acquire`` holds its thread while it waits), and a call pays a thread
hand-off (tens of microseconds) on top of its round trip.

Cancellation works: cancelling the task awaiting a call cancels the call's
:class:`~chubbycell.Cancel` token, which shuts down the connection the call
is waiting on, and the coroutine raises ``asyncio.CancelledError`` once the
thread has let go of the call (promptly: it does not wait for the cell).
As with any cancelled call, whether a call that changes the cell took
effect is unknown; a cancelled ``acquire`` may still have been granted
(release or close the handle). ``asyncio.wait_for`` and ``asyncio.timeout``
therefore bound calls too; so does each call's ``timeout=``.

Usage::

    import asyncio
    from chubbycell import aio

    async def main():
        async with aio.AsyncCell("127.0.0.1:7000") as cell:
            async with await cell.session() as s:
                async with s.lock("/locks/nightly") as held:
                    print("holding", held.sequencer)

    asyncio.run(main())
"""

import asyncio
import concurrent.futures
import contextlib
import functools

from ._ctx import Cancel
from .cell import Cell
from .types import CreateMode

__all__ = ["AsyncCell", "AsyncSession", "AsyncHandle"]

#: Threads of an AsyncCell's pool unless told otherwise.
DEFAULT_MAX_WORKERS = 64


class _Runner:
    """Runs threaded calls on a pool and turns task cancellation into the call's."""

    def __init__(self, max_workers):
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers,
                                                          thread_name_prefix="chubbycell-aio")

    async def call(self, fn, *args, cancellable=True, **kw):
        """await fn(*args, **kw) run on the pool; with cancellable, given a
        Cancel token (cancel=) that a cancelled task cancels."""
        token = None
        if cancellable:
            token = Cancel()
            kw["cancel"] = token
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self.pool, functools.partial(fn, *args, **kw))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            if token is not None:
                token.cancel()
            # Let the thread finish the call (the cancel ends it at once)
            # so that nothing runs on after the task is gone.
            try:
                await fut
            except BaseException:
                pass
            raise

    def close(self):
        self.pool.shutdown(wait=False)


class AsyncCell:
    """The asyncio form of :class:`~chubbycell.Cell`: the same arguments
    (it makes one; ``cell`` is it), plus max_workers, the threads that run
    its calls. Use ``async with`` to close it."""

    def __init__(self, addrs=None, *, max_workers=DEFAULT_MAX_WORKERS, **kw):
        self.cell = Cell(addrs, **kw)
        self._run = _Runner(max_workers)

    async def session(self, **kw):
        """Cell.session's arguments; returns an AsyncSession."""
        s = await self._run.call(self.cell.session, **kw)
        return AsyncSession(s, self._run)

    async def status(self, **kw):
        return await self._run.call(self.cell.status, **kw)

    async def get_master(self, **kw):
        return await self._run.call(self.cell.get_master, **kw)

    async def who_am_i(self, **kw):
        return await self._run.call(self.cell.who_am_i, **kw)

    whoami = who_am_i

    async def check_sequencer(self, seq, **kw):
        return await self._run.call(self.cell.check_sequencer, seq, **kw)

    async def remove_member(self, replica_id, **kw):
        return await self._run.call(self.cell.remove_member, replica_id, **kw)

    async def get_timestamps(self, count=1, **kw):
        return await self._run.call(self.cell.get_timestamps, count, **kw)

    async def close(self):
        """Close the Cell (its sessions first) and the pool."""
        await self._run.call(self.cell.close, cancellable=False)
        self._run.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
        return False


class AsyncSession:
    """The asyncio form of :class:`~chubbycell.Session` (``session`` is
    the threaded one: its state, id and epoch are read from it)."""

    def __init__(self, session, runner):
        self.session = session
        self._run = runner

    @property
    def id(self):
        return self.session.id

    @property
    def state(self):
        return self.session.state

    def cache_stats(self):
        """Session.cache_stats (no call: it is answered at once)."""
        return self.session.cache_stats()

    async def open(self, path, **kw):
        """Session.open's arguments; returns an AsyncHandle."""
        h = await self._run.call(self.session.open, path, **kw)
        return AsyncHandle(h, self._run)

    async def mkdir(self, path, **kw):
        return await self._run.call(self.session.mkdir, path, **kw)

    async def create_file(self, path, content=b"", **kw):
        return await self._run.call(self.session.create_file, path, content, **kw)

    async def multi(self, compares=(), ops=(), **kw):
        return await self._run.call(self.session.multi, compares, ops, **kw)

    @contextlib.asynccontextmanager
    async def lock(self, path, *, shared=False, timeout=None, lock_delay=None):
        """``async with s.lock(path) as held:`` as Session.lock; the lock
        is released and the handle closed on exit."""
        h = await self.open(path, create=CreateMode.OPEN_OR_CREATE)
        try:
            seq = await h.acquire(shared=shared, timeout=timeout, lock_delay=lock_delay)
        except BaseException:
            await self._run.call(h.handle.close, cancellable=False)  # also ends a granted lock
            raise
        from .session import HeldLock
        try:
            yield HeldLock(handle=h, sequencer=seq)
        finally:
            try:
                await self._run.call(h.handle.release, cancellable=False)
            finally:
                await self._run.call(h.handle.close, cancellable=False)

    async def close(self):
        await self._run.call(self.session.close, cancellable=False)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
        return False


class AsyncHandle:
    """The asyncio form of :class:`~chubbycell.Handle` (``handle`` is the
    threaded one)."""

    def __init__(self, handle, runner):
        self.handle = handle
        self._run = runner

    @property
    def path(self):
        return self.handle.path

    @property
    def last_stat(self):
        return self.handle.last_stat

    async def read(self, **kw):
        return await self._run.call(self.handle.read, **kw)

    async def read_with_stat(self, **kw):
        return await self._run.call(self.handle.read_with_stat, **kw)

    async def stat(self, **kw):
        return await self._run.call(self.handle.stat, **kw)

    async def readdir(self, **kw):
        return await self._run.call(self.handle.readdir, **kw)

    async def write(self, data, **kw):
        return await self._run.call(self.handle.write, data, **kw)

    async def delete(self, **kw):
        return await self._run.call(self.handle.delete, **kw)

    async def set_acl(self, acl, **kw):
        return await self._run.call(self.handle.set_acl, acl, **kw)

    async def acquire(self, **kw):
        return await self._run.call(self.handle.acquire, **kw)

    async def try_acquire(self, **kw):
        return await self._run.call(self.handle.try_acquire, **kw)

    async def release(self, **kw):
        return await self._run.call(self.handle.release, **kw)

    async def sequencer(self, **kw):
        return await self._run.call(self.handle.sequencer, **kw)

    async def events(self):
        """``async for ev in h.events():`` the handle's events, as
        Handle.events (it ends when the handle is closed, after
        HANDLE_INVALID, or when the session ends). An event taken while the
        task was being cancelled is put back, not lost."""
        q = self.handle._events
        while True:
            fut = asyncio.get_running_loop().run_in_executor(self._run.pool, q.get, _EVENT_POLL)
            try:
                ev = await asyncio.shield(fut)
            except asyncio.CancelledError:
                try:
                    ev = await fut
                except BaseException:
                    ev = None
                if ev is not None:
                    q.unget(ev)
                raise
            if ev is None:
                if q.drained():
                    return
                continue
            yield ev

    async def close(self, **kw):
        return await self._run.call(self.handle.close, **kw)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self._run.call(self.handle.__exit__, None, None, None, cancellable=False)
        return False


# How long one wait for an event occupies a pool thread before it looks again.
_EVENT_POLL = 0.5
