package sicheck

import "sort"

// version is one committed write (or delete) of a key.
type version struct {
	start, commit int64
	deleted       bool
}

// effectKey names what one transaction did to one key.
type effectKey struct {
	start int64
	key   string
}

// checker holds the indexes of one history and the anomalies found in it.
type checker struct {
	// txns maps each start to its first transaction; starts <= 0 are
	// not indexed.
	txns map[int64]*Txn
	// order lists the indexed transactions in history order.
	order []*Txn
	// effects maps (start, key) to true if the transaction deleted the
	// key, false if it wrote it, for every indexed transaction.
	effects map[effectKey]bool
	// versions lists the committed writes and deletes of each key,
	// sorted by (commit, start).
	versions map[string][]version
	reads    readState // reused by checkReads
	out      collector
}

// newChecker indexes h, reporting the starts it cannot index.
func newChecker(h []Txn) *checker {
	c := &checker{
		txns:     make(map[int64]*Txn, len(h)),
		effects:  make(map[effectKey]bool),
		versions: make(map[string][]version),
		out:      collector{limit: maxAnomalies},
	}
	c.indexTxns(h)
	for _, t := range c.order {
		c.indexEffects(t)
	}
	for _, vs := range c.versions {
		sort.Slice(vs, func(i, j int) bool {
			if vs[i].commit != vs[j].commit {
				return vs[i].commit < vs[j].commit
			}
			return vs[i].start < vs[j].start
		})
	}
	return c
}

// indexTxns indexes the first transaction of each positive start and
// reports DuplicateStart once per start that is not positive or not unique.
func (c *checker) indexTxns(h []Txn) {
	bad := make(map[int64]int) // start -> transactions with it, beyond the indexed one
	for i := range h {
		t := &h[i]
		if _, dup := c.txns[t.Start]; dup || t.Start <= 0 {
			bad[t.Start]++
			continue
		}
		c.txns[t.Start] = t
		c.order = append(c.order, t)
	}
	for s, n := range bad {
		if s <= 0 {
			c.report(DuplicateStart, s, 0, "", "%d transaction(s) have start %d, not positive: their reads and writes are not checked", n, s)
		} else {
			c.report(DuplicateStart, s, 0, "", "%d transactions share start %d: only the first in the history is checked", n+1, s)
		}
	}
}

// indexEffects records what t did to each key and, if t committed, adds
// its writes and deletes to the versions of their keys.
func (c *checker) indexEffects(t *Txn) {
	add := func(key string, deleted bool) {
		ek := effectKey{t.Start, key}
		if _, done := c.effects[ek]; done {
			return // a repeated key, or a key both written and deleted
		}
		c.effects[ek] = deleted
		if t.Outcome == Committed {
			c.versions[key] = append(c.versions[key], version{t.Start, t.Commit, deleted})
		}
	}
	for _, k := range t.Writes {
		add(k, false)
	}
	for _, k := range t.Deletes {
		add(k, true)
	}
}

// wrote reports whether t wrote (not deleted) key. For a committed t it
// looks in the versions of key, which checking reads keeps in cache.
func (c *checker) wrote(t *Txn, key string) bool {
	if t.Outcome != Committed {
		deleted, ok := c.effects[effectKey{t.Start, key}]
		return ok && !deleted
	}
	vs := c.versions[key]
	i := sort.Search(len(vs), func(i int) bool {
		return vs[i].commit > t.Commit || (vs[i].commit == t.Commit && vs[i].start >= t.Start)
	})
	return i < len(vs) && vs[i].start == t.Start && !vs[i].deleted
}

// visible returns the committed writes and deletes of key with commit
// timestamps <= at, the last of them the one a snapshot at at holds.
func (c *checker) visible(key string, at int64) []version {
	vs := c.versions[key]
	return vs[:sort.Search(len(vs), func(i int) bool { return vs[i].commit > at })]
}
