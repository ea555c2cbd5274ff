package sicheck

import "fmt"

// keyReads is what checkReads remembers of one transaction's reads of one
// key.
type keyReads struct {
	key    string
	first  int64          // the writer the first read saw
	others map[int64]bool // the other writers seen; nil until one is
	stale  bool           // StaleRead reported
}

// write names one committed write of one key.
type write struct {
	writer, commit int64
	key            string
}

// readState is what checkReads remembers of one transaction's reads. One
// is reused for every transaction, so that checking allocates little.
type readState struct {
	keys   []keyReads
	index  map[string]int // key -> its keyReads; nil while keys are few
	seen   []write        // committed writes it saw, visible at its start
	missed []write        // the newer writes its stale reads missed
}

// smallReads is the number of keys up to which readState looks keys up by
// scanning rather than by map.
const smallReads = 8

// reset empties st for the next transaction.
func (st *readState) reset() {
	clear(st.keys) // drop the others maps
	st.keys, st.index = st.keys[:0], nil
	st.seen, st.missed = st.seen[:0], st.missed[:0]
}

// lookup returns what st knows of key, nil if nothing.
func (st *readState) lookup(key string) *keyReads {
	if st.index != nil {
		if i, ok := st.index[key]; ok {
			return &st.keys[i]
		}
		return nil
	}
	for i := range st.keys {
		if st.keys[i].key == key {
			return &st.keys[i]
		}
	}
	return nil
}

// insert notes a first read of key that saw writer first.
func (st *readState) insert(key string, first int64) {
	st.keys = append(st.keys, keyReads{key: key, first: first})
	switch {
	case st.index != nil:
		st.index[key] = len(st.keys) - 1
	case len(st.keys) > smallReads:
		st.index = make(map[string]int, 2*len(st.keys))
		for i, kr := range st.keys {
			st.index[kr.key] = i
		}
	}
}

// checkReads checks each read of t against t's snapshot, then the
// atomicity of the writers t saw.
func (c *checker) checkReads(t *Txn) {
	if len(t.Reads) == 0 {
		return
	}
	st := &c.reads
	st.reset()
	for _, rd := range t.Reads {
		if rd.Writer == t.Start && c.wrote(t, rd.Key) {
			continue // its own write: out of scope
		}
		if c.repeated(t, st, rd) {
			continue
		}
		c.checkRead(t, st, rd)
	}
	c.checkAtomicity(t, st)
}

// repeated notes rd in st and reports whether an earlier read of t saw
// the same writer of the same key; it reports NonRepeatable the first time
// a key shows a second writer.
func (c *checker) repeated(t *Txn, st *readState, rd Read) bool {
	kr := st.lookup(rd.Key)
	switch {
	case kr == nil:
		st.insert(rd.Key, rd.Writer)
		return false
	case rd.Writer == kr.first || kr.others[rd.Writer]:
		return true
	case kr.others == nil:
		kr.others = make(map[int64]bool)
		c.report(NonRepeatable, t.Start, rd.Writer, rd.Key, "T%d read %q twice: first %s, later %s", t.Start, rd.Key, source(kr.first), source(rd.Writer))
	}
	kr.others[rd.Writer] = true
	return false
}

// checkRead checks one read against t's snapshot: the writer it names,
// then whether a newer write of the key was visible at S(t). A read of the
// latest visible write, the common case, costs one binary search.
func (c *checker) checkRead(t *Txn, st *readState, rd Read) {
	vs := c.visible(rd.Key, t.Start)
	if n := len(vs); n > 0 && vs[n-1].start == rd.Writer && !vs[n-1].deleted {
		st.seen = append(st.seen, write{rd.Writer, vs[n-1].commit, rd.Key})
		return
	}
	var seenCommit int64
	if rd.Writer != 0 {
		w, ok := c.checkWriter(t, rd)
		if !ok {
			return
		}
		seenCommit = w.Commit
		st.seen = append(st.seen, write{w.Start, w.Commit, rd.Key})
	}
	if len(vs) == 0 {
		return
	}
	l := vs[len(vs)-1]
	if (rd.Writer == 0 && !l.deleted) || (rd.Writer != 0 && l.commit > seenCommit) {
		c.staleRead(t, st, rd, l, seenCommit)
	}
}

