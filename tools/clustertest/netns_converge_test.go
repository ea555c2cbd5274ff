//go:build linux

package clustertest

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The convergence checks of TestNetnsReconfig (issue 23, items 4 and 5):
// after each change the membership settles at exactly the target — the
// target number of voters, no learner left over, the spares spare — and
// every replica taken out says so of itself, within the bounds below.

const (
	// convergeBound bounds the time from a fault's start (a kill, a cut)
	// to the settled membership: --dead-after for the death to count,
	// then the spare's addition, --promote-after and the dead voter's
	// removal, with room for a loaded machine.
	convergeBound = reconfigDeadAfter + 15*time.Second
	// removedBound bounds the time from a replica's removal (or the heal
	// of its partition) to its own status saying removed: gossip carries
	// the configurations in about a second; a healed replica first has to
	// be reached again (discovery's reconnect, a second a try).
	removedBound = 2 * netnsLease
	// aliveBound bounds the time from a heal to the master's gossip
	// having the healed replica alive again.
	aliveBound = 2 * netnsLease
	// stayFor is how long a settled membership is watched not to change.
	stayFor = 3 * time.Second
)

// ids of the replicas of v with the given membership, sorted.
func (v cellView) ids(membership string) []string {
	var out []string
	for _, r := range v.st.Replicas {
		if r.Membership == membership {
			out = append(out, r.ID)
		}
	}
	slices.Sort(out)
	return out
}

// settled reports whether v is the target: reconfigTarget voters, none of
// them gone, no learner, nothing pending.
func settled(v cellView, gone ...string) bool {
	voters := v.ids("voter")
	if v.st.PendingConfig != 0 || len(voters) != reconfigTarget || len(v.ids("learner")) != 0 {
		return false
	}
	for _, id := range gone {
		if slices.Contains(voters, id) {
			return false
		}
	}
	return true
}

// awaitSettled waits, bounded, for the target membership without gone and
// checks that it stays for stayFor; it returns the time from since.
func (rc *reconfig) awaitSettled(check, what string, since time.Time, bound time.Duration, gone ...string) time.Duration {
	rc.t.Helper()
	v := rc.awaitView(bound+5*time.Second, what, func(v cellView) bool { return settled(v, gone...) })
	d := v.at.Sub(since)
	if d > bound {
		rc.h.fail(check, "%s took %v, over the bound %v", what, d, bound)
		return d
	}
	time.Sleep(stayFor)
	if lv, ok := rc.latest(); !ok || !settled(lv, gone...) || !slices.Equal(lv.ids("voter"), v.ids("voter")) {
		rc.h.fail(check, "%s did not stay: %s", what, rc.describe(lv))
		return d
	}
	rc.h.ok(check)
	return d
}

// awaitSelfRemoved waits, bounded, until replica i's own status says it is
// removed: its entry's membership "removed", nobody named master, no
// replica shown as master. It returns the time from since.
func (rc *reconfig) awaitSelfRemoved(check string, i int, since time.Time, bound time.Duration) time.Duration {
	addr := rc.rep(i).addr
	var last string
	for deadline := since.Add(bound + 5*time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		st, err := rc.status(i, time.Second)
		if err != nil {
			last = err.Error()
			continue
		}
		self, ok := (cellView{st: st}).entry(addr)
		master := st.MasterID != ""
		for _, r := range st.Replicas {
			master = master || r.Role == "MASTER"
		}
		last = fmt.Sprintf("membership %q, master %q, config epoch %d, pending %d", self.Membership, st.MasterID, st.ConfigEpoch, st.PendingConfig)
		if ok && self.Membership == "removed" && !master && strings.Contains(strings.Join(st.Decisions, "\n"), "removed from the cell") {
			d := time.Since(since)
			if d > bound {
				rc.h.fail(check, "r%d said it was removed only %v after, over the bound %v", i+1, d, bound)
			} else {
				rc.h.ok(check)
			}
			return d
		}
	}
	rc.h.fail(check, "r%d did not say it was removed within %v: %s", i+1, bound+5*time.Second, last)
	return -1
}

