package fs

import (
	"fmt"
	"hash/crc32"
	"maps"
	"slices"

	"github.com/chubbygo/chubby/gen/chubby"
)

// checkInvariants walks the whole state and reports the first broken
// invariant. Tests run it after every command; Restore runs it on every
// snapshot. It costs O(state), so Apply does not.
//
// The invariants:
//   - the tree: the root is a permanent directory; every node is reachable
//     once, its path is its parent's path joined with its name, names are
//     valid, instances are unique and below the counter, files have no
//     children and no sequence counter, directories no content, checksums
//     match, times are ordered and not in the future; ACL names are empty
//     or valid components, and the memo of an ACL file's parsed content is
//     what its content parses to (nil for every other node);
//   - ephemerals: a node owned by a live session is in its ephemeral set
//     and nowhere else; a node owned by an ended session is a non-empty
//     directory (ephemeral files die with their session, empty orphaned
//     directories are deleted at once);
//   - locks: a lock record exists only while held, waited for or delayed;
//     it is held iff it has holders; an exclusive lock has one holder;
//     holders and waiters are live handles of this node in the right state;
//     the queue is a consistent list; no waiter could be granted now (the
//     queue is stable: granting happens eagerly); a lock-delay ends after
//     now and is in the delay heap;
//   - handles and sessions: every session's principal is valid; every
//     handle belongs to a live session and is in its set; a handle of a deleted node holds and waits for nothing;
//     every holding or waiting handle is listed by its node's lock;
//     the exactly-once record is consistent (ascending, at or above the
//     floor; each answer a success or a bare refusal);
//   - events: each session's queue is gapless and ascending up to its last
//     event seq, with EVENTS_LOST only first; per-handle events name a
//     handle and a path; a node's watchers are exactly the live handles on
//     it with an event mask, ascending by id; nothing is left marked
//     notified between commands;
//   - counters: nodes, locks held, waiters, content bytes and queued
//     events match.
func (s *State) checkInvariants() error {
	if s.root == nil || s.root.parent != nil || s.root.path != "/" || !s.root.isDir() || s.root.owner != 0 || s.root.deleted {
		return fmt.Errorf("bad root")
	}
	if s.tsReserved < 0 || s.tsReserved > MaxTimestamp {
		return fmt.Errorf("timestamps reserved %d out of range", s.tsReserved)
	}
	c := &invCounts{instances: map[int64]bool{}}
	if err := s.checkNode(s.root, c); err != nil {
		return err
	}
	if c.nodes != s.nodes || c.locksHeld != s.locksHeld || c.waiters != s.waiters || c.content != s.contentBytes {
		return fmt.Errorf("counters: nodes %d/%d, locks held %d/%d, waiters %d/%d, content %d/%d",
			c.nodes, s.nodes, c.locksHeld, s.locksHeld, c.waiters, s.waiters, c.content, s.contentBytes)
	}
	if c.delays != len(s.delays) {
		return fmt.Errorf("%d nodes in lock-delay, %d in the delay heap", c.delays, len(s.delays))
	}
	for i, n := range s.delays {
		if n.lock == nil || n.lock.heapIdx != i || n.deleted {
			return fmt.Errorf("delay heap entry %d broken", i)
		}
		if i > 0 && s.delays.Less(i, (i-1)/2) {
			return fmt.Errorf("delay heap order broken at %d", i)
		}
	}

	handles, holding, waiting, events := 0, 0, 0, 0
	if len(s.notified) != 0 {
		return fmt.Errorf("%d sessions left marked notified", len(s.notified))
	}
	perPrincipal := map[string]int{}
	for _, sess := range s.sessions {
		perPrincipal[sess.principal]++
	}
	if !maps.Equal(perPrincipal, s.byPrincipal) {
		return fmt.Errorf("sessions per principal %v, counted %v", s.byPrincipal, perPrincipal)
	}
	for id, sess := range s.sessions {
		if sess == nil || sess.id != id || id < 1 || id >= s.nextSession {
			return fmt.Errorf("session %d: bad id", id)
		}
		if sess.floor < 1 {
			return fmt.Errorf("session %d: request floor %d", id, sess.floor)
		}
		if err := checkPrincipal(sess.principal); err != nil {
			return fmt.Errorf("session %d: %s", id, err.Message)
		}
		for i, a := range sess.answers {
			if a.seq < sess.floor || i > 0 && a.seq <= sess.answers[i-1].seq {
				return fmt.Errorf("session %d: bad saved answer %d (request %d, floor %d)", id, i, a.seq, sess.floor)
			}
			if err := checkAnswer(a.res); err != nil {
				return fmt.Errorf("session %d: saved answer of request %d: %w", id, a.seq, err)
			}
		}
		if err := checkEventQueue(sess, s.now, s.nextHandle); err != nil {
			return fmt.Errorf("session %d: %w", id, err)
		}
		events += sess.events.len()
		for n := range sess.ephemerals {
			if n.deleted || n.owner != id {
				return fmt.Errorf("session %d: ephemeral set lists %s (owner %d, deleted %v)", id, n.path, n.owner, n.deleted)
			}
		}
		for hid, h := range sess.handles {
			if h == nil || h.id != hid || s.handles[hid] != h || h.session != sess {
				return fmt.Errorf("session %d: handle %d not consistent", id, hid)
			}
			handles++
		}
	}
	if c.ephemeralLive != countEphemerals(s) {
		return fmt.Errorf("ephemeral sets list %d nodes, the tree has %d owned by live sessions", countEphemerals(s), c.ephemeralLive)
	}
	if handles != len(s.handles) {
		return fmt.Errorf("sessions list %d handles, the cell %d", handles, len(s.handles))
	}
	if events != s.events {
		return fmt.Errorf("queues hold %d events, the counter says %d", events, s.events)
	}
	watching := 0
	for id, h := range s.handles {
		if h.id != id || id < 1 || id >= s.nextHandle || h.session == nil || s.sessions[h.session.id] != h.session {
			return fmt.Errorf("handle %d: bad id or session", id)
		}
		if h.mode != chubby.OpenMode_READ && h.mode != chubby.OpenMode_READ_WRITE {
			return fmt.Errorf("handle %d: open mode %d", id, h.mode)
		}
		if h.instance < 1 || h.instance >= s.nextInstance {
			return fmt.Errorf("handle %d: instance %d", id, h.instance)
		}
		if h.live() && (h.node.path != h.path || h.node.instance != h.instance) {
			return fmt.Errorf("handle %d: names %s/%d but points at %s/%d", id, h.path, h.instance, h.node.path, h.node.instance)
		}
		if !h.live() && (h.held != 0 || h.wait != 0) {
			return fmt.Errorf("handle %d of a deleted node holds or waits", id)
		}
		if h.held != 0 && h.wait != 0 {
			return fmt.Errorf("handle %d holds and waits", id)
		}
		if h.held != 0 {
			holding++
		} else if h.heldDelay != 0 || h.holdIdx != -1 {
			return fmt.Errorf("handle %d: stale hold fields", id)
		}
		if h.wait != 0 {
			waiting++
		} else if h.waitDelay != 0 || h.waitPrev != nil || h.waitNext != nil {
			return fmt.Errorf("handle %d: stale wait fields", id)
		}
		if !validDelay(h.heldDelay) || !validDelay(h.waitDelay) {
			return fmt.Errorf("handle %d: lock-delay out of range", id)
		}
		if h.eventMask != 0 && h.live() {
			watching++
		}
	}
	if watching != c.watchers {
		return fmt.Errorf("%d live handles with an event mask, nodes list %d watchers", watching, c.watchers)
	}
	if holding != c.holders || waiting != c.waiters {
		return fmt.Errorf("%d holding and %d waiting handles, locks list %d and %d", holding, waiting, c.holders, c.waiters)
	}
	return nil
}

