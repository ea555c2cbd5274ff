package sim

import (
	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// Blocking Acquire in simulated form, as the cell's handler.Acquire does
// it, with the parked calls in master.Waiters (the cell's table): the call
// is parked for its handle, and a waiting Acquire proposed through the
// change pipeline; a command that grants or fails the request answers it
// (fs.Effects.Woken); at the end of its wait the call is unparked, its
// request withdrawn (CancelWait) and the handle looked at: a lock granted
// meanwhile is answered with its sequencer, else TIMED_OUT. A handle whose
// request still waits with nobody parked on it gets that request
// withdrawn and the Acquire proposed again, once. A new master withdraws
// the requests its predecessors left waiting before it takes an Acquire;
// a master that loses mastership answers its parked calls NOT_MASTER.

// acqCall is a blocking Acquire being handled.
type acqCall struct {
	q        *request
	deadline int64 // when its wait ends (the replica's local clock)
	done     bool  // answered
}

func (a *acqCall) handle() *chubby.Handle { return a.q.cmd.Op.Acquire.Handle }

// withdrawAttempts bounds a withdrawal's proposals (the cell's).
const withdrawAttempts = 3

// acquire handles a blocking Acquire.
func (m *masterSim) acquire(q *request) {
	m.r.w.tracef("r%d Acquire from c%d: handle %d request %d wait %dms", m.r.id, q.c.id, q.cmd.Op.Acquire.Handle.Id, q.rid, q.waitMs)
	if !m.leases.Alive(q.cmd.Op.Acquire.Handle.Session) {
		m.send(q, reply{kind: replyExpired})
		return
	}
	if m.withdrawing {
		m.acqHeld = append(m.acqHeld, q) // until the stale waits are withdrawn
		return
	}
	h := q.cmd.Op.Acquire.Handle
	if m.waiters.Stale(h.Id, q.rid) {
		// An attempt of a request answered already (the cell's Acquire).
		a := &acqCall{q: q}
		if !m.r.d.Node().CanServeReads(m.now()) {
			m.send(q, reply{kind: replyBusy}) // no master lease: no read
			return
		}
		if seq := m.heldNow(h, q.cmd.Op.Acquire.Mode); seq != nil {
			m.answerAcquire(a, seq, nil)
			return
		}
		m.answerAcquire(a, nil, fs.Errorf(chubby.ErrorCode_TIMED_OUT, "request %d was answered already", q.rid))
		return
	}
	m.queueAcquire(&acqCall{q: q, deadline: m.now() + q.waitMs*ms}, 0)
}

// answerAcquire answers a's call once.
func (m *masterSim) answerAcquire(a *acqCall, seq *chubby.Sequencer, err *chubby.ChubbyError) {
	if a.done {
		return
	}
	var gen int64
	if seq != nil {
		gen = seq.LockGeneration
	}
	m.r.w.tracef("r%d answers c%d's Acquire of handle %d: generation %d, %v", m.r.id, a.q.c.id, a.handle().Id, gen, err)
	a.done = true
	if master.Definite(err) {
		m.waiters.Answered(a.handle().Id, a.q.rid)
	}
	m.send(a.q, reply{kind: replyOK, res: &fsm.Result_{Sequencer: seq, Err: err}})
}

// queueAcquire parks a and proposes its waiting Acquire (the cell's
// queueAcquire).
func (m *masterSim) queueAcquire(a *acqCall, attempt int) {
	h := a.handle()
	old, reattached, err := m.waiters.Park(h.Id, a.q.rid, a)
	if err != nil {
		a.done = true
		if err.Code == chubby.ErrorCode_UNAVAILABLE {
			m.send(a.q, reply{kind: replyBusy})
		} else {
			m.send(a.q, reply{kind: replyOK, res: &fsm.Result_{Err: err}})
		}
		return
	}
	if old != nil {
		if o := old.(*acqCall); !o.done {
			o.done = true
			m.send(o.q, reply{kind: replyBusy}) // superseded by this resend
		}
	}
	if reattached {
		m.parkWait(a)
		return
	}
	gen := m.gen
	req := *a.q.cmd.Op.Acquire
	m.propose(&fsm.Command{Op: &fsm.Op{Acquire: &req}}, func(res *fsm.Result_, err error) {
		if m.gen != gen || a.done {
			return // mastership lost: Fail answered it
		}
		if err != nil {
			m.waiters.Unpark(h.Id, a)
			a.done = true
			m.result(a.q, nil, err)
			return
		}
		if res.Err == nil {
			if res.GetWaiting() {
				m.parkWait(a)
				return
			}
			m.waiters.Unpark(h.Id, a)
			m.answerAcquire(a, res.Sequencer, nil)
			return
		}
		m.waiters.Unpark(h.Id, a)
		m.acquireRefused(a, attempt, res.Err)
	})
}

// acquireRefused handles a waiting Acquire the state refused: a lock the
// handle holds already is answered with its sequencer; a request of the
// handle left waiting with nobody parked is withdrawn and the Acquire
// proposed again, once.
func (m *masterSim) acquireRefused(a *acqCall, attempt int, err *chubby.ChubbyError) {
	h := a.handle()
	if err.Code != chubby.ErrorCode_LOCK_HELD {
		m.answerAcquire(a, nil, err)
		return
	}
	// Refused by the command that just applied here: the state it left
	// says whether the handle holds the lock already.
	if seq := m.heldNow(h, a.q.cmd.Op.Acquire.Mode); seq != nil {
		m.answerAcquire(a, seq, nil)
		return
	}
	if attempt > 0 || !m.r.sm.st.Waits(h.Id) {
		m.answerAcquire(a, nil, err)
		return
	}
	m.r.w.tracef("r%d withdraws handle %d's wait nobody is parked on", m.r.id, h.Id)
	gen := m.gen
	m.withdraw(h, 0, func(werr *chubby.ChubbyError) {
		if m.gen != gen || a.done {
			return
		}
		if werr != nil {
			m.answerAcquire(a, nil, werr)
			return
		}
		m.queueAcquire(a, attempt+1)
	})
}

// parkWait waits for a's request to be answered, until its deadline; then
// it withdraws the request and answers with what the handle holds.
func (m *masterSim) parkWait(a *acqCall) {
	r, gen := m.r, m.gen
	r.w.after(r.realAfter(max(a.deadline-m.now(), 0)), func() {
		if m.gen != gen || a.done || !r.up {
			return
		}
		r.do(func() {
			if m.gen != gen || a.done {
				return
			}
			h := a.handle()
			// Kept in the table until answered, as the cell's Finishing.
			m.waiters.Finishing(h.Id, a)
			m.withdraw(h, 0, func(werr *chubby.ChubbyError) {
				defer m.waiters.Unpark(h.Id, a) // after its answer is recorded
				if m.gen != gen || a.done {
					return
				}
				mode := a.q.cmd.Op.Acquire.Mode
				if werr != nil {
					// The request may still be granted: not TIMED_OUT.
					if seq := m.held(h, mode); seq != nil {
						m.answerAcquire(a, seq, nil)
						return
					}
					a.done = true
					m.send(a.q, reply{kind: replyBusy})
					return
				}
				if seq := m.heldNow(h, mode); seq != nil {
					m.answerAcquire(a, seq, nil)
					return
				}
				m.answerAcquire(a, nil, fs.Errorf(chubby.ErrorCode_TIMED_OUT, "lock %s not granted in time", h.Path))
			})
		}, false)
	})
}

// withdraw proposes the CancelWait of handle's waiting request, again
// after a pause while this replica stays the master and the cell is only
// briefly unavailable, at most withdrawAttempts times (the cell's
// withdrawWait).
func (m *masterSim) withdraw(h *chubby.Handle, attempt int, done func(*chubby.ChubbyError)) {
	if !m.serving {
		done(notMaster)
		return
	}
	gen := m.gen
	m.propose(&fsm.Command{Op: &fsm.Op{CancelWait: &fsm.CancelWait{Handle: h}}}, func(res *fsm.Result_, err error) {
		var ce *chubby.ChubbyError
		switch {
		case err != nil:
			ce = fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "%v", err)
		case res.Err != nil:
			ce = res.Err
		}
		if ce == nil || ce.Code != chubby.ErrorCode_UNAVAILABLE || attempt+1 >= withdrawAttempts || m.gen != gen {
			done(ce)
			return
		}
		r := m.r
		r.w.after(r.realAfter(int64(attempt+1)*20*ms), func() {
			if m.gen == gen && r.up {
				r.do(func() { m.withdraw(h, attempt+1, done) }, false)
			}
		})
	})
}

