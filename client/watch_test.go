package client

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestHeardCancelsAttemptsElsewhere: a master of a newer epoch heard of at
// b cancels the attempts in flight at other replicas (errMasterMoved) and
// makes b the guess; the same epoch again, an older one, or the first epoch
// ever heard cancel nothing.
func TestHeardCancelsAttemptsElsewhere(t *testing.T) {
	const a, b = "127.0.0.1:1", "127.0.0.1:2"
	m := newLocator([]string{a, b}, nil, time.Second)
	track := func() (context.Context, func()) {
		ctx, cancel := context.WithCancelCause(context.Background())
		addr, untrack := m.trackCur(cancel)
		if addr != m.addr() {
			t.Fatalf("tracked at %s, the guess is %s", addr, m.addr())
		}
		return ctx, untrack
	}
	first, _ := track()
	if !m.heard(b, 3) || m.addr() != b {
		t.Fatalf("the first epoch heard: guess %s, want %s", m.addr(), b)
	}
	if first.Err() != nil {
		t.Fatal("the first epoch heard cancelled an attempt: nothing was known to be stale")
	}
	m.learned(a)
	atA, _ := track()
	if m.heard(b, 3) || m.heard(b, 2) {
		t.Fatal("an epoch already heard (or older) was news")
	}
	if atA.Err() != nil {
		t.Fatal("the same epoch again cancelled an attempt")
	}
	done, untrack := track()
	untrack() // answered: no longer in flight
	m.learned(b)
	atB, _ := track()
	if !m.heard(b, 4) {
		t.Fatal("a newer epoch was not news")
	}
	if !errors.Is(context.Cause(atA), errMasterMoved) {
		t.Fatalf("the attempt at %s: %v, want errMasterMoved", a, context.Cause(atA))
	}
	if done.Err() != nil || atB.Err() != nil {
		t.Fatal("a finished attempt, or one at the new master, was cancelled")
	}
}

// TestWatchNeverSpins: watches answered at once without news (an old cell
// that does not hold them) are spaced by watchMinInterval, and failed
// ones back off; an answer naming a newer master moves the guess and ends
// the wait of anyone waiting for a locate round.
func TestWatchNeverSpins(t *testing.T) {
	const a, b, c = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"
	var calls atomic.Int64
	var news atomic.Bool
	m := newLocator([]string{a, b, c}, nil, time.Second)
	m.heard(a, 5)
	m.watch = func(ctx context.Context, addr, cur string, hold time.Duration) (string, int64, []string, error) {
		calls.Add(1)
		if addr == cur {
			t.Errorf("a watch was parked at the master guess %s", cur)
		}
		if news.Load() {
			return c, 6, nil, nil
		}
		if calls.Load()%2 == 0 {
			return "", 0, nil, errors.New("unreachable")
		}
		return cur, 5, nil, nil
	}
	defer m.close()
	ended := m.roundEnded()
	m.startWatch()
	m.startWatch() // one loop only
	const window = 3 * watchMinInterval
	time.Sleep(window)
	// At most one watch per watchMinInterval (failures pause at least a
	// fifth of it, growing), plus the first.
	if n := calls.Load(); n > 1+int64(window/(watchMinInterval/5)) || n < 2 {
		t.Fatalf("%d watches in %v", n, window)
	}
	news.Store(true)
	select {
	case <-ended:
	case <-time.After(10 * watchMinInterval):
		t.Fatal("a watch naming a newer master ended no locate-round wait")
	}
	if loc := m.lastLocated(); loc.addr != c || loc.epoch != 6 || m.addr() != c {
		t.Fatalf("after the news: located %+v, guess %s; want %s at 6", loc, m.addr(), c)
	}
}
