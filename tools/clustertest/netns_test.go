//go:build linux

package clustertest

// TestNetns runs a five-replica cell of real chubbyd processes, each in its
// own network namespace with its own address, and client agents (the Go
// client library, in namespaces of their own), and breaks it in the ways a
// lock service must survive. Every trial sets the same scene: C1 holds
// /lock (lock-delay 1 s), R1 reads /f from its cache every 10 ms, the lease
// is 3 s, and the fault comes 1.5 s after a renewal of C1's lease. Then:
//
//	partition      {master, C1, R1} | {the other four, C2, W}; C2 asks for
//	               /lock, W writes /f; healed after C2 has the lock (or a
//	               bound) and W's write is answered, plus 1.5 s
//	paused-master  SIGSTOP of the master for a lease + 2 s, then SIGCONT
//	               (see runPausedMaster for the cut that comes with it)
//	disk-full      prlimit --fsize=1MiB on the master while D writes 32 KiB
//	               files through it; C2 and W start after the disk failed;
//	               the failed replica is restarted on its data
//	kill9-control  kill -9 of the master, restarted on its data: the same
//	               checks, which pass today
//
// Each scenario checks what the users of a lock service rely on:
//
//	(a) a lock holder cut off from the cell leaves SAFE within one lease:
//	    it must not go on trusting renewals from a master that lost the cell;
//	(b) no overlap: a second client is granted the lock only after the last
//	    instant the first was SAFE believing it held it;
//	(c) no stale cached read: once a write is acknowledged, a caching reader
//	    never returns the old value;
//	(d) nothing acknowledged is lost, and the history of reads and writes is
//	    linearizable (porcupine, with the agents' timestamps);
//
// and, where they apply: (belief) a C1 that is SAFE and believes it holds
// /lock is right, per CheckSequencer; (old master) after SIGCONT the old
// master neither names itself master nor extends a lease; (failover,
// health, restart) a replica whose disk fails gives way within 5 s, exits
// non-zero or fails /healthz, and starts again on its data once the disk
// is fine. Each trial ends with a one-line summary of its checks.
//
// One trial of each by default (about a minute in all); CHUBBY_NETNS_TRIALS=N
// runs N of each and logs medians. Needs root and iproute2 (skips
// otherwise); the disk scenario needs prlimit.

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const (
	netnsLease     = 3 * time.Second
	netnsLockDelay = time.Second
	// jeopardySlack is what check (a) allows past one lease. The agent's
	// jeopardy instant is its local lease end itself (the send time of the
	// last answered KeepAlive plus the lease, read through
	// Session.LeaseRemaining), not a sample of it, and every KeepAlive
	// answered before the fault was sent before the fault instant we
	// record (taken once the fault is in place). So the only error is in
	// reading two wall clocks of one machine, microseconds; 100 ms is
	// generous and far below what a renewal by a master that lost the
	// cell adds (a whole lease per renewal).
	jeopardySlack = 100 * time.Millisecond
)

// ns is a duration from Unix nanoseconds.
func ns(d int64) time.Duration { return time.Duration(d) }

func TestNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five replicas and six agents in network namespaces")
	}
	requireNetns(t)
	removeStaleNamespaces(t)
	trials := 1
	if s := os.Getenv("CHUBBY_NETNS_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CHUBBY_NETNS_TRIALS=%q: want a number >= 1", s)
		}
		trials = n
	}
	bin := buildChubbyd(t)
	scenarios := []struct {
		name string
		run  func(*nsTrial)
		late bool // C2 and W start after the fault (see newTrial)
	}{
		{"partition", runPartition, false},
		{"paused-master", runPausedMaster, false},
		{"disk-full", runDiskFull, true},
		{"kill9-control", runKill9, false},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			var results []map[string]time.Duration
			for k := range trials {
				t.Run(fmt.Sprintf("trial%d", k+1), func(t *testing.T) {
					tr := newTrial(t, bin, sc.late)
					defer func() { results = append(results, tr.metrics) }()
					sc.run(tr)
				})
			}
			if trials > 1 {
				logMedians(t, results)
			}
		})
	}
}

func logMedians(t *testing.T, results []map[string]time.Duration) {
	by := map[string][]time.Duration{}
	for _, m := range results {
		for k, v := range m {
			by[k] = append(by[k], v)
		}
	}
	var keys []string
	for k := range by {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := by[k]
		slices.Sort(v)
		t.Logf("%-28s median %9v  min %9v  max %9v  (%d trials)", k, v[len(v)/2].Round(time.Millisecond),
			v[0].Round(time.Millisecond), v[len(v)-1].Round(time.Millisecond), len(v))
	}
}

// nsTrial is one trial of a scenario: a fresh network, cell and agents.
type nsTrial struct {
	t     *testing.T
	c     *nsCell
	probe *agent // no session: GetMaster, GetStatus, /healthz
	c1    *agent // holds /lock before the fault
	r1    *agent // reads /f in a loop, cached
	c2    *role  // asks for /lock after the fault
	w     *role  // writes /f
	v     *agent // the verifier: a fresh session for the final reads

	start    time.Time
	m        int   // the master at the fault (0-based)
	epoch    int64 // its epoch
	fault    int64 // when the fault was in place (Unix ns)
	faultEnd int64 // when it was undone (heal, SIGCONT, restart)
	// minority is the master's side while a partition is in place: a
	// replacement agent is cut off from it too.
	minority []*nsHost

	metrics map[string]time.Duration
	// paths whose reads and writes go into the linearizability check, and
	// agents beyond R1, W's and V whose operations on them do
	paths []string
	extra []*agent
	// checks made, in order, with their verdicts (the summary)
	checks []string
}

