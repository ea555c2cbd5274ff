package io.chubby.cell;

/**
 * A session's lease as its client sees it, by the rules of the Go client's
 * package client/lease, on System.nanoTime:
 *
 * <ul>
 *   <li>The local lease ends at the send time of the request that was
 *       answered plus the lease_ms the answer granted. (The master computes
 *       lease_ms so that this end comes before its own lease end whatever
 *       the clocks' drift.) A later answer never moves the end back.</li>
 *   <li>Before the local lease ends the session is safe.</li>
 *   <li>When it ends with no answer the session is in jeopardy; the grace
 *       period counts from the end of the local lease.</li>
 *   <li>An answer in jeopardy makes the session safe again, unless its lease
 *       is over already.</li>
 *   <li>At the end of the grace period, or when the cell says so, the
 *       session is expired.</li>
 * </ul>
 *
 * Not thread-safe: the session guards it.
 */
final class LocalLease {
    enum State { SAFE, JEOPARDY, EXPIRED }

    enum Transition { NO_CHANGE, ENTERED_JEOPARDY, GRACE_OVER }

    private final long grace;
    private long end;
    private long lease;
    private long epoch;
    private long renewals;
    private boolean jeopardy, ended;

    /** The lease of a session created by a request sent at sent, granted lease ns by a master of epoch. */
    LocalLease(long sent, long lease, long epoch, long grace) {
        this.grace = grace;
        this.end = sent + lease;
        this.lease = lease;
        this.epoch = epoch;
    }

    State state(long now) {
        if (ended) {
            return State.EXPIRED;
        }
        if (now - end < 0) {
            return State.SAFE;
        }
        if (now - (end + grace) < 0) {
            return State.JEOPARDY;
        }
        return State.EXPIRED;
    }

    /** Reports each move to jeopardy once, and the end of the grace period (which ends the session). */
    Transition step(long now) {
        switch (state(now)) {
            case JEOPARDY:
                if (!jeopardy) {
                    jeopardy = true;
                    return Transition.ENTERED_JEOPARDY;
                }
                break;
            case EXPIRED:
                if (!ended) {
                    ended = true;
                    return Transition.GRACE_OVER;
                }
                break;
            default:
                break;
        }
        return Transition.NO_CHANGE;
    }

    /**
     * Takes an answer to a request sent at sent granting lease ns, received
     * at now. Returns 0 if it renewed nothing, 1 if it renewed the lease,
     * 2 if it also ended a jeopardy (safe again).
     */
    int renew(long sent, long lease, long now) {
        if (ended) {
            return 0;
        }
        this.lease = lease;
        if (sent + lease - end > 0) {
            end = sent + lease;
        }
        if (end - now <= 0) {
            return 0;
        }
        boolean safeAgain = jeopardy;
        jeopardy = false;
        renewals++;
        return safeAgain ? 2 : 1;
    }

    /** Records a master epoch heard; reports whether it is newer than any before. */
    boolean noteEpoch(long e) {
        if (e <= epoch) {
            return false;
        }
        epoch = e;
        return true;
    }

    void end() {
        ended = true;
    }

    long leaseEnd() {
        return end;
    }

    long graceEnd() {
        return end + grace;
    }

    long lease() {
        return lease;
    }

    long epoch() {
        return epoch;
    }

    long renewals() {
        return renewals;
    }
}
