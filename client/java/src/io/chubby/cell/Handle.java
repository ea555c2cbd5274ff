package io.chubby.cell;

import chubby.ErrorCode;
import chubby.LockMode;
import chubby.chubbyConstants;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;

/**
 * An open node: a session's reference to one instance of the node at its
 * path ({@link Session#open(String, OpenOptions)}). If the node is deleted
 * (and perhaps re-created), calls on the handle fail with HANDLE_INVALID.
 * Calls that change the cell are exactly-once (see {@link Session}).
 * Thread-safe.
 */
public final class Handle implements AutoCloseable {
    private final Session s;
    private final chubby.Handle h;
    private final boolean created;
    private final EventListener listener;
    private final LinkedBlockingQueue<Event> events = new LinkedBlockingQueue<>(Session.HANDLE_EVENT_BUFFER);
    private final Object mu = new Object();
    private Stat stat;
    private long dropped;
    private boolean eventsClosed;
    private volatile boolean closed;

    Handle(Session s, chubby.Handle h, boolean created, Stat stat, boolean watching, EventListener listener) {
        this.s = s;
        this.h = h;
        this.created = created;
        this.stat = stat;
        this.listener = listener;
        this.eventsClosed = !watching;
    }

    long wireId() {
        return h.getId();
    }

    /**
     * The path of the node (with the counter, for a node created sequential).
     *
     * @return the path
     */
    public String path() {
        return h.getPath();
    }

    /**
     * The session the handle belongs to.
     *
     * @return the session
     */
    public Session session() {
        return s;
    }

    /**
     * Whether the open created the node.
     *
     * @return true if it did
     */
    public boolean created() {
        return created;
    }

    /**
     * The latest metadata this handle has seen (from the open, or a later
     * read, stat or write on it); it makes no call, so it may be out of date.
     *
     * @return the metadata
     */
    public Stat lastStat() {
        synchronized (mu) {
            return stat;
        }
    }

    private <T> T remember(T v, Stat st) {
        if (st != null) {
            synchronized (mu) {
                stat = st;
            }
        }
        return v;
    }

    /**
     * The handle's events, in the order the cell applied the changes, each
     * once (also across a failover): those {@link OpenOptions#eventMask(int)}
     * asked for, and EVENTS_LOST when the cell dropped some. It holds
     * {@link Session#HANDLE_EVENT_BUFFER} events; when the application does
     * not take them, the oldest is dropped ({@link #droppedEvents()}). After
     * HANDLE_INVALID (the node was deleted) nothing more comes, nor after the
     * handle is closed or the session ends ({@link #eventsClosed()}). Take
     * from it; do not add to it.
     *
     * @return the queue (the same on every call)
     */
    public BlockingQueue<Event> events() {
        return events;
    }

    /**
     * Whether the handle receives no more events (opened without an event
     * mask, HANDLE_INVALID delivered, closed, or the session ended); events
     * already queued stay.
     *
     * @return true when no event will be added
     */
    public boolean eventsClosed() {
        synchronized (mu) {
            return eventsClosed;
        }
    }

    /**
     * How many events were dropped because the application did not take
     * them from {@link #events()} fast enough.
     *
     * @return the count
     */
    public long droppedEvents() {
        synchronized (mu) {
            return dropped;
        }
    }

    /** Queues ev (dropping the oldest when full) and calls the listener; never blocks. */
    void pushEvent(Event ev) {
        synchronized (mu) {
            if (eventsClosed) {
                return;
            }
            while (!events.offer(ev)) {
                if (events.poll() != null) {
                    dropped++;
                }
            }
        }
        EventListener l = listener;
        if (l != null) {
            s.dispatch(() -> l.onEvent(this, ev));
        }
    }

    void closeEvents() {
        synchronized (mu) {
            eventsClosed = true;
        }
    }

    private chubby.HandleRequest req() {
        return new chubby.HandleRequest(h);
    }

    private int timeout() {
        return s.cell.opts.callTimeoutMs();
    }

