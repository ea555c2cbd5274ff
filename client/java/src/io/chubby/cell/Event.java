package io.chubby.cell;

import chubby.EventKind;
import chubby.LockMode;

/**
 * One event of a handle, delivered through {@link Handle#events()} and the
 * handle's {@link EventListener}: the cell queued it when it applied the
 * change, for the handles whose {@link OpenOptions#eventMask(int)} asked
 * for its kind. The fields a kind does not use are 0, null or "".
 *
 * @param seq numbers the session's events (1, 2, 3, ...): each is delivered once, in order, also across a failover
 * @param kind what happened
 * @param timeMs Unix ms, the master's clock when the change was applied
 * @param path the handle's node
 * @param child CHILD_ADDED, CHILD_REMOVED, CHILD_MODIFIED: the child's name
 * @param contentGeneration FILE_CONTENTS_MODIFIED, CHILD_MODIFIED: after the write
 * @param lockGeneration LOCK_ACQUIRED: the new holding period; CONFLICTING_LOCK_REQUEST: the one held
 * @param lockMode LOCK_ACQUIRED: the mode granted; CONFLICTING_LOCK_REQUEST: the mode asked
 * @param lostFrom EVENTS_LOST: the first seq lost (the last is seq)
 */
public record Event(long seq, EventKind kind, long timeMs, String path, String child, long contentGeneration,
        long lockGeneration, LockMode lockMode, long lostFrom) {

    static Event fromWire(chubby.Event e) {
        return new Event(e.getSeq(), e.getKind(), e.getTime_ms(), e.getPath() == null ? "" : e.getPath(),
                e.getChild() == null ? "" : e.getChild(), e.getContent_generation(), e.getLock_generation(),
                e.getLock_mode(), e.getLost_from());
    }
}
