package txn

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// cellSession connects to addrs and opens a session, both closed when the
// test ends.
func cellSession(t testing.TB, addrs ...string) *client.Session {
	t.Helper()
	ctx := testCtx(t)
	c, err := client.Connect(ctx, client.Config{Addrs: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func cellDB(t testing.TB, s *client.Session, dir string, cfg Config) *DB {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	db, err := Open(testCtx(t), s, dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestOnTheCell runs the protocol on a real cell: snapshot reads through
// the session cache, a conflict, an observer fed by the cell's events, and
// a crashed worker whose locks are resolved once its session is gone.
func TestOnTheCell(t *testing.T) {
	cl := celltest.Start(t, celltest.Options{})
	ctx := testCtx(t)
	db := cellDB(t, cellSession(t, cl.Addr), "/bank", Config{})

	write(t, db, "acct/1", "bal", "10", "acct/2", "bal", "10")
	old := begin(t, db)
	obs, err := db.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	changes := make(chan Change, 16)
	if err := obs.Watch(ctx, "acct/2", "bal", func(_ context.Context, c Change) { changes <- c }); err != nil {
		t.Fatal(err)
	}
	c1 := write(t, db, "acct/1", "bal", "5", "acct/2", "bal", "15")
	if a, b := mustGet(t, old, "acct/1", "bal"), mustGet(t, old, "acct/2", "bal"); a != "10" || b != "10" {
		t.Errorf("old snapshot sees %s, %s", a, b)
	}
	select {
	case c := <-changes:
		if c.Commit != c1 || string(c.Value) != "15" {
			t.Errorf("observed %+v, want commit %d value 15", c, c1)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the observer saw no change")
	}

	t1, t2 := begin(t, db), begin(t, db)
	t1.Set("acct/1", "bal", []byte("1"))
	t2.Set("acct/1", "bal", []byte("2"))
	mustCommit(t, t1)
	if _, err := t2.Commit(ctx); !errors.Is(err, ErrConflict) {
		t.Fatalf("second writer: %v, want ErrConflict", err)
	}

	// A worker stops after its commit point; its session ends (the cell
	// deletes its token); a reader rolls its secondary forward.
	dyingSession := cellSession(t, cl.Addr)
	dying := cellDB(t, dyingSession, "/bank", Config{hook: crashAt(pointPrimaryCommited)})
	tx := begin(t, dying)
	tx.Set("acct/1", "bal", []byte("0"))
	tx.Set("acct/2", "bal", []byte("20"))
	commitCrashing(t, tx)
	if err := dyingSession.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rd := begin(t, db)
	if a, b := mustGet(t, rd, "acct/2", "bal"), mustGet(t, rd, "acct/1", "bal"); a != "20" || b != "0" {
		t.Fatalf("after the crash: %s, %s; want 20, 0", a, b)
	}
	select {
	case c := <-changes:
		if string(c.Value) != "20" {
			t.Errorf("observed %+v after the roll-forward", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the observer missed the rolled-forward change")
	}
	// The reader or the observer rolled the lock forward, once; either has
	// counted it by now (the observer reports the change on the goroutine
	// that resolved, after it counted).
	if s := db.Stats(); s.RolledForward != 1 {
		t.Errorf("stats %+v", s)
	}

	sp, err := cellSession(t, cl.Addr).Client().Timestamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.GC(ctx, sp); err != nil {
		t.Fatal(err)
	}
	if _, _, err := old.Get(ctx, "acct/1", "bal"); !errors.Is(err, ErrSnapshotTooOld) {
		t.Errorf("old snapshot after gc: %v", err)
	}
	if err := db.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
