package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/replica/vr"
)

// Reconfiguration in the simulator: in half the seeds one or two spare
// replicas start with an empty log (vr.Config.Join), and every 100–700 ms
// of the faults the primary of the moment is asked for one change: add a
// replica outside the configuration as a learner, promote a learner,
// remove a voter (the primary itself a third of the time), demote a
// voter, remove a learner. Replacing a replica is these steps in turn.
// The changes run through the shipped Driver.ProposeConfig while every
// fault of the simulator goes on, and every checker holds throughout;
// the end-of-run convergence check asks it of the members of the final
// configuration.
//
// In half the reconfiguring seeds the first removal drawn is an
// operator's, as the cell's RemoveMember makes it: the replica is retired
// (never taken back under its id), and the proposing replica answers the
// operator by master.RemovalOutcome, polled until the change is known
// committed or lost, or until removalWait passes (then the outcome is
// unknown and nothing is claimed). A replica that crashes meanwhile
// answers nothing. At the end, a removal answered committed must hold:
// the replica is not in the final configuration.

// addSpares adds one or two replicas that start empty.
func (w *world) addSpares(snapEvery uint64) {
	for range 1 + w.rc.IntN(2) {
		r := newReplica(w, uint64(len(w.replicas)+1), snapEvery)
		r.join = true
		w.replicas = append(w.replicas, r)
		r.start()
	}
}

func (w *world) scheduleReconfig() {
	w.after(100*ms+w.rc.Int64N(600*ms), func() {
		if w.now >= w.faultsEnd || w.quiet || w.done {
			return
		}
		w.injectReconfig()
		w.scheduleReconfig()
	})
}

// injectReconfig asks the current primary for one configuration change.
func (w *world) injectReconfig() {
	p := w.primary()
	if p == nil || p.paused {
		return
	}
	info := p.d.Node().Info()
	if info.PendingConfig != 0 {
		return
	}
	next, what := w.nextConfig(info.Members, info.Retired, p.id)
	if next == nil {
		return
	}
	w.res.Reconfigs++
	var retire []uint64
	if gone := removed(info.Members, next); gone != 0 && !w.operated && (w.opt.Seed/11)%2 == 0 {
		w.operated = true
		retire = []uint64{gone}
		what = "operator removes " + what
	}
	p.do(func() {
		i, err := p.d.ProposeConfig(next, retire...)
		w.tracef("reconfig: r%d proposes %s at %d: %v", p.id, what, i, err)
		if err == nil && retire != nil {
			w.awaitRemoval(p, p.epoch, retire[0], i, w.now+removalWait)
		}
	}, true)
}

// removal is an operator's removal answered: replica id, by the change at
// index, with what the proposing replica said of it.
type removal struct {
	id, index uint64
	outcome   master.ChangeOutcome
}

// removalWait is how long the proposing replica waits for an operator's
// removal to be known committed or lost (the cell's configCommitWait).
const removalWait = 5 * int64(time.Second)

// removed is the member cur has and next has not (0: none, or more).
func removed(cur, next vr.Members) uint64 {
	var gone uint64
	for _, m := range cur {
		if !next.Contains(m.ID) {
			if gone != 0 {
				return 0
			}
			gone = m.ID
		}
	}
	return gone
}

// awaitRemoval answers an operator's removal of id (the change at index)
// as the cell's awaitRemoved does, from p's log, looked at every 2 ms.
func (w *world) awaitRemoval(p *replica, epoch int, id, index uint64, deadline int64) {
	w.after(2*ms, func() {
		if p.epoch != epoch || !p.up || w.now >= deadline {
			return // crashed: the call failed; or the outcome is unknown
		}
		o := master.ChangePending
		if !p.paused {
			o = master.RemovalOutcome(p.d.Node().Info(), id, index)
		}
		if o == master.ChangePending {
			w.awaitRemoval(p, epoch, id, index, deadline)
			return
		}
		w.tracef("reconfig: r%d tells the operator the removal of %d at %d %v", p.id, id, index, o)
		w.removals = append(w.removals, removal{id: id, index: index, outcome: o})
	})
}

// checkRemovals fails the run if an operator was told a removal committed
// and the replica is in the final configuration or not retired, or told
// it was lost (nothing changed) and the replica is retired: the run
// proposes one operator's removal at most, so only it retires anyone.
func (w *world) checkRemovals(final vr.Members, retired []uint64) {
	for _, r := range w.removals {
		switch in, ret := final.Contains(r.id), slices.Contains(retired, r.id); {
		case r.outcome == master.ChangeCommitted && (in || !ret):
			w.fail("the operator was told replica %d was removed (change at index %d), but the final configuration has it %v, retired %v", r.id, r.index, final, retired)
		case r.outcome == master.ChangeLost && ret:
			w.fail("the operator was told the removal of replica %d (change at index %d) was lost, but the final configuration retired it %v", r.id, r.index, retired)
		}
	}
}

// nextConfig draws a change of cur; primary is the proposer; retired
// replicas are not added back.
func (w *world) nextConfig(cur vr.Members, retired []uint64, primary uint64) (vr.Members, string) {
	var voters, learners, outside []uint64
	for _, r := range w.replicas {
		m, ok := cur.Get(r.id)
		switch {
		case !ok && slices.Contains(retired, r.id):
		case !ok:
			outside = append(outside, r.id)
		case m.Learner:
			learners = append(learners, r.id)
		default:
			voters = append(voters, r.id)
		}
	}
	pick := func(ids []uint64) uint64 { return ids[w.rc.IntN(len(ids))] }
	k := w.rc.IntN(100)
	if len(voters) < 3 {
		k = w.rc.IntN(55) // grow back rather than shrink further
	}
	switch {
	case k < 30 && len(outside) > 0 && len(cur) < vr.MaxMembers:
		id := pick(outside)
		next := append(cur.Clone(), vr.Member{ID: id, ClientAddr: fmt.Sprintf("r%d:7000", id), Learner: true})
		slices.SortFunc(next, func(a, b vr.Member) int { return int(a.ID) - int(b.ID) })
		return next, fmt.Sprintf("add learner %d", id)
	case k < 55 && len(learners) > 0 && len(voters) < 5:
		id := pick(learners)
		return cur.WithRole(id, false), fmt.Sprintf("promote %d", id)
	case k < 80 && len(voters) > 1:
		id := pick(voters)
		if w.rc.IntN(3) == 0 {
			id = primary
		}
		return cur.Without(id), fmt.Sprintf("remove voter %d", id)
	case k < 90 && len(learners) > 0:
		id := pick(learners)
		return cur.Without(id), fmt.Sprintf("remove learner %d", id)
	case len(voters) > 1:
		id := pick(voters)
		return cur.WithRole(id, true), fmt.Sprintf("demote %d", id)
	}
	return nil, ""
}

// finalConfig returns the configuration the run ends with (its members
// and retired replicas): the primary's, or, without one, the newest
// epoch's among the up replicas.
func (w *world) finalConfig() (vr.Members, []uint64) {
	if p := w.primary(); p != nil {
		i := p.d.Node().Info()
		return i.Members, i.Retired
	}
	var best vr.Info
	for _, r := range w.replicas {
		if r.up {
			if i := r.d.Node().Info(); best.Members == nil || i.Epoch > best.Epoch {
				best = i
			}
		}
	}
	return best.Members, best.Retired
}
