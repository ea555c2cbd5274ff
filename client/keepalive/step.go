package keepalive

import (
	"time"

	"github.com/chubbygo/chubby/client/lease"
)

// Tick applies the lease rules at now and decides what is due: the next
// KeepAlive, a locate round in jeopardy, the end of the session.
func (k *Keeper) Tick(now time.Time) {
	if k.end != NotEnded {
		return
	}
	switch k.ll.Step(now) {
	case lease.EnteredJeopardy:
		k.event(Jeopardy)
		k.probeAt = now // look for the master at once
	case lease.GraceOver:
		k.finish(GraceOver)
		return
	}
	jeopardy := k.ll.State(now) == lease.Jeopardy
	if !k.inFlight && !k.held() && !now.Before(k.retryAt) {
		k.inFlight = true
		k.rd.Send = true
	}
	if jeopardy && k.inFlight && !k.locating && !now.Before(k.probeAt) {
		k.locate()
		k.probeAt = now.Add(k.cfg.ProbeInterval)
	}
	k.rd.Wake = k.wakeAt(jeopardy)
}

// held reports whether the next KeepAlive waits for a locate round.
func (k *Keeper) held() bool { return k.roundWait && k.locating }

// wakeAt is when Tick is due at the latest: the lease end (in jeopardy the
// end of the grace period), or sooner the next send or probe.
func (k *Keeper) wakeAt(jeopardy bool) time.Time {
	wake := k.ll.LeaseEnd()
	if jeopardy {
		wake = k.ll.GraceEnd()
	}
	if !k.inFlight && !k.held() && k.retryAt.Before(wake) {
		wake = k.retryAt
	}
	if jeopardy && k.inFlight && !k.locating && k.probeAt.Before(wake) {
		wake = k.probeAt
	}
	return wake
}

// Sent records that the KeepAlive Ready asked for went to addr at now,
// and returns its attempt number, which Answered and Failed take back.
func (k *Keeper) Sent(now time.Time, addr string) uint64 {
	k.attempt++
	k.inFlight, k.addr, k.sent = true, addr, now
	return k.attempt
}

// InFlight returns the attempt number and address of the KeepAlive in
// flight; ok is false when there is none.
func (k *Keeper) InFlight() (attempt uint64, addr string, ok bool) {
	return k.attempt, k.addr, k.inFlight && k.end == NotEnded
}

// current reports whether attempt is the KeepAlive in flight of a live session.
func (k *Keeper) current(attempt uint64) bool {
	return k.end == NotEnded && k.inFlight && attempt == k.attempt
}

// Answered takes the reply to KeepAlive attempt, received at now, that
// grants lease from a master of epoch. It reports whether the reply
// renewed the session: a reply so late that its lease is over renews
// nothing the client can rely on. A reply to another attempt is ignored;
// one that grants no lease counts as a failure.
func (k *Keeper) Answered(now time.Time, attempt uint64, granted time.Duration, epoch int64) (renewed bool) {
	if !k.current(attempt) {
		return false
	}
	k.NoteEpoch(epoch)
	if granted <= 0 {
		k.Failed(now, attempt, Other, 0)
		return false
	}
	k.inFlight = false
	renewed, safeAgain := k.ll.Renew(k.sent, granted, now)
	if safeAgain {
		k.event(Safe)
	}
	k.failures, k.quick, k.wakes, k.retryAt, k.lost = 0, 0, 0, time.Time{}, ""
	return renewed
}

// Failed takes the failure of KeepAlive attempt at now; epoch is the
// master epoch the failure named (0: none). A failure of another attempt
// is ignored.
func (k *Keeper) Failed(now time.Time, attempt uint64, f Failure, epoch int64) {
	if !k.current(attempt) {
		return
	}
	k.inFlight = false
	locate, refused := false, false
	switch f {
	case Expired:
		if k.closing {
			k.finish(Closed)
		} else {
			k.finish(CellEnded)
		}
		return
	case Redirected:
		k.NoteEpoch(epoch)
		if k.resendNow() {
			return
		}
	case Refused:
		k.NoteEpoch(epoch)
		locate, refused = true, true
	case Stale:
		if !k.NoteEpoch(epoch) {
			locate = true // an epoch not newer says nothing of where to go
		} else if k.resendNow() {
			return
		}
	case Lost:
		locate = true
	}
	k.quick = 0
	k.retryAt = now.Add(Backoff(k.cfg.BackoffBase, k.cfg.BackoffMax, k.failures, k.cfg.Jitter()))
	k.failures++
	k.lost, k.lostRefused, k.roundWait = "", false, false
	if locate {
		if !k.locating {
			k.locate()
		}
		k.lost, k.lostRefused, k.roundWait = k.addr, refused, true
	}
}

// resendNow resends at once unless MaxQuick resends in a row went before.
func (k *Keeper) resendNow() bool {
	if k.quick >= k.cfg.MaxQuick {
		return false
	}
	k.quick++
	k.retryAt = time.Time{}
	return true
}

