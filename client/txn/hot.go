package txn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Hot rows
//
// Optimistic transactions starve on a row many of them write: each attempt
// takes a start timestamp, and by the time it prewrites, another has
// committed to the row after that start (first committer wins), so it
// aborts and tries again, as do all the others but one. With 64 workers
// on a few rows almost every attempt was thrown away, and some
// transactions did not commit for tens of seconds.
//
// So DB.Run learns which rows its attempts lost on (the rows named by
// ErrConflict, ErrLocked and ErrContention) and, when the store is also a
// RowLocker, runs the next attempt holding a lock on each of them: the
// attempts that want a hot row then queue for it (the cell's locks are
// FIFO) instead of racing, and each takes its start timestamp once it is
// at the head of the queue, so it loses only to a transaction that did not
// queue. The locks are advisory and only order attempts: correctness
// still rests on the protocol alone (a lock lost with a session, or an
// attempt that did not lock, can cost an abort, never a wrong commit).
// They are taken in key order, and only while holding none, so no two
// attempts wait for each other's row locks (a reader waiting for a
// prewritten column is bounded by Config.LockWait, as always). A
// transaction that never conflicts never locks anything.

// A DB also remembers, for hotMemory, the rows its transactions lost on
// (recentHot): a later transaction that writes one of them without holding
// its lock gives up before it writes anything and queues, instead of
// prewriting, losing, and cleaning up after itself. Only its reads are
// wasted.

// hotMemory is how long a DB remembers that attempts lost on a row;
// maxRecentHot bounds the rows it remembers (past it, the expired ones are
// forgotten, then others at random but those just noted).
const (
	hotMemory    = 2 * time.Second
	maxRecentHot = 1024
)

// recentHot is the rows a DB's attempts lost on lately, with when.
type recentHot struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// note records that attempts lost on rows at now.
func (h *recentHot) note(rows []string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = map[string]time.Time{}
	}
	for _, r := range rows {
		h.seen[r] = now
	}
	if len(h.seen) <= maxRecentHot {
		return
	}
	for r, t := range h.seen {
		if now.Sub(t) > hotMemory {
			delete(h.seen, r)
		}
	}
	for r, t := range h.seen {
		if len(h.seen) <= maxRecentHot {
			break
		}
		if t != now {
			delete(h.seen, r)
		}
	}
}

// unheld returns the rows of written (sorted, distinct) that were lost on
// lately and are not in held (sorted).
func (h *recentHot) unheld(written, held []string, now time.Time) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range written {
		t, ok := h.seen[r]
		if !ok {
			continue
		}
		if now.Sub(t) > hotMemory {
			delete(h.seen, r)
			continue
		}
		if _, found := slices.BinarySearch(held, r); !found {
			out = append(out, r)
		}
	}
	return out
}

// writtenRows returns the rows t writes, sorted, distinct.
func (t *Txn) writtenRows() []string {
	rows := make([]string, 0, len(t.writes))
	for c := range t.writes {
		rows = append(rows, c.row)
	}
	slices.Sort(rows)
	return slices.Compact(rows)
}

// maxHotRows bounds the rows one Run locks: past it, the rows it lost on
// first are kept (a transaction that conflicts on many rows is better
// served by fewer rows per transaction).
const maxHotRows = 8

// RowLocker is implemented by stores that can serialize the transactions
// wanting a row: LockRows blocks until this caller holds a lock on each
// of rows (sorted, distinct; FIFO among waiters for one row) or ctx ends,
// and returns the function that releases them. A failure to lock is
// Retryable when waiting longer might succeed (ErrLocked).
type RowLocker interface {
	LockRows(ctx context.Context, rows []string) (unlock func(), err error)
}

// rowError ties an error to the row it happened on, so that Run learns
// which rows are hot; its text is the error's.
type rowError struct {
	row string
	err error
}

func (e *rowError) Error() string { return e.err.Error() }
func (e *rowError) Unwrap() error { return e.err }

// onRow returns err tied to row.
func onRow(row string, err error) error { return &rowError{row: row, err: err} }

