package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// The transfer workloads: every operation is one committed transaction
// that reads two accounts and moves 1 from the first to the second, in
// each system's own optimistic idiom, with the attempts aborted before it
// (a concurrent writer got there first) retried and counted — at once,
// except ours, which uses txn.DB.Run's back-off. Its latency is the
// whole, retries included.

// transferSetup bounds the set-up of one workload's accounts.
const transferSetup = 2 * time.Minute

// transferSet names the accounts of w ("transfer-hot16"): every workload
// has its own, as it has its own locks and files.
func transferSet(w Workload) string { return fmt.Sprintf("%s%d", w.Kind, w.Clients) }

// transfers is one run of a transfer workload: each worker's client's
// handle on the accounts and its random pairs, and the attempts of the
// operations the loop counted.
type transfers struct {
	w        Workload
	accts    []Accounts
	rngs     []*rand.Rand
	last     []int // aborted attempts of each worker's latest operation
	attempts []int64
	aborts   []int64
}

// prepareTransfers opens every client's handle on w's accounts and creates
// the accounts (untimed, in the lead-in), each client a share of them.
func prepareTransfers(ctx context.Context, clients []Client, w Workload) (*transfers, error) {
	n, count := len(clients), w.accounts()
	t := &transfers{w: w, accts: make([]Accounts, n), rngs: make([]*rand.Rand, n),
		last: make([]int, n), attempts: make([]int64, n), aborts: make([]int64, n)}
	for i, c := range clients {
		a, err := c.Accounts(ctx, transferSet(w), count)
		if err != nil {
			t.close()
			return nil, fmt.Errorf("prepare accounts: %w", err)
		}
		t.accts[i] = a
		t.rngs[i] = rand.New(rand.NewPCG(uint64(n), uint64(i)))
	}
	sctx, cancel := context.WithTimeout(ctx, transferSetup)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		if from, to := i*count/n, (i+1)*count/n; from < to {
			wg.Go(func() { errs[i] = t.accts[i].Create(sctx, from, to, initialBalance) })
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.close()
		return nil, fmt.Errorf("create accounts: %w", err)
	}
	return t, nil
}

// pair picks two distinct accounts of k at random.
func pair(rng *rand.Rand, k int) (a, b int) {
	a, b = rng.IntN(k), rng.IntN(k-1)
	if b >= a {
		b++
	}
	return a, b
}

// op is worker w's operation: one transfer between a random pair,
// committed, retries included.
func (t *transfers) op(ctx context.Context, w int) (time.Duration, error) {
	a, b := pair(t.rngs[w], t.w.accounts())
	t0 := time.Now()
	aborts, err := t.accts[w].Transfer(ctx, a, b)
	t.last[w] = aborts
	return time.Since(t0), err
}

// counted adds worker w's latest operation to the attempts (loop.Counted):
// its aborted attempts and the one that committed (or failed).
func (t *transfers) counted(w int, _ error) {
	t.attempts[w] += int64(t.last[w]) + 1
	t.aborts[w] += int64(t.last[w])
}

// totals are the attempts and aborted attempts of the operations counted.
func (t *transfers) totals() (attempts, aborts int64) {
	for i := range t.attempts {
		attempts += t.attempts[i]
		aborts += t.aborts[i]
	}
	return attempts, aborts
}

// checkTimeout bounds the balance check after a transfer run, at least
// (the check takes --op-timeout when that is longer).
const checkTimeout = 2 * time.Minute

// checkReaders is how many clients read the balances for the check, each
// a share of the accounts, each on its own connection and session.
const checkReaders = 16

// check reads every balance after the run: transfers move money, they do
// not make or lose it, so the sum is what the set-up put in. It returns
// what is wrong, "" if nothing. Up to checkReaders clients read at once,
// each its own share in turn: one client reading 1,000 accounts of our
// cell took seconds, and our client library's session can reject some of
// many calls it sends at once ("below the session's floor").
func (t *transfers) check(ctx context.Context, timeout time.Duration) string {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	count := t.w.accounts()
	want := int64(count) * initialBalance
	k := min(checkReaders, len(t.accts), count)
	sums := make([]int64, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for j := range k {
		wg.Go(func() { sums[j], errs[j] = t.accts[j].Sum(cctx, j*count/k, (j+1)*count/k) })
	}
	wg.Wait()
	var got int64
	for _, s := range sums {
		got += s
	}
	err := errors.Join(errs...)
	switch {
	case err != nil:
		return fmt.Sprintf("balances not checked after the run: %v", err)
	case got != want:
		return fmt.Sprintf("CHECK FAILED: the balances add up to %d after the run, not %d: a transfer was not atomic", got, want)
	}
	return ""
}

func (t *transfers) close() {
	for _, a := range t.accts {
		if a != nil {
			a.Close()
		}
	}
}
