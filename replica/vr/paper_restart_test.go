package vr

import (
	"slices"
	"testing"
	"time"
)

// Direct tests of restarts (VR Revisited §4.3, with the log on disk) and
// of the master lease, in the manner of paper_test.go.

// --- §4.3 Recovery (restarts from the disk) ---

// TestARestartedPrimaryDoesNotResumeItsView: the paper's recovering
// replica "cannot participate in request processing and view changes
// until it has a state at least as recent as when it failed"; with the
// log on disk a
// restarted replica rejoins from it, but one that was the primary does
// not resume its view (entries it sent but had not persisted may sit on
// backups): it starts a view change at once, and the cell goes on under
// the next view's primary with every committed entry.
// Reference: §4.3; package documentation, "Restarts".
func TestARestartedPrimaryDoesNotResumeItsView(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	i := nw.propose(1, "a")
	nw.run(nw.cfg.HeartbeatInterval)
	nw.restart(1)
	if info := nw.info(1); info.IsPrimary || info.Status != StatusViewChange || info.View != 1 {
		t.Fatalf("restarted primary: %+v; want changing to view 1", info)
	}
	p := nw.waitPrimary(nw.viewChangeLimit())
	if p != 2 || nw.node(2).View() != 1 {
		t.Fatalf("primary %d in view %d, want 2 in view 1", p, nw.node(p).View())
	}
	if _, ok := nw.reps[1].applied[i]; !ok {
		t.Fatalf("the restarted replica did not apply committed entry %d again", i)
	}
	if got, want := nw.logOf(1), nw.logOf(2); !slices.Equal(got, want) {
		t.Fatalf("logs %v and %v", got, want)
	}
}

// TestARestartedBackupResumesAsABackup: a backup that was normal in its
// view restarts normal in it, follows the same primary, and causes no
// view change.
// Reference: §4.3; package documentation, "Restarts".
func TestARestartedBackupResumesAsABackup(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	nw.propose(1, "a")
	nw.restart(3)
	if info := nw.info(3); info.Status != StatusNormal || info.View != 0 {
		t.Fatalf("restarted backup: %+v", info)
	}
	nw.sent = nil
	nw.run(2 * nw.cfg.ViewChangeTimeout)
	if svc := nw.sentOf(MsgStartViewChange, 0); len(svc) != 0 || !nw.node(1).IsPrimary() {
		t.Fatalf("a view change after a backup's restart: %v", svc)
	}
	i := nw.propose(1, "b")
	nw.run(nw.cfg.HeartbeatInterval)
	if _, ok := nw.reps[3].applied[i]; !ok {
		t.Fatal("the restarted backup does not follow")
	}
}

// TestARestartedReplicaWaitsALeaseBeforeDoViewChange: a restarted
// replica cannot know what lease promise it made, so it sends no
// DoViewChange before a whole LeaseDuration·(1+MaxClockDrift) has passed
// since its start, even with a quorum changing views.
// Reference: package documentation, "Restarts" and "Master lease".
func TestARestartedReplicaWaitsALeaseBeforeDoViewChange(t *testing.T) {
	members := Members{{ID: 1}, {ID: 2}, {ID: 3}}
	start := int64(1e12)
	cfg := testConfig()
	cfg.ID = 3
	n, err := NewNode(cfg, persistedLog(members, HardState{View: 1, Commit: 1}), start)
	if err != nil {
		t.Fatal(err)
	}
	wait := int64(float64(cfg.LeaseDuration) * (1 + MaxClockDrift))
	dvc := func(now int64) bool {
		t.Helper()
		n.Tick(now)
		rd := n.Ready()
		n.Advance()
		return slices.ContainsFunc(rd.Messages, func(m Message) bool { return m.Type == MsgDoViewChange && m.To == 2 })
	}
	if err := n.Step(Message{Type: MsgStartViewChange, From: 1, To: 3, View: 1}); err != nil {
		t.Fatal(err)
	}
	if dvc(start) || dvc(start+wait-1) {
		t.Fatal("DoViewChange before a lease had passed since the restart")
	}
	if !dvc(start + wait) {
		t.Fatal("no DoViewChange once a lease had passed")
	}
}

