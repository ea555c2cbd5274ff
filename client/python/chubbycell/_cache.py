"""A session's cache of file contents, Stats and directory listings, as the
Go client's (client/cache.go).

The master keeps in memory which sessions cache which node and, before a
change to a node commits, sends each of them an invalidation on its
KeepAlive and waits until the next KeepAlive acknowledges it (or the
session's lease has run out). So the cache is filled only from replies the
cell marked cacheable, served only while the session is safe (its local
lease runs, so the master still waits for its acknowledgements), flushed
when the session goes into jeopardy, is safe again, or hears of a new
master (which knows no cachers), and its entries are dropped before the
KeepAlive that acknowledges their invalidation is sent.

gen is bumped by every invalidation, drop and flush: a reply is cached only
if gen did not move between sending the request and receiving the reply,
so an invalidation that overtook a reply is never undone by it.
"""

import dataclasses
import threading
import time

__all__ = ["Cache", "CacheStats", "DEFAULT_CACHE_MAX_ENTRIES"]

#: Nodes one session caches unless told otherwise (the cell's per-session
#: bound is the same by default); past it reads are not cached.
DEFAULT_CACHE_MAX_ENTRIES = 10000


@dataclasses.dataclass(frozen=True)
class CacheStats:
    """A session's cache counts (Session.cache_stats): hits and misses of
    the reads that may be cached, the nodes cached now (entries), and the
    invalidated nodes and flushes received (invalidations)."""
    hits: int
    misses: int
    entries: int
    invalidations: int

    @property
    def hit_rate(self):
        """hits / (hits + misses), 0 before any lookup."""
        n = self.hits + self.misses
        return self.hits / n if n else 0.0


class _Entry:
    __slots__ = ("instance", "filled", "file", "listing")

    def __init__(self, instance):
        self.instance = instance
        self.filled = 0.0
        self.file = None      # (content, Stat)
        self.listing = None   # [DirEntry]


def _parent(p):
    i = p.rfind("/")
    return "/" if i <= 0 else p[:i]


def _aged(st, age):
    """st with its lock-delay remaining reduced by age seconds: the only
    Stat field that moves with time rather than with changes."""
    if st is None or st.lock is None or not st.lock.delay_remaining_ms:
        return st
    left = max(0, st.lock.delay_remaining_ms - int(age * 1000))
    return dataclasses.replace(st, lock=dataclasses.replace(st.lock, delay_remaining_ms=left))


class Cache:
    """One session's cache, keyed by path (and the node's instance). Thread-safe."""

    def __init__(self, max_entries):
        self.max = max_entries
        self._mu = threading.Lock()
        self._entries = {}
        self._gen = 0
        self._acked = 0
        self._hits = self._misses = self._invalidations = 0

    def generation(self):
        """The current gen, to pass to fill_* with the reply."""
        with self._mu:
            return self._gen

    def _entry_locked(self, path, instance, gen):
        if self._gen != gen:
            return None
        e = self._entries.get(path)
        if e is not None and e.instance != instance:
            del self._entries[path]
            e = None
        if e is None:
            if len(self._entries) >= self.max:
                return None
            e = self._entries[path] = _Entry(instance)
        e.filled = time.monotonic()
        return e

    def fill_file(self, path, instance, gen, content, st):
        """Cache a file's content and Stat read with gen."""
        with self._mu:
            e = self._entry_locked(path, instance, gen)
            if e is not None:
                e.file = (content, st)

    def fill_dir(self, path, instance, gen, listing):
        """Cache a directory's complete listing read with gen."""
        with self._mu:
            e = self._entry_locked(path, instance, gen)
            if e is not None:
                e.listing = list(listing)

    def miss(self):
        with self._mu:
            self._misses += 1

    def file(self, path, instance, count_miss=True):
        """(content, Stat) cached for the node, or None."""
        with self._mu:
            e = self._entries.get(path)
            if e is None or e.file is None or e.instance != instance:
                if count_miss:
                    self._misses += 1
                return None
            self._hits += 1
            (content, st), filled = e.file, e.filled
        return content, _aged(st, time.monotonic() - filled)

    def dir(self, path, instance):
        """The cached listing of the directory, or None."""
        with self._mu:
            e = self._entries.get(path)
            if e is None or e.listing is None or e.instance != instance:
                self._misses += 1
                return None
            self._hits += 1
            listing, filled = e.listing, e.filled
        age = time.monotonic() - filled
        return [dataclasses.replace(d, stat=_aged(d.stat, age)) for d in listing]

    def drop(self, path):
        """Forget path and its parent's listing (a change of this client)."""
        with self._mu:
            self._gen += 1
            self._entries.pop(path, None)
            self._entries.pop(_parent(path), None)

    def drop_tree(self, path):
        """Forget path, everything under it and its ancestors' listings (a delete of this client)."""
        prefix = path.rstrip("/") + "/"
        with self._mu:
            self._gen += 1
            for p in list(self._entries):
                if p == path or p.startswith(prefix) or path.startswith(p.rstrip("/") + "/"):
                    del self._entries[p]

    def flush(self):
        """Forget everything (jeopardy, a new master, the session's end)."""
        with self._mu:
            self._gen += 1
            if self._entries:
                self._invalidations += 1
            self._entries.clear()

    def apply(self, grant):
        """Carry out a KeepAlive reply's invalidations (a wire LeaseGrant)
        and record their seq for the next KeepAlive's acknowledgement."""
        if not grant.invalidation_seq:
            return
        with self._mu:
            self._gen += 1
            if grant.invalidate_all:
                self._entries.clear()
                self._invalidations += 1
                # A flush subsumes every invalidation before it, and a new
                # master's first reply is one: its seqs may be below the
                # old master's.
                self._acked = grant.invalidation_seq
            else:
                for p in grant.invalidations or ():
                    self._entries.pop(p, None)
                    self._invalidations += 1
                self._acked = max(self._acked, grant.invalidation_seq)

    def ack_seq(self):
        """The acked_invalidation for the next KeepAlive."""
        with self._mu:
            return self._acked

    def stats(self):
        with self._mu:
            return CacheStats(hits=self._hits, misses=self._misses, entries=len(self._entries),
                              invalidations=self._invalidations)
