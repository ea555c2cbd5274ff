package io.chubby.cell;

import chubby.ErrorCode;
import java.time.Duration;

/**
 * A failed call: the cell refused it (with an {@link ErrorCode}), the library
 * refused it before sending (bad input, an ended session), or the cell could
 * not be reached. {@link #kind()} says which; {@link #code()} gives the error
 * code when there is one.
 *
 * <p>A call refused by the cell or by the library changed nothing. A call
 * that failed with {@link Kind#TRANSPORT} may or may not have taken effect
 * (its reply was lost); the library resends calls that carry a request id
 * itself, so a TRANSPORT failure of such a call means its retries ran out.
 */
public class ChubbyException extends Exception {
    private static final long serialVersionUID = 1L;

    /** Where a failure comes from. */
    public enum Kind {
        /** The cell refused the call; {@link ChubbyException#code()} is its code. */
        CELL,
        /**
         * The library refused the call before sending it: bad input
         * ({@link ErrorCode#INVALID_ARGUMENT}, {@link ErrorCode#TOO_LARGE}) or
         * a session that has expired ({@link ErrorCode#SESSION_EXPIRED}).
         */
        LOCAL,
        /** The session or the {@link Cell} was closed by the application; no code. */
        CLOSED,
        /** No replica of the cell could be reached within the retries; no code. */
        UNREACHABLE,
        /**
         * The connection failed after the request was sent (a timeout, a lost
         * reply, a protocol error): the call's fate is unknown; no code.
         */
        TRANSPORT,
        /** The calling thread was interrupted while it waited; no code. */
        INTERRUPTED,
        /**
         * The call's deadline ({@link Cell#withDeadline}, {@link Cell#async(Duration, CellCall)})
         * passed first: the call was abandoned, and a call that changes the
         * cell may or may not have taken effect; no code.
         */
        DEADLINE_EXCEEDED,
        /**
         * The call was cancelled ({@link java.util.concurrent.Future#cancel}
         * of a {@link Cell#async(CellCall)} future): abandoned, and a call
         * that changes the cell may or may not have taken effect; no code.
         */
        CANCELLED
    }

    private final Kind kind;
    private final ErrorCode code;
    private final String op;
    private final String path;
    private final String reason;
    private final String masterAddress;
    private final Long epoch;
    // retryable: the call gave up only because its attempts ran out on
    // failures that allow a resend (no master found). Session calls use it to
    // send the call again once the session reaches a master.
    final boolean retryable;

    ChubbyException(Kind kind, ErrorCode code, String op, String path, String reason,
            String masterAddress, Long epoch, Throwable cause, boolean retryable) {
        super(null, cause);
        this.kind = kind;
        this.code = code;
        this.op = op;
        this.path = path;
        this.reason = reason == null ? "" : reason;
        this.masterAddress = masterAddress;
        this.epoch = epoch;
        this.retryable = retryable;
    }

    /** A refusal by the library itself, before anything was sent. */
    static ChubbyException local(ErrorCode code, String op, String path, String reason) {
        return new ChubbyException(Kind.LOCAL, code, op, path, reason, null, null, null, false);
    }

    /** The cell's refusal {@code e} of the call {@code op} on {@code path}. */
    static ChubbyException fromCell(chubby.ChubbyError e, String op, String path) {
        String hint = e.isSetMaster_address() && !e.getMaster_address().isEmpty() ? e.getMaster_address() : null;
        Long epoch = e.isSetEpoch() ? e.getEpoch() : null;
        ErrorCode code = e.getCode();
        String reason = e.getMessage();
        if (code == null) {
            // An error code this library does not know (a newer cell).
            reason = "unknown error code: " + reason;
            code = ErrorCode.INTERNAL;
        }
        return new ChubbyException(Kind.CELL, code, op, path, reason, hint, epoch, null, false);
    }

    /** The same failure, reported as retryable or not. */
    ChubbyException withRetryable(boolean r) {
        if (r == retryable) {
            return this;
        }
        ChubbyException e = new ChubbyException(kind, code, op, path, reason, masterAddress, epoch, getCause(), r);
        e.setStackTrace(getStackTrace());
        return e;
    }

    /** The same failure, reported for the operation op on path. */
    ChubbyException forOp(String op, String path) {
        return new ChubbyException(kind, code, op, path, reason, masterAddress, epoch, getCause(), false);
    }

    /** The human form of a code: NOT_FOUND is "not found". */
    static String codeText(ErrorCode code) {
        return code.name().toLowerCase().replace('_', ' ');
    }

    /**
     * Returns "chubby: &lt;op&gt; &lt;path&gt;: &lt;code or kind&gt;: &lt;reason&gt;
     * (master at &lt;address&gt;)", for people.
     *
     * @return the message
     */
    @Override
    public String getMessage() {
        StringBuilder b = new StringBuilder("chubby: ").append(op);
        if (path != null && !path.isEmpty()) {
            b.append(' ').append(path);
        }
        b.append(": ").append(code != null ? codeText(code) : kind.name().toLowerCase().replace('_', ' '));
        if (!reason.isEmpty()) {
            b.append(": ").append(reason);
        }
        if (masterAddress != null) {
            b.append(" (master at ").append(masterAddress).append(')');
        }
        return b.toString();
    }

    /**
     * The reason alone, without the operation and the code.
     *
     * @return the reason ("" if none was given)
     */
    public String reason() {
        return reason;
    }

    /**
     * Where the failure comes from.
     *
     * @return the kind, never null
     */
    public Kind kind() {
        return kind;
    }

    /**
     * The error code: the cell's (kind CELL) or the one the library assigns
     * (kind LOCAL); null for the other kinds.
     *
     * @return the code, or null
     */
    public ErrorCode code() {
        return code;
    }

    /**
     * Reports whether this failure carries the code {@code c}.
     *
     * @param c the code to test for
     * @return true if {@link #code()} is {@code c}
     */
    public boolean is(ErrorCode c) {
        return code == c && c != null;
    }

    /**
     * The operation that failed: "open", "write", "acquire", ...
     *
     * @return the operation's name
     */
    public String op() {
        return op;
    }

    /**
     * The node's path the call was about, or null for calls that name none.
     *
     * @return the path, or null
     */
    public String path() {
        return path;
    }

    /**
     * NOT_MASTER: the master's address as the refusing replica knew it, or
     * null.
     *
     * @return the address, or null
     */
    public String masterAddress() {
        return masterAddress;
    }

    /**
     * NOT_MASTER and STALE_EPOCH: the current master epoch if the cell said,
     * or null.
     *
     * @return the epoch, or null
     */
    public Long epoch() {
        return epoch;
    }
}
