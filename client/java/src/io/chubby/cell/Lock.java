package io.chubby.cell;

/**
 * A held lock, from {@link Session#lock(String)} and its variants, for
 * try-with-resources:
 *
 * <pre>{@code
 * try (Lock l = session.lock("/svc/leader")) {
 *     String token = l.sequencer().format(); // pass it to the servers you talk to
 *     ...
 * }
 * }</pre>
 *
 * Closing it closes the handle the lock was taken on, which releases the
 * lock. The lock is only as good as its session: when the session is in
 * jeopardy, stop acting on it (see {@link SessionListener}). Thread-safe.
 */
public final class Lock implements AutoCloseable {
    private final Handle handle;
    private final Sequencer seq;

    Lock(Handle handle, Sequencer seq) {
        this.handle = handle;
        this.seq = seq;
    }

    /**
     * The lock's sequencer, as the cell granted it.
     *
     * @return the sequencer
     */
    public Sequencer sequencer() {
        return seq;
    }

    /**
     * The lock file's path.
     *
     * @return the path
     */
    public String path() {
        return handle.path();
    }

    /**
     * The handle the lock was taken on (to read or watch the lock file).
     *
     * @return the handle
     */
    public Handle handle() {
        return handle;
    }

    /**
     * Asks the cell whether the lock is still held (CheckSequencer of its
     * sequencer).
     *
     * @return the cell's answer
     * @throws ChubbyException if the call failed
     */
    public SequencerCheck check() throws ChubbyException {
        return handle.session().cell().checkSequencer(seq);
    }

    /**
     * Releases the lock by closing its handle. Closing twice does nothing.
     *
     * @throws ChubbyException if the call failed (the lock then goes with the session at the latest)
     */
    @Override
    public void close() throws ChubbyException {
        handle.close();
    }
}