// role is a part an agent plays (C2, W). If the agent's session expires
// before it has done its part — a finding of its own, which the trial
// logs — a fresh agent takes the role, so that the checks that need the
// part done can still be made.
type role struct {
	name   string
	agents []*agent
}

func (r *role) cur() *agent { return r.agents[len(r.agents)-1] }

// all returns the events of every agent of the role, in time order.
func (r *role) all() []agentEvent {
	var out []agentEvent
	for _, a := range r.agents {
		out = append(out, a.all()...)
	}
	slices.SortStableFunc(out, func(a, b agentEvent) int { return int(a.T - b.T) })
	return out
}

// replace starts a fresh agent for the role (on the majority side of a
// partition in place).
func (tr *nsTrial) replace(r *role, why string) *agent {
	name := fmt.Sprintf("%s-%d", r.name, len(r.agents)+1)
	a := tr.c.startAgentWith(name, false, func(h *nsHost) {
		if tr.minority != nil {
			if err := tr.c.net.partition(tr.minority, []*nsHost{h}); err != nil {
				tr.t.Fatal(err)
			}
		}
	})
	tr.t.Logf("  %s (%s): agent %s takes %s's role", why, tr.rel(now()), name, strings.ToUpper(r.name))
	r.agents = append(r.agents, a)
	return a
}

func lockDelayMs() int64 { return netnsLockDelay.Milliseconds() }

// fail reports a failed check (a, b, c, d, belief, old master, health,
// failover, restart, liveness) and records it for the trial's summary.
func (tr *nsTrial) fail(check, format string, args ...any) {
	tr.t.Helper()
	tr.t.Errorf("check ("+check+") FAILED: "+format, args...)
	tr.checks = append(tr.checks, check+" FAILED")
}

// ok records a check that passed, for the trial's summary.
func (tr *nsTrial) ok(check string) { tr.checks = append(tr.checks, check+" ok") }

// newTrial starts the cell and the agents, and sets the scene: W wrote v0
// to /f, C1 holds /lock, R1 reads /f from its cache.
//
// With late, C2 and W start only after the fault (contend), so that their
// sessions are not the old master's: the disk scenario, where the old
// master goes on renewing every session attached to it, needs a writer
// whose write the new master acknowledges while R1 still trusts the old.
func newTrial(t *testing.T, bin string, late bool) *nsTrial {
	tr := &nsTrial{t: t, start: time.Now(), metrics: map[string]time.Duration{}, paths: []string{"/f"},
		c2: &role{name: "c2"}, w: &role{name: "w"}}
	t.Cleanup(func() {
		tr.metrics["trial"] = time.Since(tr.start)
		t.Logf("summary (%v): %s", time.Since(tr.start).Round(100*time.Millisecond), strings.Join(tr.checks, ", "))
	})
	tr.c = startNsCell(t, bin, 5, netnsLease)
	tr.probe = tr.c.startAgent("probe", true)
	if _, _, ok := tr.c.findMaster(tr.probe, 30*time.Second); !ok {
		t.Fatal("no master within 30 s of starting the cell")
	}
	tr.c1 = tr.c.startAgent("c1", false)
	var w *agent
	if late {
		w = tr.c.startAgent("w0", false) // writes v0 and leaves
	} else {
		tr.c2.agents = []*agent{tr.c.startAgent("c2", false)}
		tr.w.agents = []*agent{tr.c.startAgent("w", false)}
		w = tr.w.cur()
	}
	tr.r1 = tr.c.startAgent("r1", false)

	w.send("write /f v0")
	if e := w.mustWait(t, 30*time.Second, "write of v0", writeOf("v0")); e.Ev != "write" {
		t.Fatalf("write of v0 failed: %s", e.Err)
	}
	if late {
		w.stop()
		tr.w.agents = nil
		tr.extra = append(tr.extra, w) // its write is in the history
	}
	tr.c1.send("acquire /lock 10000 %d", lockDelayMs())
	if e := tr.c1.mustWait(t, 30*time.Second, "acquire", acquireDone); e.Ev != "acquired" {
		t.Fatalf("C1 could not take /lock: %s", e.Err)
	}
	tr.r1.send("read-loop /f 10")
	tr.r1.mustWait(t, 30*time.Second, "cached read of v0", func(e agentEvent) bool {
		return e.Ev == "read" && e.Val == "v0" && e.Cached
	})
	var ok bool
	if tr.m, tr.epoch, ok = tr.c.findMaster(tr.probe, 30*time.Second); !ok {
		t.Fatal("no master")
	}
	tr.probe.send("master-loop 20")
	// The fault comes 1.5 s after a renewal of C1's lease: C1's KeepAlive
	// in flight at the fault was sent then. Where a session's KeepAlive
	// cycle stands at a fault decides when it goes into jeopardy (its
	// lease end is the send time + the lease); fixing it for C1 makes each
	// trial the same for the lock holder.
	since := now()
	tr.c1.mustWait(t, 2*netnsLease, "a renewal of C1's lease", func(e agentEvent) bool { return e.Ev == "lease" && e.T > since })
	time.Sleep(1500 * time.Millisecond)
	t.Logf("set up in %v: master is replica %d (epoch %d); C1 holds /lock; R1 reads /f=v0 from its cache",
		time.Since(tr.start).Round(time.Millisecond), tr.m+1, tr.epoch)
	return tr
}

func writeOf(val string) func(agentEvent) bool {
	return func(e agentEvent) bool { return (e.Ev == "write" || e.Ev == "write-error") && e.Val == val }
}

