package io.chubby.cell;

/**
 * A node's three access-control lists, as their names: each is the name of
 * a file in the directory /acl listing the principals that hold the right
 * (one per line; "*" is every principal with a certificate, "anonymous" a
 * client without one). An empty name grants the right to everybody; a name
 * whose file is missing or not a valid ACL file grants it to nobody. Read:
 * open, read, stat, readDir, checkSequencer and the node's events; write:
 * write, locks, and on a directory creating and deleting its entries;
 * changeAcl: {@link Handle#setAcl(Acl, Long)}.
 *
 * @param read the read right's ACL file name ("" for everybody)
 * @param write the write right's ACL file name ("" for everybody)
 * @param changeAcl the change-ACL right's ACL file name ("" for everybody)
 */
public record Acl(String read, String write, String changeAcl) {
    /** No restriction: every right granted to everybody. */
    public static final Acl OPEN = new Acl("", "", "");

    static Acl fromWire(chubby.ACLNames a) {
        if (a == null) {
            return OPEN;
        }
        return new Acl(orEmpty(a.getRead_acl()), orEmpty(a.getWrite_acl()), orEmpty(a.getChange_acl()));
    }

    private static String orEmpty(String s) {
        return s == null ? "" : s;
    }

    chubby.ACLNames toWire() {
        return new chubby.ACLNames(read, write, changeAcl);
    }
}
