package sicheck

import "sort"

// checkOutcomes reports Unresolved transactions and BadCommit timestamps.
func (c *checker) checkOutcomes() {
	byCommit := make(map[int64]*Txn)
	for _, t := range c.order {
		switch t.Outcome {
		case Aborted:
		case Committed:
			if len(t.Writes) > 0 || len(t.Deletes) > 0 {
				c.checkCommit(t, byCommit) // a read-only one has nothing to order
			}
		default:
			c.report(Unresolved, t.Start, 0, "", "T%d has outcome %s: resolve it (roll its primary forward or back) before judging the history", t.Start, t.Outcome)
		}
	}
}

// checkCommit reports a commit timestamp of t that is not after its start
// or that an earlier transaction of byCommit already has.
func (c *checker) checkCommit(t *Txn, byCommit map[int64]*Txn) {
	if t.Commit <= t.Start {
		c.report(BadCommit, t.Start, 0, "", "T%d committed at %d, not after its start %d", t.Start, t.Commit, t.Start)
		return
	}
	first, dup := byCommit[t.Commit]
	if !dup {
		byCommit[t.Commit] = t
		return
	}
	later, earlier := t.Start, first.Start
	if later < earlier {
		later, earlier = earlier, later
	}
	c.report(BadCommit, later, earlier, "", "T%d and T%d both committed at %d: the oracle handed out one timestamp twice", earlier, later, t.Commit)
}

// checkConflicts reports LostUpdate for each key.
func (c *checker) checkConflicts() {
	for key, vs := range c.versions {
		c.checkKeyConflicts(key, vs)
	}
}

// checkKeyConflicts reports each committed writer of key that started
// before an earlier-started writer committed, naming the one of those
// that committed last. Writers with Commit <= Start (BadCommit) are left
// out: they have no interval to overlap.
func (c *checker) checkKeyConflicts(key string, byCommit []version) {
	vs := make([]version, 0, len(byCommit))
	for _, v := range byCommit {
		if v.commit > v.start {
			vs = append(vs, v)
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].start < vs[j].start })
	var last version // of the writers before v, the one that committed last
	for i, v := range vs {
		if i > 0 && v.start < last.commit {
			c.report(LostUpdate, v.start, last.start, key, "T%d (start %d, commit %d) and T%d (start %d, commit %d) both wrote %q and both committed, though they overlap: first-committer-wins failed", last.start, last.start, last.commit, v.start, v.start, v.commit, key)
		}
		if i == 0 || v.commit > last.commit {
			last = v
		}
	}
}
