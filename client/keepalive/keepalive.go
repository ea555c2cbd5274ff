// Package keepalive is a client session's KeepAlive loop as a pure state
// machine: when to send the next KeepAlive, how to back off after a failure,
// when to ask the replicas where the master is, when the session enters
// jeopardy, is safe again, or is over. It does no I/O, reads no clock and
// starts no goroutine: the time comes with every input, and what to do
// comes out in a Ready. The Go client (package client) carries it out over
// Kitex, and the simulator (cell/sim) carries it out over its simulated
// network with its simulated clocks, so the loop the simulator checks is
// the loop that ships. The lease rules themselves are package
// client/lease's; a Keeper holds the session's lease.Local.
//
// The loop, as a driver runs it:
//
//	k := keepalive.New(cfg, sent, granted, epoch)
//	for {
//		k.Tick(now)
//		rd := k.Ready()
//		// rd.Events: tell the application (flush the cache on Jeopardy
//		//   and MasterChanged); rd.End: the session is over, stop.
//		// rd.Cancel: abandon the KeepAlive in flight.
//		// rd.Send: send a KeepAlive to the master guess; k.Sent(now, addr).
//		// rd.Locate: start a locate round; report its end with Located.
//		// Wait for a reply (Answered, Failed), a locate round's end
//		//   (Located) or rd.Wake, whichever comes first.
//	}
//
// The rules:
//
//   - One KeepAlive is in flight at a time. The master parks it until
//     shortly before the lease would end; a reply renews the lease (from
//     the send time, client/lease) and the next KeepAlive goes at once.
//   - A failure that says where to go (NOT_MASTER with a hint the driver
//     follows, STALE_EPOCH naming a newer epoch) is resent at once, at most
//     MaxQuick times in a row: enough to follow a hint and then an epoch,
//     not enough to spin between two replicas that point at each other.
//   - Any other failure is resent after a backoff: BackoffBase·2^n, at most
//     BackoffMax, jittered into [d/2, d).
//   - A failure that says nothing of where the master is (the replica could
//     not be reached, was unavailable, refused without a hint to follow)
//     also asks the replicas where the master is (a locate round), and the
//     next KeepAlive waits for that round as well as for the backoff: the
//     replicas hold their answers during a view change until they know
//     the new master, so a KeepAlive sent meanwhile could only find the
//     old master again.
//   - When a locate round (this session's or anyone's) names a master
//     other than the one the KeepAlive failed at, or a newer epoch, the
//     KeepAlive goes there at once without waiting out its backoff (at
//     most MaxQuick times between replies). When it names a master other
//     than the one a KeepAlive in flight went to, that KeepAlive is
//     abandoned and resent there (for anyone's round, only if it names a
//     newer epoch).
//   - When the local lease runs out the session is in jeopardy: the loop
//     goes on trying and, while a KeepAlive is in flight, asks the
//     replicas where the master is every ProbeInterval (a parked KeepAlive
//     may rightly take a lease to be answered, so it is not simply timed
//     out). When a round it asked for names the master the KeepAlive
//     went to and that KeepAlive has been unanswered for ProbeInterval, it
//     is abandoned and sent again: a master answers a parked KeepAlive
//     before the client's local lease ends, so this one or its reply is
//     lost, and its RPC timeout may outlast the grace period. A reply
//     makes the session safe again; the grace period running out, or
//     SESSION_EXPIRED at any time, ends it.
package keepalive

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/chubbygo/chubby/client/lease"
)

// Config configures a Keeper. DefaultConfig gives the library's values.
type Config struct {
	// Grace is the grace period: how long a session in jeopardy lives
	// before it expires. Required (> 0).
	Grace time.Duration
	// BackoffBase and BackoffMax shape the pause between KeepAlives after
	// a failure (see the package rules). Defaults 50 ms and 500 ms: the
	// grace period, not an attempt count, bounds the retries.
	BackoffBase, BackoffMax time.Duration
	// ProbeInterval is how often a session in jeopardy with a KeepAlive in
	// flight asks the replicas where the master is. Default 500 ms.
	ProbeInterval time.Duration
	// MaxQuick bounds the KeepAlives in a row sent at once, without a
	// backoff, after failures that said where to go; it bounds as well the
	// KeepAlives that locate rounds send early between two replies.
	// Default 3.
	MaxQuick int
	// Jitter returns a number in [0, 1) for the backoff. Default
	// math/rand/v2.Float64; the simulator passes its seeded source.
	Jitter func() float64
}

// Defaults of Config.
const (
	DefaultBackoffBase   = 50 * time.Millisecond
	DefaultBackoffMax    = 500 * time.Millisecond
	DefaultProbeInterval = 500 * time.Millisecond
	DefaultMaxQuick      = 3
)

// DefaultConfig returns the library's configuration for a grace period.
func DefaultConfig(grace time.Duration) Config {
	return Config{Grace: grace, BackoffBase: DefaultBackoffBase, BackoffMax: DefaultBackoffMax,
		ProbeInterval: DefaultProbeInterval, MaxQuick: DefaultMaxQuick, Jitter: rand.Float64}
}

// Failure classifies a failed KeepAlive by what it says about where the
// master is. The driver maps its transport's errors onto these.
type Failure uint8

