package main

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// memBank is an in-memory account store with optimistic transfers: an
// attempt reads both versions, yields, and commits only if neither
// changed. lossy makes every transfer lose the unit it takes (a broken
// transaction the check after the run must catch).
type memBank struct {
	mu      sync.Mutex
	bal     map[int]int64
	ver     map[int]int
	lossy   bool
	created int
}

type memAccounts struct{ b *memBank }

func (a memAccounts) Create(_ context.Context, from, to int, balance int64) error {
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	for i := from; i < to; i++ {
		a.b.bal[i] = balance
		a.b.created++
	}
	return nil
}

func (a memAccounts) Transfer(ctx context.Context, x, y int) (int, error) {
	for aborts := 0; ; aborts++ {
		a.b.mu.Lock()
		bx, by, vx, vy := a.b.bal[x], a.b.bal[y], a.b.ver[x], a.b.ver[y]
		a.b.mu.Unlock()
		time.Sleep(50 * time.Microsecond) // others may commit meanwhile
		a.b.mu.Lock()
		if a.b.ver[x] == vx && a.b.ver[y] == vy {
			a.b.bal[x], a.b.bal[y] = bx-1, by+1
			if a.b.lossy {
				a.b.bal[y]--
			}
			a.b.ver[x]++
			a.b.ver[y]++
			a.b.mu.Unlock()
			return aborts, nil
		}
		a.b.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return aborts, err
		}
	}
}

func (a memAccounts) Sum(_ context.Context, from, to int) (int64, error) {
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	var sum int64
	for i := from; i < to; i++ {
		sum += a.b.bal[i]
	}
	return sum, nil
}

func (a memAccounts) Close() error { return nil }

// memClient and memSystem are just enough of a Client and a System for
// runLoad's transfer workloads.
type memClient struct {
	Client
	b *memBank
}

func (c memClient) Accounts(context.Context, string, int) (Accounts, error) {
	return memAccounts{c.b}, nil
}

type memSystem struct{ System }

func (memSystem) Kind() string            { return sysChubby }
func (memSystem) Nodes() int              { return 1 }
func (memSystem) Bound(w Workload) string { return "memory" }

func runMemTransfers(t *testing.T, w Workload, lossy bool) (Result, *memBank) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.OpTimeout = 5 * time.Second
	e := &env{cfg: &cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)), prog: newProgress(io.Discard)}
	r := &runner{cfg: &cfg, env: e, prog: e.prog}
	b := &memBank{bal: map[int]int64{}, ver: map[int]int{}, lossy: lossy}
	clients := make([]Client, w.Clients)
	for i := range clients {
		clients[i] = memClient{b: b}
	}
	return r.runLoad(context.Background(), memSystem{}, clients, w, 20*time.Millisecond, 150*time.Millisecond), b
}

func TestTransferRunCountsAbortsAndChecksTheBalances(t *testing.T) {
	w := Workload{Kind: kindTransferHot, Clients: 16}
	res, b := runMemTransfers(t, w, false)
	if b.created != hotAccounts {
		t.Errorf("set-up created %d accounts, want %d", b.created, hotAccounts)
	}
	if !res.measured() || res.Error != "" || res.Note != "" {
		t.Fatalf("result %+v", res)
	}
	if res.Attempts != res.Ops+res.Aborts || res.Aborts == 0 {
		t.Errorf("%d attempts, %d aborts, %d committed: 16 clients on 8 accounts must abort some, and attempts = commits + aborts",
			res.Attempts, res.Aborts, res.Ops)
	}
	if rate, ok := res.abortRate(); !ok || rate <= 0 || rate >= 1 {
		t.Errorf("abort rate %v, %v", rate, ok)
	}

	res, _ = runMemTransfers(t, Workload{Kind: kindTransferSpread, Clients: 4}, true)
	if !strings.Contains(res.Note, "CHECK FAILED") {
		t.Errorf("a transfer that loses money passed the check: %+v", res)
	}
}

func TestTransferPairsAreDistinct(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[[2]int]bool{}
	for range 2000 {
		a, b := pair(rng, hotAccounts)
		if a == b || a < 0 || b < 0 || a >= hotAccounts || b >= hotAccounts {
			t.Fatalf("pair %d, %d of %d accounts", a, b, hotAccounts)
		}
		seen[[2]int{a, b}] = true
	}
	if len(seen) != hotAccounts*(hotAccounts-1) {
		t.Errorf("%d ordered pairs drawn of %d", len(seen), hotAccounts*(hotAccounts-1))
	}
	if got := transferSet(Workload{Kind: kindTransferHot, Clients: 64}); got != "transfer-hot64" {
		t.Errorf("transferSet = %q", got)
	}
}
