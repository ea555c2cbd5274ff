package txn

import (
	"context"
	"fmt"
	"time"
)

// GCStats says what a garbage collection did.
type GCStats struct {
	Rows            int   // rows visited
	RowsDeleted     int   // rows left empty and deleted
	VersionsRemoved int   // write records and values removed
	LocksResolved   int   // dead workers' locks below the safe point resolved
	Floor           int64 // the table's floor afterwards
}

// GC removes the versions no snapshot at or above safePoint can see: in
// each column, every write record at or below it but the latest (and that
// one too if it is a delete or a rollback), and the values they point to.
// Transactions that start below the floor then fail with
// ErrSnapshotTooOld. safePoint must not be above a timestamp the oracle
// already handed out; choose one older than any transaction still
// running (e.g. a timestamp taken a few minutes ago).
//
// The order makes it safe with transactions running:
//  1. The table's floor is raised first, so a read that finds a row gone
//     sees the floor too (readers read it after the row). A row that keeps
//     columns gets the safe point as its own floor in the write that
//     removes its versions, so reading it tells.
//  2. Every lock below the safe point is resolved before anything is
//     removed, because resolving a secondary needs its primary's commit
//     record, which step 3 may remove. A live worker's lock there is
//     waited for (Config.LockWait); if it stays, GC stops with ErrLocked
//     having removed nothing.
//  3. Rows are collected one compare-and-swap each. A lock written after
//     step 2 belongs to a transaction whose commit timestamp will be above
//     the oracle's time at step 1, so no record it needs is removed.
func (db *DB) GC(ctx context.Context, safePoint int64) (GCStats, error) {
	var st GCStats
	now, err := db.oracle.Timestamps(ctx, 1)
	if err != nil {
		return st, fmt.Errorf("txn: gc: %w", err)
	}
	if safePoint < 1 || safePoint > now {
		return st, fmt.Errorf("%w: gc safe point %d not in [1, %d] (handed out so far)", ErrInvalid, safePoint, now)
	}
	err = db.update(ctx, metaKey, func(r *Row) (bool, error) {
		if r.Floor >= safePoint {
			return false, nil
		}
		r.Floor = safePoint
		return true, nil
	})
	if err != nil {
		return st, fmt.Errorf("txn: gc: raise floor: %w", err)
	}
	if st.Floor, err = db.floor(ctx); err != nil {
		return st, err
	}
	keys, err := db.store.Keys(ctx)
	if err != nil {
		return st, err
	}
	for _, k := range keys {
		n, err := db.resolveBelow(ctx, k, safePoint)
		st.LocksResolved += n
		if err != nil {
			return st, fmt.Errorf("txn: gc: %w", err)
		}
	}
	for _, k := range keys {
		st.Rows++
		removed, deleted := 0, false
		err := db.update(ctx, k, func(r *Row) (bool, error) {
			removed = collect(r, safePoint)
			deleted = r.isEmpty()
			return removed > 0, nil
		})
		if err != nil {
			return st, fmt.Errorf("txn: gc: %w", err)
		}
		st.VersionsRemoved += removed
		if deleted && removed > 0 {
			st.RowsDeleted++
		}
	}
	return st, nil
}

// resolveBelow resolves every lock of row older than ts, waiting for live
// ones up to Config.LockWait.
func (db *DB) resolveBelow(ctx context.Context, row string, ts int64) (int, error) {
	deadline := time.Now().Add(db.cfg.LockWait)
	resolved := 0
	for i := 0; ; i++ {
		r, _, err := db.store.Read(ctx, row)
		if err != nil {
			return resolved, err
		}
		var old *Lock
		for _, c := range r.Cols {
			if c.Lock != nil && c.Lock.Start < ts {
				old = c.Lock
				break
			}
		}
		if old == nil {
			return resolved, nil
		}
		ok, err := db.resolve(ctx, row, *old)
		if err != nil {
			return resolved, err
		}
		if ok {
			resolved++
			continue
		}
		if time.Now().After(deadline) {
			return resolved, fmt.Errorf("%w: row %q: transaction %d of live worker %s is older than the safe point %d",
				ErrLocked, row, old.Start, old.Worker, ts)
		}
		if err := sleep(ctx, backoff(i, waitBackoff)); err != nil {
			return resolved, err
		}
	}
}

