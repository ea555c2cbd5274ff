package fs

import (
	"container/heap"

	"github.com/chubbygo/chubby/gen/chubby"
)

// lockState is the lock of one node: its holders, its FIFO queue of pending
// Acquires and its lock-delay. A node has one only while the lock is held,
// waited for or delayed.
type lockState struct {
	mode    chubby.LockMode // 0: free
	holders []*handle       // any order; handle.holdIdx is the position

	// The wait queue is a doubly linked list through the handles, so that
	// a cancel anywhere in it is O(1).
	waitHead *handle
	waitTail *handle
	nwait    int

	delayUntil int64 // 0, or the end of the lock-delay (always > State.now)
	heapIdx    int   // position in State.delays; -1 when not there
}

// lockOf returns the lock of n, creating it.
func (s *State) lockOf(n *node) *lockState {
	if n.lock == nil {
		n.lock = &lockState{heapIdx: -1}
	}
	return n.lock
}

// tidyLock forgets the lock of n once it is idle.
func (s *State) tidyLock(n *node) {
	l := n.lock
	if l != nil && l.mode == 0 && l.nwait == 0 && l.delayUntil == 0 {
		assert(len(l.holders) == 0 && l.heapIdx < 0, "idle lock of %s still in use", n.path)
		n.lock = nil
	}
}

// grantableNow reports whether a new request for mode on n can be granted at
// once: no lock-delay, nobody waiting (strict FIFO) and compatible with the
// holders (shared with shared).
func (s *State) grantableNow(n *node, mode chubby.LockMode) bool {
	l := n.lock
	if l == nil {
		return true
	}
	if l.delayUntil != 0 || l.nwait > 0 {
		return false
	}
	return l.mode == 0 || l.mode == chubby.LockMode_SHARED && mode == chubby.LockMode_SHARED
}

// unavailableReason says why grantableNow is false, for LOCK_HELD messages.
func (s *State) unavailableReason(n *node) string {
	l := n.lock
	switch {
	case l == nil:
		return "lock is free"
	case l.delayUntil != 0:
		return "lock of " + n.path + " is in lock-delay for " + itoa(l.delayUntil-s.now) + " ms"
	case l.nwait > 0 && l.mode == 0:
		return "lock of " + n.path + " has " + itoa(int64(l.nwait)) + " waiters"
	default:
		return "lock of " + n.path + " is held " + modeName(l.mode) + " by " + itoa(int64(len(l.holders))) + " handles, " + itoa(int64(l.nwait)) + " waiting"
	}
}

// grant makes h a holder of the lock of its node in mode.
func (s *State) grant(n *node, h *handle, mode chubby.LockMode, delayMs int64) {
	assert(h.node == n && h.held == 0 && h.wait == 0, "grant to handle %d in a bad state", h.id)
	l := s.lockOf(n)
	assert(l.delayUntil == 0, "grant on %s during lock-delay", n.path)
	acquired := l.mode == 0
	if acquired {
		assert(len(l.holders) == 0, "free lock of %s has holders", n.path)
		l.mode = mode
		n.lockGen++
		s.locksHeld++
	} else {
		assert(l.mode == chubby.LockMode_SHARED && mode == chubby.LockMode_SHARED, "incompatible grant on %s", n.path)
	}
	h.held = mode
	h.heldDelay = delayMs
	h.holdIdx = len(l.holders)
	l.holders = append(l.holders, h)
	if acquired {
		s.notify(n, event{kind: chubby.EventKind_LOCK_ACQUIRED, gen: n.lockGen, mode: mode})
	}
}

// enqueue appends h to the wait queue of n.
func (s *State) enqueue(n *node, h *handle, mode chubby.LockMode, delayMs int64) {
	assert(h.node == n && h.held == 0 && h.wait == 0, "enqueue of handle %d in a bad state", h.id)
	l := s.lockOf(n)
	h.wait = mode
	h.waitDelay = delayMs
	h.waitPrev = l.waitTail
	h.waitNext = nil
	if l.waitTail != nil {
		l.waitTail.waitNext = h
	} else {
		l.waitHead = h
	}
	l.waitTail = h
	l.nwait++
	s.waiters++
}

// dequeue removes the waiting handle h from the queue of n.
func (s *State) dequeue(n *node, h *handle) {
	l := n.lock
	assert(l != nil && h.wait != 0 && h.node == n, "dequeue of handle %d that does not wait on %s", h.id, n.path)
	if h.waitPrev != nil {
		h.waitPrev.waitNext = h.waitNext
	} else {
		l.waitHead = h.waitNext
	}
	if h.waitNext != nil {
		h.waitNext.waitPrev = h.waitPrev
	} else {
		l.waitTail = h.waitPrev
	}
	h.waitPrev, h.waitNext = nil, nil
	h.wait = 0
	h.waitDelay = 0
	l.nwait--
	s.waiters--
}

// releaseHold takes the lock away from its holder h. When expired (the
// holder's session ended without releasing), the lock enters lock-delay for
// the holder's lock_delay_ms. It does not grant the lock to waiters: the
// caller calls promote once it has finished its changes.
func (s *State) releaseHold(h *handle, expired bool) {
	n := h.node
	l := n.lock
	assert(l != nil && h.held != 0 && l.holders[h.holdIdx] == h, "release by handle %d that does not hold", h.id)
	last := l.holders[len(l.holders)-1]
	l.holders[h.holdIdx] = last
	last.holdIdx = h.holdIdx
	l.holders[len(l.holders)-1] = nil
	l.holders = l.holders[:len(l.holders)-1]
	if expired && h.heldDelay > 0 {
		s.setDelay(n, s.now+h.heldDelay)
	}
	h.held = 0
	h.heldDelay = 0
	h.holdIdx = -1
	if len(l.holders) == 0 {
		l.mode = 0
		s.locksHeld--
	}
}

