package fs

import (
	"fmt"

	"github.com/chubbygo/chubby/gen/chubby"
)

// Limits bounds every collection of the state machine, so that memory use
// and the cost of any one command are bounded whatever clients do. A command
// that would exceed a limit is refused with LIMIT_EXCEEDED and changes
// nothing. Limits are configuration, not state: every replica of a cell must
// use the same Limits, or they may decide the same command differently.
// Restore accepts a state that exceeds the limits it is given (they only
// refuse growth), so limits may be lowered across a restart.
type Limits struct {
	// MaxNodes bounds the nodes of the namespace, the root included.
	// Default 1,000,000.
	MaxNodes int
	// MaxSessions bounds the live sessions. Default 200,000.
	MaxSessions int
	// MaxSessionsPerPrincipal bounds the live sessions of one principal
	// (Anonymous is one principal: every caller of a plaintext cell), so
	// that one client creating sessions in a loop cannot fill the cell.
	// 0: no bound of its own (MaxSessions bounds it). Default 20,000, a
	// tenth of the default MaxSessions: a leaking client takes at most a
	// tenth of the cell, and the 10,000-session tests and the direct
	// sessions-held bench (18,000) fit; a proxy or a plaintext cell that
	// serves more clients as one principal raises it.
	MaxSessionsPerPrincipal int
	// MaxHandles bounds the open handles of all sessions. Default 2,000,000.
	MaxHandles int
	// MaxHandlesPerSession bounds the open handles of one session.
	// Default 10,000.
	MaxHandlesPerSession int
	// MaxWaitersPerLock bounds the queue of pending Acquires of one node.
	// Default 10,000.
	MaxWaitersPerLock int
	// MaxChildren bounds the entries of one directory. Default 100,000.
	MaxChildren int
	// MaxContentBytes bounds the content of one file (TOO_LARGE). It may be
	// lowered but not raised above chubby.MAX_CONTENT_BYTES, which is the
	// default.
	MaxContentBytes int
	// MaxTotalContentBytes bounds the content of all files together.
	// Default 1 GiB.
	MaxTotalContentBytes int64
	// MaxSavedAnswersPerSession bounds the answers one session keeps for
	// exactly-once: its requests in flight at or above its floor. A new
	// sequenced command that would need one more is refused (LIMIT_EXCEEDED)
	// rather than forget an answer the client may still retry. Default 1024.
	MaxSavedAnswersPerSession int
	// MaxEventsPerSession bounds the events one session keeps queued until
	// its client acknowledges them. On overflow the oldest are replaced by
	// one EVENTS_LOST event (see "Events"). Default 1,000.
	MaxEventsPerSession int
	// MaxTotalEvents bounds the queued events of all sessions together.
	// When the cell is full a session's queue stops growing (its oldest
	// events fold into EVENTS_LOST), except that an empty queue may take
	// one event: the total may exceed the limit by one per session.
	// Default 1,000,000.
	MaxTotalEvents int
}

// DefaultLimits returns the documented default limits.
func DefaultLimits() Limits {
	return Limits{
		MaxNodes:                1_000_000,
		MaxSessions:             200_000,
		MaxSessionsPerPrincipal: 20_000,
		MaxHandles:              2_000_000,
		MaxHandlesPerSession:    10_000,
		MaxWaitersPerLock:       10_000,
		MaxChildren:             100_000,
		MaxContentBytes:         int(chubby.MAX_CONTENT_BYTES),
		MaxTotalContentBytes:    1 << 30,

		MaxSavedAnswersPerSession: 1024,
		MaxEventsPerSession:       1000,
		MaxTotalEvents:            1_000_000,
	}
}

// Validate reports whether every limit is positive (MaxSessionsPerPrincipal
// may be 0: none) and MaxContentBytes is
// within chubby.MAX_CONTENT_BYTES.
func (l Limits) Validate() error {
	switch {
	case l.MaxNodes < 1:
		return fmt.Errorf("fs: MaxNodes %d < 1", l.MaxNodes)
	case l.MaxSessions < 1:
		return fmt.Errorf("fs: MaxSessions %d < 1", l.MaxSessions)
	case l.MaxSessionsPerPrincipal < 0:
		return fmt.Errorf("fs: MaxSessionsPerPrincipal %d < 0", l.MaxSessionsPerPrincipal)
	case l.MaxHandles < 1:
		return fmt.Errorf("fs: MaxHandles %d < 1", l.MaxHandles)
	case l.MaxHandlesPerSession < 1:
		return fmt.Errorf("fs: MaxHandlesPerSession %d < 1", l.MaxHandlesPerSession)
	case l.MaxWaitersPerLock < 1:
		return fmt.Errorf("fs: MaxWaitersPerLock %d < 1", l.MaxWaitersPerLock)
	case l.MaxChildren < 1:
		return fmt.Errorf("fs: MaxChildren %d < 1", l.MaxChildren)
	case l.MaxContentBytes < 1 || l.MaxContentBytes > int(chubby.MAX_CONTENT_BYTES):
		return fmt.Errorf("fs: MaxContentBytes %d not in 1..%d", l.MaxContentBytes, chubby.MAX_CONTENT_BYTES)
	case l.MaxTotalContentBytes < 1:
		return fmt.Errorf("fs: MaxTotalContentBytes %d < 1", l.MaxTotalContentBytes)
	case l.MaxSavedAnswersPerSession < 1:
		return fmt.Errorf("fs: MaxSavedAnswersPerSession %d < 1", l.MaxSavedAnswersPerSession)
	case l.MaxEventsPerSession < 1:
		return fmt.Errorf("fs: MaxEventsPerSession %d < 1", l.MaxEventsPerSession)
	case l.MaxTotalEvents < 1:
		return fmt.Errorf("fs: MaxTotalEvents %d < 1", l.MaxTotalEvents)
	}
	return nil
}
