package txn

import (
	"context"
	"fmt"
)

// resolve settles lock l, met on row, if its worker is dead, and reports
// whether it did; a live worker's lock is left alone (false). The primary
// column decides, as in Percolator:
//
//   - the primary still holds l's lock: the transaction never committed.
//     Roll the primary back (its lock and data go, a rollback record
//     stays), then row.
//   - the primary has l's commit record: the transaction committed. Roll
//     row forward: its locks of l become write records at the same commit
//     timestamp.
//   - otherwise (a rollback record, or nothing): roll row back.
//
// Deciding from a dead worker's primary is safe because the worker can
// never write again (see Liveness), so the primary cannot change under
// the decision except by another resolver making the same one.
func (db *DB) resolve(ctx context.Context, row string, l Lock) (bool, error) {
	alive, err := db.live.Alive(ctx, l.Worker)
	if err != nil || alive {
		return false, err
	}
	db.hook(pointResolving, l.Start, 0)
	p, _, err := db.store.Read(ctx, l.PrimaryRow)
	if err != nil {
		return false, fmt.Errorf("txn: resolve %d: %w", l.Start, err)
	}
	pc := p.Cols[l.PrimaryCol]
	var (
		commit     int64
		forward    bool
		rolledBack bool // the primary's row
	)
	switch {
	case pc != nil && pc.Lock != nil && pc.Lock.Start == l.Start:
		err = db.update(ctx, l.PrimaryRow, func(r *Row) (bool, error) {
			return rollbackLocks(r, l.Start, l.PrimaryCol), nil
		})
		if err != nil {
			return false, fmt.Errorf("txn: roll back %d: %w", l.Start, err)
		}
		rolledBack = true
	case pc != nil:
		if w, ok := pc.writeOf(l.Start); ok && w.Kind != KindRollback {
			commit, forward = w.Commit, true
		}
	}
	if forward {
		err = db.finish(ctx, row, l.Start, commit)
	} else if !(rolledBack && row == l.PrimaryRow) {
		pcol := ""
		if row == l.PrimaryRow {
			pcol = l.PrimaryCol
		}
		err = db.update(ctx, row, func(r *Row) (bool, error) { return rollbackLocks(r, l.Start, pcol), nil })
	}
	if err != nil {
		return false, fmt.Errorf("txn: resolve %d on %q: %w", l.Start, row, err)
	}
	if forward {
		db.st.forward.Add(1)
	} else {
		db.st.back.Add(1)
	}
	db.cfg.Logger.Debug("txn: resolved a dead worker's lock", "row", row, "start", l.Start,
		"worker", l.Worker, "forward", forward, "commit", commit)
	return true, nil
}
