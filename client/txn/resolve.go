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
	return true, db.settle(ctx, row, l, true)
}

// settle decides lock l on row by its primary, as resolve describes; the
// caller knows that l's worker will not write again (it is dead, or it is
// this DB cleaning up after itself). counted says whether to count the
// resolution in Stats.
func (db *DB) settle(ctx context.Context, row string, l Lock, counted bool) error {
	p, _, err := db.store.Read(ctx, l.PrimaryRow)
	if err != nil {
		return fmt.Errorf("txn: resolve %d: %w", l.Start, err)
	}
	pc := p.Cols[l.PrimaryCol]
	var (
		commit     int64
		forward    bool
		rolledBack bool // the primary's row
		did        bool // this call, not a racing resolver, changed a row
	)
	switch {
	case pc != nil && pc.Lock != nil && pc.Lock.Start == l.Start:
		err = db.update(ctx, l.PrimaryRow, func(r *Row) (bool, error) {
			did = rollbackLocks(r, l.Start, l.PrimaryCol)
			return did, nil
		})
		if err != nil {
			return fmt.Errorf("txn: roll back %d: %w", l.Start, err)
		}
		rolledBack = true
	case pc != nil:
		if w, ok := pc.writeOf(l.Start); ok && w.Kind != KindRollback {
			commit, forward = w.Commit, true
		}
	}
	if forward || !(rolledBack && row == l.PrimaryRow) {
		pcol := ""
		if row == l.PrimaryRow {
			pcol = l.PrimaryCol
		}
		err = db.update(ctx, row, func(r *Row) (bool, error) {
			if forward {
				did = commitLocks(r, l.Start, commit)
			} else {
				did = rollbackLocks(r, l.Start, pcol) || did
			}
			return did, nil
		})
	}
	if err != nil {
		return fmt.Errorf("txn: resolve %d on %q: %w", l.Start, row, err)
	}
	switch {
	case !counted:
	case did && forward:
		db.st.forward.Add(1)
	case did:
		db.st.back.Add(1)
	}
	db.cfg.Logger.Debug("txn: resolved a dead worker's lock", "row", row, "start", l.Start,
		"worker", l.Worker, "forward", forward, "commit", commit)
	return nil
}

// settleRow settles the locks of the transaction that started at start on
// row, if any are left.
func (db *DB) settleRow(ctx context.Context, row string, start int64) error {
	r, _, err := db.store.Read(ctx, row)
	if err != nil {
		return err
	}
	for _, c := range r.Cols {
		if c.Lock != nil && c.Lock.Start == start {
			return db.settle(ctx, row, *c.Lock, false)
		}
	}
	return nil
}

// pending is a transaction of this DB whose locks could not all be
// cleaned up (or whose commit's outcome was not learned): they are
// settled again at the next Begin, because nobody else will while this
// worker lives.
type pending struct {
	start int64
	rows  []string // the primary's first
}

// cleanup settles what a transaction that did not commit (or does not
// know) left on rows: the primary's row first, which decides, then the
// others; whatever fails is kept for settlePending.
func (db *DB) cleanup(ctx context.Context, p pending) {
	ctx = context.WithoutCancel(ctx)
	err := db.settleRow(ctx, p.rows[0], p.start)
	if err == nil {
		err = forEach(p.rows[1:], func(row string) error { return db.settleRow(ctx, row, p.start) })
	}
	if err != nil {
		db.cfg.Logger.Warn("txn: locks left behind; settling them at the next Begin", "start", p.start, "err", err)
		db.pmu.Lock()
		if len(db.pending) < maxPending {
			db.pending = append(db.pending, p)
		}
		db.pmu.Unlock()
	}
}

// settlePending retries the cleanups that failed, at most a few per call.
func (db *DB) settlePending(ctx context.Context) {
	db.pmu.Lock()
	ps := db.pending
	db.pending = nil
	db.pmu.Unlock()
	for _, p := range ps {
		db.cleanup(ctx, p)
	}
}
