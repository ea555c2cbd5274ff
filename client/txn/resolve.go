package txn

import (
	"context"
	"fmt"
)

// resolveOrWait is resolve for a lock met by a read or a prewrite: a
// lock of this DB's own worker is either a transaction of this DB still
// committing (waited for, then true: look again) or one left by a failed
// cleanup (settled now, as nobody else may).
func (db *DB) resolveOrWait(ctx context.Context, row string, l Lock) (bool, error) {
	if l.Worker != db.worker {
		return db.resolve(ctx, row, l)
	}
	if done := db.running(l.Start); done != nil {
		select {
		case <-done:
			return true, nil
		case <-ctx.Done():
			return false, context.Cause(ctx)
		}
	}
	return true, db.settle(ctx, row, l, false, snap{})
}

// resolve settles lock l, met on row, if its transaction's primary has
// committed (rolled forward, whoever the worker) or its worker is dead,
// and reports whether it did; a live worker's uncommitted lock is left
// alone (false). The primary column decides, as in Percolator:
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
	// A committed primary decides for everyone, dead or alive: such a
	// lock is only waiting for its writer's background commit, and
	// rolling it forward is what the writer would do.
	p, pv, err := db.store.Read(ctx, l.PrimaryRow)
	if err != nil {
		return false, fmt.Errorf("txn: resolve %d: %w", l.Start, err)
	}
	if c := p.Cols[l.PrimaryCol]; c != nil {
		if w, ok := c.writeOf(l.Start); ok && w.Kind != KindRollback {
			var did bool
			err := db.update(ctx, row, func(r *Row) (bool, error) {
				did = commitLocks(r, l.Start, w.Commit)
				return did, nil
			})
			if did && err == nil {
				db.st.forward.Add(1)
			}
			return err == nil, err
		}
	}
	alive, err := db.live.Alive(ctx, l.Worker)
	if err != nil || alive {
		return false, err
	}
	db.hook(pointResolving, l.Start, 0)
	return true, db.settle(ctx, row, l, true, snap{r: p, v: pv, ok: true})
}

// settle decides lock l on row by its primary, as resolve describes; the
// caller knows that l's worker will not write again (it is dead, or it is
// this DB cleaning up after itself). counted says whether to count the
// resolution in Stats; primary, if ok, is the primary's row as the caller
// just read it (the decision's write then starts from it).
func (db *DB) settle(ctx context.Context, row string, l Lock, counted bool, primary snap) error {
	// The decision is taken inside the primary's compare-and-swap, on the
	// row as it is when written, so that it cannot be overtaken: had the
	// worker committed meanwhile (it was not dead after all, say its token
	// was deleted by hand), its commit record is seen and followed.
	var (
		commit  int64
		forward bool
		did     bool // this call, not a racing resolver, changed a row
	)
	_, err := db.updateFrom(ctx, l.PrimaryRow, primary, func(r *Row) (bool, error) {
		commit, forward, did = 0, false, false
		c := r.Cols[l.PrimaryCol]
		if c != nil && (c.Lock == nil || c.Lock.Start != l.Start) {
			if w, ok := c.writeOf(l.Start); ok {
				if w.Kind != KindRollback {
					commit, forward = w.Commit, true
				}
				return false, nil // decided already
			}
		}
		did = rollbackLocks(r, l.Start, l.PrimaryCol) // all of l's locks on the primary's row
		if !did {
			// Neither lock nor record: the primary's prewrite has not
			// landed (rows are prewritten at once). A rollback record
			// makes sure it never will.
			r.col(l.PrimaryCol).addWrite(Write{Commit: l.Start, Start: l.Start, Kind: KindRollback})
			did = true
		}
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
			return db.settle(ctx, row, *c.Lock, false, snap{})
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
		rest := p.rows[1:]
		err = forEach(rest, func(i int) error { return db.settleRow(ctx, rest[i], p.start) })
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