    /**
     * Reads the file's content and metadata in one call, answered from the
     * session's cache when it holds them (see {@link Session}: a cached read
     * is never stale).
     *
     * @return the content and metadata
     * @throws ChubbyException IS_DIRECTORY, HANDLE_INVALID, ...
     */
    public Contents read() throws ChubbyException {
        Cache cache = s.cache;
        if (cache != null && s.state() == SessionState.SAFE) {
            Contents hit = cache.file(path(), h.getInstance(), true);
            if (hit != null) {
                return remember(hit, hit.stat());
            }
        }
        chubby.HandleRequest req = req();
        long gen = 0;
        if (cache != null) {
            gen = cache.generation();
            req.setCache(true);
        }
        chubby.GetContentsAndStatResponse r = s.call("read", path(), Cell.Retry.SAFE, timeout(), null,
                c -> c.fs.GetContentsAndStat(req));
        Stat st = Stat.fromWire(r.getStat());
        byte[] b = r.getContent() == null ? new byte[0] : r.getContent();
        if (cache != null && r.isCacheable()) {
            cache.fill(path(), h.getInstance(), gen, b, st);
        }
        return remember(new Contents(b, st), st);
    }

    /**
     * Reads the node's metadata (from the session's cache when a read put it
     * there).
     *
     * @return the metadata
     * @throws ChubbyException HANDLE_INVALID, ...
     */
    public Stat stat() throws ChubbyException {
        Cache cache = s.cache;
        if (cache != null && s.state() == SessionState.SAFE) {
            Contents hit = cache.file(path(), h.getInstance(), false);
            if (hit != null) {
                return remember(hit.stat(), hit.stat());
            }
        }
        chubby.HandleRequest req = req();
        Stat st = Stat.fromWire(s.call("stat", path(), Cell.Retry.SAFE, timeout(), null, c -> c.fs.GetStat(req)));
        return remember(st, st);
    }

    /** How often readDir starts a paged listing again because the directory changed between pages. */
    static final int READDIR_ATTEMPTS = 8;

    /** Entries per ReadDir page asked for (0: the cell's MAX_READDIR_ENTRIES); tests lower it. */
    int readDirLimit = 0;

    /**
     * Lists the directory's children, sorted by name: all of them. A directory too big for one
     * reply is read in pages; the set of names is one snapshot (the directory's content generation
     * is the same on every page, or the listing starts again, at most {@link #READDIR_ATTEMPTS}
     * times, then UNAVAILABLE), and each entry's Stat is as of its page. A listing that fits one
     * page is cached by the session (see {@link Session}).
     *
     * @return the children
     * @throws ChubbyException NOT_DIRECTORY, HANDLE_INVALID, ...
     */
    public List<DirEntry> readDir() throws ChubbyException {
        Cache cache = s.cache;
        if (cache != null && s.state() == SessionState.SAFE) {
            List<DirEntry> hit = cache.dir(path(), h.getInstance());
            if (hit != null) {
                return hit;
            }
        }
        for (int attempt = 0; attempt < READDIR_ATTEMPTS; attempt++) {
            List<DirEntry> out = new ArrayList<>();
            Long gen = null;
            String after = null;
            long cacheGen = cache == null ? 0 : cache.generation();
            while (true) {
                chubby.ReadDirResponse r = readDirPage(after, cache != null && after == null);
                if (gen == null) {
                    gen = r.getContent_generation();
                } else if (gen != r.getContent_generation()) {
                    break; // a child was added or removed between pages
                }
                List<chubby.DirEntry> es = r.getEntries() == null ? List.of() : r.getEntries();
                for (chubby.DirEntry d : es) {
                    out.add(new DirEntry(d.getName(), Stat.fromWire(d.getStat())));
                }
                if (!r.isMore()) {
                    List<DirEntry> all = List.copyOf(out);
                    if (cache != null && after == null && r.isCacheable()) {
                        cache.fillDir(path(), h.getInstance(), cacheGen, all); // one page: complete
                    }
                    return all;
                }
                if (es.isEmpty()) {
                    throw ChubbyException.local(ErrorCode.INTERNAL, "readdir", path(), "ReadDir page says more but holds no entry");
                }
                after = es.get(es.size() - 1).getName();
            }
        }
        throw ChubbyException.local(ErrorCode.UNAVAILABLE, "readdir", path(),
                "the directory changed during every attempt to list it; retry");
    }

