package io.chubby.cell;

import chubby.CreateMode;
import chubby.ErrorCode;
import chubby.LockMode;
import chubby.OpenMode;
import chubby.chubbyConstants;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Consumer;
import org.apache.thrift.transport.TTransportException;

/**
 * A session with the cell: the unit that holds locks, owns ephemeral nodes
 * and opens handles ({@link #open(String, OpenOptions)}, {@link #lock(String)}).
 *
 * <p><b>KeepAlive.</b> A thread keeps the session alive: it sends one
 * KeepAlive at a time, which the master parks until shortly before the
 * lease would end, and sends the next as soon as a reply comes. The local
 * lease is conservative: the send time of the request answered plus the
 * lease granted. When it runs out with no reply the session is in
 * {@link SessionState#JEOPARDY}: the thread keeps trying for the grace
 * period ({@link CellOptions#gracePeriod(Duration)}), follows NOT_MASTER
 * hints and, every 0.5 s while it waits for a reply, asks the replicas where
 * the master is and moves its KeepAlive there. A reply makes the session safe
 * again with every handle, lock and ephemeral node it had (a new master
 * gives it a full lease to come back); the end of the grace period, or the
 * cell saying SESSION_EXPIRED, expires it. Listeners
 * ({@link #addListener(SessionListener)}) hear of each change.
 *
 * <p><b>Calls.</b> A call made in jeopardy waits until the session is safe
 * (then it is sent) or expired (then it fails with SESSION_EXPIRED). A call
 * that gave up because no master could be reached waits until the session
 * reaches one again and is sent anew, at most 3 rounds in all. A call
 * already sent when the session ends is not interrupted: it ends when the
 * cell answers (the cell ends an Acquire of an ended session) or its
 * timeout passes; later calls fail at once.
 *
 * <p><b>Exactly-once.</b> Calls that change the cell (open, close, write,
 * delete, mkdir, createFile, setAcl, multi, tryAcquire, release) carry a request id: the
 * session numbers them 1, 2, 3, ... (a resend keeps its number) and tells the
 * cell the lowest number still in flight (the floor: the cell may forget the
 * answers below it). The cell applies a number at most once and answers a
 * resend with the first answer, on any master, so these calls are resent
 * after any failure that may pass — a lost reply, a timeout, a failover —
 * and still take effect once. Acquire, which waits, carries none: it is
 * resent only when it certainly did nothing.
 *
 * <p><b>Events.</b> The cell queues the events of the session's handles and
 * sends them on KeepAlive replies; the next KeepAlive acknowledges the
 * highest one received, so the cell may forget them. A new master may send
 * again what was not acknowledged; the session delivers each event once, in
 * order (by {@link Event#seq()}).
 *
 * <p><b>Cache.</b> Unless {@link CellOptions#cache(boolean)} turns it off, a
 * session caches file contents and Stats ({@link Handle#read()},
 * {@link Handle#stat()}) and directory listings that fit one page
 * ({@link Handle#readDir()}): it is created with the
 * cache flag, so the master registers it as a cacher of what it reads and,
 * before a change to such a node commits, sends it an invalidation on a
 * KeepAlive reply and waits until the next KeepAlive acknowledges it (or the
 * lease has run out). A cached read is therefore never stale. The cache is
 * used only while the session is safe and flushed in jeopardy, when the
 * master changes and when the session ends; a reply is cached only if no
 * invalidation arrived while it was in flight, and the session's own
 * changes drop its copies before and after they are sent.
 *
 * <p><b>Deadlines.</b> Calls block their thread, bounded by the call
 * timeout per attempt ({@link CellOptions#callTimeout(Duration)}); inside
 * {@link Cell#withDeadline} or {@link Cell#async(Duration, CellCall)} they
 * are bounded by one deadline, and {@link Cell#async(CellCall)} gives a
 * future whose cancellation abandons the call in flight.
 *
 * <p>Thread-safe: any number of threads may use a session and its handles.
 */
public final class Session implements AutoCloseable {
    static final long CLOSE_DRAIN_MS = 1000;
    static final long JEOPARDY_PROBE_NANOS = 500_000_000L;
    static final int MAX_QUICK_KEEPALIVES = 3;
    static final int MAX_SEND_ROUNDS = 3;
    static final int MAX_STATE_WAITS = 8;
    static final long KA_BACKOFF_BASE_MS = 50, KA_BACKOFF_MAX_MS = 500;
    /** Events kept per handle for an application that does not take them; past it the oldest go. */
    public static final int HANDLE_EVENT_BUFFER = 256;
    static final int EARLY_EVENT_BUFFER = 1024;

    final Cell cell;
    /** The session's cache, or null when the options turned it off. */
    final Cache cache;
    private final long id;
    private final long graceNanos;

    private final ReentrantLock mu = new ReentrantLock();
    private final Condition changed = mu.newCondition();
    private final LocalLease ll;
    private SessionState ended;
    private ChubbyException err;
    private boolean closing;

    private final AtomicLong reqSeq = new AtomicLong();
    private final TreeSet<Long> inflight = new TreeSet<>();

    private final CopyOnWriteArrayList<SessionListener> listeners = new CopyOnWriteArrayList<>();
    private final ExecutorService dispatcher;

    // Event delivery: guarded by evMu.
    private final Object evMu = new Object();
    private long lastSeq;
    private final Map<Long, Handle> watchers = new HashMap<>();
    private int opening;
    private final ArrayDeque<chubby.Event> early = new ArrayDeque<>();

    // The KeepAlive loop's wake-up signal.
    private final Object signal = new Object();
    private boolean signalled;
    private Thread loop;
    private final CountDownLatch loopDone = new CountDownLatch(1);