// promote grants the lock of n to the head of its queue as far as the
// strict FIFO order allows: one exclusive request, or every consecutive
// shared request at the head. Only those are woken (no herd effect).
func (s *State) promote(n *node, fx *Effects) {
	l := n.lock
	if l == nil || n.deleted {
		return
	}
	var granted []*handle
	for l.delayUntil == 0 && l.waitHead != nil {
		h := l.waitHead
		if l.mode != 0 && !(l.mode == chubby.LockMode_SHARED && h.wait == chubby.LockMode_SHARED) {
			break
		}
		mode, delay := h.wait, h.waitDelay
		s.dequeue(n, h)
		s.grant(n, h, mode, delay)
		fx.Woken = append(fx.Woken, Wake{Handle: h.id, Session: h.session.id, Sequencer: s.sequencer(n, mode)})
		granted = append(granted, h)
		if mode == chubby.LockMode_EXCLUSIVE {
			break
		}
	}
	if len(granted) > 0 && l.waitHead != nil {
		// Others still wait, and only because of the new holders: they
		// learn at once that their lock is wanted.
		s.notifyHolders(n, granted, l.waitHead.wait)
	}
	s.tidyLock(n)
}

// dropLock removes the lock of n, which is being deleted: holders lose it,
// waiters are woken with HANDLE_INVALID, a lock-delay is forgotten.
func (s *State) dropLock(n *node, fx *Effects) {
	assert(s.tent == nil, "dropLock of %s in a Multi's ops", n.path)
	l := n.lock
	if l == nil {
		return
	}
	for l.waitHead != nil {
		h := l.waitHead
		s.dequeue(n, h)
		fx.Woken = append(fx.Woken, Wake{Handle: h.id, Session: h.session.id,
			Err: Errorf(chubby.ErrorCode_HANDLE_INVALID, "%s was deleted while waiting for its lock", n.path)})
	}
	for len(l.holders) > 0 {
		s.releaseHold(l.holders[len(l.holders)-1], false)
	}
	if l.delayUntil != 0 {
		heap.Remove(&s.delays, l.heapIdx)
		l.delayUntil = 0
	}
	s.tidyLock(n)
	assert(n.lock == nil, "lock of deleted %s still in use", n.path)
}

// setDelay makes the lock of n unavailable until the time until (or later,
// if a longer delay is already pending).
func (s *State) setDelay(n *node, until int64) {
	l := s.lockOf(n)
	if until <= s.now || until <= l.delayUntil {
		return
	}
	if l.delayUntil == 0 {
		l.delayUntil = until
		heap.Push(&s.delays, n)
	} else {
		l.delayUntil = until
		heap.Fix(&s.delays, l.heapIdx)
	}
}

// advance moves the clock to t (never back) and ends the lock-delays that
// are over, granting their queues.
func (s *State) advance(t int64, fx *Effects) {
	if t > s.now {
		s.now = t
	}
	for len(s.delays) > 0 && s.delays[0].lock.delayUntil <= s.now {
		n := heap.Pop(&s.delays).(*node)
		n.lock.delayUntil = 0
		s.promote(n, fx)
		s.tidyLock(n)
	}
}

// sequencer names the lock of n held in mode in its current generation.
func (s *State) sequencer(n *node, mode chubby.LockMode) *chubby.Sequencer {
	return &chubby.Sequencer{Path: n.path, Mode: mode, LockGeneration: n.lockGen, Instance: n.instance}
}

// lockInfo describes the lock of n as of now.
func (s *State) lockInfo(n *node) *chubby.LockInfo {
	li := &chubby.LockInfo{}
	if l := n.lock; l != nil {
		if l.mode != 0 {
			m := l.mode
			li.Mode = &m
		}
		li.Holders = int32(len(l.holders))
		li.Waiters = int32(l.nwait)
		if l.delayUntil > s.now {
			li.DelayRemainingMs = l.delayUntil - s.now
		}
	}
	return li
}

// delayHeap orders the nodes in lock-delay by (delay end, instance): a total
// order, so that delays ending together are processed in the same order on
// every replica and after a restore.
type delayHeap []*node

func (h delayHeap) Len() int { return len(h) }
func (h delayHeap) Less(i, j int) bool {
	a, b := h[i].lock, h[j].lock
	if a.delayUntil != b.delayUntil {
		return a.delayUntil < b.delayUntil
	}
	return h[i].instance < h[j].instance
}
func (h delayHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].lock.heapIdx = i
	h[j].lock.heapIdx = j
}
func (h *delayHeap) Push(x any) {
	n := x.(*node)
	n.lock.heapIdx = len(*h)
	*h = append(*h, n)
}
func (h *delayHeap) Pop() any {
	old := *h
	n := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	n.lock.heapIdx = -1
	return n
}

func modeName(m chubby.LockMode) string {
	switch m {
	case chubby.LockMode_EXCLUSIVE:
		return "exclusive"
	case chubby.LockMode_SHARED:
		return "shared"
	}
	return "unknown"
}

func validMode(m chubby.LockMode) bool {
	return m == chubby.LockMode_EXCLUSIVE || m == chubby.LockMode_SHARED
}