func acquireDone(e agentEvent) bool { return e.Ev == "acquired" || e.Ev == "acquire-error" }

func sessionEnded(e agentEvent) bool {
	return e.Ev == "state" && (e.State == "expired" || e.State == "closed")
}

// rel formats a Unix-ns instant relative to the fault.
func (tr *nsTrial) rel(at int64) string {
	if at == 0 {
		return "never"
	}
	return fmt.Sprintf("%+.3fs", ns(at-tr.fault).Seconds())
}

// wValue is the value the k-th agent of W's role writes after the fault.
func wValue(k int) string { return fmt.Sprintf("v1.%d", k) }

// contend is what happens on the far side once the fault is in place: C2
// asks for the lock; W writes a new value once its session has reached a
// newer master (a lease renewed in a later epoch; at most two leases), so
// that the write is acknowledged as early as the cell allows rather than
// after W's call to the old master times out.
func (tr *nsTrial) contend() {
	if len(tr.c2.agents) == 0 { // late
		tr.replace(tr.c2, "after the fault")
	}
	tr.c2.cur().send("acquire /lock 60000 %d", lockDelayMs())
	if len(tr.w.agents) == 0 {
		tr.replace(tr.w, "after the fault")
	} else {
		e, _ := tr.w.cur().wait(2*netnsLease, func(e agentEvent) bool {
			return e.Ev == "lease" && e.Epoch > tr.epoch || sessionEnded(e)
		})
		if sessionEnded(e) {
			tr.replace(tr.w, "W's session ended")
		}
	}
	tr.w.cur().send("write /f %s", wValue(len(tr.w.agents)))
}

// observe waits (bounded) for W's write to be answered and for C2 to get
// the lock (an agent whose session expired meanwhile is replaced), then
// lets R1 read on for a while.
func (tr *nsTrial) observe() {
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		e, ok := tr.w.cur().wait(time.Until(deadline), writeOf(wValue(len(tr.w.agents))))
		if !ok || e.Ev == "write" || e.Code != "SESSION_EXPIRED" || len(tr.w.agents) >= 3 {
			break
		}
		tr.replace(tr.w, "W's write failed: session expired")
		tr.w.cur().send("write /f %s", wValue(len(tr.w.agents)))
	}
	bound := time.Unix(0, tr.fault).Add(2*netnsLease + netnsLockDelay + 5*time.Second)
	for time.Now().Before(bound) {
		e, ok := tr.c2.cur().wait(max(time.Until(bound), 0), acquireDone)
		if !ok || e.Ev == "acquired" || e.Code != "SESSION_EXPIRED" || len(tr.c2.agents) >= 3 {
			break
		}
		tr.replace(tr.c2, "C2's Acquire failed: session expired")
		tr.c2.cur().send("acquire /lock 60000 %d", lockDelayMs())
	}
	time.Sleep(1500 * time.Millisecond)
}

// settle, after the fault is undone: waits (bounded) until C1 knows where
// it stands (expired, or safe with a newer master), checks its belief
// against the cell, releases the lock if it still can, and waits for C2 to
// get it; then a fresh agent reads every path, and the loops stop.
func (tr *nsTrial) settle(extraPaths ...string) {
	t := tr.t
	_, settled := tr.c1.wait(5*netnsLease, func(e agentEvent) bool {
		return sessionEnded(e) || e.Ev == "lease" && e.Epoch > tr.epoch // renewed by a newer master
	})
	if !settled {
		t.Logf("C1 did not settle within %v of the fault's end (still safe on the old master's word, or in jeopardy)", 5*netnsLease)
	}
	// Belief against the cell: if C1 is safe and believes it holds the
	// lock, the cell must agree.
	since := now()
	tr.c1.send("checkseq /lock")
	if e, ok := tr.c1.wait(30*time.Second, func(e agentEvent) bool { return e.Ev == "checkseq" && e.Call >= since }); ok {
		st := stateAt(tr.c1.all(), e.Call)
		t.Logf("C1 after the fault: session %s; CheckSequencer(%s) valid=%v %s%s; held per GetSequencer: %q",
			st, e.Seq, e.Valid, e.Reason, errSuffix(e.Err), e.Master)
		if st == "safe" && e.Err == "" && !e.Valid {
			tr.fail("belief", "C1 is SAFE and believes it holds /lock, but the cell says its sequencer is not valid (%s)", e.Reason)
		} else {
			tr.ok("belief")
		}
	}
	if _, ended := firstEv(tr.c1.all(), sessionEnded); !ended {
		tr.c1.send("release /lock")
		tr.c1.wait(30*time.Second, func(e agentEvent) bool { return e.Ev == "released" || e.Ev == "release-error" })
	}
	deadline := time.Now().Add(20 * time.Second)
	var asked int64 // when the last Acquire was asked: events of calls from then on
	for {
		e, ok := tr.c2.cur().wait(time.Until(deadline), func(e agentEvent) bool { return acquireDone(e) && e.Call >= asked })
		if ok && e.Ev == "acquire-error" && e.Code == "SESSION_EXPIRED" && len(tr.c2.agents) < 3 {
			tr.replace(tr.c2, "C2's Acquire failed: session expired")
			asked = 0
			tr.c2.cur().send("acquire /lock 20000 %d", lockDelayMs())
			continue
		}
		if ok && e.Ev == "acquire-error" && slices.Contains([]string{"TIMED_OUT", "UNAVAILABLE", "NOT_MASTER"}, e.Code) && time.Until(deadline) > time.Second {
			// A failover withdraws the Acquires left waiting; a client
			// asks again, as this one does.
			t.Logf("C2's Acquire ended with %s (%s); asking again", e.Code, e.Err)
			asked = now()
			tr.c2.cur().send("acquire /lock %d %d", time.Until(deadline).Milliseconds(), lockDelayMs())
			continue
		}
		if !ok || e.Ev != "acquired" {
			tr.fail("liveness", "C2 did not get /lock after C1 released it or lost its session: %s %s", e.Ev, e.Err)
		}
		break
	}
	for _, a := range []*agent{tr.r1, tr.probe} {
		since := now()
		a.send("stop-loops")
		a.wait(15*time.Second, func(e agentEvent) bool { return e.Ev == "loops-stopped" && e.T >= since })
	}
	// The final reads: a fresh session, so nothing comes from a cache.
	tr.v = tr.c.startAgent("v", false)
	for _, p := range append([]string{"/f"}, extraPaths...) {
		since := now()
		tr.v.send("read %s", p)
		if e, ok := tr.v.wait(30*time.Second, func(e agentEvent) bool {
			return (e.Ev == "read" || e.Ev == "read-error") && e.Path == p && e.Call >= since
		}); !ok || e.Ev != "read" {
			tr.fail("liveness", "the final read of %s failed: %s", p, e.Err)
		}
	}
}

