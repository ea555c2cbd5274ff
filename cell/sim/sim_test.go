package sim

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chubbygo/chubby/replica/vr"
)

var (
	flagSeed  = flag.Uint64("seed", 0, "run only this seed (replay a failure)")
	flagSeeds = flag.Int("seeds", 0, "number of seeds to run (default: defaultSeeds, or $CHUBBY_SIM_SEEDS)")
	flagBase  = flag.Uint64("seedbase", 1, "first seed of the range")
	flagTrace = flag.Bool("simtrace", false, "print every event of a -seed run")
)

func seedCount() int {
	if *flagSeeds > 0 {
		return *flagSeeds
	}
	if s := os.Getenv("CHUBBY_SIM_SEEDS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	if testing.Short() {
		return defaultSeeds / 10
	}
	return defaultSeeds
}

func replay(seed uint64) string {
	return fmt.Sprintf("go test ./cell/sim -run TestSim -seed=%d -v", seed)
}

// TestSim runs the simulator over many seeds, in parallel on the
// available CPUs. A failing seed prints the command that replays it.
func TestSim(t *testing.T) {
	if *flagSeed != 0 {
		opt := Options{Seed: *flagSeed}
		if *flagTrace {
			opt.Trace = os.Stdout
		}
		res := Run(opt)
		t.Log(res.String())
		if res.Err != nil {
			t.Fatalf("seed %d failed; replay: %s", *flagSeed, replay(*flagSeed))
		}
		return
	}
	n := seedCount()
	start := time.Now()
	var next atomic.Uint64
	next.Store(*flagBase)
	end := *flagBase + uint64(n)
	var mu sync.Mutex
	var failed []uint64
	var sum Result
	var maxSettle time.Duration
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seed := next.Add(1) - 1
				if seed >= end {
					return
				}
				res := Run(Options{Seed: seed})
				mu.Lock()
				sum.add(res)
				maxSettle = max(maxSettle, res.Settle)
				if res.Err != nil {
					failed = append(failed, seed)
					t.Errorf("seed %d: %v\nreplay: %s", seed, res.Err, replay(seed))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d seeds [%d, %d) in %v: %d client ops (%d cached reads, %d ambiguous), %d view changes (%d epochs carried on by their primary), %d crashes, %d disk failures, %d pauses, %d snapshot installs, %d sessions (%d expired, %d jeopardies), %d lock beliefs, %d timestamps calls (%d timestamps), slowest settle %v; failed: %v",
		n, *flagBase, end, time.Since(start).Round(time.Millisecond), sum.Ops, sum.CachedReads, sum.Ambiguous, sum.ViewChanges, sum.CarriedOn,
		sum.Crashes, sum.DiskFails, sum.Pauses, sum.Snapshots, sum.Sessions, sum.Expired, sum.Jeopardy, sum.Beliefs, sum.TsCalls, sum.Timestamps, maxSettle, failed)
}

// add sums the counters of r into s.
func (s *Result) add(r Result) {
	s.Ops += r.Ops
	s.CachedReads += r.CachedReads
	s.Ambiguous += r.Ambiguous
	s.ViewChanges += r.ViewChanges
	s.CarriedOn += r.CarriedOn
	s.Crashes += r.Crashes
	s.DiskFails += r.DiskFails
	s.Pauses += r.Pauses
	s.Snapshots += r.Snapshots
	s.Sessions += r.Sessions
	s.Expired += r.Expired
	s.Jeopardy += r.Jeopardy
	s.Beliefs += r.Beliefs
	s.TsCalls += r.TsCalls
	s.Timestamps += r.Timestamps
}