// restartWiped kill -9s replica i for good and starts a fresh replica on
// its host and address, on an empty data directory (a new id).
func (rc *reconfig) restartWiped(i int) int {
	old := rc.rep(i)
	rc.kill(i)
	return rc.startReplica(old.host)
}

// wipeAndRejoin: with a spare present, a voter that is not the master is
// wiped and rejoins on its address under a new id. The cell must settle
// at exactly five voters without the old id, no learner left over (the
// spare or the rejoined one stays spare), within convergeBound, and stay.
func (rc *reconfig) wipeAndRejoin() string {
	spare := rc.addReplica()
	rc.awaitView(30*time.Second, fmt.Sprintf("r%d seen as a spare", spare+1), func(v cellView) bool {
		e, ok := v.entry(rc.rep(spare).addr)
		return ok && e.Membership == "spare" && e.GossipState == "alive"
	})
	m, v := rc.masterNow()
	victim := rc.otherVoters(v)[0]
	oldID := rc.id(victim)
	killed := time.Now()
	fresh := rc.restartWiped(victim)
	rc.t.Logf("  %s: r%d (id %s, a voter; master r%d) wiped and restarted as r%d on its address; r%d waits as a spare",
		rc.rel(killed), victim+1, oldID, m+1, fresh+1, spare+1)
	d := rc.awaitSettled("wipe and rejoin settles", fmt.Sprintf("five voters without id %s and no learner", oldID), killed, convergeBound, oldID)
	rc.h.metrics["wipe and rejoin → settled"] = d
	// The others sent the old id's messages to its address until they
	// dropped it: the new replica must not take them for its own (each
	// warned of as malformed, hundreds in all, before the peer server
	// refused them).
	misaddressed := strings.Count(rc.rep(fresh).proc.log.String(), "addressed to another replica")
	if misaddressed > 0 {
		rc.h.fail("wipe and rejoin: no misaddressed warnings", "r%d logged %d messages addressed to another replica", fresh+1, misaddressed)
	} else {
		rc.h.ok("wipe and rejoin: no misaddressed warnings")
	}
	lv, _ := rc.latest()
	return fmt.Sprintf("settled %v after the wipe (bound %v), %d misaddressed warnings: %s", d.Round(10*time.Millisecond), convergeBound, misaddressed, rc.describe(lv))
}

// cutOffAndHeal: a voter that is not the master is cut off from every
// other replica past --dead-after, so that the cell replaces it with the
// spare; then healed. The cell must settle without it within
// convergeBound of the cut; after the heal the master's gossip must have
// it alive within aliveBound, and it must say it was removed within
// removedBound.
func (rc *reconfig) cutOffAndHeal() string {
	t := rc.t
	m, v := rc.masterNow()
	if len(v.ids("spare")) == 0 {
		t.Fatalf("cut off and heal needs a spare: %s", rc.describe(v))
	}
	y := rc.otherVoters(v)[0]
	yid, yaddr := rc.id(y), rc.rep(y).addr
	var rest []*nsHost
	for _, i := range rc.live() {
		if i != y {
			rest = append(rest, rc.rep(i).host)
		}
	}
	if err := rc.c.net.partition([]*nsHost{rc.rep(y).host}, rest); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	t.Logf("  %s: r%d (id %s, a voter; master r%d) cut off from every other replica", rc.rel(cut), y+1, yid, m+1)
	d := rc.awaitSettled("cut-off voter replaced", fmt.Sprintf("five voters without r%d (id %s), no learner", y+1, yid), cut, convergeBound, yid)
	rc.h.metrics["cut off → replaced"] = d
	if err := rc.c.net.heal(); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	t.Logf("  %s: r%d's partition healed after %v", rc.rel(healed), y+1, healed.Sub(cut).Round(time.Millisecond))
	av := rc.awaitView(aliveBound+5*time.Second, fmt.Sprintf("the master's gossip having r%d alive", y+1), func(v cellView) bool {
		e, ok := v.entry(yaddr)
		return ok && e.GossipState == "alive"
	})
	alive := av.at.Sub(healed)
	rc.h.metrics["heal → alive in the master's gossip"] = alive
	if alive > aliveBound {
		rc.h.fail("healed seen alive", "the master had r%d alive %v after the heal, over %v", y+1, alive, aliveBound)
	} else {
		rc.h.ok("healed seen alive")
	}
	rd := rc.awaitSelfRemoved("replaced says removed", y, healed, removedBound)
	rc.h.metrics["heal → replaced replica says removed"] = rd
	lv, _ := rc.latest()
	if !settled(lv, yid) {
		rc.h.fail("cut-off voter replaced", "after the heal: %s", rc.describe(lv))
	}
	return fmt.Sprintf("replaced %v after the cut (bound %v); after the heal alive in the master's gossip in %v, r%d says removed in %v; %s",
		d.Round(10*time.Millisecond), convergeBound, alive.Round(10*time.Millisecond), y+1, rd.Round(10*time.Millisecond), rc.describe(lv))
}