func errSuffix(err string) string {
	if err == "" {
		return ""
	}
	return " error: " + err
}

// sessionAgents lists C1, R1 and every agent of C2's and W's roles.
func (tr *nsTrial) sessionAgents() []*agent {
	out := []*agent{tr.c1, tr.r1}
	out = append(out, tr.c2.agents...)
	return append(out, tr.w.agents...)
}

// noteSessions logs each session that ended during the trial: C2's and
// W's could reach a majority all along, so their loss is a finding (the
// cell promises that sessions ride through a failover), though not one of
// the checks: whether a session survives depends on where its KeepAlive
// cycle stood at the fault.
func (tr *nsTrial) noteSessions() {
	for _, a := range tr.sessionAgents() {
		if e, ok := firstEv(a.all(), sessionEnded); ok {
			why := ""
			if se, ok := firstEv(a.all(), func(e agentEvent) bool { return e.Ev == "sevent" && e.Kind == "expired" }); ok {
				why = ": " + se.Err
			}
			tr.t.Logf("  note: %s's session %s at %s%s", strings.ToUpper(a.name), e.State, tr.rel(e.T), why)
		}
	}
}

// stateAt is the session state an agent last reported at or before at.
func stateAt(evs []agentEvent, at int64) string {
	st := ""
	for _, e := range evs {
		if e.Ev == "state" && e.T <= at {
			st = e.State
		}
	}
	return st
}

// firstEv returns the first event that pred accepts.
func firstEv(evs []agentEvent, pred func(agentEvent) bool) (agentEvent, bool) {
	for _, e := range evs {
		if pred(e) {
			return e, true
		}
	}
	return agentEvent{}, false
}

// newMasterAt returns when the probe first saw a master other than the
// one at the fault, which, and its epoch.
func (tr *nsTrial) newMasterAt() (int64, int, int64) {
	for _, e := range tr.probe.all() {
		if e.Ev != "master" || e.T < tr.fault {
			continue
		}
		if m, ep := masterOf(e.Answers, len(tr.c.reps)); m != "" && tr.c.replicaOf(m) != tr.m {
			return e.T, tr.c.replicaOf(m), ep
		}
	}
	return 0, -1, 0
}

// ---- The checks