// regressions are seeds that once failed, with the bug each found. They
// run in every `go test`. (A seed replays the same scenario only as long
// as the simulator draws the same random numbers, so a later change to the
// simulator may turn one into an ordinary seed; they stay as cheap
// coverage.)
var regressions = []struct {
	seed       uint64
	bug        string
	noReconfig bool // found before reconfiguration existed: replayed without it
	forger     bool // found by TestSimForger: replayed as it runs it
}{
	{10, "a StartView delivered late said the primary's log ended before entries the backup had verified since; the backup cut verified entries (invariant panic)", true, false},
	{236, "a snapshot answering the new primary's log fetch arrived after its view change was over; the core reported it as malformed instead of ignoring it", true, false},
	{569214, "a replica recovering in view v (holding entries of view v) crashed, restarted in view change for v and sent DoViewChange(v) ending with an entry of view v; validation refused it as impossible (found after 69,214 clean seeds of the long run)", true, false},
	{540, "a PrepareOK of view v queued before the replica moved to view v+1 went out after v+1 was on disk: an acknowledgement of an older view (found by the driver-level check that every message's view is on disk)", true, false},
	{454, "same as 540, replica 1 acknowledging view 2 after moving to 3", true, false},
	{3000881, "the primary's disk went slow while its writes were async: each queued write paid the slow fsync on its own, a StartView waited behind seconds of them and the old primary never caught up (the simulator's disk writer now joins queued writes as the driver's does)", true, false},
	{3000729, "same as 3000881, replica 2 recovering behind the queued writes", true, false},
	{218, "after StartView the primary's optimistic next index stayed past a recovering backup's log and nothing was ever resent to it; commits stalled behind MaxUncommittedEntries (liveness)", true, false},
	// Found by the simulator once it ran the shipped driver, master tables
	// and client lease rules (sessions that expire, caches, partitions
	// with clients, failing disks, pauses):
	{5, "an expired session whose EndSession was refused at once (the uncommitted window full) was unmarked and due again at the same instant: the master spun (the simulator's master now retries after a pause, as the cell does)", true, false},
	{1372, "same as 5 for a lock-delay Tick refused at once", true, false},
	{12, "a proposal made from inside a driver callback reached the driver while it waited for its disk", true, false},
	{35, "the driver answered the proposals it failed in map order: a seed did not replay the same (Driver.failPendingUpTo now goes in index order)", true, false},
	{34, "after a failed write the simulated disk still stored later writes, leaving a gap in the log (a failed disk now stores nothing more)", true, false},
	{62, "same as 34", true, false},
	{408, "masters went on expiring sessions while the run ended, so a backup had not heard the last commit at the final check (the run now stops proposals first)", true, false},
	// Found once the simulator injected reconfigurations:
	{67, "a voter change committed by a majority of the old voters only; the new voters' majority did not hold it and the new epoch's first view could never form (a voter change now commits on both majorities)", false, false},
	{111, "a primary that removed itself left the new epoch without anyone who knew the change had committed (it now announces the epoch to the new voters)", false, false},
	{131, "invalidation seqs of master epochs past 2^31 collided with older masters' and the clients' highest-ack rule never acknowledged the new master (acks now name their epoch; a flush resets the ack)", false, false},
	{22736, "a voter of the old epoch that missed the announcement probed for ever (a replica of a newer epoch now answers a probe from an older one)", false, false},
	{25118, "two replicas removed from the cell hinted at each other as the primary and bounced clients between them (a hint now names only a primary heard from lately)", false, false},
	{3107, "same as 25118 with a removed primary", false, false},
	{29950, "the lock checker counted a grant that reached a client in jeopardy as a belief (it starts the belief only when the session is safe)", false, false},
	{118225, "a write torn after its entries and before its hard state (a backup that missed StartView took a Prepare of the new view as its disk failed) left entries of a view the disk did not reach, and the replica refused to restart (they are dropped now)", false, false},
	{196575, "a replica that held a new configuration only in a snapshot could not name the entry that opened the epoch, so the others never learned the change had committed (the configuration now carries its opening entry)", false, false},
	{171372, "client 0's session expired during its setup just as the faults ended, and it finished, so every other client waited for the files for ever (client 0 now finishes its setup first)", false, false},
	{11722, "a voter of the new epoch whose log lacked the entry that opened it (slow disk) could learn of the epoch only from the epoch's primary: it granted no probe and could not lead, so the view change to a view it was due to lead never completed (it now asks the other voters for their committed log)", false, false},
	{12878, "same as 11722 with a voter that had followed the new epoch's primary before its log held the change, and needed a snapshot", false, false},
	// Found once the simulator sent blocking Acquires and checked, at the
	// end, that no lock is held by a session whose client was not told
	// it got it:
	{26, "a resend of a blocking Acquire whose request was still on its way to the log was refused LOCK_HELD, and the request was then granted to nobody who knew (the resend is now told to send again)", false, false},
	{136, "a blocking Acquire whose withdrawal did not commit (its master had lost its quorum) was answered TIMED_OUT, and its request was granted later (it is now answered UNAVAILABLE)", false, false},
	{2183, "an attempt of a blocking Acquire delivered after its request had been answered queued the request again, granted to nobody (the master now answers such a stale attempt from the state)", false, false},
	{2879, "a stale Acquire attempt was answered TIMED_OUT from a read without the master lease while its handle held the lock (it now waits for the lease)", false, false},
	{18405, "the simulated client kept a session after a call was answered SESSION_EXPIRED, and held its lock for ever (it now ends the session, as the library does)", false, false},
	{19507, "a resend arriving while the parked call's request was being withdrawn queued it again (the call now stays in the table until its answer is recorded)", false, false},
	// Found once the simulated clients ran the library's KeepAlive loop
	// (client/keepalive):
	{7163, "a replica that lost mastership and won it back in a later epoch still held an earlier term's EndSession as uncertain: a live session's Acquire was refused SESSION_EXPIRED (\"being ended\") while its queued wait was later granted (a new epoch now releases earlier epochs' holds)", false, false},
	{1307, "a voter changing to a view nobody led followed a Commit of that view whose sender was forged as its primary, then only probed for the next view, which nobody granted, and never rejoined the cell (a Commit of a view the replica is changing to is not followed: it waits for StartView, and its StartViewChange lets the primary it is stranded ahead of follow it)", false, true},
	{1277, "a client whose known members, following the cell's configuration, had all left the cell but one kept asking only that one, which refused (a removed replica knows no master), and never found the cell again (a locate round in which no member names a master now asks the seeds)", false, false},
	// Found once an operator's removal was answered by the cell's rule and
	// checked against the final configuration:
	{4780, "an operator's removal of replica 4 was cut by a view change, and the next primary's own removal of replica 4, not retiring it, committed at the same index; the operator was told \"removed\" (retired), though the autopilot could take it back (RemovalOutcome now asks that the replica be retired too)", false, false},
}

