package client

import (
	"fmt"
	"sync"
	"time"
)

// SessionState is where a session is in its life (see the package
// documentation for the state machine).
type SessionState int

const (
	// StateSafe: the local lease has not run out, so the master still
	// counts the session as alive; its locks are held.
	StateSafe SessionState = iota + 1

	// StateJeopardy: the local lease ran out with no KeepAlive reply. The
	// session may still be alive at the master (or at a new master after
	// a failover), but the client cannot tell: its locks may have been
	// given to others. The client keeps looking for the master for the
	// grace period; calls wait meanwhile.
	StateJeopardy

	// StateExpired: the session is over without Close — the cell said so,
	// or the grace period ran out. Its locks and handles are gone.
	StateExpired

	// StateClosed: the session was closed (Session.Close or Client.Close).
	StateClosed
)

// String returns the state's name in lower case: "safe", "jeopardy", ...
func (st SessionState) String() string {
	switch st {
	case StateSafe:
		return "safe"
	case StateJeopardy:
		return "jeopardy"
	case StateExpired:
		return "expired"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("SessionState(%d)", int(st))
}

// SessionEventKind says what a SessionEvent reports.
type SessionEventKind int

const (
	// EventJeopardy: the local lease ran out; the session is in jeopardy.
	EventJeopardy SessionEventKind = iota + 1

	// EventSafe: a KeepAlive reply came during jeopardy; the session is
	// safe again, with every lock and handle it had.
	EventSafe

	// EventExpired: the session expired (the last event; Err says why).
	EventExpired

	// EventMasterChanged: a reply for the session carried a higher master
	// epoch than the client knew: the cell failed over to a new master (or
	// its one replica restarted). Noticed by the client; the cell's own
	// "master failed over" event comes with the replicated cell.
	EventMasterChanged
)

// String returns the kind's name in lower case: "jeopardy", "safe", ...
func (k SessionEventKind) String() string {
	switch k {
	case EventJeopardy:
		return "jeopardy"
	case EventSafe:
		return "safe"
	case EventExpired:
		return "expired"
	case EventMasterChanged:
		return "master-changed"
	}
	return fmt.Sprintf("SessionEventKind(%d)", int(k))
}

// SessionEvent is one change in a session's life, delivered on
// Session.Events.
type SessionEvent struct {
	Kind SessionEventKind
	// At is when the client noticed the change.
	At time.Time
	// Epoch is the master epoch the session knew when the event happened;
	// for EventMasterChanged, the new one.
	Epoch int64
	// Err, for EventExpired, is why the session expired (it wraps
	// ErrSessionExpired); nil otherwise.
	Err error
}

// SessionEventBuffer is how many undelivered events a session keeps for an
// application that is slow to read Session.Events. Past it the oldest
// undelivered event is dropped (and the drop logged at debug level): the
// newest events — hence the session's latest state — are always there to
// read.
const SessionEventBuffer = 16

// eventQueue is a session's bounded event channel. Pushing never blocks:
// the KeepAlive loop must never wait for the application.
type eventQueue struct {
	ch chan SessionEvent

	mu      sync.Mutex // serializes push and close
	closed  bool
	dropped uint64 // events dropped because the application did not read
}

func newEventQueue() *eventQueue {
	return &eventQueue{ch: make(chan SessionEvent, SessionEventBuffer)}
}

// push queues ev, dropping the oldest queued event when the buffer is
// full. It reports whether an event was dropped. After close it does
// nothing.
func (q *eventQueue) push(ev SessionEvent) (dropped bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	// Two rounds suffice: only push (under q.mu) adds to ch, so once one
	// event is taken out there is room.
	for range 2 {
		select {
		case q.ch <- ev:
			return dropped
		default:
		}
		select {
		case <-q.ch:
			q.dropped++
			dropped = true
		default: // the application read one meanwhile
		}
	}
	return dropped
}

// close closes the channel after the events already queued, so that an
// application ranging over Session.Events stops when the session ends.
func (q *eventQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
}