    private chubby.ReadDirResponse readDirPage(String after, boolean cache) throws ChubbyException {
        chubby.ReadDirRequest req = new chubby.ReadDirRequest(h);
        if (cache) {
            req.setCache(true); // only a complete listing in one page can be cacheable
        }
        if (after != null) {
            req.setAfter(after);
        }
        if (readDirLimit > 0) {
            req.setLimit(readDirLimit);
        }
        return s.call("readdir", path(), Cell.Retry.SAFE, timeout(), null, c -> c.fs.ReadDir(req));
    }

    static void checkContent(String op, String path, byte[] content) throws ChubbyException {
        if (content.length > chubbyConstants.MAX_CONTENT_BYTES) {
            throw ChubbyException.local(ErrorCode.TOO_LARGE, op, path, "content of " + content.length
                    + " bytes, at most " + chubbyConstants.MAX_CONTENT_BYTES + " allowed");
        }
    }

    /**
     * Replaces the file's content (the handle must be READ_WRITE). It is
     * exactly-once: resent after a lost reply or a failover, it is applied
     * once.
     *
     * @param content the new content (copied), at most MAX_CONTENT_BYTES
     * @return the new metadata
     * @throws ChubbyException PERMISSION_DENIED, TOO_LARGE, HANDLE_INVALID, ...
     */
    public Stat write(byte[] content) throws ChubbyException {
        return write(content, null);
    }

