package txn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// cell names one column of one row.
type cell struct{ row, col string }

func (c cell) String() string { return c.row + ":" + c.col }

func compareCells(a, b cell) int {
	if c := strings.Compare(a.row, b.row); c != 0 {
		return c
	}
	return strings.Compare(a.col, b.col)
}

// mutation is a buffered write: a put of value, or a delete.
type mutation struct {
	kind  Kind
	value []byte
}

// Txn is one snapshot-isolation transaction. Reads see the snapshot at its
// start; writes are buffered until Commit. Not safe for concurrent use.
type Txn struct {
	db     *DB
	start  int64
	writes map[cell]mutation
	seen   map[string]snap // rows as Get read them: prewrite starts from them
	done   bool
}

// Start returns the transaction's start timestamp (its snapshot).
func (t *Txn) Start() int64 { return t.start }

// Get returns the value of column col of row as of the transaction's
// snapshot (or its own buffered write); ok is false if there is none. A
// lock of an older transaction is resolved if its worker is dead and
// waited for (Config.LockWait) if not.
func (t *Txn) Get(ctx context.Context, row, col string) (value []byte, ok bool, err error) {
	if err := t.usable(row, col); err != nil {
		return nil, false, err
	}
	if m, mine := t.writes[cell{row, col}]; mine {
		return m.value, m.kind == KindPut, nil
	}
	v, ok, sn, err := t.db.snapshotGet(ctx, t.start, row, col)
	if err == nil && sn.ok && len(t.seen) < MaxWrites {
		if t.seen == nil {
			t.seen = map[string]snap{}
		}
		t.seen[row] = sn
	}
	return v, ok, err
}

// Set buffers a write of value to column col of row.
func (t *Txn) Set(row, col string, value []byte) error {
	if err := t.usable(row, col); err != nil {
		return err
	}
	if len(value) > MaxValueBytes {
		return fmt.Errorf("%w: value of %d bytes, more than %d", ErrInvalid, len(value), MaxValueBytes)
	}
	return t.buffer(cell{row, col}, mutation{kind: KindPut, value: slices.Clone(value)})
}

// Delete buffers a delete of column col of row.
func (t *Txn) Delete(row, col string) error {
	if err := t.usable(row, col); err != nil {
		return err
	}
	return t.buffer(cell{row, col}, mutation{kind: KindDelete})
}

func (t *Txn) buffer(c cell, m mutation) error {
	if _, ok := t.writes[c]; !ok && len(t.writes) >= MaxWrites {
		return fmt.Errorf("%w: more than %d cells written", ErrInvalid, MaxWrites)
	}
	t.writes[c] = m
	return nil
}

func (t *Txn) usable(row, col string) error {
	switch {
	case t.done:
		return fmt.Errorf("%w: transaction %d already committed or rolled back", ErrInvalid, t.start)
	case row == "" || len(row) > MaxKeyBytes:
		return fmt.Errorf("%w: row key of %d bytes (1..%d)", ErrInvalid, len(row), MaxKeyBytes)
	case col == "" || len(col) > MaxColumnBytes:
		return fmt.Errorf("%w: column name of %d bytes (1..%d)", ErrInvalid, len(col), MaxColumnBytes)
	}
	return nil
}

// Rollback ends a transaction that has not committed; its buffered writes
// are dropped (nothing was written before Commit).
func (t *Txn) Rollback(ctx context.Context) error {
	t.done = true
	t.writes = nil
	return nil
}

// snapshotGet reads col of row at ts, and returns the row as read.
func (db *DB) snapshotGet(ctx context.Context, ts int64, row, col string) ([]byte, bool, snap, error) {
	deadline := time.Now().Add(db.cfg.LockWait)
	for i := 0; ; i++ {
		r, ver, err := db.store.Read(ctx, row)
		if err != nil {
			return nil, false, snap{}, err
		}
		c := r.Cols[col]
		if c != nil && c.Lock != nil && c.Lock.Start < ts {
			resolved, err := db.resolveOrWait(ctx, row, *c.Lock)
			if err != nil {
				return nil, false, snap{}, err
			}
			if !resolved {
				if i == 0 {
					db.st.waits.Add(1)
				}
				if time.Now().After(deadline) {
					return nil, false, snap{}, onRow(row, fmt.Errorf("%w: %s:%s by transaction %d of worker %s", ErrLocked, row, col, c.Lock.Start, c.Lock.Worker))
				}
				if err := sleep(ctx, backoff(i, waitBackoff)); err != nil {
					return nil, false, snap{}, err
				}
			}
			continue
		}
		f, err := db.rowFloor(ctx, r, ver)
		if err != nil {
			return nil, false, snap{}, err
		}
		if ts < f {
			return nil, false, snap{}, fmt.Errorf("%w: start %d, floor %d", ErrSnapshotTooOld, ts, f)
		}
		sn := snap{r: r, v: ver, ok: true}
		if c == nil {
			return nil, false, sn, nil
		}
		w, ok := c.visible(ts)
		if !ok || w.Kind == KindDelete {
			return nil, false, sn, nil
		}
		v, ok := c.data(w.Start)
		if !ok {
			return nil, false, snap{}, fmt.Errorf("%w: row %q column %q: commit %d has no data", ErrCorrupt, row, col, w.Commit)
		}
		return slices.Clone(v), true, sn, nil
	}
}