type invCounts struct {
	nodes, locksHeld, waiters, holders, delays, ephemeralLive, watchers int
	content                                                             int64
	instances                                                           map[int64]bool
}

func countEphemerals(s *State) int {
	n := 0
	for _, sess := range s.sessions {
		n += len(sess.ephemerals)
	}
	return n
}

func (s *State) checkNode(n *node, c *invCounts) error {
	c.nodes++
	if n.deleted {
		return fmt.Errorf("%s: deleted node in the tree", n.path)
	}
	if n.instance < 1 || n.instance >= s.nextInstance || c.instances[n.instance] {
		return fmt.Errorf("%s: instance %d repeated or out of range", n.path, n.instance)
	}
	c.instances[n.instance] = true
	if n.contentGen < 1 || n.lockGen < 0 || n.aclGen < 0 {
		return fmt.Errorf("%s: bad generations", n.path)
	}
	if n.ctime < 0 || n.ctime > n.mtime || n.mtime > s.now {
		return fmt.Errorf("%s: bad times %d/%d (now %d)", n.path, n.ctime, n.mtime, s.now)
	}
	if err := s.checkNodeACL(n); err != nil {
		return err
	}
	if n.isDir() {
		if len(n.content) != 0 || n.checksum != 0 || n.children == nil {
			return fmt.Errorf("%s: directory with content or without children map", n.path)
		}
		if n.nextSeq < 0 || n.nextSeq > maxSequence+1 {
			return fmt.Errorf("%s: sequence counter %d", n.path, n.nextSeq)
		}
	} else {
		if n.kind != chubby.NodeKind_FILE || n.children != nil || n.nextSeq != 0 {
			return fmt.Errorf("%s: bad file", n.path)
		}
		if len(n.content) > int(chubby.MAX_CONTENT_BYTES) || crc32.Checksum(n.content, castagnoli) != n.checksum {
			return fmt.Errorf("%s: content too large or checksum mismatch", n.path)
		}
		c.content += int64(len(n.content))
	}
	if n.owner != 0 {
		if sess := s.sessions[n.owner]; sess != nil {
			if _, ok := sess.ephemerals[n]; !ok {
				return fmt.Errorf("%s: ephemeral node missing from session %d", n.path, n.owner)
			}
			c.ephemeralLive++
		} else if !n.isDir() || len(n.children) == 0 {
			return fmt.Errorf("%s: ephemeral node outlived its session %d", n.path, n.owner)
		}
	}
	if err := s.checkLock(n, c); err != nil {
		return err
	}
	for i, h := range n.watchers {
		if h == nil || h.node != n || h.eventMask == 0 || s.handles[h.id] != h || i > 0 && h.id <= n.watchers[i-1].id {
			return fmt.Errorf("%s: watcher %d not consistent", n.path, i)
		}
	}
	c.watchers += len(n.watchers)
	for name, child := range n.children {
		if child == nil || child.parent != n || child.name != name || child.path != joinPath(n.path, name) {
			return fmt.Errorf("%s: child %q not linked", n.path, name)
		}
		if err := checkName(name); err != nil {
			return fmt.Errorf("%s: child %q: %s", n.path, name, err.Message)
		}
		if err := s.checkNode(child, c); err != nil {
			return err
		}
	}
	return nil
}

