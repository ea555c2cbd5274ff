package io.chubby.cell;

/**
 * The deadline and cancellation of the calls one thread makes inside
 * {@link Cell#withDeadline} or {@link Cell#async(CellCall)}. When it fires
 * (the deadline passes, or the future is cancelled or completed from
 * outside) the call in flight is abandoned: its TCP socket is closed, so a
 * blocked read ends at once, and the thread is interrupted out of any wait
 * (backoff, jeopardy); the library then neither resends the call nor starts
 * another and throws {@link #error}. Scopes nest: an inner one is bounded by
 * its outer ones too. Thread-safe.
 */
final class Scope {
    private static final ThreadLocal<Scope> CURRENT = new ThreadLocal<>();

    private final Scope parent;
    private final long deadline; // System.nanoTime; Long.MAX_VALUE: none
    private final Object mu = new Object();
    private ChubbyException.Kind fired; // guarded by mu
    private Pool.Conn conn; // the connection of the call in flight, guarded by mu
    private Thread thread; // the thread running the scope's body, guarded by mu
    private boolean interrupted; // fire interrupted thread, guarded by mu
    private boolean done; // the body is over, guarded by mu

    Scope(Scope parent, long deadline) {
        this.parent = parent;
        this.deadline = parent == null ? deadline : Math.min(deadline, parent.deadline);
    }

    /** The innermost scope of the calling thread, or null. */
    static Scope current() {
        return CURRENT.get();
    }

    /**
     * Runs body on this thread inside s: the calls it makes are s's until
     * it returns. A scope that fired turns a failure into its own error.
     */
    static <T> T run(Scope s, CellCall<T> body, String op) throws ChubbyException {
        Scope outer = CURRENT.get();
        synchronized (s.mu) {
            s.thread = Thread.currentThread();
        }
        CURRENT.set(s);
        try {
            T v = body.call();
            s.check(op, null);
            return v;
        } catch (ChubbyException e) {
            ChubbyException.Kind k = s.firedKind();
            if (k != null && e.kind() != ChubbyException.Kind.CELL && e.kind() != ChubbyException.Kind.LOCAL) {
                throw s.error(k, e.op(), e.path(), e);
            }
            throw e;
        } finally {
            boolean ours;
            synchronized (s.mu) {
                s.thread = null;
                ours = s.interrupted;
            }
            if (outer == null) {
                CURRENT.remove();
            } else {
                CURRENT.set(outer);
            }
            // A fire() that interrupted us must not leak into the caller (or
            // the pool thread's next task), unless an outer scope fired.
            if (ours && (outer == null || outer.firedKind() == null)) {
                Thread.interrupted();
            }
        }
    }

    /** The body is over: later fires do nothing. */
    void done() {
        synchronized (mu) {
            done = true;
        }
    }

    /** Fires the scope with kind: the call in flight is abandoned. Later fires do nothing. */
    void fire(ChubbyException.Kind kind) {
        Pool.Conn c;
        synchronized (mu) {
            if (fired != null || done) {
                return;
            }
            fired = kind;
            c = conn;
            if (thread != null) {
                thread.interrupt();
                interrupted = true;
            }
        }
        if (c != null) {
            c.abort();
        }
    }

    /** Why the scope (or an outer one) fired, or null: the deadline counts as fired once passed. */
    ChubbyException.Kind firedKind() {
        for (Scope s = this; s != null; s = s.parent) {
            synchronized (s.mu) {
                if (s.fired != null) {
                    return s.fired;
                }
            }
        }
        return deadline != Long.MAX_VALUE && System.nanoTime() - deadline >= 0 ? ChubbyException.Kind.DEADLINE_EXCEEDED : null;
    }

    /** Throws the scope's error if it fired. */
    void check(String op, String path) throws ChubbyException {
        ChubbyException.Kind k = firedKind();
        if (k != null) {
            throw error(k, op, path, null);
        }
    }

    ChubbyException error(ChubbyException.Kind k, String op, String path, Throwable cause) {
        String why = k == ChubbyException.Kind.CANCELLED ? "cancelled" : "at its deadline";
        return new ChubbyException(k, null, op, path, "abandoned " + why + " (a change may or may not have taken effect)",
                null, null, cause, false);
    }

    /** Clamps a timeout (ms) to what is left before the deadline, at least 1 ms. */
    int clampMs(long ms) {
        if (deadline == Long.MAX_VALUE) {
            return (int) Math.min(ms, Integer.MAX_VALUE);
        }
        long left = Math.max(1, (deadline - System.nanoTime() + 999_999) / 1_000_000);
        return (int) Math.min(Math.min(ms, left), Integer.MAX_VALUE);
    }

    /** The ms left before the deadline, or Long.MAX_VALUE without one. */
    long leftMs() {
        return deadline == Long.MAX_VALUE ? Long.MAX_VALUE : Math.max(0, (deadline - System.nanoTime()) / 1_000_000);
    }

    /**
     * Records c as the connection of the call in flight, in this scope and
     * the outer ones (a fire aborts it); false if one of them fired already
     * (the call must not start).
     */
    boolean enter(Pool.Conn c) {
        for (Scope s = this; s != null; s = s.parent) {
            synchronized (s.mu) {
                s.conn = c;
                if (s.fired != null) {
                    return false;
                }
            }
        }
        return true;
    }

    /** The call on c is over. */
    void leave(Pool.Conn c) {
        for (Scope s = this; s != null; s = s.parent) {
            synchronized (s.mu) {
                if (s.conn == c) {
                    s.conn = null;
                }
            }
        }
    }
}
