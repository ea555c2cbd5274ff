package vr

import (
	"errors"
	"fmt"
	"time"
)

// MaxClockDrift is the assumed bound on clock rate error: over any real
// interval d, every replica's monotonic clock advances by between
// d·(1−MaxClockDrift) and d·(1+MaxClockDrift). It is 2%, forty times the
// largest slew NTP applies (500 ppm), because a lease is only as safe as
// this assumption. The master lease uses it on both sides:
//
//   - a backup that acknowledges a lease round promises not to join a new
//     view until LeaseDuration·(1+MaxClockDrift) has passed on its clock
//     after it received the round, which is at least LeaseDuration of
//     real time;
//   - the primary holds the lease only until LeaseDuration·(1−MaxClockDrift)
//     has passed on its clock after it started the round, which is at most
//     LeaseDuration of real time.
//
// So the primary stops serving reads before any replica of the quorum that
// granted the lease can help form a new view.
const MaxClockDrift = 0.02

// Protocol limits. Messages are bounded so that a transport can refuse
// anything larger outright.
const (
	// MaxEntryBytes bounds one entry's Data (a file's content is at most
	// 256 KiB, plus the command's envelope).
	MaxEntryBytes = 1 << 20
	// MaxMessageEntries bounds the entries of one message.
	MaxMessageEntries = 4096
	// MaxMessageBytes bounds the entry bytes of one message. Snapshot
	// bytes travel between the drivers in chunks, each in a message of
	// its own (MsgSnapshotChunk).
	MaxMessageBytes = 8 << 20
	// MaxRuns bounds the runs of a log shape in one message.
	MaxRuns = 1024
	// maxView and maxIndex are far beyond any real value; larger numbers in
	// a message are refused so that arithmetic on them cannot overflow.
	maxView  = 1 << 62
	maxIndex = 1 << 62
)

// Config configures a Node. Zero fields take the defaults of
// DefaultConfig.
type Config struct {
	// ID is this replica's id; it must be in the configuration.
	ID uint64

	// InitialMembers is the configuration a new replica starts with (it
	// becomes log entry 1). Every replica of a new cell must be given the
	// same one. Ignored when the replica has state on disk.
	InitialMembers Members
	// Join starts a new replica with an empty log instead, to be added to
	// an existing cell: it is passive (a learner-to-be) until a primary
	// that added it sends it the log. It wins over InitialMembers on an empty
	// disk.
	Join bool

	// HeartbeatInterval is how often the primary sends Commit (heartbeat
	// and lease round) and retransmits. Default 100 ms. A round is due
	// from three quarters of an interval after the last one on, at the
	// next Tick: with Ticks every half interval (replica.Replicated's
	// default) that is one round every interval, even when the Ticks are
	// read a little late; with finer Ticks, a little more often. It is
	// also the most one Tick counts towards a silence (see
	// ViewChangeTimeout).
	HeartbeatInterval time.Duration
	// ViewChangeTimeout is how long a backup waits without hearing from
	// the primary before it probes for a view change, and how long past
	// its lease a primary that no quorum answers keeps its view. It is
	// patience on mere silence: long enough that a primary starved of CPU
	// for about a second keeps its view. Silence is counted in the time
	// this replica ran: a Tick that comes late (the replica itself was
	// starved, or its loop was busy) counts at most HeartbeatInterval, so
	// a replica's own stall is never taken for its primary's death.
	// Default 1.2 s.
	ViewChangeTimeout time.Duration
	// SuspectAfter is the silence after which a backup asks its driver
	// whether the primary's process is still there (Node.Suspect; the
	// driver dials its peer port). A refusal is evidence of death
	// (Node.PeerGone), and the backup probes for a view change at once
	// instead of waiting out ViewChangeTimeout. Default
	// 2·HeartbeatInterval.
	SuspectAfter time.Duration
	// LeaseDuration is the master lease granted per round. It should be
	// below ViewChangeTimeout/(1+MaxClockDrift), so that a lease never
	// delays a view change on silence; and well above HeartbeatInterval
	// plus a round trip, so that a loaded primary keeps it. A view change
	// on evidence of death still waits out what is left of the lease, so
	// it bounds the failover after a kill -9. Default 240 ms.
	LeaseDuration time.Duration

	// MaxPrepareEntries and MaxPrepareBytes bound one Prepare (and Log)
	// message. Defaults 1024 and 4 MiB.
	MaxPrepareEntries int
	MaxPrepareBytes   int
	// MaxInflightPrepares bounds the Prepares sent to one backup and not
	// yet acknowledged (pipelining depth). Default 8.
	MaxInflightPrepares int
	// MaxUncommittedEntries and MaxUncommittedBytes bound the primary's
	// proposed but uncommitted entries; past them Propose returns
	// ErrOverloaded. Defaults 8192 and 64 MiB.
	MaxUncommittedEntries int
	MaxUncommittedBytes   int
	// MaxApplyBytes bounds the entry bytes of Ready.Committed. Default
	// 16 MiB.
	MaxApplyBytes int
	// CompactMargin is how many entries before a snapshot Compact keeps in
	// memory, so that a backup a little behind catches up by entries
	// rather than by a whole snapshot. Default 0 (Storage.SaveSnapshot
	// drops the covered log on disk too).
	CompactMargin int

	// Hooks report what the core does, for logs and metrics. Optional.
	Hooks Hooks
}

