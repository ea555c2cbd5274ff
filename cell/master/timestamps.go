package master

import (
	"fmt"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
)

// TimestampsCall is one GetTimestamps call at the master, as a pure state
// machine in the manner of AcquireCall: each input returns the next
// TimestampsStep, which the driver carries out and whose outcome it feeds
// back.
//
//	step            the driver                                   and then calls
//	TSLease         looks whether it serves as master, and        Lease
//	                whether its master lease is held now
//	TSAwaitLease    waits until the lease is held again, or       LeaseBack, or Gone
//	                until Until
//	TSTake          Oracle.Take(n), then Oracle.Want(n) (and      Took
//	                proposes the reservation wanted), under one
//	                lock
//	TSAwaitWindow   waits until the oracle's window may have      WindowChanged, or Gone
//	                changed (Reset, Stop, Reserved, Failed)
//	TSReply         answers First..First+n-1                      nothing: done
//	TSFail          answers NOT_MASTER (naming the master if      nothing: done
//	                known) if NotMaster, else Err
//
// The rule it holds: timestamps are taken only under a master lease held
// at that moment (a master cut off from the others, whose successor may
// be handing out higher timestamps already, must not answer; a lapsed
// lease may come back within the hold, each round its own), and a call
// that finds the window empty waits for it to change, at most
// MaxOracleRounds times.
type TimestampsCall struct {
	n      int64
	rounds int // Takes that found the window empty
	lease  leaseWait
	phase  tsPhase
}

type tsPhase int

const (
	tsLease tsPhase = iota
	tsAwaitLease
	tsTake
	tsAwaitWindow
	tsDone
)

// TimestampsDo names what a TimestampsStep asks of the driver.
type TimestampsDo int

const (
	TSNothing TimestampsDo = iota
	TSLease
	TSAwaitLease
	TSTake
	TSAwaitWindow
	TSReply
	TSFail
)

func (d TimestampsDo) String() string {
	names := [...]string{"nothing", "lease", "await-lease", "take", "await-window", "reply", "fail"}
	if int(d) < len(names) {
		return names[d]
	}
	return fmt.Sprintf("TimestampsDo(%d)", int(d))
}

// TimestampsStep is what to do next for a TimestampsCall.
type TimestampsStep struct {
	Do        TimestampsDo
	Until     Time  // TSAwaitLease
	First     int64 // TSReply
	NotMaster bool  // TSFail: this replica is not serving as master
	Lapsed    bool  // TSFail: the master lease did not come back within the hold
	Err       error // TSFail otherwise
}

// NewTimestampsCall starts a call for n timestamps whose rounds wait at
// most hold each for a lapsed master lease to come back.
func NewTimestampsCall(n int64, hold time.Duration) *TimestampsCall {
	return &TimestampsCall{n: n, lease: leaseWait{hold: hold}}
}

// Count is the number of timestamps the call asks for (TSTake).
func (t *TimestampsCall) Count() int64 { return t.n }

// Start returns the call's first step.
func (t *TimestampsCall) Start() TimestampsStep { return TimestampsStep{Do: TSLease} }

// Lease takes what the driver found at now: whether it serves as master,
// and whether its master lease is held.
func (t *TimestampsCall) Lease(serving, held bool, now Time) TimestampsStep {
	if t.phase != tsLease {
		return TimestampsStep{}
	}
	switch {
	case !serving:
		return t.fail(TimestampsStep{NotMaster: true})
	case held:
		t.lease.held()
		t.phase = tsTake
		return TimestampsStep{Do: TSTake}
	}
	until, over := t.lease.lapse(now)
	if over {
		return t.fail(TimestampsStep{Lapsed: true, Err: t.lease.refusal()})
	}
	t.phase = tsAwaitLease
	return TimestampsStep{Do: TSAwaitLease, Until: until}
}

// LeaseBack says the master lease may be held again (or the hold ran
// out): the lease is looked at again.
func (t *TimestampsCall) LeaseBack() TimestampsStep {
	if t.phase != tsAwaitLease {
		return TimestampsStep{}
	}
	t.phase = tsLease
	return TimestampsStep{Do: TSLease}
}

// Took takes Oracle.Take's outcome.
func (t *TimestampsCall) Took(first int64, ok bool) TimestampsStep {
	if t.phase != tsTake {
		return TimestampsStep{}
	}
	if ok {
		t.phase = tsDone
		return TimestampsStep{Do: TSReply, First: first}
	}
	t.rounds++
	t.phase = tsAwaitWindow
	return TimestampsStep{Do: TSAwaitWindow}
}

// WindowChanged says the oracle's window may have changed; serving is
// whether the replica still serves as master.
func (t *TimestampsCall) WindowChanged(serving bool) TimestampsStep {
	if t.phase != tsAwaitWindow {
		return TimestampsStep{}
	}
	if t.rounds >= MaxOracleRounds {
		if !serving {
			return t.fail(TimestampsStep{NotMaster: true})
		}
		return t.fail(TimestampsStep{Err: fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the oracle could not reserve timestamps; retry")})
	}
	t.phase = tsLease
	return TimestampsStep{Do: TSLease}
}

// Gone says the call cannot go on (its caller went away, the replica is
// shutting down, or it stopped serving as master): err is the answer.
func (t *TimestampsCall) Gone(err error) TimestampsStep {
	if t.phase == tsDone {
		return TimestampsStep{}
	}
	return t.fail(TimestampsStep{Err: err})
}

func (t *TimestampsCall) fail(st TimestampsStep) TimestampsStep {
	t.phase = tsDone
	st.Do = TSFail
	return st
}
