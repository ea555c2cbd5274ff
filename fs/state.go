package fs

import (
	"github.com/chubbygo/chubby/gen/chubby"
)

// MaxTimeMs is the latest Command.time_ms accepted (9999-12-31T23:59:59.999Z).
// Bounding it keeps every deadline the state computes (time + lock-delay)
// far from overflow.
const MaxTimeMs int64 = 253_402_300_799_999

// State is the whole replicated state of a cell: the namespace, locks,
// sessions and handles. It changes only through Apply, and the same commands
// applied in the same order to New(l) give the same State, byte for byte
// (Snapshot). It is not safe for concurrent use: the caller serializes Apply
// and the read methods.
type State struct {
	limits Limits

	// now is the state's clock: the latest Command.time_ms applied. It never
	// goes back; a command stamped earlier is applied at now.
	now int64

	// Id counters: the next id to hand out. Ids are never reused.
	nextSession  int64
	nextHandle   int64
	nextInstance int64

	// tsReserved is the timestamp oracle's high-water mark (oracle.go).
	tsReserved int64

	root     *node
	sessions map[chubby.SessionID]*session
	handles  map[int64]*handle
	// byPrincipal counts the live sessions of each principal (derived:
	// Restore rebuilds it), for Limits.MaxSessionsPerPrincipal.
	byPrincipal map[string]int

	// delays holds every node whose lock is in lock-delay, ordered by the
	// end of the delay, so that advancing time finds the ends that passed.
	delays delayHeap

	// notified lists the sessions that got events in the command being
	// applied (scratch for Effects.Notified; empty between commands).
	notified []*session

	// tent is set while a Multi's ops apply: what they changed, to take
	// back or carry out (ops_multi.go); nil between commands.
	tent *tentative

	// Counters kept in step with the structures above (checkInvariants
	// recomputes them).
	nodes        int
	locksHeld    int
	waiters      int
	contentBytes int64
	events       int // queued events, all sessions together
}

// New returns the empty state: the root directory and nothing else. It
// panics when l is not valid (see Limits.Validate): limits are
// configuration, checked once at start.
func New(l Limits) *State {
	if err := l.Validate(); err != nil {
		panic(err)
	}
	s := newEmpty(l)
	s.root = &node{
		name:       "",
		path:       "/",
		kind:       chubby.NodeKind_DIRECTORY,
		instance:   1,
		contentGen: 1,
		children:   map[string]*node{},
	}
	s.nextInstance = 2
	s.nodes = 1
	return s
}

func newEmpty(l Limits) *State {
	return &State{
		byPrincipal:  map[string]int{},
		limits:       l,
		nextSession:  1,
		nextHandle:   1,
		nextInstance: 1,
		sessions:     map[chubby.SessionID]*session{},
		handles:      map[int64]*handle{},
	}
}

// Limits returns the limits the state enforces.
func (s *State) Limits() Limits { return s.limits }

// Now returns the state's clock: the latest Command.time_ms applied (0
// before the first command).
func (s *State) Now() int64 { return s.now }

// Counts is the size of the state, for status pages and metrics.
type Counts struct {
	Sessions     int
	Nodes        int // the root included
	Handles      int
	LocksHeld    int // nodes whose lock is held (by one or more handles)
	Waiters      int // pending Acquires, all nodes together
	ContentBytes int64
	Events       int // queued events not yet acknowledged, all sessions together
}

// Counts returns the size of the state.
func (s *State) Counts() Counts {
	return Counts{
		Sessions:     len(s.sessions),
		Nodes:        s.nodes,
		Handles:      len(s.handles),
		LocksHeld:    s.locksHeld,
		Waiters:      s.waiters,
		ContentBytes: s.contentBytes,
		Events:       s.events,
	}
}
