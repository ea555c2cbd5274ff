package io.chubby.cell;

/**
 * Calls of the library run under a deadline or as a cancellable future
 * ({@link Cell#withDeadline}, {@link Cell#async(CellCall)}): a lambda making
 * any number of calls on the thread that runs it.
 *
 * @param <T> what it returns
 */
@FunctionalInterface
public interface CellCall<T> {
    /**
     * Makes the calls.
     *
     * @return the result
     * @throws ChubbyException a call's failure
     */
    T call() throws ChubbyException;
}
