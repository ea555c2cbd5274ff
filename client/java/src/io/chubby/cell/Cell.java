package io.chubby.cell;

import chubby.ErrorCode;
import chubby.chubbyConstants;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Predicate;
import org.apache.thrift.TException;
import org.apache.thrift.transport.TTransportException;

/**
 * A connection to one Chubby cell: its replicas, the master among them, and
 * the calls that need no session. Sessions ({@link #newSession()}) hold
 * locks and open nodes.
 *
 * <p>Calls go to the replica believed to be the master. A NOT_MASTER refusal
 * that names the master (its master_address) moves them there; one that
 * does not, or a replica that cannot be reached, moves them to the next known
 * replica and asks every known replica where the master is (GetMaster; the
 * highest epoch wins). A call is sent again at most 6 times, with a backoff
 * of 50 ms doubling to 1 s, and only when that is safe: reads and
 * CreateSession after NOT_MASTER, UNAVAILABLE or a broken connection; calls
 * that change the cell and carry a request id (exactly-once: see
 * {@link Session}) also after a timeout or a lost reply; Acquire and
 * CloseSession only when they certainly did nothing (NOT_MASTER, or no
 * connection). Broken connections are closed and new ones made on the next
 * call.
 *
 * <p>Thread-safe: any number of threads may share a Cell and its sessions.
 */
public final class Cell implements AutoCloseable {
    /** Attempts of one call, first included. */
    static final int MAX_ATTEMPTS = 6;
    /** Backoff between attempts: base·2^n, jittered into [d/2, d), at most max. */
    static final long BACKOFF_BASE_MS = 50, BACKOFF_MAX_MS = 1000;
    /** Redirects of one call sent at once, without a pause. */
    static final int MAX_QUICK_REDIRECTS = 2;
    /** Addresses accepted by connect. */
    static final int MAX_SEED_ADDRS = 64;

    /**
     * Test hook: when set, a successful reply to a call whose operation it
     * accepts is dropped, as if the connection had failed after the cell
     * applied the call, so tests can check that retries are exactly-once.
     * Never set by the library.
     */
    static volatile Predicate<String> dropReply;

    /** How calls are resent (see the class comment). */
    enum Retry {
        /** Reads and CreateSession: resent on NOT_MASTER, UNAVAILABLE, a broken connection. */
        SAFE,
        /** Calls that change the cell without a request id: resent only when certainly not applied. */
        UNSENT,
        /** Calls with a request id: resent after any failure that may pass, timeouts included. */
        ONCE
    }

    final CellOptions opts;
    final Pool pool;
    final Master master;
    final ExecutorService exec;
    /** Fires the scopes' deadlines. */
    final ScheduledExecutorService timer;
    /** Batches the timestamps calls. */
    final Timestamps ts = new Timestamps(this);
    private final Set<Session> sessions = java.util.concurrent.ConcurrentHashMap.newKeySet();
    private volatile boolean closed;

