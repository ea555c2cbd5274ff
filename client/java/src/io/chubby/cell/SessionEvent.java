package io.chubby.cell;

/**
 * One change in a session's life, delivered to its {@link SessionListener}s.
 *
 * @param kind what happened
 * @param epoch the master epoch the session knew then; for MASTER_CHANGED, the new one
 * @param error for EXPIRED, why the session expired; null otherwise
 * @param lost for LOST_EVENTS, how many events of the session's handles the cell dropped
 */
public record SessionEvent(Kind kind, long epoch, ChubbyException error, long lost) {
    /** What a session event reports. */
    public enum Kind {
        /** The local lease ran out: the session is in jeopardy. */
        JEOPARDY,
        /** A KeepAlive reply came during jeopardy: the session is safe again, with every lock and handle it had. */
        SAFE,
        /**
         * The cell failed over to a new master: a reply named a higher epoch,
         * or the new master said MASTER_FAILED_OVER; once per epoch.
         */
        MASTER_CHANGED,
        /** The cell dropped events of the session's handles (its queue overflowed): re-read what you watch. */
        LOST_EVENTS,
        /** The session expired (the last event). */
        EXPIRED
    }
}
