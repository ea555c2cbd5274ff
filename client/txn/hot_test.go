package txn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

func TestContendedRows(t *testing.T) {
	conflict := func(row string) error { return onRow(row, fmt.Errorf("%w: %s", ErrConflict, row)) }
	many := make([]error, 0, maxHotRows+2)
	for i := range maxHotRows + 2 {
		many = append(many, conflict(fmt.Sprintf("r%02d", i)))
	}
	for _, c := range []struct {
		name string
		hot  []string
		err  error
		want []string
	}{
		{"a conflict", nil, conflict("b"), []string{"b"}},
		{"added in order", []string{"a", "c"}, conflict("b"), []string{"a", "b", "c"}},
		{"known already", []string{"b"}, conflict("b"), []string{"b"}},
		{"wrapped", nil, fmt.Errorf("commit: %w", conflict("x")), []string{"x"}},
		{"a prewrite's joined rows", nil, errors.Join(conflict("y"), nil, conflict("x")), []string{"x", "y"}},
		{"a lock waited out", nil, onRow("l", fmt.Errorf("%w: l:c", ErrLocked)), []string{"l"}},
		{"a contended row", nil, onRow("k", fmt.Errorf("%w: k", ErrContention)), []string{"k"}},
		{"rolled back is not contention", nil, onRow("z", fmt.Errorf("%w: z", ErrAborted)), nil},
		{"no row named", nil, fmt.Errorf("%w: somewhere", ErrConflict), nil},
		{"at most maxHotRows", nil, errors.Join(many...), []string{"r00", "r01", "r02", "r03", "r04", "r05", "r06", "r07"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := contendedRows(slices.Clone(c.hot), c.err)
			if !slices.Equal(got, c.want) {
				t.Errorf("contendedRows(%q, %v) = %q, want %q", c.hot, c.err, got, c.want)
			}
		})
	}
	if len(contendedRows(nil, errors.Join(many...))) != maxHotRows {
		t.Error("more than maxHotRows kept")
	}
}

// lockProbe tells whether a row's lock is held now, without waiting.
type lockProbe interface {
	locked(ctx context.Context, row string) (bool, error)
}

func lockedNow(t *testing.T, p lockProbe, row string) bool {
	t.Helper()
	held, err := p.locked(testCtx(t), row)
	if err != nil {
		t.Fatalf("probing the lock of row %q: %v", row, err)
	}
	return held
}

// memProbe looks into a MemStore's row queues.
type memProbe struct{ m *MemStore }

func (p memProbe) locked(_ context.Context, row string) (bool, error) {
	rq := &p.m.locks
	rq.mu.Lock()
	defer rq.mu.Unlock()
	q := rq.q[row]
	return q != nil && len(q.sem) == 1, nil
}

// runAfterConflict checks, on db's store, that an attempt of Run that
// lost on a row is followed by one that holds the row's lock, that takes
// its start timestamp only then, and that the lock is released when Run
// returns.
func runAfterConflict(t *testing.T, db, other *DB, locker lockProbe) {
	ctx := testCtx(t)
	write(t, db, "hot", "c", "0")
	write(t, db, "cold", "c", "0")
	tries := 0
	var firstStart int64
	_, aborted, err := db.Run(ctx, func(ctx context.Context, tx *Txn) error {
		tries++
		v, _, err := tx.Get(ctx, "hot", "c")
		if err != nil {
			return err
		}
		switch tries {
		case 1:
			firstStart = tx.Start()
			if lockedNow(t, locker, "hot") {
				t.Error("the first attempt holds the row's lock: it lost on nothing yet")
			}
			write(t, other, "hot", "c", "meanwhile") // makes this attempt conflict
		case 2:
			if !lockedNow(t, locker, "hot") {
				t.Error("the attempt after a conflict on the row does not hold its lock")
			}
			if lockedNow(t, locker, "cold") {
				t.Error("a row nobody contended is locked")
			}
			if tx.Start() <= firstStart {
				t.Errorf("second attempt's start %d not after the first's %d", tx.Start(), firstStart)
			}
		}
		if err := tx.Set("cold", "c", []byte(strconv.Itoa(tries))); err != nil {
			return err
		}
		return tx.Set("hot", "c", append(v, '+'))
	})
	if err != nil || aborted != 1 || tries != 2 {
		t.Fatalf("Run: err %v, %d aborted, %d tries; want nil, 1, 2", err, aborted, tries)
	}
	if got := db.Stats().RowLocks; got != 1 {
		t.Errorf("Stats().RowLocks = %d, want 1", got)
	}
	if lockedNow(t, locker, "hot") {
		t.Error("the row's lock is still held after Run returned")
	}
	if v := mustGet(t, begin(t, db), "hot", "c"); v != "meanwhile+" {
		t.Errorf("hot = %s", v)
	}
}

