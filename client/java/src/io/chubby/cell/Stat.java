package io.chubby.cell;

import chubby.LockMode;
import chubby.NodeKind;

/**
 * A node's metadata at the time of a reply.
 *
 * @param path the node's path
 * @param kind FILE or DIRECTORY (null for a kind this library does not know)
 * @param instance differs for a re-created node of the same name
 * @param contentGeneration bumped by every write of the content
 * @param lockGeneration bumped each time the lock goes from free to held
 * @param aclGeneration bumped by every change of the node's ACL names
 * @param checksum CRC-32C of the content (0 for directories)
 * @param size content bytes; for a directory, its number of children
 * @param createTimeMs Unix ms, from the master's clock
 * @param modifyTimeMs Unix ms, from the master's clock
 * @param ephemeral whether the node goes when its owner session ends
 * @param ephemeralOwner the owner session's id (0 when permanent)
 * @param lockMode the lock's mode when held, null when free
 * @param lockHolders how many handles hold the lock
 * @param lockWaiters how many Acquire calls wait for it
 * @param lockDelayRemainingMs above 0: the lock is in lock-delay for this long
 * @param acl the node's ACL names ({@link Acl#OPEN} from a cell that predates ACLs)
 */
public record Stat(String path, NodeKind kind, long instance, long contentGeneration, long lockGeneration,
        long aclGeneration, long checksum, long size, long createTimeMs, long modifyTimeMs, boolean ephemeral,
        long ephemeralOwner, LockMode lockMode, int lockHolders, int lockWaiters, long lockDelayRemainingMs, Acl acl) {

    static Stat fromWire(chubby.Stat s) {
        if (s == null) {
            return null;
        }
        chubby.LockInfo l = s.getLock();
        return new Stat(s.getPath(), s.getKind(), s.getInstance(), s.getContent_generation(), s.getLock_generation(),
                s.getAcl_generation(), s.getChecksum(), s.getSize(), s.getCreate_time_ms(), s.getModify_time_ms(),
                s.isEphemeral(), s.getEphemeral_owner(),
                l == null || !l.isSetMode() ? null : l.getMode(),
                l == null ? 0 : l.getHolders(), l == null ? 0 : l.getWaiters(),
                l == null ? 0 : l.getDelay_remaining_ms(), Acl.fromWire(s.getAcl()));
    }

    /**
     * Whether the node is a directory.
     *
     * @return true for a directory
     */
    public boolean isDirectory() {
        return kind == NodeKind.DIRECTORY;
    }
}