// Hooks are callbacks for observability. They must not call back into the
// node.
type Hooks struct {
	// Dropped is told of each message refused as malformed or impossible
	// (a peer bug or corruption), with the reason. Ordinary stale messages
	// (an older view, a duplicate) are not reported.
	Dropped func(m *Message, reason string)
	// Event reports protocol events (view changes, becoming primary,
	// snapshot installs) as a message ("vr: ...") and slog-style key/value
	// pairs, the first two "replica" and the replica's id.
	Event func(msg string, args ...any)
}

// DefaultConfig returns the defaults: HeartbeatInterval 100 ms,
// ViewChangeTimeout 1.2 s, SuspectAfter 200 ms, LeaseDuration 240 ms, MaxPrepareEntries 1024,
// MaxPrepareBytes 4 MiB, MaxInflightPrepares 8, MaxUncommittedEntries
// 8192, MaxUncommittedBytes 64 MiB, MaxApplyBytes 16 MiB, CompactMargin 0.
// ID and InitialMembers have no default.
func DefaultConfig() Config {
	return Config{
		HeartbeatInterval:     100 * time.Millisecond,
		ViewChangeTimeout:     1200 * time.Millisecond,
		SuspectAfter:          200 * time.Millisecond,
		LeaseDuration:         240 * time.Millisecond,
		MaxPrepareEntries:     1024,
		MaxPrepareBytes:       4 << 20,
		MaxInflightPrepares:   8,
		MaxUncommittedEntries: 8192,
		MaxUncommittedBytes:   64 << 20,
		MaxApplyBytes:         16 << 20,
	}
}

// setDefaults gives every field at zero or below its DefaultConfig value.
func (c *Config) setDefaults() {
	d := DefaultConfig()
	def := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	defInt := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&c.HeartbeatInterval, d.HeartbeatInterval)
	def(&c.ViewChangeTimeout, d.ViewChangeTimeout)
	def(&c.LeaseDuration, d.LeaseDuration)
	def(&c.SuspectAfter, 2*c.HeartbeatInterval)
	defInt(&c.MaxPrepareEntries, d.MaxPrepareEntries)
	defInt(&c.MaxPrepareBytes, d.MaxPrepareBytes)
	defInt(&c.MaxInflightPrepares, d.MaxInflightPrepares)
	defInt(&c.MaxUncommittedEntries, d.MaxUncommittedEntries)
	defInt(&c.MaxUncommittedBytes, d.MaxUncommittedBytes)
	defInt(&c.MaxApplyBytes, d.MaxApplyBytes)
}

func (c *Config) validate() error {
	switch {
	case c.ID == 0:
		return errors.New("vr: Config.ID must be set")
	case c.HeartbeatInterval >= c.ViewChangeTimeout:
		return fmt.Errorf("vr: HeartbeatInterval %v must be below ViewChangeTimeout %v", c.HeartbeatInterval, c.ViewChangeTimeout)
	case c.SuspectAfter < c.HeartbeatInterval || c.SuspectAfter > c.ViewChangeTimeout:
		return fmt.Errorf("vr: SuspectAfter %v not in HeartbeatInterval %v .. ViewChangeTimeout %v", c.SuspectAfter, c.HeartbeatInterval, c.ViewChangeTimeout)
	case c.LeaseDuration <= c.HeartbeatInterval:
		return fmt.Errorf("vr: LeaseDuration %v must exceed HeartbeatInterval %v", c.LeaseDuration, c.HeartbeatInterval)
	case c.MaxPrepareEntries > MaxMessageEntries:
		return fmt.Errorf("vr: MaxPrepareEntries %d over %d", c.MaxPrepareEntries, MaxMessageEntries)
	case c.MaxPrepareBytes > MaxMessageBytes || c.MaxPrepareBytes < MaxEntryBytes:
		return fmt.Errorf("vr: MaxPrepareBytes %d not in %d..%d", c.MaxPrepareBytes, MaxEntryBytes, MaxMessageBytes)
	case c.MaxApplyBytes < MaxEntryBytes:
		return fmt.Errorf("vr: MaxApplyBytes %d below %d", c.MaxApplyBytes, MaxEntryBytes)
	case c.MaxUncommittedBytes < MaxEntryBytes:
		return fmt.Errorf("vr: MaxUncommittedBytes %d below %d", c.MaxUncommittedBytes, MaxEntryBytes)
	}
	return nil
}

// Errors returned by Propose and NewNode.
var (
	// ErrOverloaded: too many uncommitted entries; retry later.
	ErrOverloaded = errors.New("vr: too many uncommitted entries")
	// ErrTooLarge: an entry over MaxEntryBytes.
	ErrTooLarge = errors.New("vr: entry too large")
	// ErrNotBootstrapped: a replica with nothing on disk and no
	// InitialMembers.
	ErrNotBootstrapped = errors.New("vr: no state on disk and no initial configuration")
)

// NotPrimaryError is returned by Propose on a replica that is not the
// normal primary. Primary is the primary of View when Known (the cell's
// NOT_MASTER hint).
type NotPrimaryError struct {
	View    uint64
	Primary uint64
	Known   bool
}

func (e *NotPrimaryError) Error() string {
	if e.Known {
		return fmt.Sprintf("vr: not the primary; the primary of view %d is replica %d", e.View, e.Primary)
	}
	return fmt.Sprintf("vr: not the primary; view %d has no known primary yet", e.View)
}
