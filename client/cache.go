package client

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chubbygo/chubby/gen/chubby"
)

// DefaultCacheMaxEntries bounds the nodes one session caches (the cell's own
// per-session bound is the same by default); past it reads are not cached.
const DefaultCacheMaxEntries = 10000

// CacheStats counts a session's cache lookups.
type CacheStats struct {
	Hits, Misses uint64
	// Entries is the number of nodes cached now.
	Entries int
	// Invalidations counts invalidated nodes and flushes received.
	Invalidations uint64
}

// HitRate is Hits/(Hits+Misses), 0 before any lookup.
func (c CacheStats) HitRate() float64 {
	if n := c.Hits + c.Misses; n > 0 {
		return float64(c.Hits) / float64(n)
	}
	return 0
}

// cache is a session's cache of file contents, Stats and directory
// listings, keyed by path. It is filled only from replies the
// cell marked cacheable (the cell then invalidates the session's copy
// before the node changes) and served only while the session is safe.
//
// gen is bumped by every invalidation and flush: a reply is cached only if
// gen did not move between sending the request and receiving the reply, so
// an invalidation that overtook a reply is never undone by it.
type cache struct {
	max int

	mu      sync.Mutex
	entries map[string]*cacheEntry
	gen     uint64
	acked   int64 // highest invalidation seq applied: sent as acked_invalidation

	hits, misses, invalidations atomic.Uint64
}

type cacheEntry struct {
	instance int64 // node instance the entry belongs to
	filled   time.Time

	hasFile bool
	content []byte
	stat    *chubby.Stat

	hasDir  bool
	listing []*chubby.DirEntry
}

func newCache(max int) *cache {
	return &cache{max: max, entries: make(map[string]*cacheEntry)}
}

// generation returns the current gen, to pass to fill* later.
func (c *cache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

func (c *cache) entryLocked(path string, instance int64, gen uint64) *cacheEntry {
	if c.gen != gen {
		return nil
	}
	e := c.entries[path]
	if e != nil && e.instance != instance {
		delete(c.entries, path)
		e = nil
	}
	if e == nil {
		if len(c.entries) >= c.max {
			return nil
		}
		e = &cacheEntry{instance: instance}
		c.entries[path] = e
	}
	e.filled = time.Now()
	return e
}

// fillFile caches a file's content and Stat read with gen.
func (c *cache) fillFile(path string, instance int64, gen uint64, content []byte, st *chubby.Stat) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entryLocked(path, instance, gen); e != nil {
		e.hasFile, e.content, e.stat = true, content, st
	}
}

// fillDir caches a directory listing read with gen.
func (c *cache) fillDir(path string, instance int64, gen uint64, es []*chubby.DirEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entryLocked(path, instance, gen); e != nil {
		e.hasDir, e.listing = true, es
	}
}

// file returns a cached content and Stat, copied, with the lock-delay
// remaining brought up to date. A miss is counted when countMiss is set.
func (c *cache) file(path string, instance int64, countMiss bool) ([]byte, *chubby.Stat, bool) {
	c.mu.Lock()
	e := c.entries[path]
	if e == nil || !e.hasFile || e.instance != instance {
		c.mu.Unlock()
		if countMiss {
			c.misses.Add(1)
		}
		return nil, nil, false
	}
	content, st, filled := e.content, e.stat, e.filled
	c.mu.Unlock()
	c.hits.Add(1)
	return append([]byte(nil), content...), ageStat(st, time.Since(filled)), true
}

// dir returns a cached listing, copied.
func (c *cache) dir(path string, instance int64) ([]*chubby.DirEntry, bool) {
	c.mu.Lock()
	e := c.entries[path]
	if e == nil || !e.hasDir || e.instance != instance {
		c.mu.Unlock()
		c.misses.Add(1)
		return nil, false
	}
	es, filled := e.listing, e.filled
	c.mu.Unlock()
	c.hits.Add(1)
	age := time.Since(filled)
	out := make([]*chubby.DirEntry, len(es))
	for i, d := range es {
		out[i] = &chubby.DirEntry{Name: d.Name, Stat: ageStat(d.Stat, age)}
	}
	return out, true
}

// ageStat copies st with its lock-delay remaining reduced by age: the only
// Stat field that moves with time rather than with changes.
func ageStat(st *chubby.Stat, age time.Duration) *chubby.Stat {
	if st == nil {
		return nil
	}
	cp := *st
	if st.Lock != nil {
		l := *st.Lock
		l.DelayRemainingMs = max(0, l.DelayRemainingMs-age.Milliseconds())
		cp.Lock = &l
	}
	return &cp
}

// drop forgets path and its parent's listing (a write of this client).
func (c *cache) drop(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.entries, path)
	delete(c.entries, parentOf(path))
}

// dropTree forgets path, everything under it and its ancestors' listings
// (a delete of this client).
func (c *cache) dropTree(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	prefix := strings.TrimSuffix(path, "/") + "/"
	for p := range c.entries {
		if p == path || strings.HasPrefix(p, prefix) || strings.HasPrefix(path, strings.TrimSuffix(p, "/")+"/") {
			delete(c.entries, p)
		}
	}
}

// flush forgets everything (jeopardy, a new master, the session's end).
func (c *cache) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if len(c.entries) > 0 {
		c.invalidations.Add(1)
	}
	clear(c.entries)
}

// apply carries out the invalidations of a KeepAlive reply and records
// their seq for the next KeepAlive's acknowledgement.
func (c *cache) apply(g *chubby.LeaseGrant) {
	if !g.IsSetInvalidationSeq() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if g.GetInvalidateAll() {
		clear(c.entries)
		c.invalidations.Add(1)
	} else {
		for _, p := range g.GetInvalidations() {
			delete(c.entries, p)
			c.invalidations.Add(1)
		}
	}
	if g.GetInvalidateAll() {
		// A flush subsumes every invalidation before it, and a new
		// master's first reply is one: its seqs may be below the old
		// master's (they are kept apart by the epoch a KeepAlive names).
		c.acked = g.GetInvalidationSeq()
	} else {
		c.acked = max(c.acked, g.GetInvalidationSeq())
	}
}

// ackSeq is the acked_invalidation for the next KeepAlive.
func (c *cache) ackSeq() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acked
}

func (c *cache) stats() CacheStats {
	c.mu.Lock()
	n := len(c.entries)
	c.mu.Unlock()
	return CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Entries: n, Invalidations: c.invalidations.Load()}
}

func parentOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}
