package txn

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
)

// Change is one committed change of an observed column.
type Change struct {
	Row, Col string
	Commit   int64  // the commit timestamp
	Start    int64  // the writing transaction's start timestamp
	Value    []byte // nil when Deleted
	Deleted  bool
}

// Observer runs functions when observed columns change: Percolator's
// observers, reduced to their core. It learns of changes from the store's
// events (Watcher), reads the row, and calls the column's function once
// for every commit record newer than the last it reported, in commit
// order (the records of one column are written in that order, because a
// column's lock serializes its writers). A lock of a dead worker on an
// observed column is resolved, so that a crashed writer delays a change
// only until its session ends. Changes committed before Observe are not
// reported; changes removed by garbage collection before the observer
// read them are skipped.
//
// Delivery is at least once per Observer: fn may be called again for a
// change after a failure to read, never out of order for one column. For
// changes that must be acted on once, in the table, watch with WatchTxn:
// fn then runs in a transaction that also writes the column's
// acknowledgment, so that among all the observers of the column one
// transaction commits per change.
type Observer struct {
	db   *DB
	stop func()
	wake chan struct{} // a row is dirty
	quit chan struct{} // closed by Close
	done chan struct{} // closed when loop returns

	mu      sync.Mutex
	watched map[cell]*watch
	dirty   map[string]bool // rows to re-read; "" means all
}

type watch struct {
	fn   func(context.Context, Change) error // nil: handled; an error: retried later
	last int64                               // commit timestamp of the last change handled
}

// Observe starts an observer on db's store, which must be a Watcher.
// Add columns with Watch; Close stops it.
func (db *DB) Observe(ctx context.Context) (*Observer, error) {
	w, ok := db.store.(Watcher)
	if !ok {
		return nil, fmt.Errorf("%w: the store %T cannot watch", ErrInvalid, db.store)
	}
	o := &Observer{db: db, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
		watched: map[cell]*watch{}, dirty: map[string]bool{}}
	stop, err := w.Watch(ctx, o.changed)
	if err != nil {
		return nil, err
	}
	o.stop = stop
	go o.loop(context.WithoutCancel(ctx))
	return o, nil
}

// Watch calls fn for each change of column col of row committed from now
// on. fn runs on the observer's goroutine, one call at a time.
func (o *Observer) Watch(ctx context.Context, row, col string, fn func(context.Context, Change)) error {
	if fn == nil {
		return fmt.Errorf("%w: watch %q:%q without a function", ErrInvalid, row, col)
	}
	return o.watch(ctx, row, col, func(ctx context.Context, c Change) error { fn(ctx, c); return nil })
}

// AckPrefix starts the names of the acknowledgment columns WatchTxn
// writes: AckPrefix + name + "/" + the observed column.
const AckPrefix = "ack/"

// WatchTxn calls fn for each change of column col of row committed from
// now on, in a transaction (DB.Run's) that fn adds its reads and writes to
// and that also records, in the row's column AckPrefix+name+"/"+col, the
// commit timestamp of the change it handled: Percolator's acknowledgment
// column. A change already acknowledged under name is skipped, and two
// observers (of any process) that handle the same change at once both
// write the acknowledgment, so only one of them commits; the other's
// attempt is retried, finds the change acknowledged and does nothing. So
// per name one transaction of fn commits per change. fn may run more than
// once for a change (a retried attempt): what it does outside tx is at
// least once. An error of fn's own stops nothing: the change is tried
// again after a pause, and the changes after it wait for it.
func (o *Observer) WatchTxn(ctx context.Context, row, col, name string, fn func(ctx context.Context, tx *Txn, c Change) error) error {
	ack := AckPrefix + name + "/" + col
	switch {
	case fn == nil:
		return fmt.Errorf("%w: watch %q:%q without a function", ErrInvalid, row, col)
	case name == "" || len(ack) > MaxColumnBytes:
		return fmt.Errorf("%w: acknowledgment column %q: the observer's name must make it 1..%d bytes", ErrInvalid, ack, MaxColumnBytes)
	}
	return o.watch(ctx, row, col, func(ctx context.Context, c Change) error {
		_, _, err := o.db.Run(ctx, func(ctx context.Context, tx *Txn) error {
			v, ok, err := tx.Get(ctx, row, ack)
			if err != nil {
				return err
			}
			if done, _ := strconv.ParseInt(string(v), 10, 64); ok && done >= c.Commit {
				return nil // handled already: nothing written, nothing committed
			}
			if err := fn(ctx, tx, c); err != nil {
				return err
			}
			return tx.Set(row, ack, strconv.AppendInt(nil, c.Commit, 10))
		})
		return err
	})
}

