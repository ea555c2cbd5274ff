package txn

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chubbygo/chubby/client"
)

// Limits on what a transaction may carry. A row is one file of the cell
// (256 KiB) holding every version of its columns until garbage collection,
// so values are kept well below that.
const (
	MaxKeyBytes    = 80       // a row key; escaped it fits one name of the cell
	MaxColumnBytes = 64       // a column name
	MaxValueBytes  = 16 << 10 // one value
	MaxWrites      = 64       // cells one transaction writes
	metaKey        = ""       // the table's meta row (garbage-collection floor)
	maxTimestamp   = 1 << 62  // the oracle's bound
	maxObserved    = 1024     // columns one DB observes
	maxPending     = 1024     // failed cleanups a DB keeps retrying
	minBackoff     = time.Millisecond
	casBackoff     = 10 * time.Millisecond  // between compare-and-swaps of one row: the re-read is a pause already
	waitBackoff    = 20 * time.Millisecond  // between looks at a live transaction's lock
	slowBackoff    = 50 * time.Millisecond  // between retries of a failed call
	runBackoff     = 100 * time.Millisecond // Run, between attempts after conflicts
)

// Errors of transactions. All but ErrInvalid and ErrCorrupt mean "this
// transaction did not commit, begin a new one": see Retryable.
var (
	// ErrConflict: another transaction wrote a column this one writes
	// after this one started, or holds a lock on it (first committer wins).
	ErrConflict = errors.New("txn: write conflict")
	// ErrLocked: a read waited Config.LockWait for a live transaction's
	// lock on the column to go away.
	ErrLocked = errors.New("txn: column locked by a live transaction")
	// ErrAborted: a resolver judged this transaction's worker dead and
	// rolled it back before it committed.
	ErrAborted = errors.New("txn: rolled back by another worker")
	// ErrSnapshotTooOld: garbage collection removed versions this
	// transaction's snapshot needs (its start is below the floor).
	ErrSnapshotTooOld = errors.New("txn: snapshot older than the garbage-collection floor")
	// ErrContention: a row kept changing under a compare-and-swap
	// (Config.MaxCASRetries times).
	ErrContention = errors.New("txn: row contended")
	// ErrCommitUnknown: the commit of the primary was sent but its outcome
	// could not be learned (the session ended): the transaction may or
	// may not have committed. Read the primary row later to know.
	ErrCommitUnknown = errors.New("txn: commit outcome unknown")
	// ErrInvalid: a bad key, column, value or use of a finished transaction.
	ErrInvalid = errors.New("txn: invalid")
)

// Retryable reports whether err means the transaction did not commit and a
// new one may simply be tried.
func Retryable(err error) bool {
	return errors.Is(err, ErrConflict) || errors.Is(err, ErrLocked) || errors.Is(err, ErrAborted) ||
		errors.Is(err, ErrSnapshotTooOld) || errors.Is(err, ErrContention)
}