// checkAll runs checks (a)-(d) and logs the timeline.
func (tr *nsTrial) checkAll(what string) {
	t := tr.t
	c1, c2, r1, w := tr.c1.all(), tr.c2.all(), tr.r1.all(), tr.w.all()
	tr.noteSessions()
	nmAt, nm, nmEpoch := tr.newMasterAt()
	t.Logf("timeline (relative to the %s at %s):", what, time.Unix(0, tr.fault).Format("15:04:05.000"))
	if nm >= 0 {
		// The new master's own log says when it took over; the probe's
		// round of GetMaster calls waits up to 500 ms for a replica that
		// does not answer, so it sees the new master later.
		took, ok := tr.c.replicaLogTime(nm, "msg=master ", fmt.Sprintf("epoch=%d ", nmEpoch))
		if ok {
			tr.metrics["new master after fault"] = ns(took.UnixNano() - tr.fault)
		}
		t.Logf("  new master: replica %d, epoch %d, serving (its log) at %s, first seen by the probe at %s",
			nm+1, nmEpoch, tr.rel(took.UnixNano()), tr.rel(nmAt))
	} else {
		t.Logf("  no new master seen")
	}

	// (a) C1 must stop trusting the old master within a lease.
	var oldTrust, jeopardyAt int64
	for _, e := range c1 {
		if e.Ev == "lease" && e.Epoch <= tr.epoch {
			oldTrust = max(oldTrust, e.End)
		}
		if e.Ev == "state" && e.T >= tr.fault && e.State != "safe" && jeopardyAt == 0 {
			jeopardyAt = e.T
			if e.End > 0 && e.End <= e.T {
				jeopardyAt = e.End // the local lease end itself
			}
		}
	}
	renewedNew, _ := firstEv(c1, func(e agentEvent) bool { return e.Ev == "lease" && e.T >= tr.fault && e.Epoch > tr.epoch })
	t.Logf("  C1 left SAFE at %s; its lease on the old master's word (epoch %d) ran to %s; first renewal by a newer master at %s",
		tr.rel(jeopardyAt), tr.epoch, tr.rel(oldTrust), tr.rel(renewedNew.T))
	if jeopardyAt != 0 {
		tr.metrics["C1 jeopardy after fault"] = ns(jeopardyAt - tr.fault)
	}
	tr.metrics["C1 SAFE on the old master's word, after fault"] = ns(oldTrust - tr.fault)
	if limit := tr.fault + int64(netnsLease+jeopardySlack); oldTrust > limit {
		tr.fail("a", "C1 was SAFE on renewals by the old master (epoch %d) until %s, %v after the %s; want at most one lease (%v) + %v",
			tr.epoch, tr.rel(oldTrust), ns(oldTrust-tr.fault).Round(time.Millisecond), what, netnsLease, jeopardySlack)
	} else {
		tr.ok("a")
	}

	// (b) No overlap.
	acq, _ := firstEv(c1, func(e agentEvent) bool { return e.Ev == "acquired" && e.Path == "/lock" })
	capAt := int64(math.MaxInt64)
	if e, ok := firstEv(c1, func(e agentEvent) bool { return e.Ev == "release-call" && e.Path == "/lock" }); ok {
		capAt = e.T
	}
	if e, ok := firstEv(c1, func(e agentEvent) bool {
		return e.Ev == "state" && (e.State == "expired" || e.State == "closed")
	}); ok {
		capAt = min(capAt, e.T)
	}
	var trusted int64
	for _, e := range c1 {
		if e.Ev == "lease" && e.T <= capAt {
			trusted = max(trusted, e.End)
		}
	}
	trusted = max(min(trusted, capAt), acq.T)
	c2acq, c2ok := firstEv(c2, func(e agentEvent) bool { return e.Ev == "acquired" && e.Path == "/lock" })
	c2call, _ := firstEv(c2, isEv("acquire-call"))
	t.Logf("  C1 held /lock from %s; trusted it (SAFE, not released) until %s", tr.rel(acq.T), tr.rel(trusted))
	if c2ok {
		gap := ns(c2acq.T - trusted)
		tr.metrics["C2 acquire after fault"] = ns(c2acq.T - tr.fault)
		tr.metrics["gap C1 trust→C2 grant"] = gap
		t.Logf("  C2 asked at %s, was granted /lock at %s: gap after C1's last trusted instant %v",
			tr.rel(c2call.T), tr.rel(c2acq.T), gap.Round(time.Millisecond))
		if gap <= 0 {
			tr.fail("b", "overlap: C2 was granted /lock at %s while C1 was SAFE believing it held it until %s (%v of overlap)",
				tr.rel(c2acq.T), tr.rel(trusted), (-gap).Round(time.Millisecond))
		} else {
			tr.ok("b")
		}
	} else {
		t.Logf("  C2 was never granted /lock")
		tr.ok("b (vacuous: C2 never got /lock)")
	}

	// (c) No stale read after W's acknowledged write.
	for _, e := range w {
		if e.Ev == "write-error" && e.Call >= tr.fault {
			t.Logf("  W's write of %s failed at %s (outcome unknown): %s", e.Val, tr.rel(e.T), e.Err)
		}
	}
	wv1, wok := firstEv(w, func(e agentEvent) bool { return e.Ev == "write" && e.Path == "/f" && e.Call >= tr.fault })
	if wok {
		tr.metrics["W ack after fault"] = ns(wv1.T - tr.fault)
		t.Logf("  W's write of %s (generation %d) acknowledged at %s", wv1.Val, wv1.Gen, tr.rel(wv1.T))
		var stale []agentEvent
		cachedN := 0
		for _, e := range r1 {
			if e.Ev == "read" && e.Call > wv1.T && e.Gen < wv1.Gen {
				stale = append(stale, e)
				if e.Cached {
					cachedN++
				}
			}
		}
		if len(stale) > 0 {
			f, l := stale[0], stale[len(stale)-1]
			tr.metrics["R1 stale reads, from W ack to last"] = ns(l.T - wv1.T)
			tr.fail("c", "R1 returned the old value %d times after W's write was acknowledged (%d from its cache), from %s to %s: first %q gen %d (cached=%v, session %s), last %q gen %d (cached=%v, session %s)",
				len(stale), cachedN, tr.rel(f.T), tr.rel(l.T), f.Val, f.Gen, f.Cached, stateAt(r1, f.T), l.Val, l.Gen, l.Cached, stateAt(r1, l.T))
		} else {
			t.Logf("  R1: no read after W's acknowledged write returned an older value")
			tr.ok("c")
		}
	} else {
		tr.fail("c", "not possible: no write of W after the fault was acknowledged")
	}
	r1j, _ := firstEv(r1, func(e agentEvent) bool { return e.Ev == "state" && e.T >= tr.fault && e.State != "safe" })
	t.Logf("  R1 left SAFE at %s; fault undone at %s", tr.rel(r1j.T), tr.rel(tr.faultEnd))

	// (d) Nothing lost, linearizable.
	tr.checkHistory()
}