// Commit runs Percolator's two phases: prewrite (a lock and the data on
// every written cell, one row write per row, all rows at once), a commit
// timestamp, the commit of the primary (the commit point: its write
// records replace its locks in one row write); the secondaries are then
// committed in the background. It returns the commit timestamp (the start
// timestamp for a transaction that wrote nothing). Any error but
// ErrCommitUnknown means nothing was committed; the locks already written
// are then removed.
func (t *Txn) Commit(ctx context.Context) (int64, error) {
	if t.done {
		return 0, fmt.Errorf("%w: transaction %d already committed or rolled back", ErrInvalid, t.start)
	}
	t.done = true
	if len(t.writes) == 0 {
		return t.start, nil
	}
	db := t.db
	db.mu.RLock()
	defer db.mu.RUnlock()
	if db.closed {
		return 0, fmt.Errorf("%w: the DB is closed", ErrInvalid)
	}
	commit, err := t.commit(ctx)
	switch {
	case err == nil:
		db.st.commits.Add(1)
	case errors.Is(err, ErrConflict):
		db.st.conflicts.Add(1)
	default:
		db.st.aborts.Add(1)
	}
	return commit, err
}

func (t *Txn) commit(ctx context.Context) (int64, error) {
	db := t.db
	cells := slices.SortedFunc(func(yield func(cell) bool) {
		for c := range t.writes {
			if !yield(c) {
				return
			}
		}
	}, compareCells)
	primary := cells[0]
	rows := groupByRow(cells)
	if err := t.precheck(rows); err != nil {
		return 0, err
	}
	done := db.begin(t.start)
	defer func() {
		if done != nil {
			done()
		}
	}()
	// Every row at once, the primary's too: a resolver that meets a
	// secondary before the primary's lock is written finds neither lock
	// nor record there and leaves a rollback record, which this
	// transaction's prewrite of the primary then meets (ErrAborted).
	written := make([]snap, len(rows))
	err := forEach(rows, func(i int) error {
		sn, err := t.prewriteRow(ctx, primary, rows[i])
		written[i] = sn
		return err
	})
	if err != nil {
		t.cleanup(ctx, rows)
		return 0, err
	}
	db.hook(pointPrewritten, t.start, 0)
	commit, err := db.oracle.Timestamps(ctx, 1)
	if err != nil {
		t.cleanup(ctx, rows)
		return 0, fmt.Errorf("txn: commit timestamp: %w", err)
	}
	if err := t.commitPrimary(ctx, primary, commit, written[0]); err != nil {
		// Rolled back by a resolver, or unknown: either way this worker
		// now decides (a lock still there is rolled back), and then the
		// primary may tell the outcome after all.
		t.cleanup(ctx, rows)
		if errors.Is(err, ErrCommitUnknown) {
			if c, known, committed := db.outcome(ctx, primary, t.start); known && committed {
				return c, nil
			} else if known {
				return 0, fmt.Errorf("%w: transaction %d was rolled back after a failed commit: %w", ErrAborted, t.start, err)
			}
		}
		return 0, err
	}
	db.hook(pointPrimaryCommited, t.start, commit)
	// Committed. The secondaries are committed in the background, as in
	// Percolator; one left locked by a failure is rolled forward by
	// whoever meets it, so errors are only logged. A later transaction of
	// this DB that meets one of those locks waits for this (db.begin).
	finish, bg := done, context.WithoutCancel(ctx)
	done = nil
	go func() {
		defer finish()
		ctx, cancel := context.WithTimeout(bg, db.cfg.LockWait)
		defer cancel()
		forEach(rows[1:], func(i int) error {
			row := rows[i+1][0].row
			err := db.finishFrom(ctx, row, t.start, commit, written[i+1])
			if err != nil {
				db.cfg.Logger.Warn("txn: secondary not committed; a reader will roll it forward",
					"row", row, "start", t.start, "commit", commit, "err", err)
			}
			return nil
		})
	}()
	return commit, nil
}