// TestRunLocksHotRows: after an attempt lost on a row, Run's next attempt
// holds the row's lock (MemStore's RowLocker).
func TestRunLocksHotRows(t *testing.T) {
	m, o := NewMemStore(), &counter{}
	w := memDB(t, m, o, "w", Config{})
	runAfterConflict(t, w, memDB(t, m, o, "other", Config{}), memProbe{m})

	// The DB remembers the row for hotMemory: the next Run's first
	// attempt, which writes it without its lock, is given up before it
	// writes anything, and the second holds the lock. (Noted again now,
	// so that a slow machine cannot let hotMemory pass meanwhile.)
	w.recent.mu.Lock()
	_, noted := w.recent.seen["hot"]
	w.recent.mu.Unlock()
	if !noted {
		t.Fatal("Run did not remember the row it lost on")
	}
	w.recent.note([]string{"hot"}, time.Now())
	conflicts := w.Stats().Conflicts
	tries := 0
	_, aborted, err := w.Run(testCtx(t), func(ctx context.Context, tx *Txn) error {
		tries++
		if tries == 2 && !lockedNow(t, memProbe{m}, "hot") {
			t.Error("the attempt after one given up to queue does not hold the row's lock")
		}
		return tx.Set("hot", "c", []byte("queued"))
	})
	if err != nil || aborted != 1 || tries != 2 {
		t.Fatalf("Run writing a remembered hot row: err %v, %d aborted, %d tries; want nil, 1, 2", err, aborted, tries)
	}
	if st := w.Stats(); st.Queued != 1 || st.Conflicts != conflicts {
		t.Errorf("Stats: %d queued, %d more conflicts; want 1, 0 (nothing was prewritten)", st.Queued, st.Conflicts-conflicts)
	}

	// NoRowLocks: every attempt optimistic, as before.
	db := memDB(t, m, o, "w2", Config{NoRowLocks: true})
	tries = 0
	if _, _, err := db.Run(testCtx(t), func(ctx context.Context, tx *Txn) error {
		tries++
		if _, _, err := tx.Get(ctx, "hot", "c"); err != nil {
			return err
		}
		if tries == 1 {
			write(t, db, "hot", "c", "again")
		} else if lockedNow(t, memProbe{m}, "hot") {
			t.Error("NoRowLocks: the row was locked")
		}
		return tx.Set("hot", "c", []byte("x"))
	}); err != nil {
		t.Fatal(err)
	}
	if db.Stats().RowLocks != 0 {
		t.Error("NoRowLocks: RowLocks counted")
	}
}

