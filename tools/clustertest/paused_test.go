package clustertest

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// TestPausedMasterClientsMove: the master is paused (SIGSTOP: a stalled
// VM, a long GC) right after two clients made their sessions — a lock
// holder, and a contender whose Acquire is parked at the master. A paused
// process refuses nothing and resets nothing, so before the master watch
// both sessions found the new master only when their local leases ran out
// (jeopardy, a lease after the pause) and the parked Acquire stayed at the
// paused master for its whole wait. Now:
//
//   - both sessions reach the new master within lease/2 of a replica
//     naming it (the watch answers as the new view starts; before: about
//     a lease after the pause, which is more than lease/2 after the new
//     view — the view change on silence takes about a second);
//   - the contender's Acquire is resent there and queued once: the
//     holder's Release grants it within lease/2, and once granted the
//     handle waits for nothing;
//   - the old master, resumed, rejoins as a backup under the one new
//     master (the cell converges) within 30 s.
//
// Every bound derives from the configured lease (6 s here), so a loaded
// machine only eats into the margin.
func TestPausedMasterClientsMove(t *testing.T) {
	if testing.Short() {
		t.Skip("starts chubbyd processes")
	}
	const lease = 6 * time.Second
	pc := startProcCellWith(t, 3, procOptions{Args: []string{"--lease", lease.String()}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	connect := func(name string) *client.Client {
		c, err := client.Connect(ctx, client.Config{Addrs: pc.clients, ClientName: name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	probe := connect("probe")
	ps := pc.newSession(t, probe)
	pc.steadyMaster(t, probe, ps)
	ps.Close(ctx)

	// Fresh sessions: their first KeepAlives are parked at the master for
	// most of a lease, which is what used to keep them there.
	hc, cc := connect("holder"), connect("contender")
	hs, cs := pc.newSession(t, hc), pc.newSession(t, cc)
	open := func(s *client.Session) *client.Handle {
		h, err := s.Open(ctx, "/lock", client.OpenOptions{Create: chubby.CreateMode_OPEN_OR_CREATE})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	hh, ch := open(hs), open(cs)
	if _, err := hh.Acquire(ctx, chubby.LockMode_EXCLUSIVE, 10*time.Second, client.LockOptions{}); err != nil {
		t.Fatal(err)
	}
	waiting := ch.AcquireAsync(ctx, chubby.LockMode_EXCLUSIVE, time.Minute, client.LockOptions{})
	time.Sleep(200 * time.Millisecond) // parked at the master
	old := pc.steadyMaster(t, hc, hs)
	oldEpoch := hs.Epoch()
	if cs.Epoch() != oldEpoch {
		t.Fatalf("the contender's session is at epoch %d, the holder's at %d", cs.Epoch(), oldEpoch)
	}

	pid := pc.pid(old)
	named := pc.watchMaster(old)
	paused := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer resume()
	t.Logf("replica %d (the master, epoch %d) paused", old+1, oldEpoch)

	moved := func(s *client.Session) time.Time {
		for deadline := time.Now().Add(2 * lease); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if s.Epoch() > oldEpoch && s.State() == client.StateSafe {
				return time.Now()
			}
		}
		t.Fatalf("session %d still at epoch %d (%v) two leases after the pause", s.ID(), s.Epoch(), s.State())
		return time.Time{}
	}
	hMoved, cMoved := moved(hs), moved(cs)
	view, _ := named.stop()
	if view.IsZero() {
		t.Fatal("no replica named a new master after the pause")
	}
	// The new master's "master" line comes after it withdrew the Acquire
	// the old one left waiting — a change, held until every recovered
	// caching session flushed on a KeepAlive: it waits for the clients.
	serving := pc.servingSince(paused)
	t.Logf("a new master named %v after the pause (its failover duties done %v after); the holder's session there %v after it was named, the contender's %v",
		view.Sub(paused).Round(time.Millisecond), sinceOr(serving, view).Round(time.Millisecond),
		hMoved.Sub(view).Round(time.Millisecond), cMoved.Sub(view).Round(time.Millisecond))
	for who, at := range map[string]time.Time{"holder": hMoved, "contender": cMoved} {
		if late := at.Sub(view); late > lease/2 {
			t.Errorf("the %s's session reached the new master %v after it was named (bound lease/2 = %v)", who, late, lease/2)
		}
	}

	released := time.Now()
	if err := hh.Release(ctx); err != nil {
		t.Fatalf("the holder's Release at the new master: %v", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, lease/2)
	seq, err := waiting.Wait(wctx)
	wcancel()
	if err != nil {
		t.Fatalf("the contender's Acquire, %v after the holder released: %v", time.Since(released).Round(time.Millisecond), err)
	}
	t.Logf("the contender's resent Acquire granted %v after the release (generation %d)",
		time.Since(released).Round(time.Millisecond), seq.GetLockGeneration())
	got, err := ch.GetSequencer(ctx)
	if err != nil || got.GetLockGeneration() != seq.GetLockGeneration() {
		t.Fatalf("the contender's handle after the grant: %+v, %v (granted %+v)", got, err, seq)
	}
	// Granted once: the handle can wait again (no request of it left in
	// the queue), and a second contender is granted by its release.
	if err := ch.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Acquire(ctx, chubby.LockMode_EXCLUSIVE, lease, client.LockOptions{}); err != nil {
		t.Fatalf("the contender's handle cannot take the lock again: %v", err)
	}

	resume()
	start := time.Now()
	ps = pc.newSession(t, probe)
	if m := pc.steadyMaster(t, probe, ps); m == old {
		t.Fatalf("the resumed replica %d is master again", old+1)
	}
	if err := pc.rejoined(ctx, old); err != nil {
		t.Fatal(err)
	}
	t.Logf("cell converged %v after the resume", time.Since(start).Round(time.Millisecond))
}

// rejoined waits (at most 30 s) until replica i names the master every
// other replica names, and reports itself a normal member.
func (pc *procCell) rejoined(ctx context.Context, i int) error {
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		r, err := pc.getMaster(ctx, i)
		if err != nil {
			last = err.Error()
			continue
		}
		agree := true
		for j := range pc.clients {
			if j == i {
				continue
			}
			o, err := pc.getMaster(ctx, j)
			if err != nil || o.MasterAddress != r.MasterAddress || o.Epoch != r.Epoch {
				agree = false
			}
		}
		if agree {
			return nil
		}
		last = fmt.Sprintf("names %s at epoch %d, others differ", r.MasterAddress, r.Epoch)
	}
	return fmt.Errorf("replica %d did not rejoin within 30 s: %s", i+1, last)
}

// TestPausedSoloMasterKeepsSessions: the master of a one-replica cell is
// paused (SIGSTOP: a starved process, a stalled VM) for longer than the
// lease while eight clients' sessions have KeepAlives parked at it. The
// clients did their part — every one had a KeepAlive waiting for the
// master's answer — so the master, resumed, must answer them and end none
// of their sessions: its expiry timer and the parked calls' answer timers
// all come due at once after the pause, and before, whichever goroutine
// ran first decided, so some sessions ended (all eight workers of
// client/recipe's TestSemaphoreBound once, under -race beside a CPU hog,
// where the cell and its clients share one starved process).
//
// Bounds derive from the lease: every session is safe again, at the same
// epoch, within two leases of the resume, and none has ended.
func TestPausedSoloMasterKeepsSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a chubbyd process")
	}
	const lease, sessions = 3 * time.Second, 8
	pc := startProcCellWith(t, 1, procOptions{Args: []string{"--lease", lease.String()}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cs []*client.Client
	var ss []*client.Session
	for i := range sessions {
		c, err := client.Connect(ctx, client.Config{Addrs: pc.clients, ClientName: fmt.Sprintf("s%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs, ss = append(cs, c), append(ss, pc.newSession(t, c))
	}
	pc.steadyMaster(t, cs[0], ss[0])
	// Two leases of ordinary KeepAlives: every session has had an answer
	// and has its next KeepAlive parked.
	time.Sleep(2 * lease)
	epoch := ss[0].Epoch()
	for _, s := range ss {
		if s.State() != client.StateSafe || s.Epoch() != epoch {
			t.Fatalf("session %d before the pause: %v at epoch %d (want safe at %d)", s.ID(), s.State(), s.Epoch(), epoch)
		}
	}
	pid := pc.pid(0)
	pause := lease + lease/2
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	for _, s := range ss {
		for s.State() != client.StateSafe && s.State() != client.StateExpired && time.Since(resumed) < 2*lease {
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Logf("paused %v (lease %v); every session back to safe or ended %v after the resume", pause, lease, time.Since(resumed).Round(time.Millisecond))
	for _, s := range ss {
		if st := s.State(); st != client.StateSafe || s.Epoch() != epoch {
			t.Errorf("session %d %v at epoch %d two leases after the resume (want safe at %d)", s.ID(), st, s.Epoch(), epoch)
		}
	}
	for _, s := range ss {
		h, err := s.Open(ctx, "/", client.OpenOptions{})
		if err != nil {
			t.Errorf("session %d after the resume: %v", s.ID(), err)
			continue
		}
		h.Close(ctx)
	}
}