// outcome reads the fate of the transaction that started at start from
// its primary: known is false while the primary is still locked by it,
// cannot be read, or may have lost the record to garbage collection.
func (db *DB) outcome(ctx context.Context, primary cell, start int64) (commit int64, known, committed bool) {
	r, _, err := db.store.Read(context.WithoutCancel(ctx), primary.row)
	if err != nil {
		return 0, false, false
	}
	if c := r.Cols[primary.col]; c != nil {
		if c.Lock != nil && c.Lock.Start == start {
			return 0, false, false
		}
		if w, ok := c.writeOf(start); ok && w.Kind != KindRollback {
			return w.Commit, true, true
		}
	}
	// No record: rolled back, unless garbage collection removed the
	// record of a commit that newer ones superseded.
	if f, err := db.rowFloor(ctx, r, Version{Instance: 1}); err != nil || start < f {
		return 0, false, false
	}
	return 0, true, false
}

// rowFloor is the floor a read of r (at version v) is judged by: the row's
// own, or the table's for a row that is gone. The table's is read after
// the row: garbage collection raises it before it deletes a row, so a read
// that found the row gone is followed by one that sees the raise. A row's
// own floor comes in the very write that removed its versions.
func (db *DB) rowFloor(ctx context.Context, r *Row, v Version) (int64, error) {
	if v != (Version{}) && len(r.Cols) > 0 {
		return r.Floor, nil
	}
	return db.floor(ctx)
}

// groupByRow splits sorted cells into runs of one row each.
func groupByRow(cells []cell) [][]cell {
	var out [][]cell
	for i, c := range cells {
		if i == 0 || c.row != cells[i-1].row {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], c)
	}
	return out
}

// precheck fails early, before anything is written, when a row as Get
// saw it already shows a conflict the prewrite would meet: a commit after
// our start, or a lock of a younger transaction (an older one's Get
// resolved or waited out). Under contention this spares the prewrites
// and their cleanup that would be thrown away.
func (t *Txn) precheck(rows [][]cell) error {
	for _, cs := range rows {
		sn, ok := t.seen[cs[0].row]
		if !ok {
			continue
		}
		for _, c := range cs {
			col := sn.r.Cols[c.col]
			if col == nil {
				continue
			}
			if l := col.Lock; l != nil && l.Start > t.start {
				return onRow(c.row, fmt.Errorf("%w: %s locked by the younger transaction %d", ErrConflict, c, l.Start))
			}
			if w, bad := col.conflict(t.start); bad && w.Start != t.start {
				return onRow(c.row, fmt.Errorf("%w: %s committed at %d after our start %d", ErrConflict, c, w.Commit, t.start))
			}
		}
	}
	return nil
}

