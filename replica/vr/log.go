package vr

// memLog is the log a node keeps in memory: the entries after the latest
// snapshot (or from index 1), plus the snapshot's index and view. The driver
// keeps the same log on disk; Ready tells it every change.
type memLog struct {
	snapIndex uint64
	snapView  uint64
	entries   []Entry // entries[i].Index == snapIndex+1+i
}

func (l *memLog) lastIndex() uint64 { return l.snapIndex + uint64(len(l.entries)) }

// viewAt returns the view of the entry at i. Index 0 (the empty prefix) has
// view 0; the snapshot's index has the snapshot's view. ok is false for
// compacted or missing indexes.
func (l *memLog) viewAt(i uint64) (uint64, bool) {
	switch {
	case i == l.snapIndex:
		return l.snapView, true
	case i == 0:
		return 0, true
	case i < l.snapIndex || i > l.lastIndex():
		return 0, false
	}
	return l.entries[i-l.snapIndex-1].View, true
}

func (l *memLog) lastView() uint64 {
	v, _ := l.viewAt(l.lastIndex())
	return v
}

// at returns the entry at i, which must be in memory.
func (l *memLog) at(i uint64) *Entry {
	if !(i > l.snapIndex && i <= l.lastIndex()) {
		broken("log: entry %d outside (%d,%d]", i, l.snapIndex, l.lastIndex())
	}
	return &l.entries[i-l.snapIndex-1]
}

// slice returns the entries in [lo, hi], at least one and then as many as
// fit maxN and maxBytes. lo must be in memory.
func (l *memLog) slice(lo, hi uint64, maxN, maxBytes int) []Entry {
	if !(lo > l.snapIndex && lo <= hi && hi <= l.lastIndex()) {
		broken("log: slice [%d,%d] outside (%d,%d]", lo, hi, l.snapIndex, l.lastIndex())
	}
	from := int(lo - l.snapIndex - 1)
	to := from
	size := 0
	for to <= int(hi-l.snapIndex-1) && to-from < maxN {
		size += len(l.entries[to].Data)
		if to > from && size > maxBytes {
			break
		}
		to++
	}
	return l.entries[from:to:to]
}

// append adds entries after the last one. Views must not decrease.
func (l *memLog) append(es ...Entry) {
	for _, e := range es {
		if e.Index != l.lastIndex()+1 {
			broken("log: append %d after %d", e.Index, l.lastIndex())
		}
		if e.View < l.lastView() {
			broken("log: entry %d of view %d after view %d", e.Index, e.View, l.lastView())
		}
		l.entries = append(l.entries, e)
	}
}

// truncateFrom drops the entries with index >= i.
func (l *memLog) truncateFrom(i uint64) {
	if i <= l.snapIndex {
		broken("log: truncate at %d inside the snapshot %d", i, l.snapIndex)
	}
	if i > l.lastIndex() {
		return
	}
	clear(l.entries[i-l.snapIndex-1:]) // let the data be collected
	l.entries = l.entries[:i-l.snapIndex-1]
}

// compact drops the entries up to i, which a snapshot now covers.
func (l *memLog) compact(i uint64) {
	if i <= l.snapIndex {
		return
	}
	if i > l.lastIndex() {
		broken("log: compact %d beyond %d", i, l.lastIndex())
	}
	v, _ := l.viewAt(i)
	n := int(i - l.snapIndex)
	rest := make([]Entry, len(l.entries)-n, max(len(l.entries)-n, 16))
	copy(rest, l.entries[n:])
	l.entries = rest
	l.snapIndex, l.snapView = i, v
}

// reset replaces the whole log by a snapshot at (i, v).
func (l *memLog) reset(i, v uint64) {
	l.entries = nil
	l.snapIndex, l.snapView = i, v
}

// shape returns the runs of the log over (from, to], at most max of them;
// covered is the last index they describe (to, unless max cut them short).
func (l *memLog) shape(from, to uint64, max int) (runs []Run, covered uint64) {
	if !(from >= l.snapIndex && to <= l.lastIndex()) {
		broken("log: shape (%d,%d] outside [%d,%d]", from, to, l.snapIndex, l.lastIndex())
	}
	covered = from
	for i := from + 1; i <= to; i++ {
		v := l.at(i).View
		if n := len(runs); n > 0 && runs[n-1].View == v {
			runs[n-1].Last = i
		} else {
			if n == max {
				break
			}
			runs = append(runs, Run{View: v, Last: i})
		}
		covered = i
	}
	return runs, covered
}
