package io.chubby.cell;

/**
 * Receives a handle's events (see {@link OpenOptions#listener(EventListener)}).
 * It is called on the session's event thread, one event at a time, in order;
 * a slow listener delays the session's later events and listeners, never
 * the KeepAlive that keeps the session alive.
 */
@FunctionalInterface
public interface EventListener {
    /**
     * Called for each event of the handle.
     *
     * @param handle the handle the event is for
     * @param event the event
     */
    void onEvent(Handle handle, Event event);
}