// Config tunes a DB. Zero fields take DefaultConfig's values.
type Config struct {
	// LockWait bounds how long a read waits for a live transaction's lock
	// before failing with ErrLocked. Default 10 s.
	LockWait time.Duration
	// MaxCASRetries bounds the compare-and-swap attempts of one row
	// operation before ErrContention. Default 64.
	MaxCASRetries int
	// MaxOpenRows bounds the row handles a cell table keeps open
	// (NewCellStore's maxOpen). Default 1024.
	MaxOpenRows int
	// Logger receives lock resolutions and failed cleanups. Default
	// slog.Default().
	Logger *slog.Logger
	// NoRowLocks keeps Run from queueing for the rows its attempts lost on
	// (see hot.go): every attempt is then optimistic, as before. Default
	// false: a store that is a RowLocker (CellStore, MemStore) is used.
	NoRowLocks bool

	// hook, if set, runs at the named points (tests pause a worker there
	// to kill it).
	hook func(p point, start, commit int64)
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{LockWait: 10 * time.Second, MaxCASRetries: 64, MaxOpenRows: 1024, Logger: slog.Default()}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.LockWait <= 0 {
		c.LockWait = d.LockWait
	}
	if c.MaxCASRetries <= 0 {
		c.MaxCASRetries = d.MaxCASRetries
	}
	if c.MaxOpenRows <= 0 {
		c.MaxOpenRows = d.MaxOpenRows
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	return c
}

// point names a step of the protocol where tests crash a worker.
type point string

const (
	pointPrewritten      point = "prewritten"        // every lock written, commit not yet sent
	pointPrimaryCommited point = "primary-committed" // the commit point passed, secondaries still locked
	pointResolving       point = "resolving"         // a dead worker's lock met, about to resolve it
)

// Stats counts what a DB did.
type Stats struct {
	Commits, Conflicts, Aborts int64 // committed; ended by ErrConflict; ended by any other error
	RolledForward, RolledBack  int64 // others' locks resolved: of committed transactions (any worker's), of dead workers
	LockWaits                  int64 // reads that waited for a live lock
	CASRetries                 int64 // row writes that lost a race and were tried again
	RowLocks                   int64 // attempts Run made holding the locks of rows it lost on
	Queued                     int64 // attempts given up unwritten to queue for a contended row
}

type stats struct {
	commits, conflicts, aborts, forward, back, waits, retries, rowLocks, queued atomic.Int64
}

// DB runs transactions over one table as one worker.
type DB struct {
	store  Store
	live   Liveness
	oracle Oracle
	worker string
	cfg    Config
	st     stats
	close  func(context.Context) error
	recent recentHot // rows attempts lost on lately (hot.go)

	// mu is held shared by every commit and exclusively by Close: once the
	// worker's token is gone this DB must never write a lock or a commit.
	mu     sync.RWMutex
	closed bool

	pmu     sync.Mutex
	pending []pending               // cleanups to retry (resolve.go)
	commits map[int64]chan struct{} // commits under way, by start; closed when done
	bg      sync.WaitGroup          // the same, for Close
}

// New returns a DB on any store: transactions take timestamps from oracle
// and write locks naming worker, whose liveness live reports to others.
func New(store Store, live Liveness, oracle Oracle, worker string, cfg Config) (*DB, error) {
	if store == nil || live == nil || oracle == nil {
		return nil, fmt.Errorf("%w: New needs a store, a liveness and an oracle", ErrInvalid)
	}
	if worker == "" || len(worker) > MaxKeyBytes {
		return nil, fmt.Errorf("%w: worker id %q", ErrInvalid, worker)
	}
	return &DB{store: store, live: live, oracle: oracle, worker: worker, cfg: cfg.withDefaults()}, nil
}

// Open opens the table in directory dir of the cell as a new worker of
// session s: it creates the table's directories if missing and the
// worker's ephemeral token, so that the worker's locks become resolvable
// by others when s ends. Close deletes the token.
func Open(ctx context.Context, s *client.Session, dir string, cfg Config) (*DB, error) {
	cfg = cfg.withDefaults()
	cs, err := NewCellStore(ctx, s, dir, cfg.MaxOpenRows)
	if err != nil {
		return nil, err
	}
	cs.lockWait = cfg.LockWait
	var id [8]byte
	rand.Read(id[:])
	worker := hex.EncodeToString(id[:])
	host, _ := os.Hostname()
	about := fmt.Sprintf("host=%s pid=%d session=%d since=%s\n", host, os.Getpid(), s.ID(), time.Now().UTC().Format(time.RFC3339))
	if err := cs.register(ctx, worker, []byte(about)); err != nil {
		cs.Close(ctx)
		return nil, err
	}
	db, err := New(cs, cs, s.Client(), worker, cfg)
	if err != nil {
		return nil, err
	}
	db.close = func(ctx context.Context) error {
		err := cs.unregister(ctx, worker)
		cs.Close(ctx)
		return err
	}
	return db, nil
}

// Close ends the worker: its token is deleted, so locks it left behind
// (from transactions not committed or rolled back) are resolved by the
// next reader. The session stays open.
func (db *DB) Close(ctx context.Context) error {
	db.mu.Lock()
	already := db.closed
	db.closed = true
	db.mu.Unlock()
	if already {
		return nil
	}
	db.bg.Wait() // secondaries still being committed keep the token alive
	if db.close == nil {
		return nil
	}
	return db.close(ctx)
}

// begin records that the transaction that started at start is committing
// and returns the function that records its end.
func (db *DB) begin(start int64) func() {
	ch := make(chan struct{})
	db.pmu.Lock()
	if db.commits == nil {
		db.commits = map[int64]chan struct{}{}
	}
	db.commits[start] = ch
	db.pmu.Unlock()
	db.bg.Add(1)
	return func() {
		db.pmu.Lock()
		delete(db.commits, start)
		db.pmu.Unlock()
		close(ch)
		db.bg.Done()
	}
}

// running returns the channel closed when this DB's commit of the
// transaction that started at start ends, or nil if none is under way.
func (db *DB) running(start int64) <-chan struct{} {
	db.pmu.Lock()
	defer db.pmu.Unlock()
	if ch, ok := db.commits[start]; ok {
		return ch
	}
	return nil
}

// Worker returns the DB's worker id (the name of its token).
func (db *DB) Worker() string { return db.worker }

// Store returns the DB's store.
func (db *DB) Store() Store { return db.store }

// Stats returns the DB's counters.
func (db *DB) Stats() Stats {
	return Stats{
		Commits: db.st.commits.Load(), Conflicts: db.st.conflicts.Load(), Aborts: db.st.aborts.Load(),
		RolledForward: db.st.forward.Load(), RolledBack: db.st.back.Load(),
		LockWaits: db.st.waits.Load(), CASRetries: db.st.retries.Load(), RowLocks: db.st.rowLocks.Load(),
		Queued: db.st.queued.Load(),
	}
}

// Begin starts a transaction: its snapshot is everything committed before
// the oracle handed out its start timestamp.
func (db *DB) Begin(ctx context.Context) (*Txn, error) {
	db.settlePending(ctx)
	ts, err := db.oracle.Timestamps(ctx, 1)
	if err != nil {
		return nil, fmt.Errorf("txn: begin: %w", err)
	}
	return &Txn{db: db, start: ts, writes: map[cell]mutation{}}, nil
}

// snap is a row as read (or written) at a version.
type snap struct {
	r  *Row
	v  Version
	ok bool
}

// update applies f to the row at key by compare-and-swap (see updateFrom).
func (db *DB) update(ctx context.Context, key string, f func(r *Row) (bool, error)) error {
	_, err := db.updateFrom(ctx, key, snap{}, f)
	return err
}

// updateFrom applies f to the row at key by compare-and-swap, reading
// again and re-applying f when another writer got there first, and
// returns the row as written (or as read, when f changed nothing). f
// returns false when the row needs no change; it must decide from the row
// alone, so that applying it to a newer row is right.
//
// hint, if ok, is the row as the caller last saw it: the first attempt
// starts from it instead of reading, which saves a read when nobody wrote
// the row since. Only a write is trusted from a hint (the compare-and-swap
// checks it); if f on the hint changes nothing or fails, the row is read
// again and f decides on that. The hint's row is f's to change.
func (db *DB) updateFrom(ctx context.Context, key string, hint snap, f func(r *Row) (bool, error)) (snap, error) {
	for i := 0; i < db.cfg.MaxCASRetries; i++ {
		fromHint := i == 0 && hint.ok
		var cur snap
		if fromHint {
			cur = hint
		} else {
			r, v, err := db.store.Read(ctx, key)
			if err != nil {
				return snap{}, err
			}
			cur = snap{r: r, v: v, ok: true}
		}
		change, err := f(cur.r)
		if fromHint && (err != nil || !change) {
			continue // decide on the row as it is now
		}
		if err != nil || !change {
			return cur, err
		}
		v, err := db.store.Write(ctx, key, cur.v, cur.r)
		if err == nil {
			return snap{r: cur.r, v: v, ok: !cur.r.isEmpty()}, nil
		}
		if !errors.Is(err, ErrVersion) {
			return snap{}, err
		}
		if fromHint {
			continue
		}
		db.st.retries.Add(1)
		if err := sleep(ctx, backoff(i, casBackoff)); err != nil {
			return snap{}, err
		}
	}
	return snap{}, onRow(key, fmt.Errorf("%w: row %q changed %d times under us", ErrContention, key, db.cfg.MaxCASRetries))
}

// floor returns the table's garbage-collection floor.
func (db *DB) floor(ctx context.Context) (int64, error) {
	r, _, err := db.store.Read(ctx, metaKey)
	if err != nil {
		return 0, err
	}
	return r.Floor, nil
}

// Run runs f in a transaction and commits it, again in a new transaction
// while the attempt fails with a Retryable error, until ctx ends. f must
// do all its work through tx and may run several times; an error of its
// own ends Run with that error (the transaction is rolled back). It
// returns the commit timestamp and the number of attempts that were
// aborted.
//
// After an attempt lost on rows that others wrote (a conflict, a lock
// waited out, a contended row), the next attempt first locks those rows
// when the store is a RowLocker (see hot.go): it queues behind the other
// transactions that want them instead of racing them. Otherwise it starts
// after a pause that grows with each try, up to 100 ms, jittered. An
// attempt that writes a row the DB's attempts lost on in the last
// hotMemory, without its lock, is given up before it writes anything and
// counted aborted: the next one queues for the row.
func (db *DB) Run(ctx context.Context, f func(ctx context.Context, tx *Txn) error) (commit int64, aborted int, err error) {
	var hot []string // rows the attempts lost on, sorted
	for ; ; aborted++ {
		unlock, err := db.lockRows(ctx, hot)
		if err == nil {
			commit, err = db.attempt(ctx, f, hot)
			unlock()
		}
		if err == nil {
			return commit, aborted, nil
		}
		if !Retryable(err) {
			return 0, aborted, err
		}
		if hot = contendedRows(hot, err); len(hot) > 0 && db.rowLocking() {
			db.recent.note(hot, time.Now())
			if cerr := context.Cause(ctx); ctx.Err() != nil {
				return 0, aborted, fmt.Errorf("%w (last attempt: %w)", cerr, err)
			}
			continue // the queue for the rows spreads the attempts out
		}
		if serr := sleep(ctx, backoff(aborted, runBackoff)); serr != nil {
			return 0, aborted, fmt.Errorf("%w (last attempt: %w)", serr, err)
		}
	}
}

// attempt runs f in a new transaction and commits it. held are the rows
// whose locks the caller holds (sorted): a transaction that writes a row
// other attempts lost on lately (DB.recent) without holding its lock is
// given up before it writes anything, as an ErrConflict on that row, so
// that Run queues for it rather than prewrite and lose (see hot.go).
func (db *DB) attempt(ctx context.Context, f func(ctx context.Context, tx *Txn) error, held []string) (int64, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	if err := f(ctx, tx); err != nil {
		tx.Rollback(ctx)
		return 0, err
	}
	if db.rowLocking() {
		// Only while the rows fit in what one Run locks (maxHotRows):
		// past that, queueing could never cover them all.
		if hot := db.recent.unheld(tx.writtenRows(), held, time.Now()); len(hot) > 0 && len(held)+len(hot) <= maxHotRows {
			tx.Rollback(ctx)
			db.st.queued.Add(1)
			errs := make([]error, len(hot))
			for i, r := range hot {
				errs[i] = onRow(r, fmt.Errorf("%w: row %q is contended: queueing for it", ErrConflict, r))
			}
			return 0, errors.Join(errs...)
		}
	}
	return tx.Commit(ctx)
}

// rowLocking reports whether Run locks the rows its attempts lost on.
func (db *DB) rowLocking() bool {
	_, ok := db.store.(RowLocker)
	return ok && !db.cfg.NoRowLocks
}

// backoff is the pause before attempt i+1: doubling from minBackoff up
// to limit, with jitter so that racing workers spread out.
func backoff(i int, limit time.Duration) time.Duration {
	d := min(minBackoff<<min(i, 10), limit)
	var b [1]byte
	rand.Read(b[:])
	return d/2 + time.Duration(int64(d/2)*int64(b[0])/255)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (db *DB) hook(p point, start, commit int64) {
	if db.cfg.hook != nil {
		db.cfg.hook(p, start, commit)
	}
}