// collect removes from r what no snapshot at or above sp can see and
// returns how many versions (write records and values) it removed.
func collect(r *Row, sp int64) int {
	removed := 0
	for name, c := range r.Cols {
		keep := c.Writes[:0:0]
		latest := -1 // index of the latest commit or delete at or below sp
		for i, w := range c.Writes {
			if w.Commit <= sp && w.Kind != KindRollback {
				latest = i
			}
		}
		for i, w := range c.Writes {
			if w.Commit > sp || i == latest && w.Kind == KindPut {
				keep = append(keep, w)
			}
		}
		removed += len(c.Writes) - len(keep)
		c.Writes = keep
		data := c.Data[:0:0]
		for _, d := range c.Data {
			if c.Lock != nil && c.Lock.Start == d.Start || c.referenced(d.Start) {
				data = append(data, d)
			}
		}
		removed += len(c.Data) - len(data)
		c.Data = data
		if c.empty() {
			delete(r.Cols, name)
		}
	}
	switch {
	case removed > 0 && len(r.Cols) == 0:
		r.Floor = 0 // deleted: judged by the table's floor from now on
	case removed > 0:
		r.Floor = max(r.Floor, sp)
	}
	return removed
}

// referenced reports whether a committed put points at the value written
// at start.
func (c *Column) referenced(start int64) bool {
	for _, w := range c.Writes {
		if w.Start == start && w.Kind == KindPut {
			return true
		}
	}
	return false
}

// GCLoop collects garbage every interval, with a safe point about keep
// old: oracle timestamps are counters, not clock readings, so the loop
// samples one per interval and uses the newest sample taken at least keep
// ago (by this process's clock). A transaction running longer than keep
// may then fail with ErrSnapshotTooOld; nothing else changes for it.
// Errors are logged and the loop goes on; it returns when ctx ends.
func (db *DB) GCLoop(ctx context.Context, interval, keep time.Duration) {
	if interval <= 0 || keep <= 0 {
		db.cfg.Logger.Error("txn: GCLoop needs a positive interval and keep", "interval", interval, "keep", keep)
		return
	}
	var samples []gcSample // oldest first, bounded by keep/interval + 2
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ts, err := db.oracle.Timestamps(ctx, 1)
		if err != nil {
			db.cfg.Logger.Warn("txn: gc: no timestamp", "err", err)
			continue
		}
		now := time.Now()
		samples = append(samples, gcSample{at: now, ts: ts})
		sp, rest := pickSafePoint(samples, now.Add(-keep))
		samples = rest
		if sp == 0 {
			continue
		}
		st, err := db.GC(ctx, sp)
		if err != nil {
			db.cfg.Logger.Warn("txn: gc failed; will try again", "safe_point", sp, "err", err)
			continue
		}
		db.cfg.Logger.Debug("txn: gc", "safe_point", sp, "rows", st.Rows, "removed", st.VersionsRemoved,
			"rows_deleted", st.RowsDeleted, "locks_resolved", st.LocksResolved)
	}
}

type gcSample struct {
	at time.Time
	ts int64
}

// pickSafePoint returns the newest sample taken at or before cutoff (0 if
// none) and the samples still worth keeping: that one and the newer ones.
func pickSafePoint(samples []gcSample, cutoff time.Time) (int64, []gcSample) {
	i := -1
	for j, s := range samples {
		if !s.at.After(cutoff) {
			i = j
		}
	}
	if i < 0 {
		return 0, samples
	}
	return samples[i].ts, samples[i:]
}
