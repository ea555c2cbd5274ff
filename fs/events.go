package fs

import (
	"slices"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// Events (see the package documentation, "Events"). They are replicated
// state: every replica queues the same events, with the same numbers, when
// it applies the same commands, so a new master has every queue.

// MaxTrimAcks bounds the acks of one TrimEvents command.
const MaxTrimAcks = 10_000

// maxEventSeq bounds a session's event numbers (far beyond what a session
// can use), so that numbering never overflows, whatever a snapshot says.
const maxEventSeq = 1 << 62

// eventWireOverhead estimates the encoded size of an Event beyond its
// strings, for EventsAfter's byte budget.
const eventWireOverhead = 96

// maskBit is the event_mask bit of a per-handle kind.
func maskBit(k chubby.EventKind) int32 { return 1 << (k - 1) }

// handleKind reports whether k is a per-handle kind (one a mask can ask for).
func handleKind(k chubby.EventKind) bool {
	return k >= chubby.EventKind_FILE_CONTENTS_MODIFIED && k <= chubby.EventKind_HANDLE_INVALID
}

// childKind reports whether events of kind k name a child.
func childKind(k chubby.EventKind) bool {
	return k == chubby.EventKind_CHILD_ADDED || k == chubby.EventKind_CHILD_REMOVED || k == chubby.EventKind_CHILD_MODIFIED
}

// event is one queued event of a session. Its strings are shared with the
// node and handle it names, never copied.
type event struct {
	seq      int64
	kind     chubby.EventKind
	time     int64
	handle   int64
	path     string
	child    string
	gen      int64           // content generation (contents, child modified) or lock generation (lock kinds)
	mode     chubby.LockMode // lock kinds: the mode granted or asked
	lostFrom int64           // EVENTS_LOST: the first seq it stands for (the last is seq)
}

// first is the first seq an event stands for: lostFrom for EVENTS_LOST.
func (e *event) first() int64 {
	if e.kind == chubby.EventKind_EVENTS_LOST {
		return e.lostFrom
	}
	return e.seq
}

// wireSize estimates the encoded size of e.
func (e *event) wireSize() int { return eventWireOverhead + len(e.path) + len(e.child) }

// EventBytes estimates the encoded size of e, as EventsAfter counts it
// against its byte budget.
func EventBytes(e *chubby.Event) int { return eventWireOverhead + len(e.GetPath()) + len(e.GetChild()) }

// wire is e as clients see it.
func (e *event) wire() *chubby.Event {
	w := &chubby.Event{Seq: e.seq, Kind: e.kind, TimeMs: e.time}
	switch e.kind {
	case chubby.EventKind_EVENTS_LOST:
		w.LostFrom = clonePtr(&e.lostFrom)
		return w
	case chubby.EventKind_FILE_CONTENTS_MODIFIED, chubby.EventKind_CHILD_MODIFIED:
		w.ContentGeneration = clonePtr(&e.gen)
	case chubby.EventKind_LOCK_ACQUIRED, chubby.EventKind_CONFLICTING_LOCK_REQUEST:
		w.LockGeneration = clonePtr(&e.gen)
		w.LockMode = clonePtr(&e.mode)
	}
	w.Handle = clonePtr(&e.handle)
	w.Path = clonePtr(&e.path)
	if childKind(e.kind) {
		w.Child = clonePtr(&e.child)
	}
	return w
}

// eventRing is a session's event queue: a ring buffer, so that appending
// and dropping at the front are O(1) however long the queue is. Its seqs
// are gapless: element i > 0 has seq at(0).seq + i, and only element 0 may
// be an EVENTS_LOST marker.
type eventRing struct {
	buf  []event
	head int // index of the oldest event in buf
	n    int
}

func (r *eventRing) len() int { return r.n }

// at returns the i-th oldest event.
func (r *eventRing) at(i int) *event { return &r.buf[(r.head+i)%len(r.buf)] }

func (r *eventRing) push(e event) {
	if r.n == len(r.buf) {
		nb := make([]event, max(4, 2*len(r.buf)))
		for i := range r.n {
			nb[i] = *r.at(i)
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = e
	r.n++
}

func (r *eventRing) popFront() {
	*r.at(0) = event{} // drop the strings
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	if r.n == 0 {
		r.head = 0
		if len(r.buf) > 64 {
			r.buf = nil // a burst is over: give its memory back
		}
	}
}

// notify queues an event like tmpl (kind and data) for every handle
// watching n whose mask asks for tmpl.kind, and whose session's principal
// may read n now (see mayHear), in ascending handle id.
func (s *State) notify(n *node, tmpl event) {
	if len(n.watchers) == 0 {
		return
	}
	bit := maskBit(tmpl.kind)
	for _, h := range n.watchers {
		if h.eventMask&bit != 0 && s.mayHear(h, n, tmpl.kind) {
			e := tmpl
			e.handle, e.path = h.id, h.path
			s.queueEvent(h.session, e)
		}
	}
}

// notifyHolders queues CONFLICTING_LOCK_REQUEST for the handles in holders
// that ask for it, in ascending handle id: another handle wants the lock
// of n in mode.
func (s *State) notifyHolders(n *node, holders []*handle, mode chubby.LockMode) {
	bit := maskBit(chubby.EventKind_CONFLICTING_LOCK_REQUEST)
	var hs []*handle
	for _, h := range holders {
		if h.eventMask&bit != 0 && s.mayHear(h, n, chubby.EventKind_CONFLICTING_LOCK_REQUEST) {
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		return
	}
	slices.SortFunc(hs, func(a, b *handle) int { return cmpInt64(a.id, b.id) })
	for _, h := range hs {
		s.queueEvent(h.session, event{kind: chubby.EventKind_CONFLICTING_LOCK_REQUEST,
			handle: h.id, path: h.path, gen: n.lockGen, mode: mode})
	}
}

// mayHear reports whether an event of kind about n, the node of h, is
// queued for h: only while the principal of h's session may read n, as
// for the reads. HANDLE_INVALID is always queued: it tells the handle it
// is of no more use, whoever may read what.
func (s *State) mayHear(h *handle, n *node, kind chubby.EventKind) bool {
	return kind == chubby.EventKind_HANDLE_INVALID || s.holds(h.session.principal, n.acl, ReadRight)
}

// notifyConflict queues CONFLICTING_LOCK_REQUEST for the holders of the
// lock of n when a request for mode could not be granted because of them
// (it is incompatible with how they hold the lock).
func (s *State) notifyConflict(n *node, mode chubby.LockMode) {
	l := n.lock
	if l == nil || l.mode == 0 || l.mode == chubby.LockMode_SHARED && mode == chubby.LockMode_SHARED {
		return
	}
	s.notifyHolders(n, l.holders, mode)
}

// queueEvent numbers e, stamps it with the clock and appends it to the
// queue of sess, folding the oldest events into an EVENTS_LOST marker when
// the queue or the cell is over its limit.
func (s *State) queueEvent(sess *session, e event) {
	if s.tent != nil {
		// A Multi's ops: queued once they all apply (ops_multi.go).
		s.tent.events = append(s.tent.events, heldEvent{sess, e})
		return
	}
	assert(s.sessions[sess.id] == sess, "event for ended session %d", sess.id)
	assert(sess.lastEvent < maxEventSeq, "session %d: event numbers exhausted", sess.id)
	sess.lastEvent++
	e.seq = sess.lastEvent
	e.time = s.now
	before := sess.events.len()
	sess.events.push(e)
	s.events++
	switch {
	case sess.events.len() > s.limits.MaxEventsPerSession:
		s.foldEvents(sess, s.limits.MaxEventsPerSession)
	case s.events > s.limits.MaxTotalEvents:
		// The cell is full: this session's queue does not grow (except
		// from empty, so that it can say what it lost).
		s.foldEvents(sess, before)
	}
	if !sess.notified {
		sess.notified = true
		s.notified = append(s.notified, sess)
	}
}

// foldEvents shrinks the queue of sess to keep events (at least 1) by
// replacing its oldest events with one EVENTS_LOST marker standing for all
// of them (and for the marker already at the front, if any).
func (s *State) foldEvents(sess *session, keep int) {
	q := &sess.events
	keep = max(keep, 1)
	fold := q.len() - keep + 1 // events the marker replaces
	if fold < 2 {
		return
	}
	from := q.at(0).first()
	last := *q.at(fold - 1)
	for range fold - 1 {
		q.popFront()
	}
	*q.at(0) = event{seq: last.seq, kind: chubby.EventKind_EVENTS_LOST, time: last.time, lostFrom: from}
	s.events -= fold - 1
}

// trimEvents forgets the events of sess numbered acked or lower (clamped
// to the newest).
func (s *State) trimEvents(sess *session, acked int64) {
	acked = min(acked, sess.lastEvent)
	q := &sess.events
	for q.len() > 0 && q.at(0).seq <= acked {
		q.popFront()
		s.events--
	}
	if q.len() > 0 {
		if e := q.at(0); e.kind == chubby.EventKind_EVENTS_LOST && e.lostFrom <= acked {
			e.lostFrom = acked + 1 // the client has the events up to acked
		}
	}
}

// dropEvents forgets the whole queue of sess (it is ending).
func (s *State) dropEvents(sess *session) {
	s.events -= sess.events.len()
	sess.events = eventRing{}
}

// flushNotified reports the sessions that got events in this command in
// fx.Notified (in the order of their first event) and resets the marks.
func (s *State) flushNotified(fx *Effects) {
	for _, sess := range s.notified {
		sess.notified = false
		if s.sessions[sess.id] == sess {
			fx.Notified = append(fx.Notified, sess.id)
		}
	}
	clear(s.notified)
	s.notified = s.notified[:0]
}

// trimEventsOp applies TrimEvents: every ack is validated first, then each
// live session's queue is trimmed; ended sessions are skipped.
func (s *State) trimEventsOp(req *fsm.TrimEvents) *fsm.Result_ {
	if len(req.Acks) > MaxTrimAcks {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "TrimEvents carries %d acks, at most %d", len(req.Acks), MaxTrimAcks))
	}
	for i, a := range req.Acks {
		if a == nil {
			return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "TrimEvents ack %d is missing", i))
		}
		if a.Acked < 0 {
			return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "TrimEvents ack for session %d is %d, negative", a.Session, a.Acked))
		}
	}
	for _, a := range req.Acks {
		if sess := s.sessions[a.Session]; sess != nil {
			s.trimEvents(sess, a.Acked)
		}
	}
	return &fsm.Result_{}
}

