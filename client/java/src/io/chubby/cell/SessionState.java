package io.chubby.cell;

/**
 * Where a session is in its life.
 *
 * <pre>
 *        local lease ran out             grace period ran out
 * SAFE ────────────────────▶ JEOPARDY ─────────────────────▶ EXPIRED
 *  ▲                            │
 *  └────── KeepAlive reply ─────┘
 * SAFE or JEOPARDY ── the cell says SESSION_EXPIRED ──▶ EXPIRED
 * SAFE or JEOPARDY ── Session.close, Cell.close ──────▶ CLOSED
 * </pre>
 */
public enum SessionState {
    /** The local lease has not run out: the master counts the session alive, its locks are held. */
    SAFE,
    /**
     * The local lease ran out with no KeepAlive reply: the session may be
     * alive at the master or not; a lock holder should stop acting on its
     * locks until it is safe again. Calls wait meanwhile.
     */
    JEOPARDY,
    /** The grace period ran out, or the cell said the session is over: its locks and handles are gone. */
    EXPIRED,
    /** Closed by {@link Session#close()} or {@link Cell#close()}. */
    CLOSED
}