// --- The master lease (package documentation, "Master lease") ---

// TestLeaseNeedsAQuorumAndEnds: the primary holds the lease while a
// quorum acknowledged a round that began less than
// LeaseDuration·(1−MaxClockDrift) ago, and serves reads only then.
func TestLeaseNeedsAQuorumAndEnds(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	p := nw.node(1)
	nw.run(nw.cfg.HeartbeatInterval)
	start, ok := p.leaseStart()
	if !ok || !p.LeaseValid(nw.now) || !p.CanServeReads(nw.now) {
		t.Fatalf("no lease with every backup answering (start %d, %v)", start, ok)
	}
	nw.reps[2].isolated, nw.reps[3].isolated = true, true
	nw.run(nw.cfg.HeartbeatInterval)
	if s, _ := p.leaseStart(); s != start {
		t.Fatalf("lease round moved to %d without acknowledgements", s)
	}
	hold := int64(float64(nw.cfg.LeaseDuration) * (1 - MaxClockDrift))
	if !p.LeaseValid(start + hold - 1) {
		t.Fatal("lease over before LeaseDuration·(1−ε)")
	}
	if p.LeaseValid(start+hold) || p.CanServeReads(start+hold) {
		t.Fatal("lease still valid LeaseDuration·(1−ε) after its round began")
	}
}

// TestViewChangeWaitsOutTheLeasePromise: a backup that acknowledged a
// lease round sends no DoViewChange until LeaseDuration·(1+MaxClockDrift)
// after the round arrived — also on evidence of the primary's death,
// which otherwise starts the view change at once — so the old primary's
// lease is over before a new primary is normal.
func TestViewChangeWaitsOutTheLeasePromise(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	rounds := len(nw.sentOf(MsgCommit, 1))
	nw.runUntil(2*nw.cfg.HeartbeatInterval, "a lease round", func() bool { return len(nw.sentOf(MsgCommit, 1)) > rounds })
	round := nw.now // the round went out, arrived and was acknowledged at this tick
	old := nw.node(1)
	nw.reps[1].crashed = true // its peer port refuses: PeerGone
	nw.sent = nil
	wait := round + int64(float64(nw.cfg.LeaseDuration)*(1+MaxClockDrift))
	var firstDVC int64
	nw.runUntil(nw.cfg.ViewChangeTimeout, "a new primary", func() bool {
		if firstDVC == 0 && len(nw.sentOf(MsgDoViewChange, 0)) > 0 {
			firstDVC = nw.now
		}
		return nw.primary() == 2
	})
	if len(nw.sentOf(MsgStartViewChange, 0)) == 0 || firstDVC == 0 {
		t.Fatal("no view change")
	}
	if firstDVC < wait {
		t.Fatalf("DoViewChange %v after the round, before the promise ended (%v)", firstDVC-round, wait-round)
	}
	if old.LeaseValid(nw.now) {
		t.Fatal("the old primary's lease outlived the new view")
	}
	if d := nw.now - round; d > int64(nw.cfg.LeaseDuration+4*nw.cfg.HeartbeatInterval) {
		t.Fatalf("failover on evidence of death took %v", d)
	}
}

