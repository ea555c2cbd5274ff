package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

const (
	lease     = time.Second
	lockDelay = 300 * time.Millisecond
	lockPath  = "/fencelock"
)

// holder is one lock holder: its own client and session, so that closing
// the client kills the session abruptly (no KeepAlive, no release).
type holder struct {
	c *client.Client
	s *client.Session
	h *client.Handle
}

func newHolder(t *testing.T, ctx context.Context, addr string) *holder {
	t.Helper()
	c, err := client.Connect(ctx, client.Config{Addrs: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Open(ctx, lockPath, client.OpenOptions{Create: chubby.CreateMode_OPEN_OR_CREATE})
	if err != nil {
		t.Fatal(err)
	}
	return &holder{c: c, s: s, h: h}
}

func refusedWith(t *testing.T, err error, status int) {
	t.Helper()
	var re *RefusedError
	if !errors.As(err, &re) || re.Status != status {
		t.Fatalf("write: got %v, want refused with %d", err, status)
	}
}

// TestStaleHolderFenced: holder A writes; A's session dies without
// releasing; B gets the lock after the lease and A's lock-delay; A's late
// write with its old sequencer is refused by the fencing token alone (no
// call to the cell), and B's is accepted.
func TestStaleHolderFenced(t *testing.T) {
	cell := celltest.Start(t, celltest.Options{Lease: lease})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	checkClient, err := client.Connect(ctx, client.Config{Addrs: []string{cell.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer checkClient.Close()
	srv := NewServer(lockPath, checkClient)
	hs := httptest.NewServer(srv)
	defer hs.Close()

	a := newHolder(t, ctx, cell.Addr)
	seqA, err := a.h.Acquire(ctx, chubby.LockMode_EXCLUSIVE, 5*time.Second, client.LockOptions{LockDelay: lockDelay})
	if err != nil {
		t.Fatal(err)
	}
	if err := Put(ctx, hs.URL, "k", "from A", seqA); err != nil {
		t.Fatalf("A's write while holding: %v", err)
	}

	// A dies: its KeepAlives stop, its lock is not released.
	b := newHolder(t, ctx, cell.Addr)
	a.c.Close()
	died := time.Now()
	// Watch the lock go through the lock-delay: free, but kept from B.
	var ended time.Duration
	for deadline := died.Add(10 * time.Second); ended == 0; time.Sleep(10 * time.Millisecond) {
		st, err := b.h.GetStat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if li := st.GetLock(); !li.IsSetMode() && li.GetDelayRemainingMs() > 0 {
			ended = time.Since(died)
		}
		if time.Now().After(deadline) {
			t.Fatal("A's lock never entered its lock-delay")
		}
	}
	t.Logf("A's session ended %v after it died; its lock is in lock-delay", ended.Round(time.Millisecond))
	// A write of A now: still the newest tenure the server saw, so it asks
	// the cell, which says no.
	checks := srv.Checks.Load()
	refusedWith(t, Put(ctx, hs.URL, "k", "late from A, in the lock-delay", seqA), http.StatusConflict)
	if srv.Checks.Load() != checks+1 {
		t.Errorf("A's write in the lock-delay: %d checks, want %d", srv.Checks.Load(), checks+1)
	}
	seqB, err := b.h.Acquire(ctx, chubby.LockMode_EXCLUSIVE, 20*time.Second, client.LockOptions{LockDelay: lockDelay})
	if err != nil {
		t.Fatalf("B acquire: %v", err)
	}
	took := time.Since(died)
	t.Logf("B got the lock %v after A died (lease %v + lock-delay %v)", took.Round(time.Millisecond), lease, lockDelay)
	if took < lockDelay {
		t.Errorf("B got the lock after %v, before A's lock-delay %v", took, lockDelay)
	}
	if seqB.LockGeneration <= seqA.LockGeneration {
		t.Fatalf("B's lock generation %d not above A's %d", seqB.LockGeneration, seqA.LockGeneration)
	}

	// B writes first: the server's mark moves to B's generation.
	if err := Put(ctx, hs.URL, "k", "from B", seqB); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	checks = srv.Checks.Load()
	err = Put(ctx, hs.URL, "k", "late from A", seqA)
	refusedWith(t, err, http.StatusConflict)
	if srv.Checks.Load() != checks || srv.Fenced.Load() != 1 {
		t.Errorf("A's stale write: %d checks (want %d), %d fenced (want 1)", srv.Checks.Load(), checks, srv.Fenced.Load())
	}
	if got := get(t, hs.URL, "k"); got != "from B" {
		t.Fatalf("k = %q, want B's value", got)
	}
}

// TestReleasedSequencerRefusedByCell: a sequencer of the newest tenure
// the server knows is still checked with the cell, so a holder that has
// released its lock cannot write, although no newer holder came yet.
func TestReleasedSequencerRefusedByCell(t *testing.T) {
	cell := celltest.Start(t, celltest.Options{Lease: lease})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, client.Config{Addrs: []string{cell.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := NewServer(lockPath, c)
	hs := httptest.NewServer(srv)
	defer hs.Close()

	a := newHolder(t, ctx, cell.Addr)
	seq, err := a.h.TryAcquire(ctx, chubby.LockMode_EXCLUSIVE, client.LockOptions{LockDelay: client.NoLockDelay})
	if err != nil {
		t.Fatal(err)
	}
	if err := Put(ctx, hs.URL, "k", "1", seq); err != nil {
		t.Fatal(err)
	}
	if err := a.h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	checks := srv.Checks.Load()
	refusedWith(t, Put(ctx, hs.URL, "k", "2", seq), http.StatusConflict)
	if srv.Checks.Load() != checks+1 {
		t.Errorf("released sequencer: %d checks, want %d", srv.Checks.Load(), checks+1)
	}

	// Malformed, missing, shared or foreign sequencers are bad requests.
	refusedWith(t, Put(ctx, hs.URL, "k", "3", &chubby.Sequencer{Path: "/other", Mode: chubby.LockMode_EXCLUSIVE, LockGeneration: 9}), http.StatusBadRequest)
	refusedWith(t, Put(ctx, hs.URL, "k", "3", &chubby.Sequencer{Path: lockPath, Mode: chubby.LockMode_SHARED, LockGeneration: 9}), http.StatusBadRequest)
	refusedWith(t, Put(ctx, hs.URL, "k", "3", nil), http.StatusBadRequest)
	if got := get(t, hs.URL, "k"); got != "1" {
		t.Fatalf("k = %q, want 1", got)
	}
}

func get(t *testing.T, base, key string) string {
	t.Helper()
	resp, err := http.Get(base + "/kv/" + key)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("get %s: %d %s", key, resp.StatusCode, b)
	}
	return string(b)
}
