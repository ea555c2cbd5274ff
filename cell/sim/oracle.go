package sim

import (
	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/gen/fsm"
)

// The timestamp oracle in simulated form, as cell/oracle.go drives
// master.Oracle: the master Resets it when it completes its failover
// duties (become) at the mark in its state, Stops it when it loses
// mastership; a client's timestamps(n) is answered only under the master
// lease held at that moment, from Take; when Want says so, a
// ReserveTimestamps goes through the master's propose path and its end is
// reported with Reserved or Failed (by term, whatever became of the
// mastership meanwhile, as the cell does); a call that finds the window
// empty waits for the window to change and tries again, at most
// master.MaxOracleRounds times; a failed reservation is reported
// master.ReserveRetryDelay after it failed, as in the cell.
//
// The checker (check.go, tsHandedOut and tsAnswered) has been seen to
// fail when this breaks the rules: a Reset from 0 (nine seeds in ten), or
// from the mark read when the replica became primary, before its log
// caught up (one in eight); a window counted before its reservation
// committed (one in two); Take without the master lease (about one in
// two hundred: it needs a master cut off or paused with oracle clients on
// both sides).

// tsCall is a timestamps call being handled: the cell's
// master.TimestampsCall, carried out on the simulated replica.
type tsCall struct {
	q *request
	t *master.TimestampsCall
}

// resetOracle starts a term at the mark in the state (from become).
func (m *masterSim) resetOracle(reserved int64) {
	term := m.oracle.Reset(reserved)
	m.r.w.tracef("r%d oracle: term %d from %d", m.r.id, term, reserved)
	m.oracleChanged()
}

// stopOracle ends the term (from lose): the calls waiting are refused.
func (m *masterSim) stopOracle() {
	m.oracle.Stop()
	waiting := m.tsWait
	m.tsWait = nil
	for _, t := range waiting {
		m.tsStep(t, t.t.Gone(notMaster))
	}
}

// oracleChanged wakes the calls waiting for the window.
func (m *masterSim) oracleChanged() {
	waiting := m.tsWait
	m.tsWait = nil
	for _, t := range waiting {
		m.later(func() { m.tsStep(t, t.t.WindowChanged(m.serving && !m.becoming)) })
	}
}

func (m *masterSim) timestamps(q *request) {
	t := &tsCall{q: q, t: master.NewTimestampsCall(q.count, leaseHold)}
	m.tsStep(t, t.t.Start())
}

// tsStep carries out t's steps until one waits for the simulated world,
// as the cell's Server.timestamps does. A lapsed master lease is looked at
// again every leasePoll (the cell waits for the log's news instead).
func (m *masterSim) tsStep(t *tsCall, st master.TimestampsStep) {
	r := m.r
	for {
		switch st.Do {
		case master.TSLease:
			now := m.now()
			st = t.t.Lease(m.serving && !m.becoming, r.d.Node().CanServeReads(now), now)
		case master.TSAwaitLease:
			// Looked at again whatever becomes of the mastership, as the
			// cell's leaseBack: a master that stopped serving refuses.
			ep := r.epoch
			r.w.after(r.realAfter(min(leasePoll, max(st.Until-m.now(), 0))), func() {
				if r.epoch == ep && r.up {
					r.do(func() { m.tsStep(t, t.t.LeaseBack()) }, false)
				}
			})
			return
		case master.TSTake:
			n := t.t.Count()
			first, ok := m.oracle.Take(n)
			if term, upto, want := m.oracle.Want(n); want {
				m.reserveTimestamps(term, upto)
			}
			if ok {
				r.w.check.tsHandedOut(r, first, n)
			}
			st = t.t.Took(first, ok)
		case master.TSAwaitWindow:
			m.tsWait = append(m.tsWait, t)
			return
		case master.TSReply:
			m.send(t.q, reply{kind: replyOK, tsFirst: st.First, tsCount: t.t.Count()})
			return
		case master.TSFail:
			m.failCall(t.q, st.NotMaster, st.Err)
			return
		default:
			return // TSNothing
		}
	}
}

// reserveTimestamps proposes the oracle's reservation of term up to upto
// and reports how it ended.
func (m *masterSim) reserveTimestamps(term uint64, upto int64) {
	r := m.r
	r.w.tracef("r%d oracle: term %d reserves up to %d", r.id, term, upto)
	m.propose(&fsm.Command{Op: &fsm.Op{ReserveTimestamps: &fsm.ReserveTimestamps{Upto: upto}}}, func(res *fsm.Result_, err error) {
		if err == nil && res.Err != nil {
			r.w.fail("oracle: r%d's reservation up to %d refused: %v", r.id, upto, res.Err)
			return
		}
		if err != nil {
			r.w.tracef("r%d oracle: term %d reservation up to %d failed: %v", r.id, term, upto, err)
			ep := r.epoch
			r.w.after(r.realAfter(int64(master.ReserveRetryDelay)), func() {
				if r.epoch == ep {
					r.do(func() { m.oracle.Failed(term); m.oracleChanged() }, false)
				}
			})
			return
		}
		r.w.tracef("r%d oracle: term %d reserved up to %d", r.id, term, upto)
		m.oracle.Reserved(term, upto)
		m.oracleChanged()
	})
}