func TestSimRegressions(t *testing.T) {
	for _, r := range regressions {
		t.Run(fmt.Sprint(r.seed), func(t *testing.T) {
			o := Options{Seed: r.seed, NoReconfig: r.noReconfig}
			if r.forger {
				o.Forger, o.NoFaults = true, r.seed%2 == 0 // as TestSimForger runs it
			}
			if res := Run(o); res.Err != nil {
				t.Fatalf("regression seed %d (%s) fails again: %v\nreplay: %s", r.seed, r.bug, res.Err, replay(r.seed))
			}
		})
	}
}

// TestSimDeterministic checks that a seed replays exactly: the same
// events in the same order.
func TestSimDeterministic(t *testing.T) {
	for seed := uint64(30); seed < 40; seed++ {
		if a, b := Run(Options{Seed: seed}), Run(Options{Seed: seed}); a.String() != b.String() {
			t.Fatalf("seed %d ran differently twice:\n%s\n%s", seed, a, b)
		}
	}
	for _, seed := range []uint64{3, 77} {
		var a, b bytes.Buffer
		ra := Run(Options{Seed: seed, Trace: &a})
		rb := Run(Options{Seed: seed, Trace: &b})
		if ra.String() != rb.String() || !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatalf("seed %d ran differently twice:\n%s\n%s", seed, ra, rb)
		}
	}
}

