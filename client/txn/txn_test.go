package txn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// counter is an Oracle for MemStore tests.
type counter struct{ n atomic.Int64 }

func (c *counter) Timestamps(ctx context.Context, n int) (int64, error) {
	return c.n.Add(int64(n)) - int64(n) + 1, nil
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// memDB returns a DB of worker on m with oracle o.
func memDB(t testing.TB, m *MemStore, o Oracle, worker string, cfg Config) *DB {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	db, err := New(m, m, o, worker, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// crash is the panic value of a hook that stops a worker at a point.
type crash struct{ p point }

// crashAt returns a hook that panics at p, as kill -9 would stop the
// worker there, and commitCrashing runs a commit that expects it.
func crashAt(p point) func(point, int64, int64) {
	return func(q point, _, _ int64) {
		if q == p {
			panic(crash{p})
		}
	}
}

func commitCrashing(t *testing.T, tx *Txn) {
	t.Helper()
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("commit did not reach the crash point")
		} else if _, ok := r.(crash); !ok {
			panic(r)
		}
	}()
	tx.Commit(context.Background())
}

func mustGet(t *testing.T, tx *Txn, row, col string) string {
	t.Helper()
	v, ok, err := tx.Get(context.Background(), row, col)
	if err != nil {
		t.Fatalf("Get %s:%s at %d: %v", row, col, tx.Start(), err)
	}
	if !ok {
		return "<none>"
	}
	return string(v)
}

func mustCommit(t *testing.T, tx *Txn) int64 {
	t.Helper()
	c, err := tx.Commit(context.Background())
	if err != nil {
		t.Fatalf("Commit of %d: %v", tx.Start(), err)
	}
	return c
}

func begin(t *testing.T, db *DB) *Txn {
	t.Helper()
	tx, err := db.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

func write(t *testing.T, db *DB, kv ...string) int64 {
	t.Helper()
	tx := begin(t, db)
	for i := 0; i+2 < len(kv)+1; i += 3 {
		if kv[i+2] == "<delete>" {
			tx.Delete(kv[i], kv[i+1])
		} else {
			tx.Set(kv[i], kv[i+1], []byte(kv[i+2]))
		}
	}
	return mustCommit(t, tx)
}

func TestSnapshotReads(t *testing.T) {
	m, o := NewMemStore(), &counter{}
	db := memDB(t, m, o, "w1", Config{})
	write(t, db, "a", "c", "1", "b", "c", "1")
	before := begin(t, db)
	write(t, db, "a", "c", "2", "b", "c", "<delete>")
	after := begin(t, db)
	for _, c := range []struct {
		tx         *Txn
		row, value string
	}{
		{before, "a", "1"}, {before, "b", "1"}, {after, "a", "2"}, {after, "b", "<none>"}, {after, "z", "<none>"},
	} {
		if got := mustGet(t, c.tx, c.row, "c"); got != c.value {
			t.Errorf("snapshot %d read %s = %s, want %s", c.tx.Start(), c.row, got, c.value)
		}
	}
	// A transaction reads its own writes.
	after.Set("a", "c", []byte("mine"))
	if got := mustGet(t, after, "a", "c"); got != "mine" {
		t.Errorf("own write read back as %s", got)
	}
}

func TestFirstCommitterWins(t *testing.T) {
	m, o := NewMemStore(), &counter{}
	db := memDB(t, m, o, "w1", Config{})
	write(t, db, "x", "c", "0", "y", "c", "0")
	t1, t2 := begin(t, db), begin(t, db)
	t1.Set("x", "c", []byte("t1"))
	t2.Set("x", "c", []byte("t2"))
	mustCommit(t, t1)
	if _, err := t2.Commit(context.Background()); !errors.Is(err, ErrConflict) || !Retryable(err) {
		t.Fatalf("second writer of x: %v, want ErrConflict", err)
	}
	// Write skew is allowed under snapshot isolation: disjoint writes.
	t3, t4 := begin(t, db), begin(t, db)
	mustGet(t, t3, "y", "c")
	mustGet(t, t4, "x", "c")
	t3.Set("x", "c", []byte("t3"))
	t4.Set("y", "c", []byte("t4"))
	mustCommit(t, t3)
	mustCommit(t, t4)
	if s := db.Stats(); s.Commits != 4 || s.Conflicts != 1 {
		t.Errorf("stats %+v", s)
	}
	// The loser left nothing behind.
	r, _, _ := m.Read(context.Background(), "x")
	if r.Cols["c"].Lock != nil || len(r.Cols["c"].Data) != 3 {
		t.Errorf("x after the conflict: %+v", r.Cols["c"])
	}
}

func TestCrashedWorkersAreResolved(t *testing.T) {
	for _, c := range []struct {
		at   point
		want string // what a later reader sees in both rows
	}{
		{pointPrewritten, "0"},
		{pointPrimaryCommited, "moved"},
	} {
		t.Run(string(c.at), func(t *testing.T) {
			m, o := NewMemStore(), &counter{}
			reader := memDB(t, m, o, "reader", Config{LockWait: time.Second})
			write(t, reader, "a", "c", "0", "b", "c", "0")
			dying := memDB(t, m, o, "dying", Config{hook: crashAt(c.at)})
			tx := begin(t, dying)
			tx.Set("a", "c", []byte("moved"))
			tx.Set("b", "c", []byte("moved"))
			commitCrashing(t, tx)

			// While the worker lives, a lock of its uncommitted
			// transaction is waited for; one whose primary committed is
			// rolled forward at once.
			quick := memDB(t, m, o, "quick", Config{LockWait: 20 * time.Millisecond})
			_, _, err := begin(t, quick).Get(context.Background(), "b", "c")
			if c.at == pointPrewritten && !errors.Is(err, ErrLocked) || c.at == pointPrimaryCommited && err != nil {
				t.Fatalf("read of a live worker's lock: %v", err)
			}
			m.Kill("dying")
			rd := begin(t, reader)
			if a, b := mustGet(t, rd, "b", "c"), mustGet(t, rd, "a", "c"); a != c.want || b != c.want {
				t.Fatalf("after the crash at %s: a=%s b=%s, want %s", c.at, a, b, c.want)
			}
			s := quick.Stats()
			s.RolledBack += reader.Stats().RolledBack
			if c.at == pointPrimaryCommited && s.RolledForward != 1 || c.at == pointPrewritten && s.RolledBack != 1 {
				t.Errorf("stats %+v", s)
			}
			assertNoLocks(t, m)
		})
	}
}

// TestZombieCannotCommitAfterRollBack: a worker judged dead and rolled
// back finds out at its commit point and stops (its primary is gone).
func TestZombieCannotCommitAfterRollBack(t *testing.T) {
	m, o := NewMemStore(), &counter{}
	var other *DB
	zombie := memDB(t, m, o, "zombie", Config{hook: func(p point, start, _ int64) {
		if p == pointPrewritten {
			m.Kill("zombie")
			if v := mustGet(t, begin(t, other), "b", "c"); v != "<none>" {
				t.Errorf("rolled-back write visible: %s", v)
			}
		}
	}})
	other = memDB(t, m, o, "other", Config{})
	tx := begin(t, zombie)
	tx.Set("a", "c", []byte("z"))
	tx.Set("b", "c", []byte("z"))
	if _, err := tx.Commit(context.Background()); !errors.Is(err, ErrAborted) {
		t.Fatalf("zombie commit: %v, want ErrAborted", err)
	}
	assertNoLocks(t, m)
}

func assertNoLocks(t *testing.T, m *MemStore) {
	t.Helper()
	keys, _ := m.Keys(context.Background())
	for _, k := range keys {
		r, _, _ := m.Read(context.Background(), k)
		for name, c := range r.Cols {
			if c.Lock != nil {
				t.Errorf("%s:%s still locked by %d", k, name, c.Lock.Start)
			}
		}
	}
}

func TestGC(t *testing.T) {
	m, o := NewMemStore(), &counter{}
	db := memDB(t, m, o, "w", Config{})
	for i := range 5 {
		write(t, db, "a", "c", fmt.Sprint(i), "gone", "c", fmt.Sprint(i))
	}
	old := begin(t, db)
	write(t, db, "gone", "c", "<delete>")
	sp, _ := o.Timestamps(context.Background(), 1)
	write(t, db, "a", "c", "new")
	st, err := db.GC(context.Background(), sp)
	if err != nil {
		t.Fatal(err)
	}
	// a keeps its version at sp and the one above; "gone" is deleted.
	if st.RowsDeleted != 1 || st.Floor != sp {
		t.Errorf("gc stats %+v", st)
	}
	if keys, _ := m.Keys(context.Background()); len(keys) != 1 || keys[0] != "a" {
		t.Errorf("rows after gc: %v", keys)
	}
	r, _, _ := m.Read(context.Background(), "a")
	if n := len(r.Cols["c"].Writes); n != 2 {
		t.Errorf("a keeps %d versions, want 2", n)
	}
	if _, _, err := old.Get(context.Background(), "a", "c"); !errors.Is(err, ErrSnapshotTooOld) {
		t.Errorf("read below the floor: %v", err)
	}
	if got := mustGet(t, begin(t, db), "a", "c"); got != "new" {
		t.Errorf("read after gc: %s", got)
	}
	if _, err := db.GC(context.Background(), 1<<40); !errors.Is(err, ErrInvalid) {
		t.Errorf("gc above the oracle: %v", err)
	}
}

// TestGCRollsForwardBeforeCollecting: a secondary of a committed
// transaction whose primary's commit record GC would remove is rolled
// forward first, not rolled back.
func TestGCRollsForwardBeforeCollecting(t *testing.T) {
	m, o := NewMemStore(), &counter{}
	db := memDB(t, m, o, "w", Config{})
	write(t, db, "a", "c", "0", "b", "c", "0")
	dying := memDB(t, m, o, "dying", Config{hook: crashAt(pointPrimaryCommited)})
	tx := begin(t, dying)
	tx.Set("a", "c", []byte("1"))
	tx.Set("b", "c", []byte("1"))
	commitCrashing(t, tx)
	m.Kill("dying")
	// A newer commit on the primary makes the dead transaction's record
	// collectable.
	write(t, db, "a", "x", "y")
	tx2 := begin(t, db)
	tx2.Set("a", "c", []byte("2"))
	// a:c is committed by "dying" (not locked): tx2 may write it.
	mustCommit(t, tx2)
	sp, _ := o.Timestamps(context.Background(), 1)
	st, err := db.GC(context.Background(), sp)
	if err != nil {
		t.Fatal(err)
	}
	if st.LocksResolved != 1 {
		t.Errorf("gc stats %+v", st)
	}
	if got := mustGet(t, begin(t, db), "b", "c"); got != "1" {
		t.Fatalf("b after gc = %s, want the committed 1", got)
	}
}

func TestObserver(t *testing.T) {
	m, o := NewMemStore(), &counter{}
	db := memDB(t, m, o, "w", Config{})
	write(t, db, "a", "c", "before")
	obs, err := db.Observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	got := make(chan Change, 10)
	if err := obs.Watch(context.Background(), "a", "c", func(_ context.Context, c Change) { got <- c }); err != nil {
		t.Fatal(err)
	}
	c1 := write(t, db, "a", "c", "one", "a", "other", "x")
	c2 := write(t, db, "a", "c", "<delete>")
	for _, want := range []Change{{Row: "a", Col: "c", Commit: c1, Value: []byte("one")}, {Row: "a", Col: "c", Commit: c2, Deleted: true}} {
		select {
		case c := <-got:
			if c.Commit != want.Commit || c.Deleted != want.Deleted || !bytes.Equal(c.Value, want.Value) {
				t.Fatalf("change %+v, want %+v", c, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no change for commit %d", want.Commit)
		}
	}
	select {
	case c := <-got:
		t.Fatalf("extra change %+v", c)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestInvalidUse(t *testing.T) {
	m, o := NewMemStore(), &counter{}
	db := memDB(t, m, o, "w", Config{})
	tx := begin(t, db)
	long := string(make([]byte, MaxKeyBytes+1))
	for _, err := range []error{
		tx.Set("", "c", nil), tx.Set(long, "c", nil), tx.Set("r", "", nil),
		tx.Set("r", "c", make([]byte, MaxValueBytes+1)),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("got %v, want ErrInvalid", err)
		}
	}
	mustCommit(t, tx)
	if _, err := tx.Commit(context.Background()); !errors.Is(err, ErrInvalid) {
		t.Errorf("second commit: %v", err)
	}
	db.Close(context.Background())
	tx = begin(t, db)
	tx.Set("r", "c", nil)
	if _, err := tx.Commit(context.Background()); !errors.Is(err, ErrInvalid) {
		t.Errorf("commit after Close: %v", err)
	}
}

func TestRowEncoding(t *testing.T) {
	r := &Row{Cols: map[string]*Column{
		"bal": {Lock: &Lock{Start: 9, PrimaryRow: "p", PrimaryCol: "bal", Worker: "w", Kind: KindPut},
			Data: []Data{{Start: 3, Value: []byte("x")}, {Start: 9, Value: []byte("y")}}, Writes: []Write{{Commit: 4, Start: 3, Kind: KindPut}, {Commit: 7, Start: 7, Kind: KindRollback}}},
		"gone": {Writes: []Write{{Commit: 6, Start: 5, Kind: KindDelete}}},
	}}
	b := encodeRow(r)
	back, err := decodeRow(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(encodeRow(back), b) {
		t.Fatal("encoding does not round-trip")
	}
	for i := range b {
		if _, err := decodeRow(b[:i]); i > 0 && err == nil {
			t.Errorf("truncated at %d decoded", i)
		}
	}
	// Names another writer could make too long are refused.
	long := strings.Repeat("x", MaxColumnBytes+1)
	bad := encodeRow(&Row{Cols: map[string]*Column{long: {Writes: []Write{{Commit: 2, Start: 1, Kind: KindDelete}}}}})
	if _, err := decodeRow(bad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a column name of %d bytes decoded: %v", len(long), err)
	}
}

func FuzzDecodeRow(f *testing.F) {
	f.Add(encodeRow(&Row{Floor: 3, Cols: map[string]*Column{"c": {Data: []Data{{Start: 1, Value: []byte("v")}}, Writes: []Write{{Commit: 2, Start: 1, Kind: KindPut}}}}}))
	f.Add([]byte("ptx1\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRow(b)
		if err != nil {
			return
		}
		again, err := decodeRow(encodeRow(r))
		if err != nil || !bytes.Equal(encodeRow(again), encodeRow(r)) {
			t.Fatalf("a decoded row does not re-encode: %v", err)
		}
	})
}

func FuzzEscapeKey(f *testing.F) {
	f.Add("acct-1")
	f.Add("a/b._\x00")
	f.Fuzz(func(t *testing.T, k string) {
		if k == "" {
			return
		}
		back, ok := unescapeKey(escapeKey(k))
		if !ok || back != k {
			t.Fatalf("%q escaped to %q came back as %q", k, escapeKey(k), back)
		}
	})
}

func TestPickSafePoint(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := []gcSample{{t0, 10}, {t0.Add(time.Second), 20}, {t0.Add(2 * time.Second), 30}}
	for _, c := range []struct {
		cutoff time.Time
		sp     int64
		left   int
	}{
		{t0.Add(-time.Second), 0, 3},
		{t0, 10, 3},
		{t0.Add(1500 * time.Millisecond), 20, 2},
		{t0.Add(time.Hour), 30, 1},
	} {
		sp, rest := pickSafePoint(s, c.cutoff)
		if sp != c.sp || len(rest) != c.left {
			t.Errorf("cutoff %v: safe point %d with %d samples left, want %d with %d", c.cutoff.Sub(t0), sp, len(rest), c.sp, c.left)
		}
	}
}

// TestGCLoop: the loop collects old versions and leaves snapshots
// younger than keep readable.
func TestGCLoop(t *testing.T) {
	m, o := NewMemStore(), &counter{}
	db := memDB(t, m, o, "w", Config{})
	for i := range 10 {
		write(t, db, "a", "c", fmt.Sprint(i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); db.GCLoop(ctx, 5*time.Millisecond, 20*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		r, _, _ := m.Read(context.Background(), "a")
		if len(r.Cols["c"].Writes) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("versions left after 10 s of GCLoop: %d", len(r.Cols["c"].Writes))
		}
	}
	if got := mustGet(t, begin(t, db), "a", "c"); got != "9" {
		t.Errorf("after gc: %s", got)
	}
}

// TestLatePrimaryPrewriteIsRefused: rows are prewritten at once, so a
// resolver may meet a secondary before the primary's lock is written; it
// leaves a rollback record on the primary, and the primary's prewrite,
// arriving late, fails instead of committing a transaction whose
// secondary was rolled back.
func TestLatePrimaryPrewriteIsRefused(t *testing.T) {
	m, o := NewMemStore(), &counter{}
	ctx := context.Background()
	tx, primary, _ := rolledBackBehindItsBack(t, m, o)
	if _, err := tx.prewriteRow(ctx, primary, []cell{primary}); !errors.Is(err, ErrAborted) {
		t.Fatalf("late prewrite of the primary: %v, want ErrAborted", err)
	}
	assertNoLocks(t, m)
}

// TestOwnCleanupRollsForward: a DB settling its own transaction after a
// commit whose outcome it did not learn follows the primary: committed, so
// the secondary is rolled forward, not back.
func TestOwnCleanupRollsForward(t *testing.T) {
	m, o := NewMemStore(), &counter{}
	ctx := context.Background()
	w := memDB(t, m, o, "w", Config{})
	tx := begin(t, w)
	tx.Set("a", "c", []byte("1"))
	tx.Set("b", "c", []byte("1"))
	primary := cell{"a", "c"}
	for _, c := range []cell{primary, {"b", "c"}} {
		if _, err := tx.prewriteRow(ctx, primary, []cell{c}); err != nil {
			t.Fatal(err)
		}
	}
	commit, _ := o.Timestamps(ctx, 1)
	if err := tx.commitPrimary(ctx, primary, commit, snap{}); err != nil {
		t.Fatal(err)
	}
	w.cleanup(ctx, pending{start: tx.Start(), rows: []string{"a", "b"}})
	if v := mustGet(t, begin(t, w), "b", "c"); v != "1" {
		t.Fatalf("b = %s after the cleanup of a committed transaction", v)
	}
	assertNoLocks(t, m)
}

// TestRun: Run retries an attempt that conflicted, in a new transaction,
// and stops at once on an error of f's own.
func TestRun(t *testing.T) {
	m, o := NewMemStore(), &counter{}
	ctx := context.Background()
	db := memDB(t, m, o, "w", Config{})
	write(t, db, "x", "c", "0")
	tries := 0
	_, aborted, err := db.Run(ctx, func(ctx context.Context, tx *Txn) error {
		tries++
		v, _, err := tx.Get(ctx, "x", "c")
		if err != nil {
			return err
		}
		if tries == 1 {
			write(t, db, "x", "c", "meanwhile") // makes this attempt conflict
		}
		return tx.Set("x", "c", append(v, '+'))
	})
	if err != nil || aborted != 1 || tries != 2 {
		t.Fatalf("Run: err %v, %d aborted, %d tries; want nil, 1, 2", err, aborted, tries)
	}
	if v := mustGet(t, begin(t, db), "x", "c"); v != "meanwhile+" {
		t.Errorf("x = %s", v)
	}
	mine := errors.New("mine")
	if _, _, err := db.Run(ctx, func(context.Context, *Txn) error { return mine }); !errors.Is(err, mine) {
		t.Errorf("Run with f failing: %v", err)
	}
}

// TestLatePrimaryPrewriteAfterGC: the hazard of a worker wrongly thought
// dead whose transaction is older than a GC safe point. Its transaction
// was rolled back (the rollback record on its primary refuses a late
// prewrite, as above), then garbage collection removed that record; a
// late prewrite of the primary must still be refused — by the floor GC
// leaves on the row, or on the table when the row went — or the
// transaction could commit with its secondaries already rolled back.
func TestLatePrimaryPrewriteAfterGC(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("row keeps columns %v", keep), func(t *testing.T) {
			m, o := NewMemStore(), &counter{}
			ctx := context.Background()
			if keep {
				write(t, memDB(t, m, o, "other", Config{}), "a", "other", "x")
			}
			tx, primary, reader := rolledBackBehindItsBack(t, m, o)
			safe, _ := o.Timestamps(ctx, 1)
			st, err := reader.GC(ctx, safe)
			if err != nil {
				t.Fatal(err)
			}
			if r, _, _ := m.Read(ctx, "a"); r.Cols["c"] != nil && len(r.Cols["c"].Writes) > 0 {
				t.Fatalf("GC left the rollback record on the primary: %+v (stats %+v)", r.Cols["c"], st)
			}
			if _, err := tx.prewriteRow(ctx, primary, []cell{primary}); !errors.Is(err, ErrSnapshotTooOld) {
				t.Fatalf("late prewrite of the primary after GC: %v, want ErrSnapshotTooOld", err)
			}
			if v := mustGet(t, begin(t, reader), "a", "c"); v != "<none>" {
				t.Fatalf("a = %s: the rolled-back transaction wrote its primary", v)
			}
			assertNoLocks(t, m)
		})
	}
}

// rolledBackBehindItsBack has worker w prewrite the secondary b:c of a
// transaction whose primary is a:c, then declares w dead (wrongly: w runs
// on) and lets a reader roll the transaction back. It returns w's
// transaction, its primary and the reader's DB.
func rolledBackBehindItsBack(t *testing.T, m *MemStore, o Oracle) (*Txn, cell, *DB) {
	t.Helper()
	tx := begin(t, memDB(t, m, o, "w", Config{}))
	tx.Set("a", "c", []byte("1"))
	tx.Set("b", "c", []byte("1"))
	primary := cell{"a", "c"}
	if _, err := tx.prewriteRow(context.Background(), primary, []cell{{"b", "c"}}); err != nil {
		t.Fatal(err)
	}
	m.Kill("w")
	reader := memDB(t, m, o, "reader", Config{})
	if v := mustGet(t, begin(t, reader), "b", "c"); v != "<none>" {
		t.Fatalf("b = %s after the roll-back", v)
	}
	return tx, primary, reader
}
