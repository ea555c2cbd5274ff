package io.chubby.cell;

/**
 * A session's cache counters ({@link Session#cacheStats()}).
 *
 * @param hits reads, stats and listings answered from the cache
 * @param misses reads and listings that went to the cell
 * @param entries files and directory listings cached now
 * @param invalidations nodes invalidated and flushes received
 */
public record CacheStats(long hits, long misses, int entries, long invalidations) {
    /**
     * hits / (hits + misses), 0 before any lookup.
     *
     * @return the rate
     */
    public double hitRate() {
        long n = hits + misses;
        return n == 0 ? 0 : (double) hits / n;
    }
}
