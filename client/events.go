package client

import (
	"fmt"
	"sync"
	"time"

	"github.com/chubbygo/chubby/gen/chubby"
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

	// EventMasterChanged: the cell failed over to a new master (or its one
	// replica restarted): a reply for the session named a higher master
	// epoch than the client knew, or the new master said so
	// (MASTER_FAILED_OVER). Whichever comes first, it is delivered once
	// per new epoch. Events queued before the failover are not lost: the
	// new master delivers them.
	EventMasterChanged

	// EventLostEvents: the cell dropped events of the session's handles
	// because the session's queue overflowed (the client did not keep up,
	// or was cut off for long); Lost says how many. Every handle with an
	// event mask also gets an EVENTS_LOST Event. Re-read what you watch.
	EventLostEvents
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
	case EventLostEvents:
		return "lost-events"
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
	// Lost, for EventLostEvents, is how many events were lost.
	Lost int64
}

// SessionEventBuffer is how many undelivered events a session keeps for an
// application that is slow to read Session.Events. Past it the oldest
// undelivered event is dropped (and the drop logged at debug level): the
// newest events — hence the session's latest state — are always there to
// read.
const SessionEventBuffer = 16

// HandleEventBuffer is how many undelivered events a handle keeps for an
// application that is slow to read Handle.Events. Past it the oldest
// undelivered event is dropped (counted by Handle.DroppedEvents), as for
// Session.Events: the KeepAlive loop never waits for the application.
const HandleEventBuffer = 256

// earlyEventBuffer bounds the events a session keeps for handles whose
// Open has not returned yet (an event can overtake the Open's reply).
const earlyEventBuffer = 1024

// eventQueue is a bounded event channel (of a session or a handle).
// Pushing never blocks: the KeepAlive loop must never wait for the
// application.
type eventQueue[T any] struct {
	ch chan T

	mu      sync.Mutex // serializes push and close
	closed  bool
	dropped uint64 // events dropped because the application did not read
}

func newEventQueue[T any](size int) *eventQueue[T] {
	return &eventQueue[T]{ch: make(chan T, size)}
}

// push queues ev, dropping the oldest queued event when the buffer is
// full. It reports whether an event was dropped. After close it does
// nothing.
func (q *eventQueue[T]) push(ev T) (dropped bool) {
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
func (q *eventQueue[T]) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
}

// droppedCount returns how many events the application lost by not reading.
func (q *eventQueue[T]) droppedCount() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}

// Event is one event of a handle, delivered on Handle.Events: the cell
// queued it when it applied the change, for the handles whose
// OpenOptions.EventMask asked for its kind. The fields a kind does not use
// are zero.
type Event struct {
	// Seq numbers the session's events (1, 2, 3, ...): each is delivered
	// once, in order, also across a failover.
	Seq  int64
	Kind chubby.EventKind
	// Time is the master's clock when the change was applied.
	Time time.Time
	// Path is the handle's node.
	Path string
	// Child is the child's name for CHILD_ADDED, CHILD_REMOVED and
	// CHILD_MODIFIED.
	Child string
	// ContentGeneration is the content generation after the write, for
	// FILE_CONTENTS_MODIFIED and CHILD_MODIFIED.
	ContentGeneration int64
	// LockGeneration and LockMode: for LOCK_ACQUIRED the new holding period
	// and the mode granted; for CONFLICTING_LOCK_REQUEST the generation
	// held and the mode another handle asked for.
	LockGeneration int64
	LockMode       chubby.LockMode
	// LostFrom, for EVENTS_LOST, is the first lost seq; Seq is the last.
	LostFrom int64
}

func eventFromWire(e *chubby.Event) Event {
	return Event{
		Seq:               e.GetSeq(),
		Kind:              e.GetKind(),
		Time:              time.UnixMilli(e.GetTimeMs()),
		Path:              e.GetPath(),
		Child:             e.GetChild(),
		ContentGeneration: e.GetContentGeneration(),
		LockGeneration:    e.GetLockGeneration(),
		LockMode:          e.GetLockMode(),
		LostFrom:          e.GetLostFrom(),
	}
}

// sessionEvents is a session's part of event delivery: the highest seq
// received (sent back as the ack on every KeepAlive, so the cell can
// forget the events), the handles that receive events, and the events
// that overtook the reply of their handle's Open.
type sessionEvents struct {
	mu       sync.Mutex
	last     int64             // highest seq received; every seq up to it is delivered or lost
	watchers map[int64]*Handle // open handles with an event mask, by handle id
	opening  int               // Opens with an event mask not returned yet
	early    []*chubby.Event   // events for unknown handles while opening > 0
}

// acked returns the seq to acknowledge on the next KeepAlive.
func (s *Session) acked() int64 {
	s.ev.mu.Lock()
	defer s.ev.mu.Unlock()
	return s.ev.last
}

// beginOpen records an Open with an event mask in flight: events for
// handles the session does not know yet are kept until it returns.
func (s *Session) beginOpen() {
	s.ev.mu.Lock()
	s.ev.opening++
	s.ev.mu.Unlock()
}