func (s *State) checkLock(n *node, c *invCounts) error {
	l := n.lock
	if l == nil {
		return nil
	}
	if l.mode == 0 && l.nwait == 0 && l.delayUntil == 0 {
		return fmt.Errorf("%s: idle lock record", n.path)
	}
	switch l.mode {
	case 0:
		if len(l.holders) != 0 {
			return fmt.Errorf("%s: free lock with holders", n.path)
		}
	case chubby.LockMode_EXCLUSIVE:
		if len(l.holders) != 1 {
			return fmt.Errorf("%s: exclusive lock with %d holders", n.path, len(l.holders))
		}
		c.locksHeld++
	case chubby.LockMode_SHARED:
		if len(l.holders) == 0 {
			return fmt.Errorf("%s: shared lock without holders", n.path)
		}
		c.locksHeld++
	default:
		return fmt.Errorf("%s: lock mode %d", n.path, l.mode)
	}
	for i, h := range l.holders {
		if h == nil || h.node != n || h.held != l.mode || h.holdIdx != i || s.handles[h.id] != h {
			return fmt.Errorf("%s: holder %d not consistent", n.path, i)
		}
	}
	c.holders += len(l.holders)
	count := 0
	var prev *handle
	for h := l.waitHead; h != nil; h = h.waitNext {
		if count > len(s.handles) {
			return fmt.Errorf("%s: wait queue has a cycle", n.path)
		}
		if h.waitPrev != prev || h.node != n || h.wait == 0 || h.held != 0 || s.handles[h.id] != h {
			return fmt.Errorf("%s: waiter %d not consistent", n.path, count)
		}
		prev = h
		count++
	}
	if l.waitTail != prev || count != l.nwait {
		return fmt.Errorf("%s: wait queue tail or count wrong", n.path)
	}
	c.waiters += count
	if l.delayUntil != 0 {
		if l.delayUntil <= s.now || l.heapIdx < 0 || l.heapIdx >= len(s.delays) || s.delays[l.heapIdx] != n {
			return fmt.Errorf("%s: lock-delay %d not pending (now %d) or not in the heap", n.path, l.delayUntil, s.now)
		}
		c.delays++
	} else {
		if l.heapIdx != -1 {
			return fmt.Errorf("%s: in the delay heap without a delay", n.path)
		}
		if h := l.waitHead; h != nil && (l.mode == 0 || l.mode == chubby.LockMode_SHARED && h.wait == chubby.LockMode_SHARED) {
			return fmt.Errorf("%s: waiter %d could be granted now", n.path, h.id)
		}
	}
	return nil
}

