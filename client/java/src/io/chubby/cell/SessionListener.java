package io.chubby.cell;

/**
 * Receives a session's events: jeopardy, safe again, master changed, lost
 * events, expired (see {@link Session#addListener(SessionListener)}). It is
 * called on the session's event thread, one event at a time, in the order
 * they happened; the KeepAlive thread never waits for it.
 */
@FunctionalInterface
public interface SessionListener {
    /**
     * Called for each event of the session.
     *
     * @param session the session
     * @param event what happened
     */
    void onEvent(Session session, SessionEvent event);
}