// contendedRows adds to hot (sorted, distinct, at most maxHotRows) the rows
// err says an attempt lost on: those of the contention errors in its tree
// (a prewrite of several rows joins one error per row).
func contendedRows(hot []string, err error) []string {
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *rowError:
			contended := errors.Is(e.err, ErrConflict) || errors.Is(e.err, ErrLocked) || errors.Is(e.err, ErrContention)
			if i, found := slices.BinarySearch(hot, e.row); contended && !found && len(hot) < maxHotRows {
				hot = slices.Insert(hot, i, e.row)
			}
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return hot
}

// lockRows locks rows with the store's RowLocker; without one, or with no
// rows, it does nothing.
func (db *DB) lockRows(ctx context.Context, rows []string) (func(), error) {
	if len(rows) == 0 || !db.rowLocking() {
		return func() {}, nil
	}
	unlock, err := db.store.(RowLocker).LockRows(ctx, rows)
	if err != nil {
		return nil, err
	}
	db.st.rowLocks.Add(1)
	return unlock, nil
}

// rowQueues is a RowLocker in one process: a FIFO lock per row (Go's
// channel waiters are served in order). MemStore uses it; CellStore puts a
// cell lock behind one, so that the transactions of one process queue
// here and only the head of each row's queue asks the cell.
type rowQueues struct {
	mu sync.Mutex
	q  map[string]*rowQueue
}

type rowQueue struct {
	sem   chan struct{} // holds a token while the row is locked
	users int           // callers holding or waiting; the queue goes at 0
}

// lock takes row's lock, waiting in order behind others, until ctx ends.
func (rq *rowQueues) lock(ctx context.Context, row string) error {
	rq.mu.Lock()
	if rq.q == nil {
		rq.q = map[string]*rowQueue{}
	}
	q := rq.q[row]
	if q == nil {
		q = &rowQueue{sem: make(chan struct{}, 1)}
		rq.q[row] = q
	}
	q.users++
	rq.mu.Unlock()
	select {
	case q.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		rq.done(row, q)
		return fmt.Errorf("%w: waiting for row %q: %w", ErrLocked, row, context.Cause(ctx))
	}
}

// unlock releases row's lock, which the caller holds.
func (rq *rowQueues) unlock(row string) {
	rq.mu.Lock()
	q := rq.q[row]
	rq.mu.Unlock()
	<-q.sem
	rq.done(row, q)
}

func (rq *rowQueues) done(row string, q *rowQueue) {
	rq.mu.Lock()
	defer rq.mu.Unlock()
	if q.users--; q.users == 0 {
		delete(rq.q, row)
	}
}

// lockAll locks rows in order with lock (which, on failure, holds nothing
// of its row) and returns the function that unlocks them all in reverse
// order with unlock; on a failure, what was locked is unlocked.
func lockAll(ctx context.Context, rows []string, lock func(context.Context, string) error, unlock func(string)) (func(), error) {
	for i, r := range rows {
		if err := lock(ctx, r); err != nil {
			for j := i - 1; j >= 0; j-- {
				unlock(rows[j])
			}
			return nil, err
		}
	}
	return func() {
		for j := len(rows) - 1; j >= 0; j-- {
			unlock(rows[j])
		}
	}, nil
}

// LockRows implements RowLocker, in memory.
func (m *MemStore) LockRows(ctx context.Context, rows []string) (func(), error) {
	return lockAll(ctx, rows, m.locks.lock, m.locks.unlock)
}

// maxLockHandles bounds the handles on lock files a CellStore keeps open
// between uses; handles in use are never closed.
const maxLockHandles = 256

// cellRowLocks is CellStore's RowLocker: the transactions of this process
// queue for a row in memory (rowQueues), and the head of each row's queue
// holds the cell's exclusive lock on the row's lock file, dir/hot/<key>,
// waiting behind other processes' in the cell's FIFO order. The lock files
// are not the rows' files so that taking a lock changes nothing a reader
// of the row caches. They have no lock-delay: a worker whose session ends
// holding one costs the next only the wait for the session's end.
type cellRowLocks struct {
	q    rowQueues
	mu   sync.Mutex
	open map[string]*client.Handle // lock file → handle, in use or idle
	used map[string]bool           // lock files whose handle is in use
}

