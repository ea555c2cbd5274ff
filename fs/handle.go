package fs

import (
	"slices"

	"github.com/chubbygo/chubby/gen/chubby"
)

// handle is one open of one node by one session.
type handle struct {
	id        int64
	session   *session
	path      string // the node's path at Open
	instance  int64  // the node's instance at Open
	mode      chubby.OpenMode
	eventMask int32

	// node is the node opened; it stays even after the node is deleted
	// (node.deleted), which makes the handle invalid for everything but
	// Close. After a Restore a handle of a deleted node has node == nil.
	node *node

	held      chubby.LockMode // 0: holds no lock
	heldDelay int64           // lock-delay if the session expires while holding
	holdIdx   int             // position in node.lock.holders

	wait      chubby.LockMode // 0: not waiting
	waitDelay int64
	waitPrev  *handle // neighbours in node.lock's wait queue
	waitNext  *handle
}

// live reports whether the handle's node still exists.
func (h *handle) live() bool { return h.node != nil && !h.node.deleted }

// wire is the handle as clients name it.
func (h *handle) wire() *chubby.Handle {
	return &chubby.Handle{Id: h.id, Session: h.session.id, Instance: h.instance, Path: h.path}
}

// handleFor validates a handle named by a request: its session is alive
// (else SESSION_EXPIRED), and the handle exists with that session, instance
// and path (else HANDLE_INVALID). With needNode, its node must also still
// exist (else HANDLE_INVALID): only Close works on a handle whose node was
// deleted or re-created.
func (s *State) handleFor(w *chubby.Handle, needNode bool) (*handle, *chubby.ChubbyError) {
	if w == nil {
		return nil, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "handle is missing")
	}
	if s.sessions[w.Session] == nil {
		return nil, Errorf(chubby.ErrorCode_SESSION_EXPIRED, "session %d is unknown or has ended", w.Session)
	}
	h := s.handles[w.Id]
	if h == nil || h.session.id != w.Session || h.instance != w.Instance || h.path != w.Path {
		return nil, Errorf(chubby.ErrorCode_HANDLE_INVALID, "no open handle %d of session %d on %s (instance %d)", w.Id, w.Session, w.Path, w.Instance)
	}
	if needNode && !h.live() {
		return nil, Errorf(chubby.ErrorCode_HANDLE_INVALID, "handle %d: %s (instance %d) was deleted", w.Id, w.Path, w.Instance)
	}
	return h, nil
}

// checkNewHandle validates opening one more handle in sess.
func (s *State) checkNewHandle(sess *session) *chubby.ChubbyError {
	if len(sess.handles) >= s.limits.MaxHandlesPerSession {
		return Errorf(chubby.ErrorCode_LIMIT_EXCEEDED, "session %d has %d open handles, the limit is %d", sess.id, len(sess.handles), s.limits.MaxHandlesPerSession)
	}
	if len(s.handles) >= s.limits.MaxHandles {
		return Errorf(chubby.ErrorCode_LIMIT_EXCEEDED, "the cell has %d open handles, the limit is %d", len(s.handles), s.limits.MaxHandles)
	}
	return nil
}

// openHandle creates a handle of sess on n. The caller has validated it.
func (s *State) openHandle(sess *session, n *node, mode chubby.OpenMode, eventMask int32) *handle {
	h := &handle{
		id:        s.nextHandle,
		session:   sess,
		path:      n.path,
		instance:  n.instance,
		mode:      mode,
		eventMask: eventMask,
		node:      n,
		holdIdx:   -1,
	}
	s.nextHandle++
	s.handles[h.id] = h
	sess.handles[h.id] = h
	if eventMask != 0 {
		// Ids only grow, so appending keeps watchers ascending.
		n.watchers = append(n.watchers, h)
	}
	return h
}

// closeHandle closes h: a lock it holds is released cleanly (no lock-delay)
// and a pending Acquire fails with HANDLE_INVALID. The freed lock goes to
// the next waiters.
func (s *State) closeHandle(h *handle, fx *Effects) {
	var n *node
	if h.wait != 0 {
		n = h.node
		s.dequeue(n, h)
		fx.Woken = append(fx.Woken, Wake{Handle: h.id, Session: h.session.id,
			Err: Errorf(chubby.ErrorCode_HANDLE_INVALID, "handle %d was closed while waiting for the lock of %s", h.id, n.path)})
	}
	if h.held != 0 {
		n = h.node
		s.releaseHold(h, false)
	}
	s.forgetHandle(h)
	if n != nil {
		s.promote(n, fx)
	}
}

// forgetHandle removes h, which holds and waits for nothing, from the state.
func (s *State) forgetHandle(h *handle) {
	assert(h.held == 0 && h.wait == 0, "forgetting handle %d that holds or waits", h.id)
	if h.eventMask != 0 && h.live() {
		n := h.node
		i, found := slices.BinarySearchFunc(n.watchers, h.id, func(w *handle, id int64) int { return cmpInt64(w.id, id) })
		assert(found && n.watchers[i] == h, "handle %d missing from the watchers of %s", h.id, n.path)
		n.watchers = slices.Delete(n.watchers, i, i+1)
	}
	delete(s.handles, h.id)
	delete(h.session.handles, h.id)
}
