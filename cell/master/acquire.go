package master

import (
	"errors"
	"fmt"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// A blocking Acquire at the master
//
// A blocking Acquire asks for a lock and, if it is held, waits for it up
// to the call's wait. The state queues the request (fs: a waiting Acquire)
// and a later command grants or fails it; the master parks the call in
// Waiters until then. When the wait is over the request is withdrawn
// (CancelWait) and the call is answered with what the withdrawal left: the
// lock, if a grant applied first, else TIMED_OUT. TIMED_OUT is a promise
// that the handle did not get the lock, so it is said only once a
// withdrawal has applied here; a withdrawal that did not commit leaves the
// outcome open (UNAVAILABLE: Acquire again, or Release).
//
// AcquireCall holds those rules for one call, from its arrival to its
// answer, as a pure state machine: it reads no clock, starts nothing and
// touches no table. Each input returns the next AcquireStep, which the
// driver carries out and whose outcome it feeds back:
//
//	step          the driver                                     and then calls
//	DoPark        Waiters.Park(handle, rid, a token of its own)  Parked
//	DoPropose     proposes Op(), the waiting Acquire             Proposed
//	DoHeld        reads the handle's sequencer in the mode:      Held
//	              under the master lease held now if Lease, else
//	              the state as applied here
//	DoWaits       reads whether the state has a request of       Waits
//	              the handle waiting
//	DoWithdraw    proposes the CancelWait Withdrawal(); with     Withdrawn
//	              Finishing, Waiters.Finishing first
//	DoPause       waits Pause                                    Resumed
//	DoWait        waits for the parked call's answer until       Woken or WaitOver
//	              Until (the call's token answered by
//	              Waiters.Applied, or superseded, or failed)
//	DoAnswer      Settle: records the answer if Record           nothing: done
//	              (Waiters.Answered), unparks its token if
//	              still parked, answers Seq or Err
//
// A step with Unpark set asks the driver to unpark the call's token first.
// Woken may come in any step (a wake answers the call whenever it lands);
// an input after the answer, or one the step does not expect, returns
// DoNothing. The cell's handler and the simulator drive the same code.
type AcquireCall struct {
	op      *fsm.Acquire // the waiting Acquire proposed
	rid     int64
	wait    time.Duration
	until   Time
	attempt int // how many times the Acquire was withdrawn and proposed again
	w       Withdrawal
	phase   acquirePhase
	refusal error // the LOCK_HELD refusal being looked into
	wdErr   error // the final withdrawal error (phaseTimeoutHeld)
}

// AcquireDo names what a step asks of the driver.
type AcquireDo int

const (
	DoNothing AcquireDo = iota
	DoPark
	DoPropose
	DoHeld
	DoWaits
	DoWithdraw
	DoPause
	DoWait
	DoAnswer
)

func (d AcquireDo) String() string {
	names := [...]string{"nothing", "park", "propose", "held", "waits", "withdraw", "pause", "wait", "answer"}
	if int(d) < len(names) {
		return names[d]
	}
	return fmt.Sprintf("AcquireDo(%d)", int(d))
}

// AcquireStep is what to do next for an AcquireCall.
type AcquireStep struct {
	Do        AcquireDo
	Unpark    bool          // unpark the call's token first
	Lease     bool          // DoHeld: read under the master lease held now
	Finishing bool          // DoWithdraw: mark the parked call Finishing first
	Pause     time.Duration // DoPause
	Until     Time          // DoWait: the wait ends then
	// DoAnswer: the lock's sequencer, or the error; Record says the answer
	// is definite and must be recorded (Waiters.Answered) before the call
	// leaves the table.
	Seq    *chubby.Sequencer
	Err    error
	Record bool
}

type acquirePhase int

const (
	phaseStale        acquirePhase = iota // an attempt of a request answered already: looking at the state
	phasePark                             // parking the call
	phasePropose                          // proposing the waiting Acquire
	phaseRefusedHeld                      // refused LOCK_HELD: does the handle hold the lock?
	phaseRefusedWaits                     // ... or has a request waiting with nobody parked?
	phaseRewithdraw                       // withdrawing that request, to propose again
	phaseWait                             // parked, its request queued
	phaseTimeout                          // its wait over: withdrawing its request
	phaseTimeoutHeld                      // withdrawn (or not): does the handle hold the lock?
	phaseDone
)

// NewAcquireCall starts a blocking Acquire that arrived at now, with the
// request number rid (0: none) and the call's wait. op is the waiting
// Acquire to propose (Wait set). stale says the attempt belongs to a
// request that is over — answered for certain already (Waiters.Stale), or
// finished by its client's word (below its session's floor,
// fs.State.RequestFinished) — so that proposed again it would wait anew
// for nobody: it is answered from the state, never proposed. The first
// step is returned by Start.
func NewAcquireCall(op *fsm.Acquire, rid int64, wait time.Duration, now Time, stale bool) *AcquireCall {
	a := &AcquireCall{op: op, rid: rid, wait: wait, until: now + int64(wait), phase: phasePark}
	if stale {
		a.phase = phaseStale
	}
	return a
}

// Start returns the call's first step.
func (a *AcquireCall) Start() AcquireStep {
	if a.phase == phaseStale {
		return AcquireStep{Do: DoHeld, Lease: true}
	}
	return AcquireStep{Do: DoPark}
}

// Op is the waiting Acquire to propose (DoPropose).
func (a *AcquireCall) Op() *fsm.Acquire { return a.op }

// Withdrawal is the CancelWait to propose (DoWithdraw).
func (a *AcquireCall) Withdrawal() *fsm.CancelWait { return &fsm.CancelWait{Handle: a.op.Handle} }

// Done reports whether the call has been answered.
func (a *AcquireCall) Done() bool { return a.phase == phaseDone }

// Parked takes Waiters.Park's outcome.
func (a *AcquireCall) Parked(reattached bool, err *chubby.ChubbyError) AcquireStep {
	if a.phase != phasePark {
		return AcquireStep{}
	}
	switch {
	case err != nil:
		return a.answer(nil, err)
	case reattached:
		// A resend of the call parked, whose request is queued: it
		// waits in the call's place.
		a.phase = phaseWait
		return AcquireStep{Do: DoWait, Until: a.until}
	}
	a.phase = phasePropose
	return AcquireStep{Do: DoPropose}
}

// Proposed takes the outcome of the waiting Acquire's proposal: the
// result, or why it has none (a refusal in res.Err counts as err).
func (a *AcquireCall) Proposed(res *fsm.Result_, err error) AcquireStep {
	if a.phase != phasePropose {
		return AcquireStep{}
	}
	if err == nil && res != nil && res.Err != nil {
		err = res.Err
	}
	switch {
	case err == nil && res == nil:
		return a.answer(nil, fs.Errorf(chubby.ErrorCode_INTERNAL, "Acquire applied without a result"))
	case err == nil && res.GetWaiting():
		a.phase = phaseWait
		return AcquireStep{Do: DoWait, Until: a.until}
	case err == nil && res.Sequencer == nil:
		return a.answer(nil, fs.Errorf(chubby.ErrorCode_INTERNAL, "Acquire applied without a sequencer"))
	case err == nil:
		return a.answer(res.Sequencer, nil)
	case fs.Code(err) == chubby.ErrorCode_LOCK_HELD:
		// Refused by the command that just applied here: the state it
		// left says whether the handle holds the lock already.
		a.phase, a.refusal = phaseRefusedHeld, err
		return AcquireStep{Do: DoHeld, Unpark: true}
	}
	return a.answer(nil, err)
}

// Held takes the handle's sequencer in the call's mode (nil: it does not
// hold the lock), or why it could not be read under the master lease.
func (a *AcquireCall) Held(seq *chubby.Sequencer, err error) AcquireStep {
	if seq != nil && seq.Mode != a.op.Mode {
		seq = nil
	}
	switch a.phase {
	case phaseStale:
		// Proposed again, its request would wait anew, for nobody: the
		// attempt is told what the handle holds.
		if err != nil {
			return a.answer(nil, err)
		}
		if seq != nil {
			return a.answer(seq, nil)
		}
		return a.answer(nil, fs.Errorf(chubby.ErrorCode_TIMED_OUT, "request %d of handle %d was answered already, or its client finished it; the handle does not hold %s", a.rid, a.op.Handle.Id, a.op.Handle.Path))
	case phaseRefusedHeld:
		if seq != nil {
			return a.answer(seq, nil)
		}
		if a.attempt > 0 {
			return a.answer(nil, a.refusal)
		}
		a.phase = phaseRefusedWaits
		return AcquireStep{Do: DoWaits}
	case phaseTimeoutHeld:
		if seq != nil {
			return a.answer(seq, nil)
		}
		if a.wdErr != nil {
			// The request may still be waiting, with nobody parked on it,
			// and be granted later (the handle's next Acquire withdraws
			// it, and so does the next master): not a TIMED_OUT, whose
			// promise is that the handle did not get the lock.
			return a.answer(nil, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "lock %s not granted within %d ms, and withdrawing the request did not commit (%s): it may still be granted to this handle; Acquire again, or Release", a.op.Handle.Path, a.wait.Milliseconds(), fs.Code(a.wdErr)))
		}
		return a.answer(nil, fs.Errorf(chubby.ErrorCode_TIMED_OUT, "lock %s not granted within %d ms", a.op.Handle.Path, a.wait.Milliseconds()))
	}
	return AcquireStep{}
}

