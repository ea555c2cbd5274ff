package io.chubby.cell;

import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;

/**
 * A session's cache of file contents and Stats, and of directory listings
 * (read in one page), keyed by path. It is filled
 * only from replies the cell marked cacheable (the master then invalidates
 * the session's copy, on a KeepAlive reply, before the node changes, and
 * holds the change until the next KeepAlive acknowledges it or the
 * session's lease has run out) and served only while the session is safe.
 *
 * <p>gen moves with every invalidation, flush and write of this client: a
 * reply is cached only if gen did not move between sending the request and
 * receiving the reply, so an invalidation that overtook a reply is never
 * undone by it. Thread-safe.
 */
final class Cache {
    /** Nodes cached per session (the cell's default per-session bound); past it reads are not cached. */
    static final int MAX_ENTRIES = 10_000;

    private record Entry(long instance, long filledNanos, byte[] content, Stat stat) {}

    private record Listing(long instance, java.util.List<DirEntry> entries) {}

    private final Map<String, Entry> entries = new HashMap<>();
    private final Map<String, Listing> listings = new HashMap<>();
    private long gen;
    private long acked;
    private long hits, misses, invalidations;

    /** The current generation, to pass to {@link #fill} with the reply. */
    synchronized long generation() {
        return gen;
    }

    /**
     * Caches a file's content and Stat read at generation g (if nothing was
     * invalidated since) for a handle of instance.
     */
    synchronized void fill(String path, long instance, long g, byte[] content, Stat st) {
        if (g != gen || st == null || st.instance() != instance) {
            return;
        }
        if (entries.size() >= MAX_ENTRIES && !entries.containsKey(path)) {
            return;
        }
        entries.put(path, new Entry(instance, System.nanoTime(), content.clone(), st));
    }

    /** Caches a directory's complete listing read at generation g, for a handle of instance. */
    synchronized void fillDir(String path, long instance, long g, java.util.List<DirEntry> es) {
        if (g != gen || (listings.size() >= MAX_ENTRIES && !listings.containsKey(path))) {
            return;
        }
        listings.put(path, new Listing(instance, java.util.List.copyOf(es)));
    }

    /** The cached listing of path for a handle of instance, or null (a miss). */
    synchronized java.util.List<DirEntry> dir(String path, long instance) {
        Listing l = listings.get(path);
        if (l == null || l.instance != instance) {
            misses++;
            return null;
        }
        hits++;
        return l.entries;
    }

    /**
     * The cached content and Stat of path for a handle of instance, or
     * null; countMiss says whether a miss counts (a stat() that finds
     * nothing is not one: it does not fill).
     */
    synchronized Contents file(String path, long instance, boolean countMiss) {
        Entry e = entries.get(path);
        if (e == null || e.instance != instance) {
            if (countMiss) {
                misses++;
            }
            return null;
        }
        hits++;
        return new Contents(e.content.clone(), aged(e.stat, (System.nanoTime() - e.filledNanos) / 1_000_000));
    }

    /** st with its lock-delay remaining reduced by ageMs: the one Stat field that moves with time. */
    private static Stat aged(Stat st, long ageMs) {
        if (st.lockDelayRemainingMs() <= 0 || ageMs <= 0) {
            return st;
        }
        return new Stat(st.path(), st.kind(), st.instance(), st.contentGeneration(), st.lockGeneration(),
                st.aclGeneration(), st.checksum(), st.size(), st.createTimeMs(), st.modifyTimeMs(), st.ephemeral(),
                st.ephemeralOwner(), st.lockMode(), st.lockHolders(), st.lockWaiters(),
                Math.max(0, st.lockDelayRemainingMs() - ageMs), st.acl());
    }

    /** Forgets path and its parent's listing (a change of this client to it). */
    synchronized void drop(String path) {
        gen++;
        entries.remove(path);
        listings.remove(path);
        listings.remove(parentOf(path));
    }

    static String parentOf(String p) {
        int i = p.lastIndexOf('/');
        return i <= 0 ? "/" : p.substring(0, i);
    }

    /** Forgets path, everything under it and its ancestors' listings (a delete of this client). */
    synchronized void dropTree(String path) {
        gen++;
        String prefix = path.equals("/") ? "/" : path + "/";
        for (Map<String, ?> m : java.util.List.of(entries, listings)) {
            for (Iterator<String> it = m.keySet().iterator(); it.hasNext(); ) {
                String p = it.next();
                if (p.equals(path) || p.startsWith(prefix)) {
                    it.remove();
                }
            }
        }
        for (String p = path; !p.equals("/"); ) {
            p = parentOf(p);
            listings.remove(p);
        }
    }

    /** Forgets everything (jeopardy, a new master, the session's end). */
    synchronized void flush() {
        gen++;
        if (!entries.isEmpty() || !listings.isEmpty()) {
            invalidations++;
        }
        entries.clear();
        listings.clear();
    }

    /**
     * Carries out the invalidations of a KeepAlive reply and records their
     * seq for the next KeepAlive's acknowledgement.
     */
    synchronized void apply(chubby.LeaseGrant g) {
        if (!g.isSetInvalidation_seq()) {
            return;
        }
        gen++;
        if (g.isInvalidate_all()) {
            entries.clear();
            listings.clear();
            invalidations++;
            // A flush subsumes every invalidation before it, and a new
            // master's first reply is one: its seqs may be below the old
            // master's (the epoch a KeepAlive names keeps them apart).
            acked = g.getInvalidation_seq();
            return;
        }
        if (g.getInvalidations() != null) {
            for (String p : g.getInvalidations()) {
                entries.remove(p);
                listings.remove(p);
                invalidations++;
            }
        }
        acked = Math.max(acked, g.getInvalidation_seq());
    }

    /** The acked_invalidation for the next KeepAlive (0: none yet). */
    synchronized long ackSeq() {
        return acked;
    }

    synchronized CacheStats stats() {
        return new CacheStats(hits, misses, entries.size() + listings.size(), invalidations);
    }
}