// TestAPrimaryNoQuorumAnswersStepsDown: a primary deaf one way (its
// backups hear its heartbeats, it hears nothing) steps down a
// ViewChangeTimeout past the end of its lease, and the cell gets a
// primary again; before then it keeps its view.
func TestAPrimaryNoQuorumAnswersStepsDown(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	nw.run(nw.cfg.HeartbeatInterval)
	start, ok := nw.node(1).leaseStart()
	if !ok {
		t.Fatal("no lease")
	}
	nw.drop = func(m *Message) bool { return m.To == 1 }
	stepDown := start + int64(float64(nw.cfg.LeaseDuration)*(1-MaxClockDrift)) + int64(nw.cfg.ViewChangeTimeout)
	nw.runUntil(nw.cfg.ViewChangeTimeout+nw.cfg.LeaseDuration+nw.cfg.HeartbeatInterval, "the deaf primary steps down",
		func() bool { return !nw.node(1).IsPrimary() })
	if nw.now < stepDown {
		t.Fatalf("stepped down %v after its last acknowledged round, before %v", nw.now-start, stepDown-start)
	}
	nw.drop = nil
	if p := nw.waitPrimary(nw.viewChangeLimit(), 1); p != 2 {
		t.Fatalf("primary %d, want 2", p)
	}
}

// --- Failure detection (package documentation, "Failure detection: fast
// on proof of death, patient on silence") ---

// TestABackupAsksAboutASilentPrimaryAfterSuspectAfter: after SuspectAfter
// of silence (not before) a backup names its primary in Suspect; a
// PeerGone for it then starts a probe at once, long before
// ViewChangeTimeout, while a PeerGone before SuspectAfter of silence is
// ignored.
func TestABackupAsksAboutASilentPrimaryAfterSuspectAfter(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	heard := nw.now // the primary's last heartbeat arrived now
	n := nw.node(2) // ticked by hand below, Suspect read here
	nw.now += nw.tickStep()
	n.Tick(nw.now)
	n.PeerGone(1)
	nw.ready(nw.reps[2])
	if n.Stats().PeersGone != 0 || n.Stats().Probes != 0 {
		t.Fatalf("acted on PeerGone after %v of silence: %+v", time.Duration(nw.now-heard), n.Stats())
	}
	asked := int64(0)
	for end := nw.now + int64(nw.cfg.ViewChangeTimeout); nw.now < end && asked == 0; {
		nw.now += nw.tickStep()
		n.Tick(nw.now)
		if id, ok := n.Suspect(); ok {
			if id != 1 {
				t.Fatalf("Suspect names %d, want the primary 1", id)
			}
			asked = nw.now
		}
		nw.ready(nw.reps[2])
	}
	if asked == 0 || n.Stats().Probes != 0 {
		t.Fatalf("no Suspect within the view-change timeout (probes %d)", n.Stats().Probes)
	}
	if silence := time.Duration(asked - heard); silence < nw.cfg.SuspectAfter {
		t.Fatalf("Suspect after %v of silence, want at least %v", silence, nw.cfg.SuspectAfter)
	}
	nw.sent = nil
	n.PeerGone(1)
	nw.ready(nw.reps[2])
	if ps := nw.sentOf(MsgProbe, 2); len(ps) == 0 {
		t.Fatal("no probe on evidence of the primary's death")
	}
}

// TestAStalledBackupDoesNotCountItsOwnStall: silence is counted in live
// time, which a Tick advances by at most HeartbeatInterval, so a backup
// whose own loop was frozen far longer than ViewChangeTimeout (here the
// whole cell's, as on a paused machine) probes nobody when it runs again.
func TestAStalledBackupDoesNotCountItsOwnStall(t *testing.T) {
	nw := newNetwork(t, 1, 2, 3)
	n := nw.node(2)
	nw.now += int64(10 * nw.cfg.ViewChangeTimeout)
	nw.sent = nil
	nw.step(nw.reps[2], nil) // the backup runs first
	if ps := nw.sentOf(MsgProbe, 2); len(ps) != 0 {
		t.Fatalf("a backup probed after its own stall: %v", ps)
	}
	if n.View() != 0 {
		t.Fatalf("view %d", n.View())
	}
	nw.run(nw.cfg.ViewChangeTimeout)
	if ps := nw.sentOf(MsgProbe, 0); len(ps) != 0 || !nw.node(1).IsPrimary() {
		t.Fatalf("probes after a backup's stall: %v", ps)
	}
}