// Waits takes whether the state has a request of the handle waiting.
// One with no call parked on it — an earlier master left it, or its
// caller was told it failed and its withdrawal failed — would be granted
// to nobody who hears of it, so it is withdrawn and the Acquire proposed
// again, once.
func (a *AcquireCall) Waits(waits bool) AcquireStep {
	if a.phase != phaseRefusedWaits {
		return AcquireStep{}
	}
	if !waits {
		return a.answer(nil, a.refusal)
	}
	a.phase, a.w = phaseRewithdraw, Withdrawal{}
	return AcquireStep{Do: DoWithdraw}
}

// Withdrawn takes the outcome of the CancelWait proposed (nil: applied).
func (a *AcquireCall) Withdrawn(err error) AcquireStep {
	if a.phase != phaseRewithdraw && a.phase != phaseTimeout {
		return AcquireStep{}
	}
	if pause, again := a.w.Failed(err); again {
		return AcquireStep{Do: DoPause, Pause: pause}
	}
	if a.phase == phaseTimeout {
		// Once a withdrawal applied here, the state says for certain
		// whether a grant applied first. Else only a read under the
		// master lease can show a grant.
		a.phase, a.wdErr = phaseTimeoutHeld, err
		return AcquireStep{Do: DoHeld, Lease: err != nil}
	}
	if err != nil {
		return a.answer(nil, err)
	}
	a.attempt++
	a.phase = phasePark
	return AcquireStep{Do: DoPark}
}