    private Cell(List<String> seeds, CellOptions opts) {
        this.opts = opts;
        this.pool = new Pool(opts);
        AtomicInteger n = new AtomicInteger();
        ThreadFactory tf = r -> {
            Thread t = new Thread(r, "chubby-cell-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
        this.exec = Executors.newCachedThreadPool(tf);
        this.timer = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "chubby-cell-timer");
            t.setDaemon(true);
            return t;
        });
        this.master = new Master(seeds, pool, exec);
    }

    /**
     * Connects to the cell whose replicas include addrs (host:port each; one
     * is enough: the others are learned from the cell), with default
     * options. It asks the replicas where the master is and fails if none
     * answers.
     *
     * @param addrs replica addresses, host:port (IPv6 hosts in brackets)
     * @return the connected cell; close it when done
     * @throws ChubbyException INVALID_ARGUMENT for a bad address; UNREACHABLE
     *     when no replica answered
     */
    public static Cell connect(List<String> addrs) throws ChubbyException {
        return connect(addrs, new CellOptions());
    }

    /**
     * Connects to the cell whose replicas include addrs, with options (see
     * {@link CellOptions}; unless {@link CellOptions#lazy(boolean)} it asks
     * the replicas where the master is and fails if none answers).
     *
     * @param addrs replica addresses, host:port (IPv6 hosts in brackets); repeats are dropped
     * @param options the options (copied)
     * @return the connected cell; close it when done
     * @throws ChubbyException INVALID_ARGUMENT for a bad address or option;
     *     UNREACHABLE when no replica answered
     */
    public static Cell connect(List<String> addrs, CellOptions options) throws ChubbyException {
        if (options == null) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "connect", null, "options are null");
        }
        CellOptions o = options.copy();
        o.validate();
        if (o.tls == null) {
            o.tls = Tls.fromEnv();
        }
        if (addrs == null || addrs.isEmpty()) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "connect", null, "no replica addresses");
        }
        if (addrs.size() > MAX_SEED_ADDRS) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "connect", null,
                    addrs.size() + " addresses, at most " + MAX_SEED_ADDRS + " allowed");
        }
        Set<String> seeds = new LinkedHashSet<>();
        for (String a : addrs) {
            String why = Check.addrProblem(a);
            if (why != null) {
                throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "connect", null, why);
            }
            seeds.add(a);
        }
        Cell c = new Cell(new ArrayList<>(seeds), o);
        if (!o.lazy) {
            try {
                c.getMaster();
            } catch (ChubbyException e) {
                c.close();
                throw e;
            }
        }
        return c;
    }

    /**
     * Creates a session and starts the thread that keeps it alive.
     * CreateSession is resent on NOT_MASTER, UNAVAILABLE and broken
     * connections (bounded): a session created by an attempt whose reply was
     * lost is never kept alive and ends after one lease.
     *
     * @return the session; close it when done
     * @throws ChubbyException if no session could be created
     */
    public Session newSession() throws ChubbyException {
        long sent = System.nanoTime();
        chubby.CreateSessionRequest req = new chubby.CreateSessionRequest(opts.clientName);
        if (opts.cache) {
            req.setCache(true); // the master then invalidates our copies before changes
        }
        chubby.CreateSessionResponse r = call("create-session", null, Retry.SAFE, opts.callTimeoutMs(),
                c -> c.session.CreateSession(req));
        if (r.getLease_ms() <= 0 || r.getSession() <= 0) {
            throw new ChubbyException(ChubbyException.Kind.TRANSPORT, null, "create-session", null,
                    "the cell granted session " + r.getSession() + " a lease of " + r.getLease_ms() + " ms",
                    null, null, null, false);
        }
        Session s = new Session(this, r.getSession(), sent, r.getLease_ms(), r.getEpoch());
        sessions.add(s);
        if (closed) {
            s.endLocally(closedError("create-session"));
            throw closedError("create-session");
        }
        s.start();
        return s;
    }

    void removeSession(Session s) {
        sessions.remove(s);
    }

    /**
     * Asks where the master is (GetMaster, answered by any replica) and
     * moves calls there; the known replicas follow the configuration it
     * names.
     *
     * @return the master's address, epoch, id and the cell's replicas
     * @throws ChubbyException if no replica answered
     */
    public MasterInfo getMaster() throws ChubbyException {
        String[] from = new String[1];
        chubby.GetMasterResponse r = call("get-master", null, Retry.SAFE, opts.callTimeoutMs(), c -> {
            from[0] = c.addr;
            return c.cell.GetMaster(new chubby.GetMasterRequest());
        });
        master.adopt(from[0], r.getMaster_address(), r.getReplicas());
        master.learned(r.getMaster_address());
        List<String> reps = new ArrayList<>();
        if (r.getReplicas() != null) {
            for (String a : r.getReplicas()) {
                if (a != null && Check.addrProblem(a) == null && reps.size() < Master.MAX_REPLICAS) {
                    reps.add(a);
                }
            }
        }
        return new MasterInfo(r.getMaster_address(), r.getEpoch(), r.getMaster_id(), List.copyOf(reps));
    }

    /**
     * Asks the cell whether seq still names a held lock (CheckSequencer: the
     * lock is held in that mode, at that generation, on that instance of
     * the node). Downstream servers call it with the sequencers lock holders
     * send them; it needs no session.
     *
     * @param seq the sequencer to check
     * @return whether it is valid, and why not
     * @throws ChubbyException INVALID_ARGUMENT for a malformed sequencer, or the call's failure
     */
    public SequencerCheck checkSequencer(Sequencer seq) throws ChubbyException {
        if (seq == null) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "check-sequencer", null, "sequencer is null");
        }
        seq.validate("check-sequencer");
        chubby.CheckSequencerRequest req = new chubby.CheckSequencerRequest(seq.toWire());
        chubby.CheckSequencerResponse r = call("check-sequencer", seq.path(), Retry.SAFE, opts.callTimeoutMs(),
                c -> c.lock.CheckSequencer(req));
        return new SequencerCheck(r.isValid(), r.getReason() == null ? "" : r.getReason());
    }

    /**
     * Returns one timestamp from the cell's oracle ({@link #timestamps(int)}
     * with n = 1).
     *
     * @return the timestamp, above 0
     * @throws ChubbyException the call's failure
     */
    public long timestamp() throws ChubbyException {
        return timestamps(1);
    }

    /**
     * Returns n strictly increasing timestamps from the cell's oracle
     * (GetTimestamps): first .. first+n-1, each larger than every timestamp
     * the cell handed out before this call began, to anyone, across
     * failovers and restarts. They are counters, not clock readings. The call
     * is resent like a read (a lost reply only skips timestamps). Concurrent
     * calls are batched, as the Go client batches them: while two
     * GetTimestamps are in flight the others gather into one, sent when one
     * comes back (each caller's timestamps still come from a request sent
     * after it asked). A caller whose deadline passes, or that is
     * cancelled, stops waiting; its share of the batch is skipped.
     *
     * @param n how many, 1 .. MAX_TIMESTAMPS_PER_CALL
     * @return the first of them
     * @throws ChubbyException INVALID_ARGUMENT for n out of range, TRANSPORT
     *     for an answer that does not match the request, or the call's failure
     */
    public long timestamps(int n) throws ChubbyException {
        if (n < 1 || n > chubbyConstants.MAX_TIMESTAMPS_PER_CALL) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "timestamps", null,
                    "count " + n + " outside [1, " + chubbyConstants.MAX_TIMESTAMPS_PER_CALL + "]");
        }
        return ts.take(n);
    }

    /** One GetTimestamps call of n, resent like a read (a lost reply only skips timestamps). */
    long getTimestamps(int n) throws ChubbyException {
        chubby.GetTimestampsRequest req = new chubby.GetTimestampsRequest(n);
        chubby.GetTimestampsResponse r = call("timestamps", null, Retry.SAFE, opts.callTimeoutMs(),
                c -> c.oracle.GetTimestamps(req));
        if (r.getCount() != n || r.getFirst() < 1) {
            throw new ChubbyException(ChubbyException.Kind.TRANSPORT, null, "timestamps", null,
                    "the cell answered " + r.getCount() + " timestamps from " + r.getFirst() + ", not " + n,
                    null, null, null, false);
        }
        return r.getFirst();
    }

    /**
     * Asks the cell which principal it takes this client for (WhoAmI): the
     * one every ACL check of its sessions uses. Resent like a read.
     *
     * @return the principal ("anonymous" without a client certificate) and
     *     whether the connection is TLS
     * @throws ChubbyException the call's failure
     */
    public Identity whoAmI() throws ChubbyException {
        chubby.WhoAmIResponse r = call("whoami", null, Retry.SAFE, opts.callTimeoutMs(), c -> c.cell.WhoAmI());
        return new Identity(r.getPrincipal() == null ? "" : r.getPrincipal(), r.isTls());
    }

    /** Longest deadline accepted (the longest Acquire wait, and then some). */
    static final Duration MAX_DEADLINE = Duration.ofHours(1);

    private static long deadlineOf(String op, Duration d) throws ChubbyException {
        if (d == null || d.isNegative() || d.isZero() || d.compareTo(MAX_DEADLINE) > 0) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, op, null,
                    "deadline " + d + " outside (0, " + MAX_DEADLINE + "]");
        }
        return System.nanoTime() + d.toNanos();
    }

    /**
     * Runs body on this thread with every call it makes bounded by one
     * deadline, timeout from now: each attempt's socket timeout and each
     * Acquire's wait are cut to what is left, no call is resent after it,
     * and when it passes the call in flight is abandoned (its TCP socket
     * closed, any wait of the library interrupted) and fails with
     * {@link ChubbyException.Kind#DEADLINE_EXCEEDED} (an Acquire whose cut
     * wait the cell ends first: with the cell's TIMED_OUT). A call that
     * changes the cell and was abandoned may or may not have taken effect.
     * Deadlines nest: an inner one is bounded by the outer. The KeepAlive
     * thread is not affected, and a connection being opened is bounded by
     * the connect timeout, not abandoned.
     *
     * @param <T> what body returns
     * @param timeout how long the calls may take together, up to 1 hour
     * @param body the calls
     * @return body's result
     * @throws ChubbyException DEADLINE_EXCEEDED, or a call's own failure
     */
    public <T> T withDeadline(Duration timeout, CellCall<T> body) throws ChubbyException {
        long deadline = deadlineOf("deadline", timeout);
        if (body == null) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "deadline", null, "body is null");
        }
        Scope sc = new Scope(Scope.current(), deadline);
        java.util.concurrent.ScheduledFuture<?> alarm;
        try {
            alarm = timer.schedule(() -> sc.fire(ChubbyException.Kind.DEADLINE_EXCEEDED), timeout.toNanos(), TimeUnit.NANOSECONDS);
        } catch (RejectedExecutionException e) {
            throw closedError("deadline");
        }
        try {
            return Scope.run(sc, body, "deadline");
        } finally {
            alarm.cancel(false);
        }
    }

    /**
     * Runs body on a thread of the library and returns its future, with no
     * deadline (see {@link #async(Duration, CellCall)}).
     *
     * @param <T> what body returns
     * @param body the calls
     * @return the future of body's result
     */
    public <T> CompletableFuture<T> async(CellCall<T> body) {
        return start(body, Long.MAX_VALUE, null);
    }

    /**
     * Runs body on a thread of the library and returns its future; the
     * calls body makes are bounded by a deadline, timeout from now, as in
     * {@link #withDeadline}. The future fails with a ChubbyException:
     * DEADLINE_EXCEEDED at the deadline, at once, even if the abandoned call
     * takes longer to unwind. Cancelling the future (or completing it from
     * outside, as {@link CompletableFuture#orTimeout} does) abandons the
     * call in flight the same way, at once: its connection is closed, and the
     * library neither resends it nor starts another. An abandoned Acquire
     * may still be granted by the cell until its wait passes (the cell keeps
     * the wait it queued): close the handle if it must hold nothing.
     *
     * @param <T> what body returns
     * @param timeout how long the calls may take together, up to 1 hour
     * @param body the calls
     * @return the future of body's result; it fails with INVALID_ARGUMENT
     *     for a bad timeout or a null body
     */
    public <T> CompletableFuture<T> async(Duration timeout, CellCall<T> body) {
        long deadline;
        try {
            deadline = deadlineOf("async", timeout);
        } catch (ChubbyException e) {
            return CompletableFuture.failedFuture(e);
        }
        return start(body, deadline, timeout);
    }

    private <T> CompletableFuture<T> start(CellCall<T> body, long deadline, Duration timeout) {
        if (body == null) {
            return CompletableFuture.failedFuture(
                    ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "async", null, "body is null"));
        }
        CompletableFuture<T> f = new CompletableFuture<>();
        Scope sc = new Scope(null, deadline);
        // Completed from outside (cancel, orTimeout, complete): abandon the
        // call. Once body has completed it, this does nothing.
        f.whenComplete((v, e) -> sc.fire(ChubbyException.Kind.CANCELLED));
        try {
            if (timeout != null) {
                java.util.concurrent.ScheduledFuture<?> alarm = timer.schedule(() -> {
                    sc.fire(ChubbyException.Kind.DEADLINE_EXCEEDED);
                    f.completeExceptionally(sc.error(ChubbyException.Kind.DEADLINE_EXCEEDED, "async", null, null));
                }, timeout.toNanos(), TimeUnit.NANOSECONDS);
                f.whenComplete((v, e) -> alarm.cancel(false));
            }
            exec.execute(() -> {
                try {
                    T v = Scope.run(sc, body, "async");
                    sc.done();
                    f.complete(v);
                } catch (ChubbyException e) {
                    sc.done();
                    f.completeExceptionally(e);
                } catch (RuntimeException | Error e) {
                    sc.done();
                    f.completeExceptionally(e);
                }
            });
        } catch (RejectedExecutionException e) {
            f.completeExceptionally(closedError("async"));
        }
        return f;
    }

    /**
     * The replica calls go to now: the master, as far as this client knows.
     *
     * @return its address
     */
    public String currentMaster() {
        return master.addr();
    }

    /**
     * The replicas this client knows: the configured ones until the cell
     * names its configuration, then its members.
     *
     * @return their addresses
     */
    public List<String> replicas() {
        return master.replicas();
    }

    /**
     * Closes every session of this cell (as {@link Session#close()} does),
     * then every connection. Calls in flight fail with kind CLOSED. Closing
     * twice does nothing.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        for (Session s : List.copyOf(sessions)) {
            try {
                s.close();
            } catch (ChubbyException e) {
                // The session ends locally anyway; the cell ends it after its lease.
            }
        }
        closed = true;
        pool.close();
        exec.shutdownNow();
        timer.shutdownNow();
    }

    boolean isClosed() {
        return closed;
    }

    ChubbyException closedError(String op) {
        return new ChubbyException(ChubbyException.Kind.CLOSED, null, op, null, "the cell connection is closed",
                null, null, null, false);
    }

    /** The pause before retry number attempt (0 for the first retry), in ms. */
    static long backoffMs(long base, long max, int attempt) {
        long d = base;
        for (int i = 0; i < attempt && d < max; i++) {
            d *= 2;
        }
        d = Math.min(d, max);
        return d / 2 + (long) ((d / 2) * ThreadLocalRandom.current().nextDouble());
    }

    /**
     * Sends fn to the master guess, resending as cls allows, at most
     * MAX_ATTEMPTS times with a bounded backoff. A failure is a
     * ChubbyException; one marked retryable gave up only because its attempts
     * ran out on failures cls allows to resend (no master could be reached).
     */
    <T> T call(String op, String path, Retry cls, int timeoutMs, Pool.Rpc<T> fn) throws ChubbyException {
        int redirects = 0;
        master.maybeRefresh();
        Scope sc = Scope.current();
        for (int attempt = 0; ; attempt++) {
            if (closed) {
                throw closedError(op);
            }
            if (sc != null) {
                sc.check(op, path);
            }
            String addr = master.addr();
            boolean hinted = false, refused = false;
            ChubbyException cause;
            try {
                T v = pool.invoke(addr, cls == Retry.UNSENT, sc == null ? timeoutMs : sc.clampMs(timeoutMs), fn);
                Predicate<String> drop = dropReply;
                if (drop != null && drop.test(op)) {
                    throw new Pool.Lost(addr, new TTransportException("reply dropped by the test hook"), false);
                }
                return v;
            } catch (chubby.ChubbyError e) {
                cause = ChubbyException.fromCell(e, op, path);
                if (cause.is(ErrorCode.NOT_MASTER)) {
                    // A refused call did nothing: safe to send again, whatever it is.
                    hinted = master.redirect(addr, cause.masterAddress());
                    refused = true;
                } else if (!cause.is(ErrorCode.UNAVAILABLE) || cls == Retry.UNSENT) {
                    throw cause;
                }
            } catch (Pool.Unsent e) {
                if (closed) {
                    throw closedError(op);
                }
                if (sc != null) {
                    sc.check(op, path); // abandoned: neither resent nor reported as a transport failure
                }
                // No connection: the request never left, so any call may be resent.
                master.unreachable(addr);
                cause = new ChubbyException(ChubbyException.Kind.UNREACHABLE, null, op, path, e.getMessage(),
                        null, null, e.getCause(), false);
            } catch (Pool.Lost e) {
                if (closed) {
                    throw closedError(op);
                }
                if (sc != null) {
                    sc.check(op, path); // abandoned: neither resent nor reported as a transport failure
                }
                cause = new ChubbyException(ChubbyException.Kind.TRANSPORT, null, op, path, e.getMessage(),
                        null, null, e.getCause(), false);
                boolean retry = e.timeout ? cls == Retry.ONCE : cls != Retry.UNSENT;
                if (!retry) {
                    throw cause;
                }
                master.unreachable(addr);
            } catch (TException e) {
                if (closed) {
                    throw closedError(op);
                }
                if (sc != null) {
                    sc.check(op, path); // abandoned: neither resent nor reported as a transport failure
                }
                // A protocol or application error: not a passing failure.
                throw new ChubbyException(ChubbyException.Kind.TRANSPORT, null, op, path, String.valueOf(e.getMessage()),
                        null, null, e, false);
            }
            if (attempt + 1 >= MAX_ATTEMPTS) {
                throw cause.withRetryable(true);
            }
            try {
                // The backoff counts from the failure: a locate round is part of
                // the pause, not added to it.
                long resendAt = System.nanoTime() + backoffMs(BACKOFF_BASE_MS, BACKOFF_MAX_MS, attempt) * 1_000_000L;
                boolean multi = master.multi();
                long known = master.lastLocated().epoch();
                if (!hinted && multi) {
                    master.locateWait(); // nobody said where the master is: ask every replica
                }
                Master.Located loc = master.lastLocated();
                if (!loc.addr().isEmpty() && loc.epoch() > known && redirects < MAX_QUICK_REDIRECTS) {
                    redirects++; // a master of a newer epoch serves: go at once
                    continue;
                }
                boolean found = !master.addr().equals(addr) || (refused && !hinted && multi);
                if (found && redirects < MAX_QUICK_REDIRECTS) {
                    redirects++; // told (or found) where the master is: go at once
                    continue;
                }
                master.pause(resendAt, addr, refused, known);
            } catch (InterruptedException e) {
                if (sc != null && sc.firedKind() != null) {
                    sc.check(op, path); // the scope's interrupt: its error, the flag is cleared when it ends
                }
                Thread.currentThread().interrupt();
                throw new ChubbyException(ChubbyException.Kind.INTERRUPTED, null, op, path,
                        "interrupted while retrying: " + cause.getMessage(), null, null, e, false);
            }
        }
    }
}