// HasEventsAfter reports whether session id has queued events numbered
// above after: a KeepAlive acknowledging after should be answered now.
func (s *State) HasEventsAfter(id chubby.SessionID, after int64) bool {
	sess := s.sessions[id]
	return sess != nil && sess.events.len() > 0 && sess.lastEvent > after
}

// LastEvent returns the seq of the newest event ever queued for session
// id (0 when none, or the session is not alive).
func (s *State) LastEvent(id chubby.SessionID) int64 {
	if sess := s.sessions[id]; sess != nil {
		return sess.lastEvent
	}
	return 0
}

// EventsAfter returns the queued events of session id numbered above
// after, oldest first: at most maxEvents of them and, past the first, at
// most about maxBytes encoded. nil when there are none or the session is
// not alive. The events are freshly allocated.
func (s *State) EventsAfter(id chubby.SessionID, after int64, maxEvents, maxBytes int) []*chubby.Event {
	sess := s.sessions[id]
	if sess == nil || sess.events.len() == 0 || sess.lastEvent <= after || maxEvents <= 0 {
		return nil
	}
	q := &sess.events
	start := 0
	if first := q.at(0).seq; after >= first {
		start = int(after-first) + 1 // gapless: element i has seq first+i
	}
	var out []*chubby.Event
	bytes := 0
	for i := start; i < q.len() && len(out) < maxEvents; i++ {
		e := q.at(i)
		bytes += e.wireSize()
		if len(out) > 0 && bytes > maxBytes {
			break
		}
		out = append(out, e.wire())
	}
	return out
}

// snapEvents returns the queue of sess for the snapshot.
func (sess *session) snapEvents() []*chubby.Event {
	if sess.events.len() == 0 {
		return nil
	}
	out := make([]*chubby.Event, sess.events.len())
	for i := range out {
		out[i] = sess.events.at(i).wire()
	}
	return out
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
