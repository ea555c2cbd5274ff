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
// Safety does not rest on liveness being right: the decision is made in
// the primary's own row write (see settle), so a worker wrongly thought
// dead only loses its transaction (its commit finds the rollback record).
// Liveness decides when a lock may be overruled, so that a live worker is
// not aborted by every reader it meets.
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
	// The decision is taken inside the primary's compare-and-swap, on the
	// row as it is when written, so that it cannot be overtaken: had the
	// worker committed meanwhile (it was not dead after all, say its token
	// was deleted by hand), its commit record is seen and followed.
	var (
		commit  int64
		forward bool
		did     bool // this call, not a racing resolver, changed a row
	)
	err := db.update(ctx, l.PrimaryRow, func(r *Row) (bool, error) {
		commit, forward, did = 0, false, false
		if c := r.Cols[l.PrimaryCol]; c != nil && (c.Lock == nil || c.Lock.Start != l.Start) {
			if w, ok := c.writeOf(l.Start); ok && w.Kind != KindRollback {
				commit, forward = w.Commit, true
				return false, nil
			}
		}
		did = rollbackLocks(r, l.Start, l.PrimaryCol) // all of l's locks on the primary's row
		return did, nil
	})
	if err == nil && (forward || row != l.PrimaryRow) {
		var rowDid bool // of the attempt that counted
		err = db.update(ctx, row, func(r *Row) (bool, error) {
			if forward {
				rowDid = commitLocks(r, l.Start, commit)
			} else {
				rowDid = rollbackLocks(r, l.Start, "")
			}
			return rowDid, nil
		})
		did = did || rowDid
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
	db.cfg.Logger.Debug("txn: resolved a lock", "row", row, "start", l.Start,
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