// checkHistory checks that every path's final read by W returned its last
// acknowledged write (or a write of unknown outcome made after it), and that
// the reads and writes of the trial's paths are linearizable.
func (tr *nsTrial) checkHistory() {
	t := tr.t
	var ops []porcupine.Operation
	agents := append([]*agent{tr.r1, tr.v}, tr.w.agents...)
	agents = append(agents, tr.extra...)
	for id, a := range agents {
		for _, e := range a.all() {
			if !slices.Contains(tr.paths, e.Path) {
				continue
			}
			switch e.Ev {
			case "write":
				ops = append(ops, porcupine.Operation{ClientId: id, Input: kvInput{write: true, key: e.Path, value: e.Val},
					Output: kvOutput{}, Call: e.Call, Return: e.T})
			case "write-error":
				ops = append(ops, porcupine.Operation{ClientId: id, Input: kvInput{write: true, key: e.Path, value: e.Val},
					Output: kvOutput{unknown: true}, Call: e.Call, Return: math.MaxInt64})
			case "read":
				ops = append(ops, porcupine.Operation{ClientId: id, Input: kvInput{key: e.Path},
					Output: kvOutput{value: e.Val}, Call: e.Call, Return: e.T})
			}
		}
	}
	// Nothing lost: per path, the last acknowledged write and W's final read.
	var lost []string
	for _, p := range tr.paths {
		var last *porcupine.Operation
		var final *agentEvent
		for i := range ops {
			in := ops[i].Input.(kvInput)
			if in.key == p && in.write && !ops[i].Output.(kvOutput).unknown && (last == nil || ops[i].Call > last.Call) {
				last = &ops[i]
			}
		}
		evs := tr.v.all()
		for i := range evs {
			if evs[i].Ev == "read" && evs[i].Path == p {
				final = &evs[i]
			}
		}
		if last == nil {
			continue
		}
		want := last.Input.(kvInput).value
		if final == nil {
			lost = append(lost, fmt.Sprintf("%s: no final read (last acknowledged write %q)", p, want))
			continue
		}
		if final.Val == want {
			continue
		}
		// A write of unknown outcome made after the last acknowledged one may have applied.
		later := false
		for _, op := range ops {
			in := op.Input.(kvInput)
			if in.key == p && in.write && op.Output.(kvOutput).unknown && in.value == final.Val && op.Call > last.Return {
				later = true
			}
		}
		if !later {
			lost = append(lost, fmt.Sprintf("%s: final read %q (gen %d), last acknowledged write %q", p, final.Val, final.Gen, want))
		}
	}
	if len(lost) > 0 {
		tr.fail("d", "acknowledged writes lost: %s", strings.Join(lost, "; "))
	}
	res, info := porcupine.CheckOperationsVerbose(kvModel, ops, 60*time.Second)
	switch res {
	case porcupine.Ok:
		t.Logf("  history of %d operations on %d paths: linearizable", len(ops), len(tr.paths))
		if len(lost) == 0 {
			tr.ok("d")
		}
	case porcupine.Illegal:
		path := filepath.Join(os.TempDir(), fmt.Sprintf("chubby-netns-%s-history.html", strings.ReplaceAll(t.Name(), "/", "-")))
		porcupine.VisualizePath(kvModel, info, path)
		tr.fail("d", "the history of %d operations is not linearizable (visualization: %s)", len(ops), path)
	default:
		t.Logf("  linearizability check of %d operations timed out (unknown)", len(ops))
	}
}

// oldMasterClaims counts the probe's GetMaster answers in [from, to) in
// which the master at the fault named itself master.
func (tr *nsTrial) oldMasterClaims(from, to int64) (n int, first, last int64) {
	old := tr.c.reps[tr.m].addr
	for _, e := range tr.probe.all() {
		if e.Ev != "master" || e.T < from || e.T >= to {
			continue
		}
		for _, a := range e.Answers {
			if a.Addr == old && a.Master == old && a.Err == "" {
				n++
				if first == 0 {
					first = e.T
				}
				last = e.T
			}
		}
	}
	return n, first, last
}

// checkOldMaster: after the old master is back (SIGCONT), it must not
// answer as master — no GetMaster answer of its own naming itself — and
// no session's lease may be extended in its epoch.
func (tr *nsTrial) checkOldMaster(from int64, what string) {
	t := tr.t
	n, first, last := tr.oldMasterClaims(from, math.MaxInt64)
	if n > 0 {
		tr.fail("old master", "after %s the old master (replica %d) still answered GetMaster naming itself %d times, from %s to %s",
			what, tr.m+1, n, tr.rel(first), tr.rel(last))
	} else {
		t.Logf("  old master (replica %d) did not claim to be master after %s", tr.m+1, what)
	}
	failed := n > 0
	// Nor may any session's lease be extended in the old epoch.
	for _, a := range tr.sessionAgents() {
		for _, e := range a.all() {
			if e.Ev == "lease" && e.T >= from && e.Epoch <= tr.epoch {
				tr.fail("old master", "after %s %s's lease was extended in the old master's epoch %d at %s (to %s)",
					what, strings.ToUpper(a.name), e.Epoch, tr.rel(e.T), tr.rel(e.End))
				failed = true
				break
			}
		}
	}
	if !failed {
		tr.ok("old master")
	}
}

