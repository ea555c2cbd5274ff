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

// tsCall is a timestamps call being handled.
type tsCall struct {
	q      *request
	rounds int   // failed Takes so far
	lapsed int64 // when this round first found the master lease lapsed
	done   bool
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
		if !t.done {
			t.done = true
			m.refuse(t.q)
		}
	}
}

// oracleChanged wakes the calls waiting for the window.
func (m *masterSim) oracleChanged() {
	waiting := m.tsWait
	m.tsWait = nil
	for _, t := range waiting {
		m.later(func() { m.tsWoken(t) })
	}
}

func (m *masterSim) timestamps(q *request) {
	m.tsRound(&tsCall{q: q})
}

// tsRound is one turn of the cell's loop: the master lease held now (a
// lapsed one may come back within leaseHold), Take, Want; the answer, or
// a wait for the window to change.
func (m *masterSim) tsRound(t *tsCall) {
	r := m.r
	if t.done || !r.up {
		return
	}
	if !m.serving || m.becoming {
		t.done = true
		m.refuse(t.q)
		return
	}
	now := m.now()
	if !r.d.Node().CanServeReads(now) {
		if t.lapsed == 0 {
			t.lapsed = now
		}
		if now-t.lapsed >= int64(leaseHold) {
			t.done = true
			m.send(t.q, reply{kind: replyBusy}) // the master lease did not come back
			return
		}
		ep := r.epoch
		r.w.after(r.realAfter(5*ms), func() {
			if r.epoch == ep {
				r.do(func() { m.tsRound(t) }, false)
			}
		})
		return
	}
	t.lapsed = 0
	n := t.q.count
	first, ok := m.oracle.Take(n)
	if term, upto, want := m.oracle.Want(n); want {
		m.reserveTimestamps(term, upto)
	}
	if ok {
		t.done = true
		r.w.check.tsHandedOut(r, first, n)
		m.send(t.q, reply{kind: replyOK, tsFirst: first, tsCount: n})
		return
	}
	t.rounds++
	m.tsWait = append(m.tsWait, t)
}

// tsWoken goes on with a call after the window changed.
func (m *masterSim) tsWoken(t *tsCall) {
	if t.done {
		return
	}
	if t.rounds >= master.MaxOracleRounds {
		t.done = true
		if !m.serving || m.becoming {
			m.refuse(t.q)
		} else {
			m.send(t.q, reply{kind: replyBusy}) // the oracle could not reserve
		}
		return
	}
	m.tsRound(t)
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