// checkEventQueue checks the event queue of sess (see checkInvariants).
func checkEventQueue(sess *session, now, nextHandle int64) error {
	q := &sess.events
	if sess.lastEvent < 0 || sess.lastEvent > maxEventSeq || q.n < 0 || q.n > len(q.buf) {
		return fmt.Errorf("event queue counters broken")
	}
	for i := range q.len() {
		e := q.at(i)
		switch {
		case i > 0 && e.seq != q.at(i-1).seq+1, i == 0 && e.first() < 1:
			return fmt.Errorf("event %d: seqs not gapless and ascending", e.seq)
		case e.kind == chubby.EventKind_EVENTS_LOST:
			if i != 0 || e.lostFrom > e.seq || e.handle != 0 || e.path != "" {
				return fmt.Errorf("event %d: bad EVENTS_LOST", e.seq)
			}
		case !handleKind(e.kind):
			return fmt.Errorf("event %d: kind %d", e.seq, e.kind)
		case e.handle < 1 || e.handle >= nextHandle || e.path == "" || childKind(e.kind) != (e.child != ""):
			return fmt.Errorf("event %d: bad handle, path or child", e.seq)
		}
		if e.time < 0 || e.time > now {
			return fmt.Errorf("event %d: time %d (now %d)", e.seq, e.time, now)
		}
	}
	if q.len() > 0 && q.at(q.len()-1).seq != sess.lastEvent {
		return fmt.Errorf("newest event %d, last event seq %d", q.at(q.len()-1).seq, sess.lastEvent)
	}
	return nil
}

// checkNodeACL checks n's ACL names, and that the memo of its parsed
// content is what parsing its content gives (nil but for an ACL file).
func (s *State) checkNodeACL(n *node) error {
	for r, name := range n.acl {
		if err := checkACLName(name); err != nil {
			return fmt.Errorf("%s: %s ACL name %q: %s", n.path, Right(r), name, err.Message)
		}
	}
	var want *ACL
	if s.isACLFile(n) {
		want, _ = parseACL(n.content)
	}
	if (want == nil) != (n.aclFile == nil) || !slices.Equal(want.Entries(), n.aclFile.Entries()) {
		return fmt.Errorf("%s: memo of the parsed ACL is %v, the content parses to %v", n.path, n.aclFile.Entries(), want.Entries())
	}
	return nil
}
