package sim

import (
	"errors"
	"time"

	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	rp "github.com/chubbygo/chubby/replica"
)

// Blocking Acquire: each call runs the cell's own master.AcquireCall, the
// rules of park, propose, wait, withdraw and answer that the cell's
// handler.acquire carries out over Deferreds and goroutines; here its
// steps are carried out with the simulated replica's proposals, state and
// timers, and the parked calls sit in master.Waiters (the cell's table).
// Around it, as in the cell: a new master withdraws the requests its
// predecessors left waiting before it takes an Acquire, and a master
// that loses mastership answers its parked calls NOT_MASTER.
//
// A step's callback that finds mastership changed (a timer or a proposal
// of an earlier mastership) drops the call: a parked one was answered by
// failParked, a crashed replica's by the connection reset, and any other
// is left to its client's timeout, as a lost reply.

// acqCall is a blocking Acquire being handled; it is its own token in
// master.Waiters.
type acqCall struct {
	q *request
	a *master.AcquireCall
}

func (c *acqCall) handle() *chubby.Handle { return c.a.Op().Handle }

// acquire handles a blocking Acquire.
func (m *masterSim) acquire(q *request) {
	h := q.cmd.Op.Acquire.Handle
	m.r.w.tracef("r%d Acquire from c%d: handle %d request %d wait %dms", m.r.id, q.c.id, h.Id, q.rid, q.waitMs)
	if !m.leases.Alive(h.Session) {
		m.send(q, reply{kind: replyExpired})
		return
	}
	if m.withdrawing {
		m.acqHeld = append(m.acqHeld, q) // until the stale waits are withdrawn
		return
	}
	op := *q.cmd.Op.Acquire
	op.Wait = true
	c := &acqCall{q: q}
	stale := m.waiters.Stale(h.Id, q.rid) || m.r.sm.st.RequestFinished(h.Session, q.rid) // the cell's handler.stale
	c.a = master.NewAcquireCall(&op, q.rid, time.Duration(q.waitMs*ms), m.now(), stale)
	m.step(c, c.a.Start())
}

// step carries out c's steps until one waits for the simulated world.
func (m *masterSim) step(c *acqCall, st master.AcquireStep) {
	h, gen := c.handle(), m.gen
	for {
		if st.Unpark {
			m.waiters.Unpark(h.Id, c)
		}
		switch st.Do {
		case master.DoPark:
			old, reattached, err := m.waiters.Park(h.Id, c.q.rid, c)
			if old != nil {
				o := old.(*acqCall)
				m.step(o, o.a.Woken(nil, master.ErrSuperseded))
			}
			st = c.a.Parked(reattached, err)
		case master.DoPropose:
			m.propose(&fsm.Command{Op: &fsm.Op{Acquire: c.a.Op()}}, func(res *fsm.Result_, err error) {
				if m.gen == gen {
					m.step(c, c.a.Proposed(res, logError(err)))
				}
			})
			return
		case master.DoHeld:
			st = c.a.Held(m.held(h, st.Lease))
		case master.DoWaits:
			st = c.a.Waits(m.r.sm.st.Waits(h.Id))
		case master.DoWithdraw:
			if st.Finishing {
				m.waiters.Finishing(h.Id, c)
			}
			m.withdrawOnce(h, func(err error) {
				if m.gen == gen {
					m.step(c, c.a.Withdrawn(err))
				}
			})
			return
		case master.DoPause:
			m.afterLocal(int64(st.Pause), gen, func() { m.step(c, c.a.Resumed()) })
			return
		case master.DoWait:
			m.afterLocal(max(st.Until-m.now(), 0), gen, func() { m.step(c, c.a.WaitOver()) })
			return
		case master.DoAnswer:
			if st.Record {
				m.waiters.Answered(h.Id, c.q.rid)
			}
			m.waiters.Unpark(h.Id, c)
			m.answerAcquire(c, st.Seq, st.Err)
			return
		default:
			return // DoNothing: answered already
		}
	}
}

// afterLocal runs fn as an input of its own after d of this replica's
// clock, if mastership has not changed by then.
func (m *masterSim) afterLocal(d int64, gen int, fn func()) {
	r := m.r
	r.w.after(r.realAfter(d), func() {
		if m.gen == gen && r.up {
			r.do(func() {
				if m.gen == gen {
					fn()
				}
			}, false)
		}
	})
}

