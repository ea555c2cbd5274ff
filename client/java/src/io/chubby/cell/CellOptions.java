package io.chubby.cell;

import chubby.ErrorCode;
import chubby.chubbyConstants;
import java.time.Duration;

/**
 * How {@link Cell#connect(java.util.List, CellOptions)} reaches a cell. The
 * setters return this options object, so they chain; {@code connect} checks
 * every value and copies them, so later changes do not affect a connected
 * {@link Cell}. Not thread-safe (fill it in on one thread).
 */
public final class CellOptions {
    /** The Thrift transport spoken to the cell (both are served on its one port). */
    public enum Transport {
        /** Framed: each message is preceded by its 4-byte length (the default). */
        FRAMED,
        /** Buffered: messages back to back on the stream. */
        BUFFERED
    }

    Duration callTimeout = Duration.ofSeconds(10);
    Duration connectTimeout = Duration.ofSeconds(2);
    Duration gracePeriod = Duration.ofSeconds(45);
    String clientName = "java-" + ProcessHandle.current().pid();
    Transport transport = Transport.FRAMED;
    boolean lazy;
    javax.net.ssl.SSLContext tls;
    boolean cache = true;

    /** Options with the defaults: see each setter. */
    public CellOptions() {}

    CellOptions copy() {
        CellOptions o = new CellOptions();
        o.callTimeout = callTimeout;
        o.connectTimeout = connectTimeout;
        o.gracePeriod = gracePeriod;
        o.clientName = clientName;
        o.transport = transport;
        o.lazy = lazy;
        o.tls = tls;
        o.cache = cache;
        return o;
    }

    /**
     * Bounds one attempt of a call (not a KeepAlive, which the master parks
     * for up to a lease, nor an Acquire, which waits for its lock: each of
     * those gets this much beyond its own wait). Default 10 s; 1 ms .. 10 min.
     *
     * @param d the timeout
     * @return this
     */
    public CellOptions callTimeout(Duration d) {
        callTimeout = d;
        return this;
    }

    /**
     * Bounds opening one connection to a replica. Default 2 s; 1 ms .. 1 min.
     *
     * @param d the timeout
     * @return this
     */
    public CellOptions connectTimeout(Duration d) {
        connectTimeout = d;
        return this;
    }

    /**
     * How long a session in jeopardy (its local lease ran out with no
     * KeepAlive reply) keeps looking for the master before it expires,
     * counted from the end of the local lease. Default 45 s (Chubby's);
     * 0 .. 10 min.
     *
     * @param d the grace period
     * @return this
     */
    public CellOptions gracePeriod(Duration d) {
        gracePeriod = d;
        return this;
    }

    /**
     * The name sessions are created with, shown to operators in the cell's
     * status. Default "java-&lt;pid&gt;"; 1..MAX_CLIENT_NAME_BYTES bytes.
     *
     * @param name the name
     * @return this
     */
    public CellOptions clientName(String name) {
        clientName = name;
        return this;
    }

    /**
     * The transport: {@link Transport#FRAMED} (default) or
     * {@link Transport#BUFFERED}.
     *
     * @param t the transport
     * @return this
     */
    public CellOptions transport(Transport t) {
        transport = t;
        return this;
    }

    /**
     * Connect without asking the cell anything: the first call goes to the
     * first address and finds the master from there (following NOT_MASTER).
     * Default false: connect asks the replicas where the master is, and fails
     * if none answers.
     *
     * @param lazy whether to connect lazily
     * @return this
     */
    public CellOptions lazy(boolean lazy) {
        this.lazy = lazy;
        return this;
    }

    /**
     * Speak mutual TLS to the cell's client port with ctx (see {@link Tls}:
     * {@link Tls#fromFiles} makes one from PEM files). Default null:
     * {@link Cell#connect} then builds one from the environment variables
     * the Go client reads (CHUBBY_TLS_CA, CHUBBY_TLS_CERT, CHUBBY_TLS_KEY,
     * CHUBBY_TLS_SERVER_NAME; {@link Tls#fromEnv()}), and without
     * CHUBBY_TLS_CA it speaks plaintext, for a cell started without TLS.
     * Only TLS 1.3 is offered, as the cell accepts nothing older.
     *
     * @param ctx the TLS context, or null for the default
     * @return this
     */
    public CellOptions tls(javax.net.ssl.SSLContext ctx) {
        tls = ctx;
        return this;
    }

    /**
     * Whether sessions cache file contents and Stats (default true, as the
     * Go client): a session's reads of a node are then answered from memory
     * while the session is safe, and the master invalidates the copy before
     * the node changes (see {@link Session}). Off: every read is a round trip
     * to the master.
     *
     * @param on whether to cache
     * @return this
     */
    public CellOptions cache(boolean on) {
        cache = on;
        return this;
    }

    /** Checks every value; throws INVALID_ARGUMENT naming the first bad one. */
    void validate() throws ChubbyException {
        within("callTimeout", callTimeout, Duration.ofMillis(1), Duration.ofMinutes(10));
        within("connectTimeout", connectTimeout, Duration.ofMillis(1), Duration.ofMinutes(1));
        within("gracePeriod", gracePeriod, Duration.ZERO, Duration.ofMinutes(10));
        if (clientName == null || clientName.isEmpty()) {
            throw bad("clientName is empty");
        }
        int bytes = clientName.getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
        if (bytes > chubbyConstants.MAX_CLIENT_NAME_BYTES) {
            throw bad("clientName is " + bytes + " bytes, at most " + chubbyConstants.MAX_CLIENT_NAME_BYTES + " allowed");
        }
        if (transport == null) {
            throw bad("transport is null");
        }
    }

    private static void within(String name, Duration d, Duration lo, Duration hi) throws ChubbyException {
        if (d == null) {
            throw bad(name + " is null");
        }
        if (d.compareTo(lo) < 0 || d.compareTo(hi) > 0) {
            throw bad(name + " " + d + " outside [" + lo + ", " + hi + "]");
        }
    }

    private static ChubbyException bad(String why) {
        return ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "connect", null, why);
    }

    int callTimeoutMs() {
        return (int) callTimeout.toMillis();
    }

    int connectTimeoutMs() {
        return (int) connectTimeout.toMillis();
    }
}
