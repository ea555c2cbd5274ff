package master

import (
	"errors"
	"fmt"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
)

// KeepAlive is a KeepAlive request as the master takes it in: its
// sessions, in order, with what each client acknowledged.
type KeepAlive struct {
	IDs []chubby.SessionID
	// Acks are the events each client received (acked_event); InvAcks the
	// invalidations it applied (acked_invalidation, naming its epoch).
	Acks, InvAcks []int64
}

// ParseKeepAlive checks a KeepAlive against the master epoch now and
// takes in its sessions. A request that names an older epoch is refused
// STALE_EPOCH with this one: its client must learn that the master changed
// (and flush what it caches) before this master extends its leases. A
// request must carry 1..MAX_SESSIONS_PER_KEEPALIVE sessions, none absent,
// none twice, none with a negative acked_event (INVALID_ARGUMENT). The
// cell's handler and the simulator's master both take KeepAlives in here.
func ParseKeepAlive(req *chubby.KeepAliveRequest, epoch int64) (KeepAlive, *chubby.ChubbyError) {
	if req == nil {
		return KeepAlive{}, fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "request has no body")
	}
	if e := req.GetEpoch(); e > 0 && e < epoch {
		return KeepAlive{}, &chubby.ChubbyError{Code: chubby.ErrorCode_STALE_EPOCH, Epoch: &epoch,
			Message: fmt.Sprintf("the master changed: epoch %d is over, this is epoch %d", e, epoch)}
	}
	n := len(req.Sessions)
	if n == 0 || n > int(chubby.MAX_SESSIONS_PER_KEEPALIVE) {
		return KeepAlive{}, fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "a KeepAlive carries 1..%d sessions, not %d", chubby.MAX_SESSIONS_PER_KEEPALIVE, n)
	}
	ka := KeepAlive{IDs: make([]chubby.SessionID, 0, n), Acks: make([]int64, 0, n), InvAcks: make([]int64, 0, n)}
	seen := make(map[chubby.SessionID]struct{}, n)
	for _, it := range req.Sessions {
		if it == nil {
			return KeepAlive{}, fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "request has no session item")
		}
		if _, dup := seen[it.Session]; dup {
			return KeepAlive{}, fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "session %d appears twice in one KeepAlive", it.Session)
		}
		if it.GetAckedEvent() < 0 {
			return KeepAlive{}, fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "session %d: acked_event %d is negative", it.Session, it.GetAckedEvent())
		}
		seen[it.Session] = struct{}{}
		ka.IDs = append(ka.IDs, it.Session)
		ka.Acks = append(ka.Acks, it.GetAckedEvent())
		ka.InvAcks = append(ka.InvAcks, it.GetAckedInvalidation())
	}
	return ka, nil
}

// KeepAliveCall is one KeepAlive at the master after ParseKeepAlive, from
// its registration in Leases to its reply, as a pure state machine in the
// manner of AcquireCall: each input returns the next KeepAliveStep, which
// the driver carries out and whose outcome it feeds back.
//
//	step          the driver                                   and then calls
//	KAPark        parks the call up to Wait (woken early by    ParkOver, or Gone
//	              Leases.Wake, Ended, Due); its caller may go
//	KAAnswer      Leases.Answer(call, now, until, ...)         Answered
//	KAAwaitLease  waits until the master lease is held again,  LeaseBack, or Gone
//	              or until Until
//	KAReply       attaches events and invalidations to the     nothing: done
//	              grants and replies
//	KAFail        Leases.Abandon(call) if Abandon; answers     nothing: done
//	              NOT_MASTER (naming the master if known) if
//	              NotMaster, else Err
//
// The rule it holds is the lease rule's last step: leases are extended
// only under a master lease held at the moment of the answer, never from
// a reading of the clock taken before; a lapsed master lease may come back
// within the hold (one heartbeat of a loaded primary), and a call that
// waited the hold for it is refused UNAVAILABLE without extending
// anything.
type KeepAliveCall struct {
	lease    leaseWait
	awaiting bool // a KAAwaitLease is out: a wake changes nothing meanwhile
	done     bool
}

// KeepAliveDo names what a KeepAliveStep asks of the driver.
type KeepAliveDo int

const (
	KANothing KeepAliveDo = iota
	KAPark
	KAAnswer
	KAAwaitLease
	KAReply
	KAFail
)

func (d KeepAliveDo) String() string {
	names := [...]string{"nothing", "park", "answer", "await-lease", "reply", "fail"}
	if int(d) < len(names) {
		return names[d]
	}
	return fmt.Sprintf("KeepAliveDo(%d)", int(d))
}