// checkRejoin waits until replica i runs and has applied what the master
// had committed when it was restarted. It fails the test, showing why,
// if the replica exits or does not catch up within d.
func (tr *nsTrial) checkRejoin(i int, d time.Duration) bool {
	t := tr.t
	var target int64
	if nm, _, ok := tr.c.findMaster(tr.probe, 10*time.Second, i); ok {
		since := now()
		tr.probe.send("status %s", tr.c.reps[nm].addr)
		if e, ok := tr.probe.wait(5*time.Second, func(e agentEvent) bool { return e.Ev == "status" && e.Call >= since }); ok {
			target = e.Commit
		}
	}
	r := tr.c.reps[i]
	start := time.Now()
	deadline := start.Add(d)
	for time.Now().Before(deadline) {
		if r.proc.exited() {
			tr.fail("restart", "replica %d exited %v, %v after it was restarted on its data directory; its log:\n%s\ndata directory %s:\n%s",
				r.id, r.proc.err, time.Since(start).Round(time.Millisecond), tail(r.proc.log.String(), 2500), r.dir, listDir(r.dir))
			return false
		}
		since := now()
		tr.probe.send("status %s", r.addr)
		if e, ok := tr.probe.wait(5*time.Second, func(e agentEvent) bool { return e.Ev == "status" && e.Call >= since }); ok && e.Err == "" && e.Applied >= target {
			tr.metrics["rejoin after restart"] = time.Since(start)
			t.Logf("  replica %d restarted on its data and caught up (applied %d >= %d) in %v",
				r.id, e.Applied, target, time.Since(start).Round(time.Millisecond))
			tr.ok("restart")
			return true
		}
		time.Sleep(200 * time.Millisecond)
	}
	tr.fail("restart", "replica %d runs but did not catch up to %d within %v; data directory:\n%s", r.id, target, d, listDir(r.dir))
	return false
}

// listDir lists a directory's files with their sizes (zero-byte files marked).
func listDir(dir string) string {
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		mark := ""
		if fi.Size() == 0 {
			mark = "   <-- 0 bytes"
		}
		fmt.Fprintf(&b, "  %10d  %s%s\n", fi.Size(), rel, mark)
		return nil
	})
	return b.String()
}

// ---- The scenarios

// runPartition: the master, C1 and R1 on one side; the other four
// replicas, C2 and W on the other.
func runPartition(tr *nsTrial) {
	t, c := tr.t, tr.c
	minority := []*nsHost{c.reps[tr.m].host, tr.c1.host, tr.r1.host}
	var majority []*nsHost
	for i, r := range c.reps {
		if i != tr.m {
			majority = append(majority, r.host)
		}
	}
	majority = append(majority, tr.c2.cur().host, tr.w.cur().host)
	begin := now()
	if err := c.net.partition(minority, majority); err != nil {
		t.Fatal(err)
	}
	tr.fault = now()
	tr.minority = minority
	t.Logf("partition {replica %d, C1, R1} | {the other replicas, C2, W} installed in %v", tr.m+1, ns(tr.fault-begin).Round(time.Millisecond))
	tr.contend()
	tr.observe()
	if err := c.net.heal(); err != nil {
		t.Fatal(err)
	}
	tr.faultEnd = now()
	tr.minority = nil
	if n, first, last := tr.oldMasterClaims(tr.fault, tr.faultEnd); n > 0 {
		t.Logf("  (the old master named itself master to the probe %d times during the partition, from %s to %s)",
			n, tr.rel(first), tr.rel(last))
	}
	tr.settle()
	tr.checkAll("partition")
}

// runPausedMaster: SIGSTOP the master for a lease + 2 s, then SIGCONT.
//
// Right after the SIGSTOP the stopped replica is also cut off from the
// other replicas (clients and the probe still reach it), until 1 s after
// the SIGCONT. A stopped process notices nothing, so the pause is the same;
// what the cut does is keep the news of the new view out of its socket
// buffers, so that after SIGCONT it has a second in which only its own
// clock can tell it that it is no longer master. Without the cut, whether
// it answers as master first or reads the new view first is a race between
// its goroutines (it answered as master in about four runs of five).
func runPausedMaster(tr *nsTrial) {
	t, c := tr.t, tr.c
	if err := c.sigstop(tr.m); err != nil {
		t.Fatal(err)
	}
	tr.fault = now()
	old := []*nsHost{c.reps[tr.m].host}
	var others []*nsHost
	for i, r := range c.reps {
		if i != tr.m {
			others = append(others, r.host)
		}
	}
	if err := c.net.partition(old, others); err != nil {
		t.Fatal(err)
	}
	tr.contend()
	cont := time.Unix(0, tr.fault).Add(netnsLease + 2*time.Second)
	time.Sleep(time.Until(cont.Add(-300 * time.Millisecond)))
	// A GetMaster that reaches the stopped master just before SIGCONT: it
	// is answered as soon as the process runs again.
	tr.probe.send("getmaster %s 3000", c.reps[tr.m].addr)
	time.Sleep(time.Until(cont))
	if err := c.sigcont(tr.m); err != nil {
		t.Fatal(err)
	}
	tr.faultEnd = now()
	t.Logf("replica %d stopped (SIGSTOP) for %v, cut off from the other replicas until 1 s after SIGCONT",
		tr.m+1, ns(tr.faultEnd-tr.fault).Round(time.Millisecond))
	time.Sleep(time.Second) // the probe asks the old master every 20 ms
	if err := c.net.heal(); err != nil {
		t.Fatal(err)
	}
	tr.observe()
	time.Sleep(time.Until(time.Unix(0, tr.faultEnd).Add(2 * time.Second)))
	tr.settle()
	tr.checkAll("SIGSTOP")
	tr.checkOldMaster(tr.faultEnd, "SIGCONT")
}

// runKill9 (control): kill -9 of the master, restarted on its data later.
func runKill9(tr *nsTrial) {
	t, c := tr.t, tr.c
	c.kill9(tr.m)
	tr.fault = now()
	t.Logf("replica %d killed with SIGKILL", tr.m+1)
	tr.contend()
	tr.observe()
	c.start(tr.m)
	tr.faultEnd = now()
	tr.checkRejoin(tr.m, 30*time.Second)
	tr.settle()
	tr.checkAll("kill -9")
}