// answerAcquire sends c's answer as the cell's handler would return it.
func (m *masterSim) answerAcquire(c *acqCall, seq *chubby.Sequencer, err error) {
	var gen int64
	if seq != nil {
		gen = seq.LockGeneration
	}
	m.r.w.tracef("r%d answers c%d's Acquire of handle %d: generation %d, %v", m.r.id, c.q.c.id, c.handle().Id, gen, err)
	// Every error here is a *chubby.ChubbyError (logError made the
	// proposals' so): NOT_MASTER and UNAVAILABLE as any failed call, a
	// refusal as the state's answer.
	var ce *chubby.ChubbyError
	switch {
	case err == nil:
		m.send(c.q, reply{kind: replyOK, res: &fsm.Result_{Sequencer: seq}})
	case errors.As(err, &ce) && ce.Code != chubby.ErrorCode_NOT_MASTER && ce.Code != chubby.ErrorCode_UNAVAILABLE:
		m.send(c.q, reply{kind: replyOK, res: &fsm.Result_{Err: ce}})
	default:
		m.failCall(c.q, false, err)
	}
}

// logError is what the cell's submit makes of a proposal's error
// (Server.logError): NOT_MASTER when this replica is not the master, else
// UNAVAILABLE; a refusal by the state is the result's, not an error.
func logError(err error) error {
	var ce *chubby.ChubbyError
	var nm *rp.NotMasterError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce):
		return ce
	case errors.As(err, &nm), errors.Is(err, errNotMaster):
		return notMaster
	}
	return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "%v", err)
}

// held is the handle's sequencer (any mode: AcquireCall checks it); with
// lease, read under the master lease held now, as the cell's handler.held,
// which fails UNAVAILABLE without one (the cell first waits up to its
// leaseHold for the lease to come back).
func (m *masterSim) held(h *chubby.Handle, lease bool) (*chubby.Sequencer, error) {
	if lease && !m.r.d.Node().CanServeReads(m.now()) {
		return nil, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the master lease lapsed")
	}
	seq, _ := m.r.sm.st.GetSequencer(h)
	return seq, nil
}

// withdrawOnce proposes the CancelWait of handle's waiting request (the
// cell's Server.withdrawOnce); done hears the outcome.
func (m *masterSim) withdrawOnce(h *chubby.Handle, done func(error)) {
	if !m.serving {
		done(notMaster)
		return
	}
	m.propose(&fsm.Command{Op: &fsm.Op{CancelWait: &fsm.CancelWait{Handle: h}}}, func(res *fsm.Result_, err error) {
		if err == nil && res.Err != nil {
			err = res.Err
		}
		done(logError(err))
	})
}

// withdraw is withdrawOnce, proposed again after a pause while the cell
// is only briefly unavailable (master.Withdrawal, the cell's
// withdrawWait); done hears the last outcome, unless mastership changes.
func (m *masterSim) withdraw(h *chubby.Handle, done func(error)) {
	var w master.Withdrawal
	gen := m.gen
	var try func()
	try = func() {
		m.withdrawOnce(h, func(err error) {
			if m.gen != gen {
				return
			}
			pause, again := w.Failed(err)
			if !again {
				done(err)
				return
			}
			m.afterLocal(int64(pause), gen, try)
		})
	}
	try()
}

// wakeParked answers the parked calls an applied command answers.
func (m *masterSim) wakeParked(fx fs.Effects) {
	for _, w := range m.waiters.Applied(fx) {
		c := w.Token.(*acqCall)
		var err error
		if w.Err != nil {
			err = w.Err
		}
		m.step(c, c.a.Woken(w.Sequencer, err))
	}
}

// failParked answers every parked call NOT_MASTER (mastership lost), and
// the calls held for the stale withdrawals.
func (m *masterSim) failParked() {
	for _, tok := range m.waiters.Fail() {
		c := tok.(*acqCall)
		m.step(c, c.a.Woken(nil, notMaster))
	}
	held := m.acqHeld
	m.acqHeld, m.withdrawing = nil, false
	for _, q := range held {
		m.refuse(q)
	}
}

// withdrawStale withdraws, one after the other, the requests earlier
// masters left waiting (the cell's cancelStaleWaits); Acquires wait until
// it is done.
func (m *masterSim) withdrawStale() {
	pending := m.r.sm.st.PendingWaits()
	if len(pending) == 0 {
		return
	}
	m.r.w.tracef("r%d withdraws %d waits left by earlier masters", m.r.id, len(pending))
	m.withdrawing = true
	gen := m.gen
	var next func(i int)
	next = func(i int) {
		if m.gen != gen {
			return
		}
		if i == len(pending) {
			m.r.w.tracef("r%d withdrew %d waits left by earlier masters", m.r.id, len(pending))
			held := m.acqHeld
			m.acqHeld, m.withdrawing = nil, false
			for _, q := range held {
				m.acquire(q)
			}
			return
		}
		m.withdraw(pending[i], func(error) { next(i + 1) })
	}
	next(0)
}