// held is the handle's sequencer if it holds the lock in mode, read under
// the master lease.
func (m *masterSim) held(h *chubby.Handle, mode chubby.LockMode) *chubby.Sequencer {
	if !m.r.d.Node().CanServeReads(m.now()) {
		return nil
	}
	return m.heldNow(h, mode)
}

// heldNow is held read with no master lease: after a withdrawal this
// replica applied, the state settles whether the lock was granted.
func (m *masterSim) heldNow(h *chubby.Handle, mode chubby.LockMode) *chubby.Sequencer {
	seq, _ := m.r.sm.st.GetSequencer(h)
	if seq != nil && seq.Mode == mode {
		return seq
	}
	return nil
}

// wakeParked answers the parked calls an applied command answers.
func (m *masterSim) wakeParked(fx fs.Effects) {
	for _, w := range m.waiters.Applied(fx) {
		a := w.Token.(*acqCall)
		m.answerAcquire(a, w.Sequencer, w.Err)
	}
}

// failParked answers every parked call NOT_MASTER (mastership lost), and
// the calls held for the stale withdrawals.
func (m *masterSim) failParked() {
	for _, tok := range m.waiters.Fail() {
		a := tok.(*acqCall)
		if !a.done {
			a.done = true
			m.refuse(a.q)
		}
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
		m.withdraw(pending[i], 0, func(*chubby.ChubbyError) { next(i + 1) })
	}
	next(0)
}