// runDiskFull: while D writes 32 KiB files through the master, the
// master's file size limit drops to 1 MiB: Badger's next new file (a
// memtable's log, a table) cannot be made. The master must stop serving,
// the cell fail over, the failed replica exit or say it is unhealthy, and
// restart on its data without the limit.
func runDiskFull(tr *nsTrial) {
	t, c := tr.t, tr.c
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("needs prlimit (util-linux)")
	}
	const files = 8
	var extra []string
	for k := range files {
		extra = append(extra, fmt.Sprintf("/d%d", k))
	}
	tr.paths = append(tr.paths, extra...)
	d := c.startAgent("d", false)
	tr.extra = append(tr.extra, d)
	d.send("write-loop /d %d %d", files, 32<<10)
	d.mustWait(t, 30*time.Second, "20 acknowledged 32 KiB writes", func() func(agentEvent) bool {
		n := 0
		return func(e agentEvent) bool {
			if e.Ev == "write" {
				n++
			}
			return n >= 20
		}
	}())
	if err := c.prlimitFsize(tr.m, 1<<20); err != nil {
		t.Fatal(err)
	}
	limited := now()
	t.Logf("replica %d (pid %d): file size limit now 1 MiB", tr.m+1, c.reps[tr.m].proc.pid())
	// Wait for the master's disk to fail (its log says so) or for it to
	// exit. It fails when Badger makes its next file, at the latest when
	// the memtable (replica.DefaultStorageOptions, 16 MiB) fills: about
	// 512 of D's writes after the limit. A starved machine may take more
	// than 90 s to make that many, so the wait is a liveness bound, not a
	// speed bound: after 90 s it fails when writes have stopped (none
	// acknowledged for 30 s) or twice the memtable's worth were
	// acknowledged after the limit with the disk still working.
	const enough = 2 * (16 << 20) / (32 << 10)
	base := countEv(d.all(), "write")
	var failedAt time.Time
	start, progress, last := time.Now(), time.Now(), base
	for {
		if ts, ok := c.replicaLogTime(tr.m, "disk failed"); ok {
			failedAt = ts
			break
		}
		if c.reps[tr.m].proc.exited() {
			failedAt = time.Now()
			break
		}
		n := countEv(d.all(), "write")
		if n != last {
			progress, last = time.Now(), n
		}
		if time.Since(start) > 90*time.Second && (n-base >= enough || time.Since(progress) > 30*time.Second) {
			t.Fatalf("replica %d's disk did not fail in the %v after the limit (%d writes of 32 KiB acknowledged since, the last %v ago)",
				tr.m+1, time.Since(start).Round(time.Second), n-base, time.Since(progress).Round(time.Second))
		}
		time.Sleep(20 * time.Millisecond)
	}
	tr.fault = failedAt.UnixNano()
	// D's part is done; it stops writing (a write of unknown outcome is
	// in the history as such).
	since := now()
	d.send("stop-loops")
	t.Logf("replica %d's disk failed %v after the limit (%d writes of 32 KiB acknowledged by then)",
		tr.m+1, ns(tr.fault-limited).Round(time.Millisecond), countEvBefore(d.all(), "write", tr.fault))
	for _, line := range strings.Split(c.reps[tr.m].proc.log.String(), "\n") {
		if strings.Contains(line, "disk failed") || strings.Contains(line, "too large") {
			t.Logf("  r%d: %s", tr.m+1, tail(line, 400))
		}
	}
	tr.metrics["disk failure after limit"] = ns(tr.fault - limited)
	d.wait(30*time.Second, func(e agentEvent) bool { return e.Ev == "loops-stopped" && e.T >= since })
	tr.contend()
	tr.observe()
	// The cell must fail over: the probe sees a new master within 5 s.
	if at, nm, ep := tr.newMasterAt(); at == 0 || ns(at-tr.fault) > 5*time.Second {
		tr.fail("failover", "no new master answered within 5 s of the master's disk failure (first seen at %s)", tr.rel(at))
	} else {
		t.Logf("  failover: replica %d (epoch %d) answers as master at %s", nm+1, ep, tr.rel(at))
		tr.ok("failover")
	}
	// The failed replica must have exited non-zero or say it is unhealthy.
	r := c.reps[tr.m]
	if r.proc.exited() {
		t.Logf("  replica %d exited: %v", r.id, r.proc.err)
		if r.proc.err == nil {
			tr.fail("health", "replica %d exited with status 0 after its disk failed", r.id)
		} else {
			tr.ok("health (exited)")
		}
	} else {
		since := now()
		tr.probe.send("healthz %s", r.http)
		e, _ := tr.probe.wait(5*time.Second, func(e agentEvent) bool { return e.Ev == "healthz" && e.Call >= since })
		t.Logf("  replica %d still runs; /healthz answered %d %s", r.id, e.HTTP, e.Err)
		if e.HTTP == 200 {
			tr.fail("health", "replica %d still runs %v after its disk failed and /healthz says 200 OK",
				r.id, time.Since(failedAt).Round(time.Millisecond))
		} else {
			tr.ok("health (unhealthy)")
		}
	}
	// Restart on the same data, without the limit.
	c.kill9(tr.m)
	t.Logf("  replica %d's data directory after its disk failed (before the restart):\n%s", r.id, listDir(r.dir))
	c.start(tr.m)
	tr.faultEnd = now()
	tr.checkRejoin(tr.m, 30*time.Second)
	tr.settle(extra...)
	tr.checkAll("disk failure")
}

func countEv(evs []agentEvent, name string) int {
	return countEvBefore(evs, name, math.MaxInt64)
}

func countEvBefore(evs []agentEvent, name string, before int64) int {
	n := 0
	for _, e := range evs {
		if e.Ev == name && e.T <= before {
			n++
		}
	}
	return n
}