// forEach runs f(i) for every index of xs concurrently (on the caller's
// goroutine when there is one) and returns the errors joined.
func forEach[T any](xs []T, f func(i int) error) error {
	if len(xs) == 1 {
		return f(0)
	}
	errs := make([]error, len(xs))
	var wg sync.WaitGroup
	for i := range xs {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// prewriteRow locks and writes the cells cs of one row in one row write,
// starting from the row as Get saw it, and returns the row as written. A
// lock of a dead worker is resolved first; a live one, or a commit after
// our start, is a conflict.
func (t *Txn) prewriteRow(ctx context.Context, primary cell, cs []cell) (snap, error) {
	db, row := t.db, cs[0].row
	hint := t.seen[row]
	for attempt := 0; ; attempt++ {
		var blocker *Lock
		sn, err := db.updateFrom(ctx, row, hint, func(r *Row) (bool, error) {
			blocker = nil
			// Garbage collection may have removed records this write
			// must see to find a conflict (a delete after our start).
			f := r.Floor
			if len(r.Cols) == 0 {
				var err error
				if f, err = db.floor(ctx); err != nil { // a row that is gone: the table's
					return false, err
				}
			}
			if t.start < f {
				return false, fmt.Errorf("%w: start %d, floor %d of row %q", ErrSnapshotTooOld, t.start, f, row)
			}
			for _, c := range cs {
				col := r.Cols[c.col]
				if col == nil {
					continue
				}
				if l := col.Lock; l != nil && l.Start != t.start {
					blocker = l
					return false, nil
				}
				if w, bad := col.conflict(t.start); bad {
					if w.Start == t.start {
						return false, fmt.Errorf("%w: %s was rolled back", ErrAborted, c)
					}
					return false, onRow(c.row, fmt.Errorf("%w: %s committed at %d after our start %d", ErrConflict, c, w.Commit, t.start))
				}
			}
			for _, c := range cs {
				m := t.writes[c]
				col := r.col(c.col)
				col.Lock = &Lock{Start: t.start, PrimaryRow: primary.row, PrimaryCol: primary.col, Worker: db.worker, Kind: m.kind}
				if m.kind == KindPut {
					col.putData(t.start, m.value)
				}
			}
			return true, nil
		})
		hint = snap{}
		if err != nil || blocker == nil {
			return sn, err
		}
		resolved, err := db.resolveOrWait(ctx, row, *blocker)
		if err != nil {
			return snap{}, err
		}
		if !resolved || attempt >= 3 {
			return snap{}, onRow(row, fmt.Errorf("%w: %s locked by transaction %d of worker %s", ErrConflict, row, blocker.Start, blocker.Worker))
		}
	}
}

// commitPrimary is the commit point: the primary row's locks of this
// transaction become write records at commit, in one row write. If the
// lock is gone, a resolver rolled us back: ErrAborted. If the outcome of
// the write cannot be learned, ErrCommitUnknown.
func (t *Txn) commitPrimary(ctx context.Context, primary cell, commit int64, hint snap) error {
	db := t.db
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		committed := false
		_, err := db.updateFrom(ctx, primary.row, hint, func(r *Row) (bool, error) {
			committed = false
			c := r.Cols[primary.col]
			if c != nil && c.Lock != nil && c.Lock.Start == t.start {
				commitLocks(r, t.start, commit)
				return true, nil
			}
			if c != nil {
				if w, ok := c.writeOf(t.start); ok && w.Kind != KindRollback {
					committed = true // an earlier attempt did it
					return false, nil
				}
			}
			return false, fmt.Errorf("%w: transaction %d's primary lock on %s is gone", ErrAborted, t.start, primary)
		})
		if err == nil || committed || errors.Is(err, ErrAborted) {
			return err
		}
		hint, lastErr = snap{}, err
		if ctx.Err() != nil {
			break
		}
		if err := sleep(ctx, backoff(attempt+3, slowBackoff)); err != nil {
			break
		}
	}
	return fmt.Errorf("%w: transaction %d: %w", ErrCommitUnknown, t.start, lastErr)
}

// commitLocks turns every lock of the transaction that started at start in
// r into a write record at commit; it reports whether there was one.
func commitLocks(r *Row, start, commit int64) bool {
	any := false
	for _, c := range r.Cols {
		if l := c.Lock; l != nil && l.Start == start {
			c.addWrite(Write{Commit: commit, Start: start, Kind: l.Kind})
			c.Lock = nil
			any = true
		}
	}
	return any
}

// rollbackLocks removes every lock of the transaction that started at
// start from r, with its data. primaryCol is "" unless r is the
// transaction's primary row: there the primary column gets a rollback
// record, so that the transaction's own late commit finds it and stops.
// It reports whether there was a lock.
func rollbackLocks(r *Row, start int64, primaryCol string) bool {
	any := false
	for name, c := range r.Cols {
		if l := c.Lock; l != nil && l.Start == start {
			c.Lock = nil
			c.dropData(start)
			if name == primaryCol {
				c.addWrite(Write{Commit: start, Start: start, Kind: KindRollback})
			}
			any = true
		}
	}
	return any
}

// finishFrom commits the locks of the transaction that started at start on
// row (a secondary) at commit, starting from hint.
func (db *DB) finishFrom(ctx context.Context, row string, start, commit int64, hint snap) error {
	_, err := db.updateFrom(ctx, row, hint, func(r *Row) (bool, error) { return commitLocks(r, start, commit), nil })
	return err
}

// cleanup settles the locks rows may hold after a commit that failed.
func (t *Txn) cleanup(ctx context.Context, rows [][]cell) {
	keys := make([]string, len(rows))
	for i, cs := range rows {
		keys[i] = cs[0].row
	}
	t.db.cleanup(ctx, pending{start: t.start, rows: keys})
}