// LockRows implements RowLocker with the cell's locks. They are taken one
// after another, in key order; they are released all at once.
func (cs *CellStore) LockRows(ctx context.Context, rows []string) (func(), error) {
	unlock, err := lockAll(ctx, rows, cs.lockRow, cs.unlockRow)
	if err != nil || len(rows) == 1 {
		return unlock, err
	}
	return func() {
		var wg sync.WaitGroup
		for _, r := range rows {
			wg.Go(func() { cs.unlockRow(r) })
		}
		wg.Wait()
	}, nil
}

func (cs *CellStore) lockPath(row string) string { return cs.dir + "/hot/" + escapeKey(row) }

func (cs *CellStore) lockRow(ctx context.Context, row string) error {
	l := &cs.locks
	if err := l.q.lock(ctx, row); err != nil {
		return err
	}
	p := cs.lockPath(row)
	h, err := cs.lockHandle(ctx, p)
	if err == nil {
		_, err = h.Acquire(ctx, chubby.LockMode_EXCLUSIVE, cs.lockWait, client.LockOptions{LockDelay: client.NoLockDelay})
		if err != nil {
			// Whether the cell granted it is unknown after a cancel: the
			// handle goes, and its lock with it.
			cs.dropLockHandle(ctx, p, h)
		}
	}
	if err != nil {
		l.q.unlock(row)
		if client.IsCode(err, chubby.ErrorCode_TIMED_OUT) {
			return onRow(row, fmt.Errorf("%w: row %q stayed locked for %v: %w", ErrLocked, row, cs.lockWait, err))
		}
		return fmt.Errorf("txn: lock row %q: %w", row, err)
	}
	return nil
}

func (cs *CellStore) unlockRow(row string) {
	p := cs.lockPath(row)
	cs.locks.mu.Lock()
	h := cs.locks.open[p]
	cs.locks.mu.Unlock()
	if h != nil {
		ctx, cancel := context.WithTimeout(context.Background(), cs.lockWait)
		if err := h.Release(ctx); err != nil {
			cs.dropLockHandle(ctx, p, h) // closing it releases the lock
		} else {
			cs.idleLockHandle(ctx, p)
		}
		cancel()
	}
	cs.locks.q.unlock(row)
}

// lockHandle returns an open handle on the lock file p, creating the file
// if missing, marked in use.
func (cs *CellStore) lockHandle(ctx context.Context, p string) (*client.Handle, error) {
	l := &cs.locks
	l.mu.Lock()
	if h := l.open[p]; h != nil {
		l.used[p] = true
		l.mu.Unlock()
		return h, nil
	}
	l.mu.Unlock()
	h, err := cs.s.Open(ctx, p, client.OpenOptions{Create: chubby.CreateMode_OPEN_OR_CREATE})
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open, l.used = map[string]*client.Handle{}, map[string]bool{}
	}
	l.open[p], l.used[p] = h, true
	return h, nil
}

// idleLockHandle marks p's handle unused, and closes idle handles past
// maxLockHandles.
func (cs *CellStore) idleLockHandle(ctx context.Context, p string) {
	l := &cs.locks
	l.mu.Lock()
	delete(l.used, p)
	var closing []*client.Handle
	for q, h := range l.open {
		if len(l.open) <= maxLockHandles {
			break
		}
		if !l.used[q] {
			delete(l.open, q)
			closing = append(closing, h)
		}
	}
	l.mu.Unlock()
	for _, h := range closing {
		go h.Close(context.WithoutCancel(ctx))
	}
}

// dropLockHandle closes p's handle h and forgets it.
func (cs *CellStore) dropLockHandle(ctx context.Context, p string, h *client.Handle) {
	l := &cs.locks
	l.mu.Lock()
	if l.open[p] == h {
		delete(l.open, p)
		delete(l.used, p)
	}
	l.mu.Unlock()
	go h.Close(context.WithoutCancel(ctx))
}
