package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
)

const (
	lease     = time.Second
	lockDelay = 500 * time.Millisecond
	file      = "/leader"
	// takeoverBound is what a takeover may take. kill closes the client,
	// which leaves its parked KeepAlive (and connection) behind, so the
	// master still answers it with one more lease: the session ends up to
	// about two leases after the kill (a killed process's connection
	// closes, and it ends within one). Then the lock-delay, the grant and
	// the write; plus slack for a loaded test machine.
	takeoverBound = 2*lease + lockDelay + 3*time.Second
)

// seen is one candidate's observation.
type seen struct {
	who int
	Observation
}

// candidate runs one candidate on its own client and session; kill stops
// it abruptly: its client closes without ending the session, so the cell
// ends it only when its lease runs out, as if the process died.
type candidate struct {
	addr string
	kill func()
	done chan error
}

func start(t *testing.T, cellAddr string, who int, obs chan<- seen) *candidate {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := client.Connect(ctx, client.Config{Addrs: []string{cellAddr}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cand := &candidate{addr: fmt.Sprintf("10.0.0.%d:5432", who), done: make(chan error, 1)}
	var once sync.Once
	cand.kill = func() {
		once.Do(func() {
			c.Close() // first: no KeepAlive, no release, no close of the handle
			cancel()
		})
	}
	t.Cleanup(cand.kill)
	run := &Candidate{Session: s, Path: file, Address: cand.addr, LockDelay: lockDelay,
		Observe: func(o Observation) { obs <- seen{who, o} }}
	go func() { cand.done <- run.Run(ctx) }()
	return cand
}

// await returns the first observation that match accepts, failing the
// test after d.
func await(t *testing.T, obs <-chan seen, d time.Duration, what string, match func(seen) bool) seen {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case o := <-obs:
			t.Logf("candidate %d: leader %s self=%t %s held=%t", o.who, o.Leader, o.Self, o.How, o.Held)
			if match(o) {
				return o
			}
		case <-timeout:
			t.Fatalf("no %s within %v", what, d)
		}
	}
}

// TestElection: three candidates, one leads and the others learn its
// address; kill the leader, the next takes over within lease + lock-delay
// and the remaining follower learns the new address from an event; kill
// that one too, and the last takes over.
func TestElection(t *testing.T) {
	cell := celltest.Start(t, celltest.Options{Lease: lease})
	obs := make(chan seen, 100)
	cands := map[int]*candidate{}
	for who := 1; who <= 3; who++ {
		cands[who] = start(t, cell.Addr, who, obs)
	}

	// One leads; both others learn its address (by reading or by event).
	// Observations of different candidates arrive in any order: a
	// follower may hear of the leader before the leader reports its win.
	leader := -1
	learned := map[int]string{} // candidate -> leader address it last learned
	await(t, obs, 10*time.Second, "leader known to all", func(o seen) bool {
		if o.Self && o.How == Won {
			leader = o.who
		} else if !o.Self && o.Held {
			learned[o.who] = o.Leader
		}
		if leader < 0 {
			return false
		}
		for who := range cands {
			if who != leader && learned[who] != cands[leader].addr {
				return false
			}
		}
		return true
	})

	for round := 1; len(cands) > 1; round++ {
		old := leader
		oldAddr := cands[old].addr
		cands[old].kill()
		killed := time.Now()
		delete(cands, old)

		leader = -1
		var takeover time.Duration
		heard := map[int]string{}          // follower -> address it heard of by event
		heardAt := map[int]time.Duration{} // and when
		await(t, obs, takeoverBound+5*time.Second, "takeover", func(o seen) bool {
			if cands[o.who] == nil {
				return false // the dead one
			}
			if o.Self && o.How == Won {
				leader, takeover = o.who, time.Since(killed)
			} else if !o.Self && o.How == Event && o.Leader != oldAddr {
				heard[o.who], heardAt[o.who] = o.Leader, time.Since(killed)
			}
			if leader < 0 {
				return false
			}
			for who := range cands {
				if who != leader && heard[who] != cands[leader].addr {
					return false
				}
			}
			return true
		})
		t.Logf("round %d: candidate %d took over from %d in %v (lease %v + lock-delay %v); followers heard by event after %v",
			round, leader, old, takeover.Round(time.Millisecond), lease, lockDelay, heardAt)
		if takeover < lockDelay {
			t.Errorf("takeover in %v, before the lock-delay %v ran out", takeover, lockDelay)
		}
		if takeover > takeoverBound {
			t.Errorf("takeover took %v, more than %v", takeover, takeoverBound)
		}
	}

	// A clean stop of the last one ends Run with nil.
	for _, c := range cands {
		c.kill()
		select {
		case err := <-c.done:
			if err != nil {
				t.Logf("last candidate's Run: %v", err) // its client closed under it
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its context ended")
		}
	}
}