const (
	// Other says nothing useful (an unexpected error, a malformed reply):
	// resend after a backoff.
	Other Failure = iota
	// Expired: the cell says the session is over (SESSION_EXPIRED).
	Expired
	// Redirected: NOT_MASTER with a hint the driver now follows as its
	// master guess: resend at once.
	Redirected
	// Refused: NOT_MASTER with no hint to follow (none, or the master just
	// failed to reach). The replica is alive and not the master: ask the
	// replicas.
	Refused
	// Stale: STALE_EPOCH, with the master's epoch if it named one. A newer
	// epoch than known is resent at once; otherwise ask the replicas.
	Stale
	// Lost: the replica could not be reached, the call timed out, or the
	// replica was unavailable (shutting down, overloaded): ask the replicas.
	Lost
)

var failureNames = [...]string{"other", "expired", "redirected", "refused", "stale", "lost"}

func (f Failure) String() string {
	if int(f) < len(failureNames) {
		return failureNames[f]
	}
	return fmt.Sprintf("Failure(%d)", uint8(f))
}

// EventKind is what changed for the session.
type EventKind uint8

const (
	// Jeopardy: the local lease ran out with no reply. Flush the cache; the
	// application should stop acting on its locks.
	Jeopardy EventKind = iota + 1
	// Safe: a reply renewed the lease of a session in jeopardy.
	Safe
	// MasterChanged: a reply or a refusal named a newer master epoch. Flush
	// the cache: the new master knows no cachers.
	MasterChanged
)

var eventNames = [...]string{Jeopardy: "jeopardy", Safe: "safe", MasterChanged: "master-changed"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one change, in the order they happened.
type Event struct {
	Kind  EventKind
	Epoch int64 // the highest master epoch known after it
}

// End says why a session is over.
type End uint8

const (
	// NotEnded: the session lives.
	NotEnded End = iota
	// GraceOver: no reply within the grace period after the local lease ended.
	GraceOver
	// CellEnded: the cell said SESSION_EXPIRED.
	CellEnded
	// Closed: the cell said SESSION_EXPIRED after Closing: the close took.
	Closed
)

var endNames = [...]string{"not-ended", "grace-over", "cell-ended", "closed"}

func (e End) String() string {
	if int(e) < len(endNames) {
		return endNames[e]
	}
	return fmt.Sprintf("End(%d)", uint8(e))
}

// Ready is what the driver is to do now; Keeper.Ready hands it over once.
type Ready struct {
	// Events to tell, oldest first.
	Events []Event
	// End is set once, when the session is over; the driver stops.
	End End
	// Cancel: abandon the KeepAlive in flight (the master is elsewhere);
	// its outcome, should it come, is ignored.
	Cancel bool
	// Send: send a KeepAlive to the master guess now and report it with Sent.
	Send bool
	// Locate: start a locate round (or join the one running) and report
	// its end with Located(ours=true). A driver that has nobody else to
	// ask reports it at once with no address.
	Locate bool
	// Wake: call Tick no later than this (zero once the session is over).
	Wake time.Time
}

// Keeper is one session's KeepAlive loop. It is not safe for concurrent
// use; New makes one.
type Keeper struct {
	cfg Config
	ll  lease.Local
	end End
	// closing: a SESSION_EXPIRED from now on means the close took.
	closing bool

	// The KeepAlive in flight: attempt numbers every one sent.
	inFlight bool
	attempt  uint64
	addr     string    // where it went
	sent     time.Time // its send time: the lease it renews counts from here

	retryAt  time.Time // with none in flight: when to send the next
	failures int       // failed attempts in a row, for the backoff
	quick    int       // immediate resends in a row
	wakes    int       // KeepAlives a round sent before their backoff ended, since the last reply
	locating bool      // a locate round this loop asked for is running
	probeAt  time.Time // in jeopardy: when to start the next locate round
	// lost is the replica the last KeepAlive failed at without learning
	// where the master is ("" after a reply); lostRefused: it refused (it
	// is alive, so a round naming it means it has become the master).
	// roundWait: the next KeepAlive waits for the round in locating.
	lost        string
	lostRefused bool
	roundWait   bool

	rd Ready
}

// New returns the loop of a session created by a request sent at sent
// that was granted lease by a master of epoch. It panics on a Config
// without a grace period or a lease that is not positive: both are the
// driver's to validate.
func New(cfg Config, sent time.Time, granted time.Duration, epoch int64) *Keeper {
	if cfg.Grace <= 0 || granted <= 0 {
		panic(fmt.Sprintf("keepalive: grace %v and lease %v must be positive", cfg.Grace, granted))
	}
	def := DefaultConfig(cfg.Grace)
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = def.BackoffBase
	}
	if cfg.BackoffMax < cfg.BackoffBase {
		cfg.BackoffMax = max(def.BackoffMax, cfg.BackoffBase)
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = def.ProbeInterval
	}
	if cfg.MaxQuick <= 0 {
		cfg.MaxQuick = def.MaxQuick
	}
	if cfg.Jitter == nil {
		cfg.Jitter = def.Jitter
	}
	return &Keeper{cfg: cfg, ll: lease.New(sent, granted, epoch, cfg.Grace)}
}