// endOpen records that an Open begun with beginOpen returned; h is its
// handle (nil when it failed), which from now on receives its events,
// those that came early first.
func (s *Session) endOpen(h *Handle) {
	s.ev.mu.Lock()
	defer s.ev.mu.Unlock()
	s.ev.opening--
	if h != nil && s.Err() == nil {
		if s.ev.watchers == nil {
			s.ev.watchers = make(map[int64]*Handle)
		}
		s.ev.watchers[h.h.GetId()] = h
		keep := s.ev.early[:0]
		for _, e := range s.ev.early {
			if e.GetHandle() == h.h.GetId() {
				s.pushHandleEvent(h, e)
			} else {
				keep = append(keep, e)
			}
		}
		clear(s.ev.early[len(keep):])
		s.ev.early = keep
	} else if h != nil {
		h.events.close()
	}
	if s.ev.opening == 0 {
		s.ev.early = nil // whatever is left is for handles nobody will see
	}
}

// unwatch stops event delivery to h and closes its channel.
func (s *Session) unwatch(h *Handle) {
	s.ev.mu.Lock()
	if s.ev.watchers[h.h.GetId()] == h {
		delete(s.ev.watchers, h.h.GetId())
	}
	s.ev.mu.Unlock()
	h.events.close()
}

// closeWatchers closes every handle's event channel (the session ended).
func (s *Session) closeWatchers() {
	s.ev.mu.Lock()
	ws := s.ev.watchers
	s.ev.watchers, s.ev.early = nil, nil
	s.ev.mu.Unlock()
	for _, h := range ws {
		h.events.close()
	}
}

// deliverEvents delivers the events of a KeepAlive reply for the session,
// in order: each seq once (a new master may send again what the old one
// sent), MASTER_FAILED_OVER as EventMasterChanged (once per epoch). Called
// by the KeepAlive loop only; it never blocks.
func (s *Session) deliverEvents(evs []*chubby.Event) {
	for _, e := range evs {
		if e == nil {
			continue
		}
		if e.GetKind() == chubby.EventKind_MASTER_FAILED_OVER {
			s.noteEpoch(e.GetEpoch())
			continue
		}
		s.ev.mu.Lock()
		if e.GetSeq() <= s.ev.last {
			s.ev.mu.Unlock()
			continue // had it already
		}
		next := s.ev.last + 1
		s.ev.last = e.GetSeq()
		first := e.GetSeq()
		if e.GetKind() == chubby.EventKind_EVENTS_LOST {
			first = max(e.GetLostFrom(), next)
		}
		if first > next {
			// A gap the cell did not mark (it should not happen): say so
			// as the cell would have.
			s.lostLocked(&chubby.Event{Seq: first - 1, Kind: chubby.EventKind_EVENTS_LOST, TimeMs: e.GetTimeMs(), LostFrom: &next})
		}
		if e.GetKind() == chubby.EventKind_EVENTS_LOST {
			s.lostLocked(&chubby.Event{Seq: e.GetSeq(), Kind: e.GetKind(), TimeMs: e.GetTimeMs(), LostFrom: &first})
			s.ev.mu.Unlock()
			continue
		}
		h := s.ev.watchers[e.GetHandle()]
		switch {
		case h != nil:
			s.pushHandleEvent(h, e)
			if e.GetKind() == chubby.EventKind_HANDLE_INVALID {
				delete(s.ev.watchers, e.GetHandle()) // nothing follows it
			}
		case s.ev.opening > 0:
			if len(s.ev.early) == earlyEventBuffer {
				s.ev.early = append(s.ev.early[:0], s.ev.early[1:]...)
			}
			s.ev.early = append(s.ev.early, e)
		default:
			s.log.Debug("chubby: event for a handle the session does not know (closed?); dropped",
				"handle", e.GetHandle(), "seq", e.GetSeq(), "kind", e.GetKind())
		}
		s.ev.mu.Unlock()
	}
}

// lostLocked reports lost events e (EVENTS_LOST, LostFrom..Seq) on the
// session's channel and to every handle with an event mask; s.ev.mu is
// held.
func (s *Session) lostLocked(e *chubby.Event) {
	n := e.GetSeq() - e.GetLostFrom() + 1
	s.log.Warn("chubby: the cell dropped events of this session (its queue overflowed)",
		"from", e.GetLostFrom(), "to", e.GetSeq(), "lost", n)
	s.events.push(SessionEvent{Kind: EventLostEvents, At: time.Now(), Epoch: s.Epoch(), Lost: n})
	for _, h := range s.ev.watchers {
		s.pushHandleEvent(h, e)
	}
}

// pushHandleEvent queues e on h's channel, closing it after HANDLE_INVALID.
func (s *Session) pushHandleEvent(h *Handle, e *chubby.Event) {
	if h.events.push(eventFromWire(e)) {
		s.log.Debug("chubby: handle event buffer full; dropped the oldest event",
			"path", h.Path(), "buffer", HandleEventBuffer, "event", e.GetKind())
	}
	if e.GetKind() == chubby.EventKind_HANDLE_INVALID {
		h.events.close()
	}
}
