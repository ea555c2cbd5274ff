package io.chubby.cell;

import chubby.chubbyConstants;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Gathers concurrent {@link Cell#timestamps(int)} calls into batches, as
 * Percolator's oracle clients (and the Go client) do: a call goes at once
 * while fewer than MAX_IN_FLIGHT are in flight; otherwise it joins the batch
 * that is gathering, which goes as soon as one in flight comes back. Each
 * batch is one GetTimestamps sent after every one of its callers asked, so
 * the oracle's order holds for each caller as for a call of its own. A batch
 * belongs to all its callers: it runs on a thread of the library, outside
 * any caller's deadline (bounded by the call timeout); a caller whose
 * deadline passes or that is cancelled stops waiting, and its share of the
 * batch is skipped. Thread-safe.
 */
final class Timestamps {
    /** Batches in flight per cell: enough that the round trip is not the limit, few enough that batches grow. */
    static final int MAX_IN_FLIGHT = 2;

    private static final class Batch {
        int count; // timestamps asked in all, at most MAX_TIMESTAMPS_PER_CALL
        final CompletableFuture<Long> first = new CompletableFuture<>();
    }

    private final Cell cell;
    private Batch gathering; // guarded by this
    private int inFlight; // guarded by this
    /** GetTimestamps calls answered (tests check that calls were batched). */
    final AtomicLong calls = new AtomicLong();

    Timestamps(Cell cell) {
        this.cell = cell;
    }

    long take(int n) throws ChubbyException {
        Batch b, send = null;
        boolean slot = false;
        long offset;
        synchronized (this) {
            if (gathering != null && gathering.count + n > chubbyConstants.MAX_TIMESTAMPS_PER_CALL) {
                b = new Batch(); // rare: a batch near a million; this one goes alone, without a slot
                b.count = n;
                offset = 0;
                send = b;
            } else {
                if (gathering == null) {
                    gathering = new Batch();
                }
                b = gathering;
                offset = b.count;
                b.count += n;
                if (inFlight < MAX_IN_FLIGHT) {
                    gathering = null;
                    inFlight++;
                    send = b;
                    slot = true;
                }
            }
        }
        if (send != null) {
            start(send, slot);
        }
        return await(b) + offset;
    }

    /** Sends batch b on a thread of the library; counted: it holds an in-flight slot, given back after. */
    private void start(Batch b, boolean counted) {
        try {
            cell.exec.execute(() -> run(b, counted));
        } catch (RejectedExecutionException e) {
            b.first.completeExceptionally(cell.closedError("timestamps"));
            if (counted) {
                next();
            }
        }
    }

    private void run(Batch b, boolean counted) {
        try {
            b.first.complete(cell.getTimestamps(b.count));
            calls.incrementAndGet();
        } catch (ChubbyException | RuntimeException e) {
            b.first.completeExceptionally(e);
        }
        if (counted) {
            next();
        }
    }

    /** A batch in flight came back: the one that gathered meanwhile, if any, goes. */
    private void next() {
        Batch n;
        synchronized (this) {
            inFlight--;
            n = gathering;
            if (n != null) {
                gathering = null;
                inFlight++;
            }
        }
        if (n != null) {
            start(n, true);
        }
    }

    private long await(Batch b) throws ChubbyException {
        Scope sc = Scope.current();
        try {
            if (sc == null) {
                return b.first.get();
            }
            return b.first.get(sc.leftMs(), TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof ChubbyException ce) {
                throw ce.forOp("timestamps", null);
            }
            throw new ChubbyException(ChubbyException.Kind.TRANSPORT, null, "timestamps", null,
                    String.valueOf(e.getCause()), null, null, e.getCause(), false);
        } catch (TimeoutException e) {
            sc.check("timestamps", null);
            throw sc.error(ChubbyException.Kind.DEADLINE_EXCEEDED, "timestamps", null, e);
        } catch (InterruptedException e) {
            if (sc != null && sc.firedKind() != null) {
                sc.check("timestamps", null); // the scope's interrupt: its error
            }
            Thread.currentThread().interrupt();
            throw new ChubbyException(ChubbyException.Kind.INTERRUPTED, null, "timestamps", null,
                    "interrupted while waiting for timestamps", null, null, e, false);
        }
    }
}
