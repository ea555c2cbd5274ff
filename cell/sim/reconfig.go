package sim

import (
	"fmt"
	"slices"

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
	next, what := w.nextConfig(info.Members, p.id)
	if next == nil {
		return
	}
	w.res.Reconfigs++
	p.do(func() {
		i, err := p.d.ProposeConfig(next)
		w.tracef("reconfig: r%d proposes %s at %d: %v", p.id, what, i, err)
	}, true)
}

// nextConfig draws a change of cur; primary is the proposer.
func (w *world) nextConfig(cur vr.Members, primary uint64) (vr.Members, string) {
	var voters, learners, outside []uint64
	for _, r := range w.replicas {
		m, ok := cur.Get(r.id)
		switch {
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

// finalMembers returns the configuration the run ends with: the primary's,
// or, without one, the newest epoch's among the up replicas.
func (w *world) finalMembers() vr.Members {
	if p := w.primary(); p != nil {
		return p.d.Node().Info().Members
	}
	var best vr.Info
	for _, r := range w.replicas {
		if r.up {
			if i := r.d.Node().Info(); best.Members == nil || i.Epoch > best.Epoch {
				best = i
			}
		}
	}
	return best.Members
}