// staleRead notes that rd, of t, missed the newer write l, reporting
// StaleRead once per key.
func (c *checker) staleRead(t *Txn, st *readState, rd Read, l version, seenCommit int64) {
	st.missed = append(st.missed, write{l.start, l.commit, rd.Key})
	kr := st.lookup(rd.Key)
	if kr.stale {
		return
	}
	kr.stale = true
	verb := "wrote"
	if l.deleted {
		verb = "deleted"
	}
	c.report(StaleRead, t.Start, l.start, rd.Key, "T%d (start %d) read %q %s, but T%d %s it and committed at %d <= %d", t.Start, t.Start, rd.Key, sourceAt(rd.Writer, seenCommit), l.start, verb, l.commit, t.Start)
}

// checkWriter checks the writer a read of t names: a transaction of the
// history that wrote the key and committed before t started. It returns
// that writer and true if so; false, reporting why, if not, and false
// without a report if the writer is unresolved (it is reported itself).
func (c *checker) checkWriter(t *Txn, rd Read) (*Txn, bool) {
	w, ok := c.txns[rd.Writer]
	switch {
	case !ok:
		c.report(UnknownWriter, t.Start, rd.Writer, rd.Key, "T%d read %q as written by T%d, which is not in the history", t.Start, rd.Key, rd.Writer)
		return nil, false
	case !c.wrote(w, rd.Key):
		c.report(NotAWriter, t.Start, w.Start, rd.Key, "T%d read %q as written by T%d, which did not write it", t.Start, rd.Key, w.Start)
		return nil, false
	case w.Outcome == Aborted:
		c.report(AbortedRead, t.Start, w.Start, rd.Key, "T%d read %q as written by T%d, which aborted: a dirty read", t.Start, rd.Key, w.Start)
		return nil, false
	case w.Outcome != Committed:
		return nil, false
	case w.Commit > t.Start:
		c.report(FutureRead, t.Start, w.Start, rd.Key, "T%d (start %d) read %q as written by T%d, which committed later, at %d: not in its snapshot", t.Start, t.Start, rd.Key, w.Start, w.Commit)
		return nil, false
	}
	return w, true
}

// checkAtomicity reports HalfVisible once per writer of which t saw one
// write while a stale read of another key missed another write, naming
// the least such missed key.
func (c *checker) checkAtomicity(t *Txn, st *readState) {
	if len(st.missed) == 0 {
		return
	}
	seen := make(map[int64][]string) // writer -> up to two distinct keys seen
	for _, s := range st.seen {
		if ks := seen[s.writer]; len(ks) == 0 || (len(ks) == 1 && ks[0] != s.key) {
			seen[s.writer] = append(ks, s.key)
		}
	}
	type half struct {
		missed write
		saw    string
	}
	found := make(map[int64]half)
	for _, m := range st.missed {
		saw, ok := otherKey(seen[m.writer], m.key)
		if h, dup := found[m.writer]; !ok || (dup && h.missed.key <= m.key) {
			continue
		}
		found[m.writer] = half{m, saw}
	}
	for w, h := range found {
		c.report(HalfVisible, t.Start, w, h.missed.key, "T%d (start %d) saw T%d's write of %q but not its write of %q, though T%d committed at %d <= %d: its commit was not atomic", t.Start, t.Start, w, h.saw, h.missed.key, w, h.missed.commit, t.Start)
	}
}

// otherKey returns a key of keys that is not key.
func otherKey(keys []string, key string) (string, bool) {
	for _, k := range keys {
		if k != key {
			return k, true
		}
	}
	return "", false
}

// source describes what a read of Writer w saw.
func source(w int64) string {
	if w == 0 {
		return "with no value"
	}
	return fmt.Sprintf("from T%d", w)
}

// sourceAt describes what a read of Writer w, committed at commit, saw.
func sourceAt(w, commit int64) string {
	if w == 0 {
		return "with no value"
	}
	return fmt.Sprintf("from T%d (commit %d)", w, commit)
}