// TestManyHotRows: a transaction that writes more remembered hot rows than
// one Run locks (maxHotRows) is not given up again and again until the
// rows are forgotten: it goes ahead optimistically.
func TestManyHotRows(t *testing.T) {
	m, o := NewMemStore(), &counter{}
	db := memDB(t, m, o, "w", Config{})
	var rows []string
	for i := range maxHotRows + 2 {
		rows = append(rows, fmt.Sprintf("r%02d", i))
	}
	db.recent.note(rows, time.Now())
	_, aborted, err := db.Run(testCtx(t), func(ctx context.Context, tx *Txn) error {
		for _, r := range rows {
			if err := tx.Set(r, "c", []byte("x")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || aborted != 0 {
		t.Fatalf("Run: err %v, %d aborted; want nil, 0 (given up to queue for rows it cannot all lock)", err, aborted)
	}
}

// TestHotTransfers: workers moving units between two accounts all commit
// and the total is kept, with the rows' locks; and a transaction that
// waits for a row's lock in vain ends when its context does.
func TestHotTransfers(t *testing.T) {
	m, o := NewMemStore(), &counter{}
	hotTransfers(t, func(w string) *DB { return memDB(t, m, o, w, Config{}) }, 16, 50)

	unlock, err := m.LockRows(context.Background(), []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = m.LockRows(ctx, []string{"a"})
	if !errors.Is(err, ErrLocked) || !Retryable(err) {
		t.Errorf("LockRows of a held row, context ended: %v, want a Retryable ErrLocked", err)
	}
}

// hotTransfers runs workers transfers each between the accounts a and b
// (all of them on the same two rows) with Run, and checks that every one
// committed and the sum is kept.
func hotTransfers(t *testing.T, open func(worker string) *DB, workers, each int) {
	t.Helper()
	ctx := testCtx(t)
	db0 := open("setup")
	write(t, db0, "a", "bal", "1000", "b", "bal", "1000")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var aborted, locked int64
	errs := make(chan error, workers)
	for w := range workers {
		db := open(fmt.Sprintf("w%d", w))
		wg.Go(func() {
			for i := range each {
				from, to := "a", "b"
				if (w+i)%2 == 1 {
					from, to = to, from
				}
				_, n, err := db.Run(ctx, func(ctx context.Context, tx *Txn) error {
					f, err := getInt(ctx, tx, from)
					if err != nil {
						return err
					}
					g, err := getInt(ctx, tx, to)
					if err != nil {
						return err
					}
					if err := tx.Set(from, "bal", []byte(strconv.Itoa(f-1))); err != nil {
						return err
					}
					return tx.Set(to, "bal", []byte(strconv.Itoa(g+1)))
				})
				if err != nil {
					errs <- fmt.Errorf("worker %d transfer %d: %w", w, i, err)
					return
				}
				mu.Lock()
				aborted += int64(n)
				mu.Unlock()
			}
			mu.Lock()
			locked += db.Stats().RowLocks
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	tx := begin(t, db0)
	a, errA := getInt(ctx, tx, "a")
	b, errB := getInt(ctx, tx, "b")
	if errA != nil || errB != nil || a+b != 2000 {
		t.Errorf("after the transfers a %d (%v) + b %d (%v), want 2000", a, errA, b, errB)
	}
	t.Logf("%d transfers by %d workers on two rows: %d attempts aborted, %d made holding the rows' locks", workers*each, workers, aborted, locked)
}

func getInt(ctx context.Context, tx *Txn, row string) (int, error) {
	v, ok, err := tx.Get(ctx, row, "bal")
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("row %s missing", row)
	}
	return strconv.Atoi(string(v))
}

// TestHotRowsOnTheCell: the same on a real cell, where a row's lock is the
// cell's lock on its lock file: the attempt after a conflict holds it (a
// second session cannot take it), it is released when Run returns, and
// workers of separate sessions on two rows all commit.
func TestHotRowsOnTheCell(t *testing.T) {
	cl := celltest.Start(t, celltest.Options{})
	s := cellSession(t, cl.Addr)
	db := cellDB(t, s, "/hot", Config{})
	other := cellDB(t, cellSession(t, cl.Addr), "/hot", Config{})
	// The lock as another process sees it: the cell's lock on the file.
	probe := cellSession(t, cl.Addr)
	runAfterConflict(t, db, other, cellLockProbe{s: probe, path: "/hot/hot/"})

	hotTransfers(t, func(w string) *DB { return cellDB(t, cellSession(t, cl.Addr), "/hot", Config{}) }, 8, 10)
}

// cellLockProbe tells whether another session holds a row's cell lock:
// it tries to take it from its own session (TryAcquire does not wait).
type cellLockProbe struct {
	s    *client.Session
	path string
}

func (p cellLockProbe) locked(ctx context.Context, row string) (bool, error) {
	h, err := p.s.Open(ctx, p.path+escapeKey(row), client.OpenOptions{Create: chubby.CreateMode_OPEN_OR_CREATE})
	if err != nil {
		return false, err
	}
	defer h.Close(context.WithoutCancel(ctx)) // releases it if taken
	_, err = h.TryAcquire(ctx, chubby.LockMode_EXCLUSIVE, client.LockOptions{LockDelay: client.NoLockDelay})
	switch {
	case client.IsCode(err, chubby.ErrorCode_LOCK_HELD):
		return true, nil
	case err != nil:
		return false, err
	}
	return false, nil
}

// TestWatchTxn: two observers of one column under one name, each in its
// own DB, handle every change in a transaction that counts it; with the
// acknowledgment column the count is the number of changes, not twice
// it, though both observers see every change. An fn that fails is tried
// again, and its change is counted once.
func TestWatchTxn(t *testing.T) {
	m, o := NewMemStore(), &counter{}
	ctx := testCtx(t)
	writer := memDB(t, m, o, "writer", Config{})
	write(t, writer, "a", "c", "0", "total", "n", "0")
	var calls, failed atomic.Int64
	count := func(ctx context.Context, tx *Txn, c Change) error {
		if calls.Add(1) == 3 && failed.Add(1) == 1 {
			return errors.New("fn fails once")
		}
		n, err := getCount(ctx, tx)
		if err != nil {
			return err
		}
		return tx.Set("total", "n", []byte(strconv.Itoa(n+1)))
	}
	for _, w := range []string{"o1", "o2"} {
		obs, err := memDB(t, m, o, w, Config{}).Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer obs.Close()
		if err := obs.WatchTxn(ctx, "a", "c", "count", count); err != nil {
			t.Fatal(err)
		}
	}
	const changes = 20
	var last int64
	for i := range changes {
		last = write(t, writer, "a", "c", strconv.Itoa(i+1))
	}
	ack := AckPrefix + "count/c"
	deadline := time.Now().Add(time.Minute)
	for {
		v, _, err := begin(t, writer).Get(ctx, "a", ack)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := strconv.ParseInt(string(v), 10, 64); n >= last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acknowledged up to %s after a minute, want %d", v, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
	n, err := getCount(ctx, begin(t, writer))
	if err != nil {
		t.Fatal(err)
	}
	if n != changes {
		t.Errorf("changes counted %d times, want %d (fn called %d times)", n, changes, calls.Load())
	}
	if failed.Load() != 1 {
		t.Error("fn's failure never happened")
	}
	t.Logf("%d changes, fn called %d times by two observers, %d commits", changes, calls.Load(), n)

	obs, err := writer.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	for _, name := range []string{"", strings.Repeat("x", MaxColumnBytes)} {
		if err := obs.WatchTxn(ctx, "a", "c", name, count); !errors.Is(err, ErrInvalid) {
			t.Errorf("WatchTxn named %q: %v, want ErrInvalid", name, err)
		}
	}
}

func getCount(ctx context.Context, tx *Txn) (int, error) {
	v, _, err := tx.Get(ctx, "total", "n")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(v))
}
