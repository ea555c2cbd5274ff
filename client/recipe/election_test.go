package recipe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// The coordination recipes' tests run against a real cell with a short
// session lease, so that a killed participant's session expires soon.
const coordLease = 2 * time.Second

// coordTakeover bounds what a kill -9 takes to show: the lease, the
// lock-delay the tests ask for, and slack for a loaded machine.
const coordTakeover = 30 * time.Second

// coordCell starts a one-replica cell with the short lease.
func coordCell(t *testing.T) *celltest.Cell {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: starts a cell (skipped with -short)")
	}
	return celltest.Start(t, celltest.Options{Lease: coordLease})
}

// coordSession connects to the cell at addrs and opens a session; both
// end with the test.
func coordSession(t *testing.T, addrs ...string) *client.Session {
	t.Helper()
	return coordSessionWith(t, client.Config{Addrs: addrs})
}

// coordSessionWith connects with cfg and opens a session; both end with
// the test.
func coordSessionWith(t *testing.T, cfg client.Config) *client.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// coordCtx is a context that ends after d or with the test.
func coordCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// coordMkdir makes dir (with parents).
func coordMkdir(t *testing.T, s *client.Session, dir string) {
	t.Helper()
	if _, err := s.Mkdir(coordCtx(t, 10*time.Second), dir, client.MkdirOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
}

// coordChildSession is a child's session on CHUBBY_CELL, or exit 2.
func coordChildSession(ctx context.Context) *client.Session {
	c, err := client.Connect(ctx, client.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: connect:", err)
		os.Exit(2)
	}
	s, err := c.NewSession(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: session:", err)
		os.Exit(2)
	}
	return s
}

// coordChildFail reports a child's failure and returns its exit code.
func coordChildFail(what string, err error) int {
	fmt.Fprintf(os.Stderr, "child: %s: %v\n", what, err)
	return 1
}

func init() {
	// A candidate that campaigns (path, address, lock-delay), says
	// "leader <generation>" and leads until killed.
	children["election-candidate"] = func(args []string) int {
		ctx := context.Background()
		delay, err := time.ParseDuration(args[2])
		if err != nil {
			return coordChildFail("lock-delay", err)
		}
		e, err := NewElection(coordChildSession(ctx), args[0])
		if err != nil {
			return coordChildFail("election", err)
		}
		l, err := e.Campaign(ctx, []byte(args[1]), CampaignOptions{LockDelay: delay})
		if err != nil {
			return coordChildFail("campaign", err)
		}
		fmt.Println("leader", l.LockGeneration())
		select {}
	}
}

// nextLeader is the next change an observer reports, within 20 s.
func nextLeader(t *testing.T, o *LeaderObserver) LeaderInfo {
	t.Helper()
	info, err := o.Next(coordCtx(t, 20*time.Second))
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	return info
}

// awaitLeader reads observations until one names address (skipping
// "no leader" ones; any other leader fails the test) and returns it.
func awaitLeader(t *testing.T, o *LeaderObserver, address string) LeaderInfo {
	t.Helper()
	for range 20 {
		info := nextLeader(t, o)
		if !info.Leads() {
			continue
		}
		if string(info.Address) != address {
			t.Fatalf("observer saw leader %q, want %q", info.Address, address)
		}
		return info
	}
	t.Fatalf("no leader %q after 20 observations", address)
	return LeaderInfo{}
}

// TestElection: one leader at a time; Leader and Observe name it with its
// term; a candidate with a Wait times out; Resign empties the file and
// observers see "no leader", then the next leader.
func TestElection(t *testing.T) {
	cell := coordCell(t)
	s1, s2, s3 := coordSession(t, cell.Addr), coordSession(t, cell.Addr), coordSession(t, cell.Addr)
	coordMkdir(t, s1, "/el")
	ctx := coordCtx(t, 60*time.Second)
	e1, _ := NewElection(s1, "/el/db")
	e2, _ := NewElection(s2, "/el/db")
	e3, _ := NewElection(s3, "/el/db")

	l1, err := e1.Campaign(ctx, []byte("10.0.0.1:80"), CampaignOptions{LockDelay: client.NoLockDelay})
	if err != nil {
		t.Fatal(err)
	}
	if !l1.Held() || string(l1.Address()) != "10.0.0.1:80" {
		t.Fatalf("leadership: held %v, address %q", l1.Held(), l1.Address())
	}
	if valid, reason, err := s3.Client().CheckSequencer(ctx, l1.Sequencer()); err != nil || !valid {
		t.Fatalf("the leader's sequencer is not valid: %v %s %v", valid, reason, err)
	}
	info, err := e3.Leader(ctx)
	if err != nil || string(info.Address) != "10.0.0.1:80" || info.LockGeneration != l1.LockGeneration() {
		t.Fatalf("Leader = %+v, %v", info, err)
	}
	obs, err := e3.Observe(ctx, ObserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close(ctx)
	if info := nextLeader(t, obs); string(info.Address) != "10.0.0.1:80" || info.LockGeneration != l1.LockGeneration() {
		t.Fatalf("first observation %+v", info)
	}
	_, err = e3.Campaign(ctx, []byte("10.0.0.3:80"), CampaignOptions{Wait: 300 * time.Millisecond})
	if !client.IsCode(err, chubby.ErrorCode_TIMED_OUT) {
		t.Fatalf("a campaign with a 300ms wait against a leader: %v, want TIMED_OUT", err)
	}

	if err := l1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if l1.Held() {
		t.Fatal("resigned leadership still held")
	}
	if info := nextLeader(t, obs); info.Leads() || info.Last != nil {
		t.Fatalf("after Resign: %+v, want no leader and an empty file", info)
	}
	l2, err := e2.Campaign(ctx, []byte("10.0.0.2:80"), CampaignOptions{LockDelay: client.NoLockDelay})
	if err != nil {
		t.Fatal(err)
	}
	if info := awaitLeader(t, obs, "10.0.0.2:80"); info.LockGeneration != l2.LockGeneration() || l2.LockGeneration() <= l1.LockGeneration() {
		t.Fatalf("second leader %+v, leadership generation %d after %d", info, l2.LockGeneration(), l1.LockGeneration())
	}
	if err := l2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := e3.Leader(ctx); err != nil || info.Leads() {
		t.Fatalf("after both resigned: %+v %v", info, err)
	}
	if err := obs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := obs.Next(ctx); !errors.Is(err, ErrObserverClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
}

// TestElectionObserverStaleAddress: after a leader's session closes
// without resigning, its address stays in the file; when the next holder
// is granted the lock, the observer does not take that address for the
// new leader's, and names the new leader once it writes.
func TestElectionObserverStaleAddress(t *testing.T) {
	cell := coordCell(t)
	s1, s2, s3 := coordSession(t, cell.Addr), coordSession(t, cell.Addr), coordSession(t, cell.Addr)
	coordMkdir(t, s1, "/el")
	ctx := coordCtx(t, 60*time.Second)
	e1, _ := NewElection(s1, "/el/x")
	e3, _ := NewElection(s3, "/el/x")
	if _, err := e1.Campaign(ctx, []byte("old"), CampaignOptions{LockDelay: client.NoLockDelay}); err != nil {
		t.Fatal(err)
	}
	obs, err := e3.Observe(ctx, ObserveOptions{Recheck: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close(ctx)
	first := nextLeader(t, obs)
	if string(first.Address) != "old" {
		t.Fatalf("first observation %+v", first)
	}
	if err := s1.Close(ctx); err != nil { // releases the lock, leaves "old" in the file
		t.Fatal(err)
	}
	if info := nextLeader(t, obs); info.Leads() || string(info.Last) != "old" {
		t.Fatalf("after the leader's session closed: %+v, want no leader, last \"old\"", info)
	}

	// A new holder, granted the lock, has not written yet.
	h, err := s2.Open(ctx, "/el/x", client.OpenOptions{Mode: chubby.OpenMode_READ_WRITE})
	if err != nil {
		t.Fatal(err)
	}
	seq, err := h.TryAcquire(ctx, chubby.LockMode_EXCLUSIVE, client.LockOptions{LockDelay: client.NoLockDelay})
	if err != nil {
		t.Fatal(err)
	}
	quiet, cancel := context.WithTimeout(ctx, time.Second)
	info, err := obs.Next(quiet)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("while the new holder has not written, the observer said %+v (%v), want nothing new", info, err)
	}
	if _, err := h.SetContents(ctx, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if info := nextLeader(t, obs); string(info.Address) != "new" || info.LockGeneration != seq.GetLockGeneration() {
		t.Fatalf("after the write: %+v, want new at generation %d", info, seq.GetLockGeneration())
	}
	// Deleting the file ends the observer.
	if err := h.Delete(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, err := obs.Next(coordCtx(t, 20*time.Second)); !errors.Is(err, ErrElectionGone) {
		t.Fatalf("after the delete: %v, want ErrElectionGone", err)
	}
}

// TestElectionKilledLeader: kill -9 of the leader (a child process); the
// waiting candidate leads after the lease and lock-delay, and the
// observer sees "no leader" with the dead one's address left, then the
// new leader.
func TestElectionKilledLeader(t *testing.T) {
	cell := coordCell(t)
	s2, s3 := coordSession(t, cell.Addr), coordSession(t, cell.Addr)
	coordMkdir(t, s2, "/el")
	ctx := coordCtx(t, 90*time.Second)
	leader := startChild(t, "election-candidate", cell.Addr, "/el/k", "child:1", "300ms")
	gen1, _ := strconv.ParseInt(strings.Fields(leader.Expect("leader", 20*time.Second))[1], 10, 64)

	e3, _ := NewElection(s3, "/el/k")
	obs, err := e3.Observe(ctx, ObserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close(ctx)
	if info := nextLeader(t, obs); string(info.Address) != "child:1" || info.LockGeneration != gen1 {
		t.Fatalf("first observation %+v, want child:1 at %d", info, gen1)
	}
	e2, _ := NewElection(s2, "/el/k")
	won := make(chan *Leadership, 1)
	go func() {
		l, err := e2.Campaign(ctx, []byte("survivor:2"), CampaignOptions{LockDelay: client.NoLockDelay})
		if err != nil {
			t.Error(err)
		}
		won <- l
	}()
	leader.Kill()
	killed := time.Now()
	if info := nextLeader(t, obs); info.Leads() || string(info.Last) != "child:1" {
		t.Fatalf("after the kill: %+v, want no leader, last child:1", info)
	}
	awaitLeader(t, obs, "survivor:2")
	select {
	case l := <-won:
		if l == nil || l.LockGeneration() <= gen1 {
			t.Fatalf("takeover leadership %+v", l)
		}
		t.Logf("takeover %v after the kill (lease %v, lock-delay 300ms)", time.Since(killed).Round(time.Millisecond), coordLease)
	case <-time.After(coordTakeover):
		t.Fatal("the candidate did not lead after the leader was killed")
	}
}

// TestElectionArguments: bad input is INVALID_ARGUMENT and touches
// nothing.
func TestElectionArguments(t *testing.T) {
	cell := coordCell(t)
	s := coordSession(t, cell.Addr)
	ctx := coordCtx(t, 20*time.Second)
	for _, p := range []string{"", "rel", "/", "/a/", "/a b"} {
		if _, err := NewElection(s, p); !client.IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
			t.Errorf("NewElection(%q): %v", p, err)
		}
	}
	if _, err := NewElection(nil, "/x"); !client.IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
		t.Errorf("NewElection(nil): %v", err)
	}
	e, _ := NewElection(s, "/args")
	for _, tc := range []struct {
		addr []byte
		opts CampaignOptions
	}{
		{nil, CampaignOptions{}},
		{bytes.Repeat([]byte("x"), chubby.MAX_CONTENT_BYTES+1), CampaignOptions{}},
		{[]byte("a"), CampaignOptions{Wait: -time.Second}},
		{[]byte("a"), CampaignOptions{LockDelay: 2 * time.Minute}},
		{[]byte("a"), CampaignOptions{LockDelay: -2}},
	} {
		if _, err := e.Campaign(ctx, tc.addr, tc.opts); !client.IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
			t.Errorf("Campaign(%d bytes, %+v): %v", len(tc.addr), tc.opts, err)
		}
	}
	if _, err := e.Observe(ctx, ObserveOptions{Recheck: -1}); !client.IsCode(err, chubby.ErrorCode_INVALID_ARGUMENT) {
		t.Errorf("Observe with a negative recheck: %v", err)
	}
	if _, err := e.Leader(ctx); !client.IsCode(err, chubby.ErrorCode_NOT_FOUND) {
		t.Errorf("Leader of a file no bad campaign made: %v, want NOT_FOUND", err)
	}
}
