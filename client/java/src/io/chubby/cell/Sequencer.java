package io.chubby.cell;

import chubby.ErrorCode;
import chubby.LockMode;

/**
 * Names a held lock: its node (path and instance), its mode and its lock
 * generation (a fencing token). A lock holder passes it to the servers it
 * talks to, which check it with {@link Cell#checkSequencer(Sequencer)}. Its
 * printable form ({@link #format()}, {@link #parse(String)}) is the Go
 * client's and the CLI's:
 * {@code chubby-seq:v1:<E|S>:<lock_generation>:<instance>:<path>}.
 *
 * @param path the node's path
 * @param mode EXCLUSIVE or SHARED
 * @param lockGeneration the holding period of the lock
 * @param instance the node's instance
 */
public record Sequencer(String path, LockMode mode, long lockGeneration, long instance) {
    private static final String PREFIX = "chubby-seq:v1:";

    static Sequencer fromWire(chubby.Sequencer s) {
        return new Sequencer(s.getPath(), s.getMode(), s.getLock_generation(), s.getInstance());
    }

    chubby.Sequencer toWire() {
        return new chubby.Sequencer(path, mode, lockGeneration, instance);
    }

    void validate(String op) throws ChubbyException {
        String why = Check.pathProblem(path);
        if (why == null && mode == null) {
            why = "mode is null";
        }
        if (why == null && (lockGeneration < 0 || instance < 0)) {
            why = "negative lock generation or instance";
        }
        if (why != null) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, op, null, "sequencer: " + why);
        }
    }

    /**
     * The printable form, {@code chubby-seq:v1:<E|S>:<lock_generation>:<instance>:<path>}.
     *
     * @return the printable form
     */
    public String format() {
        String m = mode == LockMode.EXCLUSIVE ? "E" : mode == LockMode.SHARED ? "S" : "?";
        return PREFIX + m + ":" + lockGeneration + ":" + instance + ":" + path;
    }

    /**
     * The printable form, as {@link #format()}.
     *
     * @return the printable form
     */
    @Override
    public String toString() {
        return format();
    }

    /**
     * Parses the printable form. It is strict, so that exactly one string
     * names each sequencer: the mode is E or S, both numbers are canonical
     * non-negative decimals (no sign, no leading zeros) that fit a long, and
     * the path is well-formed; {@code parse(s).format()} equals {@code s}.
     *
     * @param s the printable form
     * @return the sequencer
     * @throws ChubbyException INVALID_ARGUMENT when s is not a printable sequencer
     */
    public static Sequencer parse(String s) throws ChubbyException {
        if (s == null || !s.startsWith(PREFIX)) {
            throw bad(s, "does not start with " + PREFIX);
        }
        String[] parts = s.substring(PREFIX.length()).split(":", 4);
        if (parts.length != 4) {
            throw bad(s, "want chubby-seq:v1:<E|S>:<lock_generation>:<instance>:<path>");
        }
        LockMode mode;
        switch (parts[0]) {
            case "E" -> mode = LockMode.EXCLUSIVE;
            case "S" -> mode = LockMode.SHARED;
            default -> throw bad(s, "mode " + Check.quote(parts[0]) + " is not E or S");
        }
        long gen = canonical(s, "lock generation", parts[1]);
        long inst = canonical(s, "instance", parts[2]);
        String why = Check.pathProblem(parts[3]);
        if (why != null) {
            throw bad(s, why);
        }
        return new Sequencer(parts[3], mode, gen, inst);
    }

    private static long canonical(String s, String what, String n) throws ChubbyException {
        if (n.isEmpty()) {
            throw bad(s, what + ": empty number");
        }
        for (int i = 0; i < n.length(); i++) {
            if (n.charAt(i) < '0' || n.charAt(i) > '9') {
                throw bad(s, what + ": " + Check.quote(n) + " is not a non-negative decimal number");
            }
        }
        if (n.length() > 1 && n.charAt(0) == '0') {
            throw bad(s, what + ": " + Check.quote(n) + " has leading zeros");
        }
        try {
            return Long.parseLong(n);
        } catch (NumberFormatException e) {
            throw bad(s, what + ": " + Check.quote(n) + " is out of range");
        }
    }

    private static ChubbyException bad(String s, String why) {
        return ChubbyException.local(ErrorCode.INVALID_ARGUMENT, "parse-sequencer", null,
                "sequencer " + (s == null ? "null" : Check.quote(s)) + ": " + why);
    }
}