// Resumed says a DoPause is over: the withdrawal is proposed again.
func (a *AcquireCall) Resumed() AcquireStep {
	if a.phase != phaseRewithdraw && a.phase != phaseTimeout {
		return AcquireStep{}
	}
	return AcquireStep{Do: DoWithdraw}
}

// Woken takes the parked call's answer: the lock's sequencer, or the error
// it was answered with (its handle closed, its node deleted, its session
// ended, superseded by a resend, mastership lost).
func (a *AcquireCall) Woken(seq *chubby.Sequencer, err error) AcquireStep {
	if a.phase == phaseDone || a.phase == phaseStale || a.phase == phasePark {
		return AcquireStep{}
	}
	if seq == nil && err == nil {
		err = fs.Errorf(chubby.ErrorCode_INTERNAL, "Acquire woken without a sequencer")
	}
	return a.answer(seq, err)
}

// WaitOver says the call's wait ended (its deadline, or its caller went
// away) with no answer: its request is withdrawn. The call stays in the
// table meanwhile (Finishing: a resend is told to come again) and leaves
// it with its answer recorded.
func (a *AcquireCall) WaitOver() AcquireStep {
	if a.phase != phaseWait {
		return AcquireStep{}
	}
	a.phase, a.w = phaseTimeout, Withdrawal{}
	return AcquireStep{Do: DoWithdraw, Finishing: true}
}

func (a *AcquireCall) answer(seq *chubby.Sequencer, err error) AcquireStep {
	a.phase = phaseDone
	return AcquireStep{Do: DoAnswer, Seq: seq, Err: err, Record: DefiniteErr(err)}
}

// DefiniteErr is Definite of any error: one that is not a
// *chubby.ChubbyError (the caller went away, say) settles nothing.
func DefiniteErr(err error) bool {
	var ce *chubby.ChubbyError
	if err != nil && !errors.As(err, &ce) {
		return false
	}
	return Definite(ce)
}

// WithdrawAttempts bounds the proposals of one Withdrawal.
const WithdrawAttempts = 3

// withdrawPause is the pause before a withdrawal's second proposal; the
// third waits twice as long.
const withdrawPause = 20 * time.Millisecond

// Withdrawal is the retry rule of a CancelWait: a proposal the cell
// refused as only briefly unavailable is proposed again after a pause, at
// most WithdrawAttempts times in all. The zero value is a withdrawal not
// yet proposed.
type Withdrawal struct{ attempts int }

// Failed takes a proposal's outcome (nil: it applied) and says whether to
// propose again, and after what pause.
func (w *Withdrawal) Failed(err error) (pause time.Duration, again bool) {
	w.attempts++
	if err == nil || fs.Code(err) != chubby.ErrorCode_UNAVAILABLE || w.attempts >= WithdrawAttempts {
		return 0, false
	}
	return time.Duration(w.attempts) * withdrawPause, true
}