    Session(Cell cell, long id, long sent, long leaseMs, long epoch) {
        this.cell = cell;
        this.cache = cell.opts.cache ? new Cache() : null;
        this.id = id;
        this.graceNanos = cell.opts.gracePeriod.toNanos();
        this.ll = new LocalLease(sent, leaseMs * 1_000_000L, epoch, graceNanos);
        this.dispatcher = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "chubby-session-" + id + "-events");
            t.setDaemon(true);
            return t;
        });
    }

    void start() {
        loop = new Thread(this::runLoop, "chubby-session-" + id + "-keepalive");
        loop.setDaemon(true);
        loop.start();
    }

    /**
     * The session's id, as the cell knows it.
     *
     * @return the id
     */
    public long id() {
        return id;
    }

    /**
     * The cell the session belongs to.
     *
     * @return the cell
     */
    public Cell cell() {
        return cell;
    }

    /**
     * Where the session is now. Exact to the moment: a session whose local
     * lease has just run out is in JEOPARDY even before its listeners hear it.
     *
     * @return the state
     */
    public SessionState state() {
        mu.lock();
        try {
            return stateLocked(System.nanoTime());
        } finally {
            mu.unlock();
        }
    }

    private SessionState stateLocked(long now) {
        if (err != null) {
            return ended;
        }
        return ll.state(now) == LocalLease.State.SAFE ? SessionState.SAFE : SessionState.JEOPARDY;
    }

    /**
     * The highest master epoch the session has heard of.
     *
     * @return the epoch
     */
    public long epoch() {
        mu.lock();
        try {
            return ll.epoch();
        } finally {
            mu.unlock();
        }
    }

    /**
     * How long the session is certainly alive at the master unless renewed:
     * the local lease end minus now; zero in jeopardy and once it ended.
     *
     * @return the time left
     */
    public Duration leaseRemaining() {
        mu.lock();
        try {
            if (err != null) {
                return Duration.ZERO;
            }
            return Duration.ofNanos(Math.max(0, ll.leaseEnd() - System.nanoTime()));
        } finally {
            mu.unlock();
        }
    }

    /** KeepAlive replies that renewed the lease so far (for tests). */
    long renewals() {
        mu.lock();
        try {
            return ll.renewals();
        } finally {
            mu.unlock();
        }
    }

    /**
     * Why the session ended (kind CLOSED, or code SESSION_EXPIRED), or null
     * while it lives (safe or in jeopardy).
     *
     * @return the reason, or null
     */
    public ChubbyException error() {
        mu.lock();
        try {
            return err;
        } finally {
            mu.unlock();
        }
    }

    /**
     * Adds a listener for the session's events (JEOPARDY, SAFE,
     * MASTER_CHANGED, LOST_EVENTS, EXPIRED). It hears only events after it is
     * added; {@link #state()} tells the state now.
     *
     * @param l the listener
     */
    public void addListener(SessionListener l) {
        if (l == null) {
            throw new NullPointerException("listener");
        }
        listeners.add(l);
    }

    /**
     * Removes a listener added with {@link #addListener(SessionListener)}.
     *
     * @param l the listener
     */
    public void removeListener(SessionListener l) {
        listeners.remove(l);
    }

    /** Runs r on the event thread, after everything queued before it. */
    void dispatch(Runnable r) {
        try {
            dispatcher.execute(() -> {
                try {
                    r.run();
                } catch (RuntimeException e) {
                    // A listener's failure must not stop the others.
                }
            });
        } catch (RejectedExecutionException e) {
            // The session has ended and its last events went out.
        }
    }

    private void emit(SessionEvent.Kind kind, long epoch, ChubbyException error, long lost) {
        SessionEvent ev = new SessionEvent(kind, epoch, error, lost);
        dispatch(() -> {
            for (SessionListener l : listeners) {
                try {
                    l.onEvent(this, ev);
                } catch (RuntimeException e) {
                    // Likewise: one listener's bug does not silence the rest.
                }
            }
        });
    }

    // ------------------------------------------------------------------
    // Files and locks

    /**
     * Opens an existing node for reading (and locking).
     *
     * @param path the node's path
     * @return the handle; close it when done
     * @throws ChubbyException NOT_FOUND, INVALID_ARGUMENT, ...
     */
    public Handle open(String path) throws ChubbyException {
        return open(path, new OpenOptions());
    }

    /**
     * Opens (and maybe creates) the node at path as options say. It is
     * exactly-once: resent after a lost reply or a failover, it opens (and
     * creates) once.
     *
     * @param path the node's path
     * @param options how to open it (copied)
     * @return the handle; close it when done
     * @throws ChubbyException NOT_FOUND, EXISTS, INVALID_ARGUMENT, ...
     */
    public Handle open(String path, OpenOptions options) throws ChubbyException {
        Check.path("open", path);
        if (options == null) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "open", path, "options are null");
        }
        OpenOptions o = options.copy();
        o.validate(path);
        chubby.OpenRequest req = new chubby.OpenRequest(id, path, o.mode, o.create);
        if (o.ephemeral) {
            req.setEphemeral(true);
        }
        if (o.sequential) {
            req.setSequential(true);
        }
        if (o.initialContent != null) {
            req.setInitial_content(o.initialContent);
        }
        if (o.eventMask != 0) {
            req.setEvent_mask(o.eventMask);
            beginOpen(); // an event may overtake the reply: keep such events until the handle is known
        }
        Handle h = null;
        try {
            chubby.OpenResponse r = call("open", path, Cell.Retry.ONCE, cell.opts.callTimeoutMs(), req::setRid,
                    c -> c.fs.Open(req));
            h = new Handle(this, r.getHandle(), r.isCreated(), Stat.fromWire(r.getStat()), o.eventMask != 0, o.listener);
            return h;
        } finally {
            if (o.eventMask != 0) {
                endOpen(h);
            }
        }
    }

    /**
     * Creates the directory path.
     *
     * @param path the directory's path
     * @param parents create missing parents; an existing directory is then not an error
     * @return the directory's metadata
     * @throws ChubbyException EXISTS, NOT_FOUND (a parent is missing), INVALID_ARGUMENT, ...
     */
    public Stat mkdir(String path, boolean parents) throws ChubbyException {
        Check.path("mkdir", path);
        chubby.MkdirRequest req = new chubby.MkdirRequest(id, path);
        if (parents) {
            req.setParents(true);
        }
        return Stat.fromWire(call("mkdir", path, Cell.Retry.ONCE, cell.opts.callTimeoutMs(), req::setRid,
                c -> c.fs.Mkdir(req)));
    }

    /**
     * Creates the file path with content in one call, without a handle.
     *
     * @param path the file's path
     * @param content its content (at most MAX_CONTENT_BYTES; null for empty)
     * @param makeParents create missing parent directories (permanent ones)
     * @return the file's metadata
     * @throws ChubbyException EXISTS, NOT_FOUND, TOO_LARGE, INVALID_ARGUMENT, ...
     */
    public Stat createFile(String path, byte[] content, boolean makeParents) throws ChubbyException {
        Check.path("create", path);
        byte[] b = content == null ? new byte[0] : content.clone();
        Handle.checkContent("create", path, b);
        chubby.CreateFileRequest req = new chubby.CreateFileRequest(id, path);
        req.setContent(b);
        if (makeParents) {
            req.setMake_parents(true);
        }
        return Stat.fromWire(call("create", path, Cell.Retry.ONCE, cell.opts.callTimeoutMs(), req::setRid,
                c -> c.fs.CreateFile(req)));
    }

    /**
     * Checks cmps and, if every one holds, applies ops in order, all or
     * nothing, as one command of the cell (Multi): a compare that does not
     * hold is an answer ({@link MultiResult#succeeded()} false, naming it),
     * an op that cannot be applied is an error naming its index, and either
     * way nothing changed. Later ops see the effects of earlier ones (a
     * directory, then a file in it). It is exactly-once, like
     * {@link Handle#write(byte[])}.
     *
     * @param cmps the conditions (at most MAX_MULTI_COMPARES; may be empty)
     * @param ops the changes (at most MAX_MULTI_OPS; contents together at most MAX_MULTI_BYTES)
     * @return whether it was applied, and the nodes' metadata
     * @throws ChubbyException INVALID_ARGUMENT or TOO_LARGE for bad input,
     *     the refusing op's error (EXISTS, NOT_FOUND, PERMISSION_DENIED, ...),
     *     or the call's failure
     */
    public MultiResult multi(List<Cmp> cmps, List<Op> ops) throws ChubbyException {
        if (cmps == null || ops == null) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "multi", null,
                    (cmps == null ? "compares" : "ops") + " are null");
        }
        if (cmps.size() > chubbyConstants.MAX_MULTI_COMPARES || ops.size() > chubbyConstants.MAX_MULTI_OPS) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "multi", null, cmps.size() + " compares and "
                    + ops.size() + " ops, at most " + chubbyConstants.MAX_MULTI_COMPARES + " and "
                    + chubbyConstants.MAX_MULTI_OPS + " allowed");
        }
        List<chubby.Compare> wc = new ArrayList<>(cmps.size());
        for (int i = 0; i < cmps.size(); i++) {
            Cmp c = cmps.get(i);
            if (c == null) {
                throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "multi", null, "compare " + i + " is null");
            }
            Check.path("multi", c.path());
            wc.add(c.toWire());
        }
        List<chubby.MultiOp> wo = new ArrayList<>(ops.size());
        long total = 0;
        for (int i = 0; i < ops.size(); i++) {
            Op o = ops.get(i);
            if (o == null) {
                throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "multi", null, "op " + i + " is null");
            }
            Check.path("multi", o.path());
            if (o.contentBytes() > chubbyConstants.MAX_CONTENT_BYTES) {
                throw ChubbyException.local(ErrorCode.TOO_LARGE, "multi", o.path(), "op " + i + ": content of "
                        + o.contentBytes() + " bytes, at most " + chubbyConstants.MAX_CONTENT_BYTES + " allowed");
            }
            total += o.contentBytes();
            wo.add(o.toWire());
        }
        if (total > chubbyConstants.MAX_MULTI_BYTES) {
            throw ChubbyException.local(ErrorCode.TOO_LARGE, "multi", null, "contents of " + total
                    + " bytes together, at most " + chubbyConstants.MAX_MULTI_BYTES + " allowed");
        }
        chubby.MultiRequest req = new chubby.MultiRequest(id, wc, wo);
        Runnable drop = () -> {
            if (cache != null) {
                for (Op o : ops) {
                    dropCached(o.kind() == chubby.MultiOpKind.DELETE ? "delete" : "multi", o.path());
                }
            }
        };
        drop.run();
        String path = ops.isEmpty() ? null : ops.get(0).path();
        chubby.MultiResponse r;
        try {
            r = call("multi", path, Cell.Retry.ONCE, cell.opts.callTimeoutMs(), req::setRid, c -> c.fs.Multi(req));
        } finally {
            drop.run();
        }
        List<Stat> stats = new ArrayList<>();
        if (r.isSucceeded() && r.getStats() != null) {
            for (chubby.Stat st : r.getStats()) {
                stats.add(Stat.fromWire(st));
            }
        }
        return new MultiResult(r.isSucceeded(), r.isSucceeded() ? -1 : r.getFailed_compare(), List.copyOf(stats));
    }

    /**
     * Takes the exclusive lock of the node at path (creating the file if it
     * is missing), waiting for it up to MAX_ACQUIRE_WAIT_MS (10 min), with
     * the cell's default lock-delay. Use it with try-with-resources:
     * {@code try (Lock l = session.lock("/svc/leader")) { ... }}.
     *
     * @param path the lock file's path
     * @return the held lock
     * @throws ChubbyException TIMED_OUT when the wait passed, or the call's failure
     */
    public Lock lock(String path) throws ChubbyException {
        return lock(path, LockMode.EXCLUSIVE, Duration.ofMillis(chubbyConstants.MAX_ACQUIRE_WAIT_MS), null);
    }

    /**
     * Takes the exclusive lock of the node at path, waiting at most wait.
     *
     * @param path the lock file's path
     * @param wait how long to wait (1 ms .. MAX_ACQUIRE_WAIT_MS)
     * @return the held lock
     * @throws ChubbyException TIMED_OUT when the wait passed, or the call's failure
     */
    public Lock lock(String path, Duration wait) throws ChubbyException {
        return lock(path, LockMode.EXCLUSIVE, wait, null);
    }

    /**
     * Takes a shared lock of the node at path, waiting up to
     * MAX_ACQUIRE_WAIT_MS; any number of sessions may hold it shared at once.
     *
     * @param path the lock file's path
     * @return the held lock
     * @throws ChubbyException TIMED_OUT when the wait passed, or the call's failure
     */
    public Lock lockShared(String path) throws ChubbyException {
        return lock(path, LockMode.SHARED, Duration.ofMillis(chubbyConstants.MAX_ACQUIRE_WAIT_MS), null);
    }

    /**
     * Takes the node's lock in mode, waiting at most wait, with a lock-delay
     * (see {@link Handle#acquire(LockMode, Duration, Duration)}). The node
     * is opened (created if missing) for the lock; closing the
     * {@link Lock} closes it, which releases the lock.
     *
     * @param path the lock file's path
     * @param mode EXCLUSIVE or SHARED
     * @param wait how long to wait (1 ms .. MAX_ACQUIRE_WAIT_MS)
     * @param lockDelay null for the cell's default, else 0 .. MAX_LOCK_DELAY_MS
     * @return the held lock
     * @throws ChubbyException TIMED_OUT when the wait passed, or the call's failure
     */
    public Lock lock(String path, LockMode mode, Duration wait, Duration lockDelay) throws ChubbyException {
        Check.path("lock", path);
        Handle.checkLockArgs("lock", path, mode, lockDelay);
        Handle.checkWait("lock", path, wait);
        Handle h = open(path, OpenOptions.read().create(CreateMode.OPEN_OR_CREATE));
        try {
            return new Lock(h, h.acquire(mode, wait, lockDelay));
        } catch (ChubbyException e) {
            closeQuietly(h);
            throw e;
        }
    }

    /**
     * Takes the exclusive lock of the node at path if it is free now.
     *
     * @param path the lock file's path
     * @return the held lock
     * @throws ChubbyException LOCK_HELD when someone else holds it, or the call's failure
     */
    public Lock tryLock(String path) throws ChubbyException {
        return tryLock(path, LockMode.EXCLUSIVE, null);
    }

    /**
     * Takes the node's lock in mode if it is available now.
     *
     * @param path the lock file's path
     * @param mode EXCLUSIVE or SHARED
     * @param lockDelay null for the cell's default, else 0 .. MAX_LOCK_DELAY_MS
     * @return the held lock
     * @throws ChubbyException LOCK_HELD when it is not available, or the call's failure
     */
    public Lock tryLock(String path, LockMode mode, Duration lockDelay) throws ChubbyException {
        Check.path("lock", path);
        Handle.checkLockArgs("lock", path, mode, lockDelay);
        Handle h = open(path, OpenOptions.read().create(CreateMode.OPEN_OR_CREATE));
        try {
            return new Lock(h, h.tryAcquire(mode, lockDelay));
        } catch (ChubbyException e) {
            closeQuietly(h);
            throw e;
        }
    }

    private static void closeQuietly(Handle h) {
        try {
            h.close();
        } catch (ChubbyException e) {
            // The handle goes with the session at the latest.
        }
    }

    /**
     * Ends the session at the cell (CloseSession: its locks are released
     * without lock-delay, its handles closed, its ephemeral nodes deleted)
     * and stops its KeepAlive thread. The session ends locally even when the
     * call fails (the cell then ends it when its lease runs out), and the
     * failure is thrown. Closing a closed or expired session does nothing.
     *
     * @throws ChubbyException if CloseSession failed (the session is closed locally anyway)
     */
    @Override
    public void close() throws ChubbyException {
        mu.lock();
        if (err != null || closing) {
            mu.unlock();
            awaitLoop(5000);
            return;
        }
        closing = true;
        mu.unlock();
        ChubbyException failure = null;
        try {
            chubby.CloseSessionRequest req = new chubby.CloseSessionRequest(id);
            cell.call("close-session", null, Cell.Retry.UNSENT, cell.opts.callTimeoutMs(), c -> {
                c.session.CloseSession(req);
                return null;
            });
            // The cell answers the parked KeepAlive at once when the session
            // ends; let the loop see that answer rather than abandon it.
            awaitLoop(CLOSE_DRAIN_MS);
        } catch (ChubbyException e) {
            if (e.is(ErrorCode.SESSION_EXPIRED)) {
                end(expired("the cell had ended it before close"), true);
            } else {
                failure = e;
            }
        }
        end(closedError(), false);
        awaitLoop(5000);
        if (failure != null) {
            throw failure;
        }
    }

    private void awaitLoop(long ms) {
        if (Thread.currentThread() == loop) {
            return;
        }
        try {
            loopDone.await(ms, TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    // ------------------------------------------------------------------
    // Session lifecycle

    private ChubbyException closedError() {
        return new ChubbyException(ChubbyException.Kind.CLOSED, null, "session", null, "the session is closed",
                null, null, null, false);
    }

    private static ChubbyException expired(String why) {
        return ChubbyException.local(ErrorCode.SESSION_EXPIRED, "session", null, why);
    }

    /** Ends the session locally with e (the first reason wins). */
    void end(ChubbyException e, boolean isExpired) {
        long epoch;
        mu.lock();
        try {
            if (err != null) {
                return;
            }
            err = e;
            ll.end();
            ended = isExpired ? SessionState.EXPIRED : SessionState.CLOSED;
            epoch = ll.epoch();
            changed.signalAll();
        } finally {
            mu.unlock();
        }
        cell.removeSession(this);
        if (cache != null) {
            cache.flush();
        }
        if (isExpired) {
            emit(SessionEvent.Kind.EXPIRED, epoch, e, 0);
        }
        closeWatchers();
        dispatcher.shutdown(); // after the events queued so far
        wake();
    }

    /** Ends a session the cell never got to keep (the Cell closed as it was made). */
    void endLocally(ChubbyException e) {
        end(e, false);
        loopDone.countDown();
    }

    boolean isEnded() {
        mu.lock();
        try {
            return err != null;
        } finally {
            mu.unlock();
        }
    }

    private void enterJeopardy() {
        if (cache != null) {
            cache.flush(); // the master may stop waiting for our acknowledgements at any moment now
        }
        long epoch;
        mu.lock();
        try {
            epoch = ll.epoch();
            changed.signalAll();
        } finally {
            mu.unlock();
        }
        emit(SessionEvent.Kind.JEOPARDY, epoch, null, 0);
    }

    /** Records a master epoch heard in a reply; a newer one is MASTER_CHANGED. */
    private void noteEpoch(long epoch) {
        mu.lock();
        try {
            if (err != null || !ll.noteEpoch(epoch)) {
                return;
            }
        } finally {
            mu.unlock();
        }
        if (cache != null) {
            cache.flush(); // a new master knows no cachers
        }
        emit(SessionEvent.Kind.MASTER_CHANGED, epoch, null, 0);
    }

    // ------------------------------------------------------------------
    // Calls

    /**
     * Runs a call of the session: it fails at once when the session has
     * ended, waits while it is in jeopardy, ends it when the cell says
     * SESSION_EXPIRED, and sends a call that found no master again once the
     * session has reached one (at most MAX_SEND_ROUNDS rounds). setRid, if
     * not null, puts the call's request id into its request before the
     * first send; the same id goes with every resend.
     */
    <T> T call(String op, String path, Cell.Retry cls, int timeoutMs, Consumer<chubby.RequestID> setRid,
            Pool.Rpc<T> fn) throws ChubbyException {
        long seq = 0;
        if (setRid != null) {
            seq = reqSeq.incrementAndGet();
            setRid.accept(new chubby.RequestID(seq, beginRequest(seq)));
        }
        // Write-through: our copy of what a change touches goes now and again
        // when it is done (the master invalidates it too).
        boolean drops = cache != null && path != null && cls != Cell.Retry.SAFE;
        if (drops) {
            dropCached(op, path);
        }
        try {
            boolean needRenewal = false;
            long after = 0;
            Scope sc = Scope.current();
            for (int round = 0; ; round++) {
                if (sc != null) {
                    sc.check(op, path);
                }
                long renewals = awaitSafe(op, path, needRenewal, after);
                try {
                    return cell.call(op, path, cls, timeoutMs, fn);
                } catch (ChubbyException e) {
                    if (e.kind() == ChubbyException.Kind.CELL && e.is(ErrorCode.SESSION_EXPIRED)) {
                        end(expired("the cell ended it: " + e.reason()), true);
                        throw e;
                    }
                    ChubbyException gone = error();
                    if (gone != null && e.kind() != ChubbyException.Kind.CELL) {
                        throw gone.forOp(op, path); // the session ended meanwhile: that is why
                    }
                    if (!e.retryable || round + 1 >= MAX_SEND_ROUNDS) {
                        throw e.withRetryable(false);
                    }
                    needRenewal = true;
                    after = renewals;
                }
            }
        } finally {
            if (seq != 0) {
                endRequest(seq);
            }
            if (drops) {
                dropCached(op, path);
            }
        }
    }

    private void dropCached(String op, String path) {
        if (op.equals("delete")) {
            cache.dropTree(path);
        } else {
            cache.drop(path);
        }
    }

    /**
     * The cache's counters: hits, misses, entries, invalidations (all 0
     * when {@link CellOptions#cache(boolean)} turned it off).
     *
     * @return the counters
     */
    public CacheStats cacheStats() {
        return cache == null ? new CacheStats(0, 0, 0, 0) : cache.stats();
    }

    /**
     * Waits until the session is safe (and, with needRenewal, has renewed its
     * lease more than after times) or has ended. Returns the renewal count;
     * after MAX_STATE_WAITS changes it lets the call go and the cell decides.
     */
    private long awaitSafe(String op, String path, boolean needRenewal, long after) throws ChubbyException {
        mu.lock();
        try {
            for (int i = 0; i < MAX_STATE_WAITS; i++) {
                if (err != null) {
                    throw err.forOp(op, path);
                }
                long now = System.nanoTime();
                SessionState st = stateLocked(now);
                if (st == SessionState.SAFE && (!needRenewal || ll.renewals() > after)) {
                    return ll.renewals();
                }
                // Bounded: the loop moves to jeopardy at the lease end and
                // ends the session at the grace end, and signals either.
                long until = st == SessionState.SAFE ? ll.leaseEnd() : ll.graceEnd();
                changed.awaitNanos(Math.max(until - now, 0) + 10_000_000L);
            }
            if (err != null) {
                throw err.forOp(op, path);
            }
            return ll.renewals();
        } catch (InterruptedException e) {
            Scope sc = Scope.current();
            if (sc != null && sc.firedKind() != null) {
                sc.check(op, path); // the scope's interrupt: its error, the flag is cleared when it ends
            }
            Thread.currentThread().interrupt();
            throw new ChubbyException(ChubbyException.Kind.INTERRUPTED, null, op, path,
                    "interrupted while the session was in jeopardy", null, null, e, false);
        } finally {
            mu.unlock();
        }
    }

    /** Records a numbered call in flight; returns the floor: the lowest number still in flight. */
    private long beginRequest(long seq) {
        synchronized (inflight) {
            inflight.add(seq);
            return inflight.first();
        }
    }

    /** Records that a numbered call is finished: it will not be resent. */
    private void endRequest(long seq) {
        synchronized (inflight) {
            inflight.remove(seq);
        }
    }

    // ------------------------------------------------------------------
    // Events

    private void beginOpen() {
        synchronized (evMu) {
            opening++;
        }
    }

    /** An Open begun with beginOpen returned; h (null if it failed) receives its events from now on. */
    private void endOpen(Handle h) {
        synchronized (evMu) {
            opening--;
            if (h != null && !isEnded()) {
                watchers.put(h.wireId(), h);
                for (Iterator<chubby.Event> it = early.iterator(); it.hasNext(); ) {
                    chubby.Event e = it.next();
                    if (e.getHandle() == h.wireId()) {
                        it.remove();
                        pushHandleEvent(h, e);
                    }
                }
            } else if (h != null) {
                h.closeEvents();
            }
            if (opening == 0) {
                early.clear(); // what is left is for handles nobody will see
            }
        }
    }

    /** Stops event delivery to h. */
    void unwatch(Handle h) {
        synchronized (evMu) {
            if (watchers.get(h.wireId()) == h) {
                watchers.remove(h.wireId());
            }
        }
        h.closeEvents();
    }

    private void closeWatchers() {
        List<Handle> ws;
        synchronized (evMu) {
            ws = new ArrayList<>(watchers.values());
            watchers.clear();
            early.clear();
        }
        for (Handle h : ws) {
            h.closeEvents();
        }
    }

    /** The seq to acknowledge on the next KeepAlive: the highest received. */
    private long acked() {
        synchronized (evMu) {
            return lastSeq;
        }
    }

    /**
     * Delivers the events of a KeepAlive reply, in order: each seq once (a
     * new master may send again what the old one sent), MASTER_FAILED_OVER
     * as MASTER_CHANGED. Called by the KeepAlive thread; never blocks.
     */
    private void deliverEvents(List<chubby.Event> evs) {
        if (evs == null) {
            return;
        }
        for (chubby.Event e : evs) {
            if (e == null) {
                continue;
            }
            if (e.getKind() == chubby.EventKind.MASTER_FAILED_OVER) {
                noteEpoch(e.getEpoch());
                continue;
            }
            synchronized (evMu) {
                if (e.getSeq() <= lastSeq) {
                    continue; // had it already
                }
                long next = lastSeq + 1;
                lastSeq = e.getSeq();
                long first = e.getSeq();
                if (e.getKind() == chubby.EventKind.EVENTS_LOST) {
                    first = Math.max(e.getLost_from(), next);
                }
                if (first > next) {
                    // A gap the cell did not mark: say so as the cell would have.
                    chubby.Event gap = new chubby.Event(first - 1, chubby.EventKind.EVENTS_LOST, e.getTime_ms());
                    gap.setLost_from(next);
                    lostLocked(gap);
                }
                if (e.getKind() == null) {
                    continue; // a kind this library does not know: received (so acknowledged), not delivered
                }
                if (e.getKind() == chubby.EventKind.EVENTS_LOST) {
                    chubby.Event lost = new chubby.Event(e.getSeq(), e.getKind(), e.getTime_ms());
                    lost.setLost_from(first);
                    lostLocked(lost);
                    continue;
                }
                Handle h = watchers.get(e.getHandle());
                if (h != null) {
                    pushHandleEvent(h, e);
                    if (e.getKind() == chubby.EventKind.HANDLE_INVALID) {
                        watchers.remove(e.getHandle()); // nothing follows it
                    }
                } else if (opening > 0) {
                    if (early.size() == EARLY_EVENT_BUFFER) {
                        early.removeFirst();
                    }
                    early.addLast(e);
                }
                // Otherwise: an event for a handle closed meanwhile; dropped.
            }
        }
    }

    private void lostLocked(chubby.Event e) {
        long n = e.getSeq() - e.getLost_from() + 1;
        emit(SessionEvent.Kind.LOST_EVENTS, epoch(), null, n);
        for (Handle h : watchers.values()) {
            pushHandleEvent(h, e);
        }
    }

    private void pushHandleEvent(Handle h, chubby.Event e) {
        h.pushEvent(Event.fromWire(e));
        if (e.getKind() == chubby.EventKind.HANDLE_INVALID) {
            h.closeEvents();
        }
    }

    // ------------------------------------------------------------------
    // The KeepAlive loop

    private void wake() {
        synchronized (signal) {
            signalled = true;
            signal.notifyAll();
        }
    }

    /** One KeepAlive in flight. */
    private final class Attempt {
        final String addr;
        final long sent; // before sending: the lease it renews counts from here
        final CompletableFuture<chubby.KeepAliveResponse> f = new CompletableFuture<>();
        volatile Pool.Conn conn;
        volatile boolean aborted;

        Attempt(String addr, long sent) {
            this.addr = addr;
            this.sent = sent;
        }

        void abort() {
            aborted = true;
            Pool.Conn c = conn;
            if (c != null) {
                c.close();
            }
        }
    }

    private Attempt sendKeepAlive(long grantedNanos) {
        cell.master.maybeRefresh();
        String addr = cell.master.addr();
        chubby.KeepAliveItem item = new chubby.KeepAliveItem(id);
        long acked = acked();
        if (acked > 0) {
            item.setAcked_event(acked); // what earlier replies delivered: the cell may forget it
        }
        long inv = cache == null ? 0 : cache.ackSeq();
        if (inv > 0) {
            item.setAcked_invalidation(inv); // our copies of those nodes are gone: the master may go on
        }
        chubby.KeepAliveRequest req = new chubby.KeepAliveRequest(List.of(item));
        req.setEpoch(epoch());
        // The master parks it for up to the lease.
        int timeout = (int) Math.min(Integer.MAX_VALUE, grantedNanos / 1_000_000L + cell.opts.callTimeoutMs());
        Attempt a = new Attempt(addr, System.nanoTime());
        a.f.whenComplete((r, e) -> wake());
        try {
            cell.exec.execute(() -> {
                try {
                    a.f.complete(cell.pool.invoke(addr, false, timeout, c -> {
                        a.conn = c;
                        if (a.aborted) {
                            throw new TTransportException("KeepAlive abandoned");
                        }
                        return c.session.KeepAlive(req);
                    }));
                } catch (Throwable e) {
                    a.f.completeExceptionally(e);
                }
            });
        } catch (RejectedExecutionException e) {
            a.f.completeExceptionally(e);
        }
        return a;
    }

    private void runLoop() {
        Runnable onRound = this::wake;
        cell.master.onRoundEnd(onRound);
        Loop l = new Loop();
        try {
            while (l.turn()) {
                // each turn waits, bounded by the lease or grace end
            }
        } catch (RuntimeException e) {
            end(expired("the KeepAlive thread failed: " + e), true);
        } finally {
            if (l.cur != null) {
                l.cur.abort();
            }
            cell.master.removeRoundEnd(onRound);
            loopDone.countDown();
        }
    }

    /** The state of the KeepAlive loop (the Go client's kaLoop). */
    private final class Loop {
        Attempt cur; // the KeepAlive in flight, or null
        long retryAt = System.nanoTime(); // when cur is null: when to send the next one
        int failures; // failed attempts in a row, for the backoff
        int quick; // immediate resends in a row
        CompletableFuture<Void> locating; // a locate round the loop waits for, or null
        long probeAt; // in jeopardy: when to start the next locate round
        // lost: the replica the last KeepAlive failed at without learning where
        // the master is (null after a reply); lostRefused: it answered
        // NOT_MASTER. roundWait: the next KeepAlive waits for locating to end.
        // wakes: KeepAlives a round sent before their backoff ended, since the
        // last reply.
        String lost;
        boolean lostRefused;
        boolean roundWait;
        int wakes;

        boolean turn() {
            long seenRounds = cell.master.roundsEnded();
            long now = System.nanoTime();
            LocalLease.Transition tr;
            SessionState state;
            long leaseEnd, graceEnd, granted;
            mu.lock();
            try {
                if (err != null) {
                    return false;
                }
                tr = ll.step(now);
                state = stateLocked(now);
                leaseEnd = ll.leaseEnd();
                graceEnd = ll.graceEnd();
                granted = ll.lease();
            } finally {
                mu.unlock();
            }
            if (tr == LocalLease.Transition.ENTERED_JEOPARDY) {
                enterJeopardy();
                probeAt = now; // look for the master at once
                return true;
            }
            if (tr == LocalLease.Transition.GRACE_OVER) {
                end(expired("no KeepAlive reply within the grace period (" + Duration.ofNanos(graceNanos)
                        + ") after the local lease ended"), true);
                return false;
            }
            boolean jeopardy = state == SessionState.JEOPARDY;
            boolean held = roundWait && locating != null;
            if (cur == null && !held && now - retryAt >= 0) {
                cur = sendKeepAlive(granted);
            }
            if (jeopardy && cur != null && locating == null && now - probeAt >= 0) {
                locating = cell.master.locate();
                probeAt = now + JEOPARDY_PROBE_NANOS;
            }
            long wakeAt = jeopardy ? graceEnd : leaseEnd;
            if (cur == null && !held && retryAt - wakeAt < 0) {
                wakeAt = retryAt;
            }
            if (jeopardy && cur != null && locating == null && probeAt - wakeAt < 0) {
                wakeAt = probeAt;
            }
            try {
                synchronized (signal) {
                    while (!signalled && !isEnded()) {
                        if ((cur != null && cur.f.isDone()) || (locating != null && locating.isDone())
                                || cell.master.roundsEnded() != seenRounds) {
                            break;
                        }
                        long left = wakeAt - System.nanoTime();
                        if (left <= 0) {
                            break;
                        }
                        TimeUnit.NANOSECONDS.timedWait(signal, left);
                    }
                    signalled = false;
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                end(expired("the KeepAlive thread was interrupted"), true);
                return false;
            }
            if (isEnded()) {
                return false;
            }
            if (cur != null && cur.f.isDone() && !replied(state, leaseEnd)) {
                return false;
            }
            if (locating != null && locating.isDone()) {
                roundOver(true);
            } else if (cell.master.roundsEnded() != seenRounds) {
                roundOver(false);
            }
            return true;
        }

        /** A locate round ended: ours (the loop waited for it) or anyone's. */
        void roundOver(boolean ours) {
            if (locating != null && locating.isDone()) {
                locating = null;
                ours = true;
            }
            if (locating == null) {
                roundWait = false;
            }
            Master.Located loc = cell.master.lastLocated();
            if (loc.addr().isEmpty()) {
                return;
            }
            long now = System.nanoTime();
            if (cur != null && ours && !loc.addr().equals(cur.addr)) {
                // The replicas say the master is elsewhere: go there rather
                // than wait for a reply that may never come.
                cur.abort();
                cur = null;
                retryAt = now;
            } else if (cur == null && lost != null
                    && (!loc.addr().equals(lost) || lostRefused || loc.epoch() > epoch())
                    && retryAt - now > 0 && wakes < MAX_QUICK_KEEPALIVES) {
                // Found where the KeepAlive failed to go: go there now.
                wakes++;
                retryAt = now;
            }
        }

        /** Handles the outcome of the KeepAlive in flight; false when the loop is over. */
        boolean replied(SessionState state, long leaseEnd) {
            Attempt a = cur;
            cur = null;
            Throwable failure = null;
            try {
                failure = applyKeepAlive(a.sent, a.f.join());
            } catch (CompletionException e) {
                failure = e.getCause() != null ? e.getCause() : e;
            } catch (RuntimeException e) {
                failure = e;
            }
            if (failure == null) {
                failures = 0;
                quick = 0;
                wakes = 0;
                retryAt = System.nanoTime();
                lost = null;
                return true;
            }
            if (isEnded()) {
                return false;
            }
            Verdict v = keepAliveFailed(a.addr, failure);
            if (v == Verdict.FATAL) {
                return false;
            }
            if (v == Verdict.RESEND_NOW && quick < MAX_QUICK_KEEPALIVES) {
                quick++;
                retryAt = System.nanoTime();
                return true;
            }
            quick = 0;
            long d = Cell.backoffMs(KA_BACKOFF_BASE_MS, KA_BACKOFF_MAX_MS, failures);
            failures++;
            retryAt = System.nanoTime() + d * 1_000_000L;
            lost = null;
            lostRefused = false;
            roundWait = false;
            if ((v == Verdict.LOCATE || v == Verdict.LOCATE_REFUSED) && cell.master.multi()) {
                if (locating == null) {
                    locating = cell.master.locate();
                }
                lost = a.addr;
                lostRefused = v == Verdict.LOCATE_REFUSED;
                roundWait = true;
            }
            return true;
        }
    }

    /** What keepAliveFailed decided. */
    private enum Verdict {
        /** The session has ended. */
        FATAL,
        /** The failure said where to go: resend without a backoff. */
        RESEND_NOW,
        /** Nobody said where the master is: ask the replicas. */
        LOCATE,
        /** As LOCATE; the replica answered NOT_MASTER (it is alive). */
        LOCATE_REFUSED,
        /** Back off and resend. */
        RETRY
    }

    /**
     * Records a KeepAlive reply to a request sent at sent. Returns null when it
     * renewed the session, else the failure it amounts to.
     */
    private Throwable applyKeepAlive(long sent, chubby.KeepAliveResponse r) {
        noteEpoch(r.getEpoch());
        if (r.getResults() == null) {
            return new IllegalStateException("KeepAlive reply without results");
        }
        for (chubby.LeaseGrant g : r.getResults()) {
            if (g == null || g.getSession() != id) {
                continue;
            }
            if (g.isSetError()) {
                return g.getError();
            }
            if (g.getLease_ms() <= 0 || g.getLease_ms() > 3_600_000L) {
                return new IllegalStateException("KeepAlive reply grants a lease of " + g.getLease_ms() + " ms");
            }
            if (cache != null) {
                cache.apply(g); // before the next KeepAlive, which acknowledges it
            }
            long now = System.nanoTime();
            int renewed;
            long epoch;
            mu.lock();
            try {
                if (err != null) {
                    return null;
                }
                // The local lease ran out before this reply (the loop may not
                // have seen it yet): the master may have stopped waiting for
                // our acknowledgements, so the cache goes before the session
                // is safe again.
                if (cache != null && now - ll.leaseEnd() >= 0) {
                    cache.flush();
                }
                // A reply so late that its lease is already over renews
                // nothing the client can rely on.
                renewed = ll.renew(sent, g.getLease_ms() * 1_000_000L, now);
                epoch = ll.epoch();
                changed.signalAll();
            } finally {
                mu.unlock();
            }
            if (renewed == 2) {
                emit(SessionEvent.Kind.SAFE, epoch, null, 0);
            }
            deliverEvents(g.getEvents());
            return null;
        }
        return new IllegalStateException("KeepAlive reply has no result for session " + id);
    }

    /** Handles a failed KeepAlive sent to addr (the Go client's keepAliveFailed). */
    private Verdict keepAliveFailed(String addr, Throwable failure) {
        if (failure instanceof chubby.ChubbyError ce) {
            ErrorCode code = ce.getCode();
            if (code == ErrorCode.SESSION_EXPIRED) {
                boolean c;
                mu.lock();
                c = closing;
                mu.unlock();
                if (c) {
                    end(closedError(), false);
                } else {
                    end(expired("the cell ended it: " + ce.getMessage()), true);
                }
                return Verdict.FATAL;
            }
            if (code == ErrorCode.NOT_MASTER) {
                if (ce.isSetEpoch()) {
                    noteEpoch(ce.getEpoch());
                }
                return cell.master.redirect(addr, ce.getMaster_address()) ? Verdict.RESEND_NOW : Verdict.LOCATE_REFUSED;
            }
            if (code == ErrorCode.STALE_EPOCH) {
                // A new master refused the old epoch: adopt its epoch and resend at once.
                if (ce.isSetEpoch() && ce.getEpoch() > epoch()) {
                    noteEpoch(ce.getEpoch());
                    return Verdict.RESEND_NOW;
                }
                return Verdict.LOCATE;
            }
            if (code == ErrorCode.UNAVAILABLE) {
                return Verdict.LOCATE; // a replica shutting down or overloaded: perhaps the master moved
            }
            return Verdict.RETRY;
        }
        if (failure instanceof Pool.Unsent || failure instanceof Pool.Lost) {
            cell.master.unreachable(addr);
            return Verdict.LOCATE;
        }
        return Verdict.RETRY;
    }
}
