package io.chubby.cell;

import chubby.CreateMode;
import chubby.ErrorCode;
import chubby.OpenMode;
import chubby.chubbyConstants;

/**
 * How {@link Session#open(String, OpenOptions)} opens (and maybe creates) a
 * node. The setters return this object, so they chain:
 * {@code OpenOptions.readWrite().create(CreateMode.OPEN_OR_CREATE).eventMask(chubbyConstants.EVENT_MASK_ALL)}.
 * {@code open} checks the values and copies them. Not thread-safe (fill it
 * in on one thread).
 */
public final class OpenOptions {
    OpenMode mode = OpenMode.READ;
    CreateMode create = CreateMode.OPEN_EXISTING;
    boolean ephemeral;
    boolean sequential;
    byte[] initialContent;
    int eventMask;
    EventListener listener;

    /** READ, OPEN_EXISTING, no events: the defaults. */
    public OpenOptions() {}

    /**
     * Options to open an existing node for reading (and locking).
     *
     * @return new options
     */
    public static OpenOptions read() {
        return new OpenOptions();
    }

    /**
     * Options to open an existing node for reading and writing.
     *
     * @return new options
     */
    public static OpenOptions readWrite() {
        return new OpenOptions().mode(OpenMode.READ_WRITE);
    }

    /**
     * READ (read contents and metadata, take locks; the default) or
     * READ_WRITE (also write contents and delete).
     *
     * @param m the mode
     * @return this
     */
    public OpenOptions mode(OpenMode m) {
        mode = m;
        return this;
    }

    /**
     * OPEN_EXISTING (the default: NOT_FOUND if missing), OPEN_OR_CREATE
     * (create a file if missing) or CREATE_NEW (EXISTS if present; always
     * creates when sequential).
     *
     * @param c the create mode
     * @return this
     */
    public OpenOptions create(CreateMode c) {
        create = c;
        return this;
    }

    /**
     * On create: the file is deleted when the session ends.
     *
     * @param e whether the file is ephemeral
     * @return this
     */
    public OpenOptions ephemeral(boolean e) {
        ephemeral = e;
        return this;
    }

    /**
     * On create: a 10-digit per-parent counter is appended to the name;
     * {@link Handle#path()} tells the name created.
     *
     * @param s whether the name is sequential
     * @return this
     */
    public OpenOptions sequential(boolean s) {
        sequential = s;
        return this;
    }

    /**
     * On create: the file's first content (copied), at most
     * MAX_CONTENT_BYTES.
     *
     * @param content the content, or null for none
     * @return this
     */
    public OpenOptions initialContent(byte[] content) {
        initialContent = content == null ? null : content.clone();
        return this;
    }

    /**
     * The events the handle receives: an OR of chubbyConstants.EVENT_MASK_*
     * bits (EVENT_MASK_ALL for every kind); 0, the default, asks for none.
     * Bits outside EVENT_MASK_ALL are INVALID_ARGUMENT.
     *
     * @param mask the event mask
     * @return this
     */
    public OpenOptions eventMask(int mask) {
        eventMask = mask;
        return this;
    }

    /**
     * A listener called with each of the handle's events (on the session's
     * event thread), besides their queue {@link Handle#events()}. Needs an
     * event mask.
     *
     * @param l the listener, or null for none
     * @return this
     */
    public OpenOptions listener(EventListener l) {
        listener = l;
        return this;
    }

    OpenOptions copy() {
        OpenOptions o = new OpenOptions();
        o.mode = mode;
        o.create = create;
        o.ephemeral = ephemeral;
        o.sequential = sequential;
        o.initialContent = initialContent;
        o.eventMask = eventMask;
        o.listener = listener;
        return o;
    }

    void validate(String path) throws ChubbyException {
        String why = null;
        if (mode == null) {
            why = "mode is null";
        } else if (create == null) {
            why = "create is null";
        } else if ((eventMask & ~chubbyConstants.EVENT_MASK_ALL) != 0) {
            why = "event mask " + eventMask + " has bits outside EVENT_MASK_ALL (" + chubbyConstants.EVENT_MASK_ALL + ")";
        } else if (listener != null && eventMask == 0) {
            why = "a listener without an event mask would never be called";
        } else if (initialContent != null && initialContent.length > chubbyConstants.MAX_CONTENT_BYTES) {
            throw ChubbyException.local(ErrorCode.TOO_LARGE, "open", path, "initial content of "
                    + initialContent.length + " bytes, at most " + chubbyConstants.MAX_CONTENT_BYTES + " allowed");
        }
        if (why != null) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "open", path, why);
        }
    }
}
