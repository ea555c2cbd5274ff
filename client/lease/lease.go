// Package lease is a client's local view of its session's lease: the rules
// by which a Chubby client knows whether its session is safe, in jeopardy
// or expired, as pure code with the time passed in. The Go
// client (package client) keeps its sessions by these rules, and the
// simulator (cell/sim) runs its simulated clients on the very same
// code, so that what it checks about clients' beliefs is what ships.
//
// The rules:
//
//   - The local lease ends at the send time of the request that was
//     answered plus the lease_ms the answer granted, counted on the
//     client's own clock. The master computes lease_ms so that this end
//     comes, in real time, before the master's own lease end whatever the
//     clocks' drift (cell/master, the lease rule). A later answer never
//     moves the end back.
//   - Before the local lease ends the session is safe: its locks are its
//     own and its cache may be used.
//   - When it ends with no answer the session is in jeopardy: the cache
//     must be flushed and not used, and the application should stop
//     acting on its locks. The grace period counts from the end of the
//     local lease.
//   - An answer in jeopardy makes the session safe again, unless its lease
//     is over already (a reply that took longer than its lease renews
//     nothing the client can rely on).
//   - At the end of the grace period, or when the cell says so, the session
//     is expired: nothing of it is valid any more.
package lease

import "time"

// State is where a session stands.
type State uint8

const (
	// Safe: the local lease has not run out.
	Safe State = iota + 1
	// Jeopardy: the local lease ran out; the grace period has not.
	Jeopardy
	// Expired: the grace period ran out, or the session was ended.
	Expired
)

func (s State) String() string {
	switch s {
	case Safe:
		return "safe"
	case Jeopardy:
		return "jeopardy"
	case Expired:
		return "expired"
	}
	return "State(?)"
}

// Local is one session's lease as its client sees it. The zero value is
// not usable: New makes one. It is not safe for concurrent use.
type Local struct {
	grace    time.Duration
	end      time.Time     // local lease end
	lease    time.Duration // the last lease granted
	epoch    int64         // highest master epoch heard of
	renewals uint64        // answers that renewed the lease
	// jeopardy: Step reported the move to jeopardy (the session was safe
	// before); ended: the session is over.
	jeopardy, ended bool
}

// New returns the lease of a session created by a request sent at sent
// and granted lease, by a master of epoch; grace is the grace period.
func New(sent time.Time, lease time.Duration, epoch int64, grace time.Duration) Local {
	return Local{grace: grace, end: sent.Add(lease), lease: lease, epoch: epoch}
}

// State returns the state at now, exact to the moment (a lease that has
// just run out is in jeopardy even before Step reported it).
func (l *Local) State(now time.Time) State {
	switch {
	case l.ended:
		return Expired
	case now.Before(l.end):
		return Safe
	case now.Before(l.end.Add(l.grace)):
		return Jeopardy
	}
	return Expired
}

// Safe reports whether the session is safe at now: its locks are its own
// and its cache may be used.
func (l *Local) Safe(now time.Time) bool { return l.State(now) == Safe }

// Transition is what Step found changed.
type Transition uint8

const (
	// NoChange: the state is what Step last reported.
	NoChange Transition = iota
	// EnteredJeopardy: the local lease ran out since Step last looked.
	EnteredJeopardy
	// GraceOver: the grace period ran out; the session is expired (Step
	// ends it).
	GraceOver
)

// Step reports the transition at now that the caller has not yet heard
// of: each move to jeopardy once, and the end of the grace period (which
// ends the session).
func (l *Local) Step(now time.Time) Transition {
	switch l.State(now) {
	case Jeopardy:
		if !l.jeopardy {
			l.jeopardy = true
			return EnteredJeopardy
		}
	case Expired:
		if !l.ended {
			l.ended = true
			return GraceOver
		}
	}
	return NoChange
}

// Renew takes an answer to a request sent at sent that grants lease,
// received at now. renewed: the answer renews the session (it is safe
// now). safeAgain: it was in jeopardy before (an answer whose lease is
// already over renews nothing).
func (l *Local) Renew(sent time.Time, lease time.Duration, now time.Time) (renewed, safeAgain bool) {
	if l.ended {
		return false, false
	}
	l.lease = lease
	if end := sent.Add(lease); end.After(l.end) {
		l.end = end
	}
	if !l.end.After(now) {
		return false, false
	}
	safeAgain = l.jeopardy
	l.jeopardy = false
	l.renewals++
	return true, safeAgain
}

// NoteEpoch records a master epoch heard in an answer for the session and
// reports whether it is newer than any before (the master changed: the
// cache must be flushed).
func (l *Local) NoteEpoch(epoch int64) bool {
	if epoch <= l.epoch {
		return false
	}
	l.epoch = epoch
	return true
}

// End ends the session (the cell said it ended, or it was closed).
func (l *Local) End() { l.ended = true }

// LeaseEnd returns the local lease end.
func (l *Local) LeaseEnd() time.Time { return l.end }

// GraceEnd returns when the session expires if no answer renews it.
func (l *Local) GraceEnd() time.Time { return l.end.Add(l.grace) }

// Lease returns the last lease granted.
func (l *Local) Lease() time.Duration { return l.lease }

// Epoch returns the highest master epoch heard of.
func (l *Local) Epoch() int64 { return l.epoch }

// Renewals counts the answers that renewed the lease.
func (l *Local) Renewals() uint64 { return l.renewals }