// TestFailoverLatency kills the primary of a healthy cell under load and
// reports, over many seeds, the virtual time from the kill to the first
// client operation that started after it and completed (calls time out
// after 100–200 ms and follow NOT_MASTER hints; sessions run the library's
// KeepAlive loop and master watch).
func TestFailoverLatency(t *testing.T) {
	n := 100
	if testing.Short() {
		n = 10
	}
	var ds []time.Duration
	for seed := uint64(1); seed <= uint64(n); seed++ {
		res := Run(Options{Seed: seed, NoFaults: true, NoReconfig: true, NoBlockingAcquire: true, FaultTime: 3 * time.Second, KillPrimaryAt: time.Second})
		if res.Err != nil {
			t.Fatalf("seed %d: %v", seed, res.Err)
		}
		if res.Failover == 0 {
			t.Fatalf("seed %d: no operation completed after the kill", seed)
		}
		ds = append(ds, res.Failover)
		if res.Failover > time.Second {
			t.Logf("seed %d: failover %v", seed, res.Failover)
		}
	}
	slices.Sort(ds)
	med, p99, worst := ds[len(ds)/2], ds[len(ds)*99/100], ds[len(ds)-1]
	t.Logf("failover over %d seeds: median %v, p99 %v, max %v", n, med, p99, worst)
	if med > 500*time.Millisecond || worst > 1500*time.Millisecond {
		t.Errorf("failover median %v (target < 500 ms), max %v (target < 1.5 s)", med, worst)
	}
}

// TestSimStalls: CPU stalls alone — replicas' loops frozen for up to about
// a second, the primary's half the time, under the clients' load — change
// no view, in any seed: patience on silence, and a replica's own stall is
// not taken for its primary's. (The checkers run as in TestSim.)
func TestSimStalls(t *testing.T) {
	n := defaultSeeds / 10
	if testing.Short() {
		n = 20
	}
	def := vr.DefaultConfig()
	longest := def.ViewChangeTimeout - 3*def.HeartbeatInterval
	stalls := 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		res := Run(Options{Seed: seed, StallsOnly: longest, NoReconfig: true, FaultTime: 4 * time.Second})
		if res.Err != nil {
			t.Fatalf("seed %d: %v", seed, res.Err)
		}
		if res.ViewChanges != 0 {
			t.Fatalf("seed %d: %d view changes with stalls of at most %v (%d stalls): replay with -seed=%d and StallsOnly", seed, res.ViewChanges, longest, res.Stalls, seed)
		}
		stalls += res.Stalls
	}
	t.Logf("%d seeds, %d stalls of 0.1–%v: no view change", n, stalls, longest)
}

// TestSimForger: among honest replicas (with the usual faults in half the
// seeds), a sender that replays, re-addresses and forges the views,
// epochs, senders and grants of replica messages (forger.go). Once it
// stops, every checker holds as in TestSim: the cell serves every client
// within SettleTime (three view-change timeouts, two session leases and
// 2 s after the faults end) and converges. Failing seeds replay with
// -seed and Forger.
func TestSimForger(t *testing.T) {
	n := defaultSeeds / 5
	if testing.Short() {
		n = 40
	}
	if s := os.Getenv("CHUBBY_SIM_FORGER_SEEDS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	forged := 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		res := Run(Options{Seed: seed, Forger: true, NoFaults: seed%2 == 0})
		if res.Err != nil {
			t.Fatalf("seed %d (faults %v): %v", seed, seed%2 == 1, res.Err)
		}
		forged += res.Forged
	}
	t.Logf("%d seeds, %d forged messages: the cell recovered in every one", n, forged)
}