// Located takes the end of a locate round that named addr ("" if none)
// as the master of epoch. ours: the round this loop asked for (with
// Ready.Locate) has ended; otherwise it was somebody else's (another
// session's, a call's, the client's master watch).
func (k *Keeper) Located(now time.Time, addr string, epoch int64, ours bool) {
	if k.end != NotEnded {
		return
	}
	if ours {
		k.locating = false
	}
	if !k.locating {
		k.roundWait = false
	}
	switch {
	case addr == "":
	case k.inFlight && k.addr != "" && addr != k.addr && (ours || epoch > k.ll.Epoch()):
		// The replicas say the master is elsewhere (or anyone's round found
		// a master of a newer epoch there): go there rather than wait for a
		// reply that may never come.
		k.inFlight, k.rd.Cancel, k.retryAt = false, true, time.Time{}
	case k.inFlight && addr == k.addr && ours && k.ll.State(now) == lease.Jeopardy &&
		now.Sub(k.sent) >= k.cfg.ProbeInterval:
		// In jeopardy, the replicas name the master the KeepAlive went to,
		// and it has not answered for a probe interval: a master answers a
		// parked KeepAlive before the client's local lease ends, so this
		// one (or its reply) is lost. Send it again rather than wait out
		// its RPC timeout, which may outlast the grace period.
		k.inFlight, k.rd.Cancel, k.retryAt = false, true, time.Time{}
	case !k.inFlight && k.lost != "" && (addr != k.lost || k.lostRefused || epoch > k.ll.Epoch()) &&
		k.retryAt.After(now) && k.wakes < k.cfg.MaxQuick:
		// Found where the KeepAlive failed to go: go there now.
		k.wakes++
		k.retryAt = time.Time{}
	}
}

// locate asks the driver for a locate round.
func (k *Keeper) locate() {
	k.locating = true
	k.rd.Locate = true
}

// NoteEpoch records a master epoch heard for the session (in a reply, a
// refusal, or by the driver from elsewhere) and reports whether it is
// newer than any before; then a MasterChanged event is due.
func (k *Keeper) NoteEpoch(epoch int64) bool {
	if k.end != NotEnded || !k.ll.NoteEpoch(epoch) {
		return false
	}
	k.event(MasterChanged)
	return true
}

// Closing records that the session is being closed: a SESSION_EXPIRED
// from now on means the close took.
func (k *Keeper) Closing() { k.closing = true }

// Finish ends the session for a reason the driver learned elsewhere (a
// call answered SESSION_EXPIRED, the session was closed). It does nothing
// to a session already over.
func (k *Keeper) Finish(why End) {
	if k.end == NotEnded && why != NotEnded {
		k.finish(why)
	}
}

func (k *Keeper) finish(why End) {
	k.end = why
	k.ll.End()
	k.inFlight, k.locating = false, false
	k.rd.End, k.rd.Send, k.rd.Locate, k.rd.Wake = why, false, false, time.Time{}
}

func (k *Keeper) event(kind EventKind) {
	k.rd.Events = append(k.rd.Events, Event{Kind: kind, Epoch: k.ll.Epoch()})
}

// Events returns the events due and forgets them, for a driver that
// tells them as soon as an input made them (between Readies); Ready hands
// over those not taken.
func (k *Keeper) Events() []Event {
	evs := k.rd.Events
	k.rd.Events = nil
	return evs
}

// Ready returns what is to be done and forgets it: each Ready is handed
// over once.
func (k *Keeper) Ready() Ready {
	rd := k.rd
	k.rd = Ready{}
	return rd
}

// Ended returns why the session is over (NotEnded while it lives).
func (k *Keeper) Ended() End { return k.end }

// State returns where the session stands at now, exact to the moment.
func (k *Keeper) State(now time.Time) lease.State { return k.ll.State(now) }

// Safe reports whether the session is safe at now.
func (k *Keeper) Safe(now time.Time) bool { return k.ll.Safe(now) }

// Epoch returns the highest master epoch heard of.
func (k *Keeper) Epoch() int64 { return k.ll.Epoch() }

// LeaseEnd returns the local lease end.
func (k *Keeper) LeaseEnd() time.Time { return k.ll.LeaseEnd() }

// GraceEnd returns when the session expires if nothing renews it.
func (k *Keeper) GraceEnd() time.Time { return k.ll.GraceEnd() }

// Lease returns the last lease granted: a KeepAlive may be parked that long.
func (k *Keeper) Lease() time.Duration { return k.ll.Lease() }

// Renewals counts the replies that renewed the lease.
func (k *Keeper) Renewals() uint64 { return k.ll.Renewals() }

// Backoff is the pause before retry number attempt (0 for the first
// retry): d = min(max, base·2^attempt), then jittered into [d/2, d) by
// jitter ∈ [0, 1) so that many clients do not retry in step. It never
// returns less than base/2 or more than max. The KeepAlive loop and the
// library's call retries and master watch share it.
func Backoff(base, max time.Duration, attempt int, jitter float64) time.Duration {
	d := base
	for i := 0; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	jitter = min(0.999, jitter)
	if jitter < 0 {
		jitter = 0
	}
	return d/2 + time.Duration(float64(d/2)*jitter)
}