    /**
     * Replaces the file's content if its content generation is still
     * expectedGeneration (compare-and-swap); GENERATION_MISMATCH otherwise,
     * and nothing changes.
     *
     * @param content the new content (copied), at most MAX_CONTENT_BYTES
     * @param expectedGeneration the generation the file must have, or null for none
     * @return the new metadata
     * @throws ChubbyException GENERATION_MISMATCH, PERMISSION_DENIED, TOO_LARGE, ...
     */
    public Stat write(byte[] content, Long expectedGeneration) throws ChubbyException {
        if (content == null) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "write", path(), "content is null");
        }
        byte[] b = content.clone();
        checkContent("write", path(), b);
        chubby.SetContentsRequest req = new chubby.SetContentsRequest(h, java.nio.ByteBuffer.wrap(b));
        if (expectedGeneration != null) {
            req.setExpected_generation(expectedGeneration);
        }
        Stat st = Stat.fromWire(s.call("write", path(), Cell.Retry.ONCE, timeout(), req::setRid,
                c -> c.fs.SetContents(req)));
        return remember(st, st);
    }

    /**
     * Replaces the node's ACL names (SetACL; the session's principal needs
     * the node's change_acl right) and returns the new metadata, whose
     * aclGeneration went up by one. With expectedGeneration it is a
     * compare-and-swap on the aclGeneration: GENERATION_MISMATCH otherwise,
     * and nothing changes. It is exactly-once, like {@link #write(byte[])}.
     *
     * @param acl the new names (each one path component, or "" for everybody)
     * @param expectedGeneration the aclGeneration the node must have, or null for none
     * @return the new metadata
     * @throws ChubbyException INVALID_ARGUMENT for a malformed name,
     *     PERMISSION_DENIED, GENERATION_MISMATCH, HANDLE_INVALID, ...
     */
    public Stat setAcl(Acl acl, Long expectedGeneration) throws ChubbyException {
        checkAcl("set-acl", path(), acl);
        chubby.SetACLRequest req = new chubby.SetACLRequest(h, acl.toWire());
        if (expectedGeneration != null) {
            req.setExpected_acl_generation(expectedGeneration);
        }
        Stat st = Stat.fromWire(s.call("set-acl", path(), Cell.Retry.ONCE, timeout(), req::setRid,
                c -> c.fs.SetACL(req)));
        return remember(st, st);
    }

    static void checkAcl(String op, String path, Acl acl) throws ChubbyException {
        if (acl == null) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, op, path, "acl is null");
        }
        String[][] names = {{"read", acl.read()}, {"write", acl.write()}, {"changeAcl", acl.changeAcl()}};
        for (String[] n : names) {
            if (n[1] == null) {
                throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, op, path, "acl " + n[0] + " is null");
            }
            String why = n[1].isEmpty() ? null : Check.pathProblem("/" + n[1]);
            if (why != null || n[1].indexOf('/') >= 0) {
                throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, op, path, "acl " + n[0] + " "
                        + Check.quote(n[1]) + " is not a name (one path component: the file /acl/NAME)");
            }
        }
    }

    /**
     * Deletes the node (the handle must be READ_WRITE); a non-empty
     * directory only when recursive.
     *
     * @param recursive delete a directory's children too
     * @throws ChubbyException NOT_EMPTY, PERMISSION_DENIED, HANDLE_INVALID, ...
     */
    public void delete(boolean recursive) throws ChubbyException {
        chubby.DeleteRequest req = new chubby.DeleteRequest(h);
        if (recursive) {
            req.setRecursive(true);
        }
        s.call("delete", path(), Cell.Retry.ONCE, timeout(), req::setRid, c -> {
            c.fs.Delete(req);
            return null;
        });
    }

    /**
     * Deletes the node (a file or an empty directory).
     *
     * @throws ChubbyException NOT_EMPTY, PERMISSION_DENIED, HANDLE_INVALID, ...
     */
    public void delete() throws ChubbyException {
        delete(false);
    }

    static void checkLockArgs(String op, String path, LockMode mode, Duration lockDelay) throws ChubbyException {
        if (mode == null) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, op, path, "lock mode is null");
        }
        if (lockDelay != null && (lockDelay.isNegative()
                || lockDelay.compareTo(Duration.ofMillis(chubbyConstants.MAX_LOCK_DELAY_MS)) > 0)) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, op, path,
                    "lock delay " + lockDelay + " outside [0, " + chubbyConstants.MAX_LOCK_DELAY_MS + " ms]");
        }
    }

    static void checkWait(String op, String path, Duration wait) throws ChubbyException {
        if (wait == null || wait.compareTo(Duration.ofMillis(1)) < 0
                || wait.compareTo(Duration.ofMillis(chubbyConstants.MAX_ACQUIRE_WAIT_MS)) > 0) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, op, path,
                    "wait " + wait + " outside [1 ms, " + chubbyConstants.MAX_ACQUIRE_WAIT_MS + " ms]");
        }
    }

    /** Whole milliseconds, rounded up. */
    private static long ceilMs(Duration d) {
        long ms = d.toMillis();
        return d.minusMillis(ms).isZero() ? ms : ms + 1;
    }

    /**
     * Takes the node's lock in mode, waiting in FIFO order behind other
     * waiters at most wait, with the cell's default lock-delay.
     *
     * @param mode EXCLUSIVE or SHARED
     * @param wait how long to wait (1 ms .. MAX_ACQUIRE_WAIT_MS; rounded up to whole ms)
     * @return the lock's sequencer
     * @throws ChubbyException TIMED_OUT when the wait passed, LOCK_HELD if this handle holds it, ...
     */
    public Sequencer acquire(LockMode mode, Duration wait) throws ChubbyException {
        return acquire(mode, wait, null);
    }

    /**
     * Takes the node's lock in mode, waiting at most wait. lockDelay is how
     * long the lock stays unavailable to others when this session ends
     * holding it without releasing it (so that late messages of a dead holder
     * cannot interleave with the next holder's): null for the cell's default
     * (DEFAULT_LOCK_DELAY_MS, 15 s), zero for none, at most MAX_LOCK_DELAY_MS.
     *
     * <p>Acquire carries no request id (it waits), so it is resent only when
     * it certainly did nothing; if it fails otherwise, the handle may hold
     * the lock after all: release (LOCK_NOT_HELD is harmless) or close the
     * handle to be sure.
     *
     * @param mode EXCLUSIVE or SHARED
     * @param wait how long to wait (1 ms .. MAX_ACQUIRE_WAIT_MS; rounded up to whole ms)
     * @param lockDelay the lock-delay, or null for the cell's default
     * @return the lock's sequencer
     * @throws ChubbyException TIMED_OUT when the wait passed, or the call's failure
     */
    public Sequencer acquire(LockMode mode, Duration wait, Duration lockDelay) throws ChubbyException {
        checkLockArgs("acquire", path(), mode, lockDelay);
        checkWait("acquire", path(), wait);
        long waitMs = ceilMs(wait);
        Scope sc = Scope.current();
        if (sc != null) {
            waitMs = Math.max(1, Math.min(waitMs, sc.leftMs())); // the cell gives up by the deadline itself
        }
        chubby.AcquireRequest req = new chubby.AcquireRequest(h, mode, waitMs);
        if (lockDelay != null) {
            req.setLock_delay_ms(ceilMs(lockDelay));
        }
        // The master parks the call for up to wait: give the socket more.
        int t = (int) Math.min(Integer.MAX_VALUE, waitMs + timeout());
        return Sequencer.fromWire(s.call("acquire", path(), Cell.Retry.UNSENT, t, null, c -> c.lock.Acquire(req)));
    }

    /**
     * Takes the node's lock in mode if it is available now, with the cell's
     * default lock-delay.
     *
     * @param mode EXCLUSIVE or SHARED
     * @return the lock's sequencer
     * @throws ChubbyException LOCK_HELD when it is not available, ...
     */
    public Sequencer tryAcquire(LockMode mode) throws ChubbyException {
        return tryAcquire(mode, null);
    }

    /**
     * Takes the node's lock in mode if it is available now. Exactly-once.
     *
     * @param mode EXCLUSIVE or SHARED
     * @param lockDelay the lock-delay (see {@link #acquire(LockMode, Duration, Duration)}), or null for the default
     * @return the lock's sequencer
     * @throws ChubbyException LOCK_HELD when it is not available, ...
     */
    public Sequencer tryAcquire(LockMode mode, Duration lockDelay) throws ChubbyException {
        checkLockArgs("try-acquire", path(), mode, lockDelay);
        chubby.TryAcquireRequest req = new chubby.TryAcquireRequest(h, mode);
        if (lockDelay != null) {
            req.setLock_delay_ms(ceilMs(lockDelay));
        }
        return Sequencer.fromWire(s.call("try-acquire", path(), Cell.Retry.ONCE, timeout(), req::setRid,
                c -> c.lock.TryAcquire(req)));
    }

    /**
     * Releases the lock the handle holds. Exactly-once.
     *
     * @throws ChubbyException LOCK_NOT_HELD if it holds none, ...
     */
    public void release() throws ChubbyException {
        chubby.HandleRequest req = req();
        s.call("release", path(), Cell.Retry.ONCE, timeout(), req::setRid, c -> {
            c.lock.Release(req);
            return null;
        });
    }

    /**
     * The sequencer of the lock the handle holds.
     *
     * @return the sequencer
     * @throws ChubbyException LOCK_NOT_HELD if it holds none, ...
     */
    public Sequencer sequencer() throws ChubbyException {
        chubby.HandleRequest req = req();
        return Sequencer.fromWire(s.call("get-sequencer", path(), Cell.Retry.SAFE, timeout(), null,
                c -> c.lock.GetSequencer(req)));
    }

    /**
     * Closes the handle: a lock it holds is released, an Acquire waiting on it
     * fails, and it receives no more events. Exactly-once; closing a closed
     * handle does nothing.
     *
     * @throws ChubbyException if the call failed (the handle is closed with its session at the latest)
     */
    @Override
    public void close() throws ChubbyException {
        if (closed) {
            return;
        }
        chubby.CloseRequest req = new chubby.CloseRequest(h);
        try {
            s.call("close", path(), Cell.Retry.ONCE, timeout(), req::setRid, c -> {
                c.fs.Close(req);
                return null;
            });
        } catch (ChubbyException e) {
            if (!e.is(ErrorCode.HANDLE_INVALID)) {
                throw e;
            }
            // The cell had no such handle any more: closed either way.
        }
        closed = true;
        s.unwatch(this);
    }
}
