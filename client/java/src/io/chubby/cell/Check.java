package io.chubby.cell;

import chubby.ErrorCode;
import chubby.chubbyConstants;

/**
 * Validation of what comes from outside: paths, addresses, limits. The cell
 * enforces the same rules; checking here makes bad input fail before
 * anything is sent (a LOCAL {@link ChubbyException}).
 */
final class Check {
    private Check() {}

    /** Longest address accepted (as the cell bounds those clients send). */
    static final int MAX_ADDR_BYTES = 512;

    /**
     * Checks that p is a well-formed node path: "/" or an absolute slash path
     * of 1..MAX_PATH_DEPTH components, each 1..MAX_NAME_BYTES bytes of
     * [A-Za-z0-9._-] and not "." or "..", at most MAX_PATH_BYTES in all, with
     * no empty component and no trailing slash (the Go client's ValidatePath).
     * Returns null if it is, else why not.
     */
    static String pathProblem(String p) {
        if (p == null || p.isEmpty()) {
            return "empty path";
        }
        if (p.length() > chubbyConstants.MAX_PATH_BYTES) {
            return "path is " + p.length() + " bytes, at most " + chubbyConstants.MAX_PATH_BYTES + " allowed";
        }
        if (p.charAt(0) != '/') {
            return "path " + quote(p) + " is not absolute";
        }
        if (p.equals("/")) {
            return null;
        }
        String[] comps = p.substring(1).split("/", -1);
        if (comps.length > chubbyConstants.MAX_PATH_DEPTH) {
            return "path " + quote(p) + " has " + comps.length + " components, at most "
                    + chubbyConstants.MAX_PATH_DEPTH + " allowed";
        }
        for (String c : comps) {
            if (c.isEmpty()) {
                return "path " + quote(p) + " has an empty component";
            }
            if (c.equals(".") || c.equals("..")) {
                return "path " + quote(p) + " has a \"" + c + "\" component";
            }
            if (c.length() > chubbyConstants.MAX_NAME_BYTES) {
                return "path " + quote(p) + " has a component of " + c.length() + " bytes, at most "
                        + chubbyConstants.MAX_NAME_BYTES + " allowed";
            }
            for (int i = 0; i < c.length(); i++) {
                if (!nameChar(c.charAt(i))) {
                    return "path " + quote(p) + ": character " + quote(String.valueOf(c.charAt(i)))
                            + " not allowed in a name (only A-Z a-z 0-9 . _ -)";
                }
            }
        }
        return null;
    }

    /** Throws INVALID_ARGUMENT for op unless p is a well-formed path. */
    static void path(String op, String p) throws ChubbyException {
        String why = pathProblem(p);
        if (why != null) {
            throw ChubbyException.local(ErrorCode.INVALID_ARGUMENT, op, null, why);
        }
    }

    private static boolean nameChar(char b) {
        return ('a' <= b && b <= 'z') || ('A' <= b && b <= 'Z') || ('0' <= b && b <= '9')
                || b == '.' || b == '_' || b == '-';
    }

    /**
     * Checks that addr is host:port with a non-empty host (a name or an IP;
     * IPv6 in brackets) and a decimal port in 1..65535 (the Go client's
     * ValidateAddr). Returns null if it is, else why not.
     */
    static String addrProblem(String addr) {
        if (addr == null || addr.isEmpty()) {
            return "empty address";
        }
        if (addr.length() > MAX_ADDR_BYTES) {
            return "address of " + addr.length() + " bytes, at most " + MAX_ADDR_BYTES + " allowed";
        }
        int colon = addr.lastIndexOf(':');
        if (colon < 0) {
            return "address " + quote(addr) + ": want host:port";
        }
        String host = addr.substring(0, colon);
        String port = addr.substring(colon + 1);
        if (host.startsWith("[")) {
            if (!host.endsWith("]") || host.length() < 3 || host.substring(1, host.length() - 1).contains("[")
                    || host.substring(1, host.length() - 1).contains("]")) {
                return "address " + quote(addr) + ": malformed bracketed host";
            }
        } else if (host.contains(":") || host.contains("[") || host.contains("]")) {
            return "address " + quote(addr) + ": want host:port (IPv6 hosts in brackets)";
        }
        if (host.isEmpty()) {
            return "address " + quote(addr) + ": missing host";
        }
        for (int i = 0; i < host.length(); i++) {
            char c = host.charAt(i);
            if (c == ' ' || c == '\t' || c == '/' || c < 0x21 || c > 0x7e) {
                return "address " + quote(addr) + ": malformed host";
            }
        }
        if (port.isEmpty() || port.length() > 5) {
            return "address " + quote(addr) + ": port must be a number in 1..65535";
        }
        for (int i = 0; i < port.length(); i++) {
            if (port.charAt(i) < '0' || port.charAt(i) > '9') {
                return "address " + quote(addr) + ": port must be a number in 1..65535";
            }
        }
        int n = Integer.parseInt(port);
        if (n < 1 || n > 65535) {
            return "address " + quote(addr) + ": port must be a number in 1..65535";
        }
        return null;
    }

    /** The host of a valid address, without IPv6 brackets. */
    static String host(String addr) {
        String h = addr.substring(0, addr.lastIndexOf(':'));
        return h.startsWith("[") ? h.substring(1, h.length() - 1) : h;
    }

    /** The port of a valid address. */
    static int port(String addr) {
        return Integer.parseInt(addr.substring(addr.lastIndexOf(':') + 1));
    }

    /** Keeps messages about hostile input short. */
    static String quote(String s) {
        if (s.length() > 80) {
            s = s.substring(0, 80) + "...";
        }
        return "\"" + s + "\"";
    }
}