// KeepAliveStep is what to do next for a KeepAliveCall.
type KeepAliveStep struct {
	Do        KeepAliveDo
	Wait      time.Duration // KAPark
	Until     Time          // KAAwaitLease
	Abandon   bool          // KAFail: unpark the call without extending anything
	NotMaster bool          // KAFail: this replica is not serving as master
	Lapsed    bool          // KAFail: the master lease did not come back within the hold
	Err       error         // KAFail otherwise
}

// NewKeepAliveCall starts a KeepAlive whose answer waits at most hold for
// a lapsed master lease to come back.
func NewKeepAliveCall(hold time.Duration) *KeepAliveCall {
	return &KeepAliveCall{lease: leaseWait{hold: hold}}
}

// Registered takes Leases.Register's outcome: how long to park, or why
// the call is refused. news says the driver found something to tell at
// once (events after the client's acks, invalidations queued): then the
// call is answered now.
func (k *KeepAliveCall) Registered(wait time.Duration, news bool, err error) KeepAliveStep {
	switch {
	case k.done:
		return KeepAliveStep{}
	case errors.Is(err, ErrNotServing):
		return k.fail(KeepAliveStep{NotMaster: true})
	case err != nil:
		return k.fail(KeepAliveStep{Err: fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "KeepAlive refused: %v; retry", err)})
	case wait > 0 && !news:
		return KeepAliveStep{Do: KAPark, Wait: wait}
	}
	return KeepAliveStep{Do: KAAnswer}
}

// ParkOver says the parked call was woken or its time came. While the
// call awaits the master lease it changes nothing: LeaseBack answers.
func (k *KeepAliveCall) ParkOver() KeepAliveStep {
	if k.done || k.awaiting {
		return KeepAliveStep{}
	}
	return KeepAliveStep{Do: KAAnswer}
}

// Gone says the call cannot go on: its caller went away, or this replica
// stopped being the master (err says which; a *chubby.ChubbyError is
// answered as it is). Nothing is extended.
func (k *KeepAliveCall) Gone(err error) KeepAliveStep {
	if k.done {
		return KeepAliveStep{}
	}
	var ce *chubby.ChubbyError
	if !errors.As(err, &ce) {
		err = fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "KeepAlive abandoned: %v", err)
	}
	return k.fail(KeepAliveStep{Abandon: true, Err: err})
}

// Answered takes Leases.Answer's outcome at now.
func (k *KeepAliveCall) Answered(err error, now Time) KeepAliveStep {
	switch {
	case k.done:
		return KeepAliveStep{}
	case err == nil:
		k.done = true
		return KeepAliveStep{Do: KAReply}
	case errors.Is(err, ErrLeaseLapsed):
		until, over := k.lease.lapse(now)
		if over {
			return k.fail(KeepAliveStep{Abandon: true, Lapsed: true, Err: k.lease.refusal()})
		}
		k.awaiting = true
		return KeepAliveStep{Do: KAAwaitLease, Until: until}
	case errors.Is(err, ErrNotServing):
		return k.fail(KeepAliveStep{Abandon: true, NotMaster: true})
	}
	return k.fail(KeepAliveStep{Abandon: true, Err: fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "KeepAlive not answered: %v", err)})
}

// LeaseBack says the master lease may be held again (or the hold ran
// out): the answer is tried again.
func (k *KeepAliveCall) LeaseBack() KeepAliveStep {
	if k.done || !k.awaiting {
		return KeepAliveStep{}
	}
	k.awaiting = false
	return KeepAliveStep{Do: KAAnswer}
}

func (k *KeepAliveCall) fail(st KeepAliveStep) KeepAliveStep {
	k.done = true
	st.Do = KAFail
	return st
}

// leaseWait is a call's hold for a lapsed master lease: it may come back
// within hold of when the call first found it lapsed.
type leaseWait struct {
	hold   time.Duration
	since  Time
	lapsed bool
}

// lapse notes that the lease was found lapsed at now and returns when the
// hold ends, and whether it has.
func (w *leaseWait) lapse(now Time) (until Time, over bool) {
	if !w.lapsed {
		w.lapsed, w.since = true, now
	}
	until = w.since + int64(w.hold)
	return until, now >= until
}

// held notes that the lease was found held: a later lapse has a hold of
// its own.
func (w *leaseWait) held() { w.lapsed = false }

// refusal is the answer of a call whose hold ran out.
func (w *leaseWait) refusal() error {
	return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the master lease lapsed (a majority has not acknowledged it for %v); retry, or find the master", w.hold)
}