func (o *Observer) watch(ctx context.Context, row, col string, fn func(context.Context, Change) error) error {
	if row == "" || len(row) > MaxKeyBytes || col == "" || len(col) > MaxColumnBytes {
		return fmt.Errorf("%w: watch %q:%q", ErrInvalid, row, col)
	}
	r, _, err := o.db.store.Read(ctx, row)
	if err != nil {
		return err
	}
	last := int64(0)
	if c := r.Cols[col]; c != nil && len(c.Writes) > 0 {
		last = c.Writes[len(c.Writes)-1].Commit
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.watched[cell{row, col}]; !ok && len(o.watched) >= maxObserved {
		return fmt.Errorf("%w: more than %d observed columns", ErrInvalid, maxObserved)
	}
	o.watched[cell{row, col}] = &watch{fn: fn, last: last}
	o.dirty[row] = true // a change between the read and now is not missed
	o.poke()
	return nil
}

// Close stops the observer and waits for a running fn to return.
func (o *Observer) Close() {
	o.stop()
	close(o.quit)
	<-o.done
}

// changed is the store's callback: it must not block.
func (o *Observer) changed(key string) {
	o.mu.Lock()
	o.dirty[key] = true
	o.mu.Unlock()
	o.poke()
}

func (o *Observer) poke() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

func (o *Observer) loop(ctx context.Context) {
	defer close(o.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-o.quit:
			cancel() // Close ends a transaction of WatchTxn waiting
		case <-ctx.Done():
		}
	}()
	for {
		select {
		case <-o.quit:
			return
		case <-o.wake:
		}
		o.mu.Lock()
		dirty := o.dirty
		o.dirty = map[string]bool{}
		var rows []string
		for c := range o.watched {
			if dirty[""] || dirty[c.row] {
				rows = append(rows, c.row)
			}
		}
		o.mu.Unlock()
		slices.Sort(rows)
		for _, row := range slices.Compact(rows) {
			if err := o.scan(ctx, row); err != nil {
				if ctx.Err() != nil {
					return
				}
				o.db.cfg.Logger.Warn("txn: observer could not handle a row's changes; will retry", "row", row, "err", err)
				if sleep(ctx, slowBackoff) != nil {
					return
				}
				o.changed(row)
			}
		}
	}
}

// scan reports the new changes of row's observed columns.
func (o *Observer) scan(ctx context.Context, row string) error {
	r, _, err := o.db.store.Read(ctx, row)
	if err != nil {
		return err
	}
	for name, c := range r.Cols {
		o.mu.Lock()
		w := o.watched[cell{row, name}]
		o.mu.Unlock()
		if w == nil {
			continue
		}
		if c.Lock != nil {
			if _, err := o.db.resolve(ctx, row, *c.Lock); err != nil {
				return err
			}
		}
		for _, rec := range c.Writes {
			if rec.Commit <= w.last || rec.Kind == KindRollback {
				continue
			}
			ch := Change{Row: row, Col: name, Commit: rec.Commit, Start: rec.Start, Deleted: rec.Kind == KindDelete}
			if !ch.Deleted {
				v, _ := c.data(rec.Start)
				ch.Value = slices.Clone(v)
			}
			if err := w.fn(ctx, ch); err != nil {
				return fmt.Errorf("change of %s:%s committed at %d: %w", row, name, rec.Commit, err)
			}
			w.last = rec.Commit
		}
	}
	return nil
}