// removeWithMasterCut: RemoveMember of a voter X that is not the master,
// and the master cut off from every other replica in the same instant,
// for reconfigCut (less than --dead-after: it is not replaced). The
// change commits or is lost, whichever the race gives; within
// convergeBound of the cut the cell settles at exactly the target (X out
// if the change took, the spare added for it), the old master back as a
// voter, and X, if out, says it was removed within removedBound of
// the settling.
func (rc *reconfig) removeWithMasterCut() string {
	t := rc.t
	m, v := rc.masterNow()
	x := rc.otherVoters(v)[0]
	xid := rc.id(x)
	var rest []*nsHost
	for _, i := range rc.live() {
		if i != m {
			rest = append(rest, rc.rep(i).host)
		}
	}
	since := now()
	rc.probe.send("remove-member %s %s", rc.rep(m).addr, xid)
	if err := rc.c.net.partition([]*nsHost{rc.rep(m).host}, rest); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	t.Logf("  %s: RemoveMember(r%d, id %s) asked of the master r%d, cut off from every other replica in the same instant", rc.rel(cut), x+1, xid, m+1)
	e := rc.probe.mustWait(t, 10*time.Second, "RemoveMember's answer", func(e agentEvent) bool {
		return e.Ev == "remove-member" && e.Call >= since && e.Val == xid
	})
	answer := fmt.Sprintf("committed at %d", e.Commit)
	if e.Err != "" {
		answer = fmt.Sprintf("%s (%s)", e.Err, e.Code)
	}
	t.Logf("  %s: RemoveMember answered: %s", rc.rel(time.Unix(0, e.T)), answer)
	time.Sleep(time.Until(cut.Add(reconfigCut)))
	if err := rc.c.net.heal(); err != nil {
		t.Fatal(err)
	}
	t.Logf("  %s: the old master r%d's partition healed", rc.rel(time.Now()), m+1)
	maddr := rc.rep(m).addr
	sv := rc.awaitView(convergeBound+5*time.Second, "the target membership, the old master a voter again", func(v cellView) bool {
		e, ok := v.entry(maddr)
		return settled(v) && ok && e.Membership == "voter"
	})
	d := sv.at.Sub(cut)
	removed := !slices.Contains(sv.ids("voter"), xid)
	if removed {
		d = rc.awaitSettled("remove, master cut off: settles", fmt.Sprintf("five voters without id %s", xid), cut, convergeBound, xid)
	} else {
		d = rc.awaitSettled("remove, master cut off: settles", "five voters (the removal lost)", cut, convergeBound)
	}
	rc.h.metrics["remove with master cut off → settled"] = d
	note := fmt.Sprintf("RemoveMember: %s; settled %v after the cut (bound %v)", answer, d.Round(10*time.Millisecond), convergeBound)
	if removed {
		rd := rc.awaitSelfRemoved("remove, master cut off: removed says so", x, time.Now(), removedBound)
		rc.h.metrics["remove with master cut off → it says removed (after settling)"] = rd
		note += fmt.Sprintf("; r%d out, says removed (checked after settling) in %v", x+1, rd.Round(10*time.Millisecond))
	} else {
		note += fmt.Sprintf("; the removal was lost, r%d still a voter", x+1)
	}
	lv, _ := rc.latest()
	return note + "; " + rc.describe(lv)
}
