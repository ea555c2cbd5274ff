package fs

import (
	"container/heap"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/cloudwego/gopkg/protocol/thrift"
)

// snapshotVersion is the version of the snapshot encoding Snapshot writes.
// Restore also reads version 2, from before events: no session has events
// queued, and event masks are taken as they were stored.
const snapshotVersion = 3

// Snapshot returns the whole state as Thrift binary of fsm.Snapshot. Every
// list is in a fixed order, so equal states give equal bytes: replicas can
// compare snapshots byte for byte.
func (s *State) Snapshot() []byte {
	snap := &fsm.Snapshot{
		Version:      snapshotVersion,
		NowMs:        s.now,
		NextSession:  s.nextSession,
		NextHandle:   s.nextHandle,
		NextInstance: s.nextInstance,
		Nodes:        make([]*fsm.SnapNode, 0, s.nodes),
		// Unset when none is reserved: a cell that never used the
		// oracle keeps the snapshot bytes it had.
		TimestampsReserved: nonZero(s.tsReserved),
		Sessions:           make([]*fsm.SnapSession, 0, len(s.sessions)),
		Handles:            make([]*fsm.SnapHandle, 0, len(s.handles)),
	}
	s.snapNodes(s.root, &snap.Nodes)
	for _, id := range s.Sessions() {
		sess := s.sessions[id]
		ss := &fsm.SnapSession{
			Id:           sess.id,
			ClientName:   sess.clientName,
			CreateTimeMs: sess.ctime,
			SeqFloor:     sess.floor,
			Answers:      make([]*fsm.SnapAnswer, 0, len(sess.answers)),
		}
		if sess.caches {
			ss.Cache = &sess.caches
		}
		if sess.principal != Anonymous {
			ss.Principal = clonePtr(&sess.principal)
		}
		for _, a := range sess.answers {
			ss.Answers = append(ss.Answers, &fsm.SnapAnswer{Seq: a.seq, Result_: a.res})
		}
		if sess.lastEvent > 0 {
			ss.LastEventSeq = clonePtr(&sess.lastEvent)
			ss.Events = sess.snapEvents()
		}
		snap.Sessions = append(snap.Sessions, ss)
	}
	ids := make([]int64, 0, len(s.handles))
	for id := range s.handles {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		h := s.handles[id]
		sh := &fsm.SnapHandle{
			Id:              h.id,
			Session:         h.session.id,
			Path:            h.path,
			Instance:        h.instance,
			Mode:            h.mode,
			EventMask:       h.eventMask,
			HeldLockDelayMs: h.heldDelay,
			WaitLockDelayMs: h.waitDelay,
		}
		if h.held != 0 {
			sh.HeldMode = clonePtr(&h.held)
		}
		if h.wait != 0 {
			sh.WaitMode = clonePtr(&h.wait)
		}
		snap.Handles = append(snap.Handles, sh)
	}
	return thrift.FastMarshal(snap)
}

// snapNodes appends n and its subtree, depth-first, children by name.
func (s *State) snapNodes(n *node, out *[]*fsm.SnapNode) {
	sn := &fsm.SnapNode{
		Path:              n.path,
		Kind:              n.kind,
		Instance:          n.instance,
		ContentGeneration: n.contentGen,
		LockGeneration:    n.lockGen,
		AclGeneration:     n.aclGen,
		Checksum:          int64(n.checksum),
		Content:           n.content,
		CreateTimeMs:      n.ctime,
		ModifyTimeMs:      n.mtime,
		EphemeralOwner:    n.owner,
		NextSequence:      n.nextSeq,
		LockHolders:       []int64{},
		LockWaiters:       []int64{},
	}
	if sn.Content == nil {
		sn.Content = []byte{}
	}
	if !n.acl.empty() {
		// Only then: a cell without ACLs snapshots as before them.
		sn.Acl = n.acl.wire()
	}
	if l := n.lock; l != nil {
		if l.mode != 0 {
			sn.LockMode = clonePtr(&l.mode)
		}
		for _, h := range l.holders {
			sn.LockHolders = append(sn.LockHolders, h.id)
		}
		slices.Sort(sn.LockHolders)
		for h := l.waitHead; h != nil; h = h.waitNext {
			sn.LockWaiters = append(sn.LockWaiters, h.id)
		}
		sn.LockDelayUntilMs = l.delayUntil
	}
	*out = append(*out, sn)
	if n.isDir() {
		for _, name := range sortedNames(n) {
			s.snapNodes(n.children[name], out)
		}
	}
}

// Restore rebuilds a State from a Snapshot. It validates everything — the
// encoding, every field, every cross-reference and every invariant — and
// returns an error for a corrupt snapshot; it never panics on bad input. The
// limits l are enforced on what happens next; a snapshot exceeding them is
// still accepted.
func Restore(b []byte, l Limits) (*State, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	snap, err := decodeSnapshot(b)
	if err != nil {
		return nil, err
	}
	s, err := restore(snap, l)
	if err != nil {
		return nil, fmt.Errorf("fs: restore: %w", err)
	}
	return s, nil
}

func decodeSnapshot(b []byte) (*fsm.Snapshot, error) {
	snap := fsm.NewSnapshot()
	if err := fastRead(b, snap, snapshotSchema); err != nil {
		return nil, fmt.Errorf("fs: restore: decode: %w", err)
	}
	return snap, nil
}

// restore rebuilds a State from a decoded snapshot, in steps: the header
// (version, clock, id counters), the nodes, the sessions, the handles, the
// locks that link nodes and handles, the ephemeral owners; then every
// invariant is checked.
func restore(snap *fsm.Snapshot, l Limits) (*State, error) {
	s, err := restoreHeader(snap, l)
	if err != nil {
		return nil, err
	}
	byPath, err := s.restoreNodes(snap)
	if err != nil {
		return nil, err
	}
	if err := s.restoreSessions(snap); err != nil {
		return nil, err
	}
	held, waiting, err := s.restoreHandles(snap, byPath)
	if err != nil {
		return nil, err
	}
	if err := s.restoreLocks(snap, byPath, held, waiting); err != nil {
		return nil, err
	}
	if err := s.restoreOwners(byPath); err != nil {
		return nil, err
	}
	if err := s.checkInvariants(); err != nil {
		return nil, err
	}
	return s, nil
}

// restoreHeader checks the snapshot's version, clock and id counters and
// returns the empty state they start.
func restoreHeader(snap *fsm.Snapshot, l Limits) (*State, error) {
	if err := checkSnapshotVersion(snap.Version); err != nil {
		return nil, err
	}
	if snap.NowMs < 0 || snap.NowMs > MaxTimeMs {
		return nil, fmt.Errorf("now_ms %d out of range", snap.NowMs)
	}
	if snap.NextSession < 1 || snap.NextHandle < 1 || snap.NextInstance < 2 {
		return nil, fmt.Errorf("id counters %d/%d/%d out of range", snap.NextSession, snap.NextHandle, snap.NextInstance)
	}
	if r := snap.GetTimestampsReserved(); r < 0 || r > MaxTimestamp {
		return nil, fmt.Errorf("timestamps_reserved %d out of range", r)
	}
	s := newEmpty(l)
	s.now = snap.NowMs
	s.nextSession = snap.NextSession
	s.nextHandle = snap.NextHandle
	s.nextInstance = snap.NextInstance
	s.tsReserved = snap.GetTimestampsReserved()

	return s, nil
}

// restoreNodes restores the namespace, parents first, and returns the
// nodes by path.
func (s *State) restoreNodes(snap *fsm.Snapshot) (map[string]*node, error) {
	byPath := make(map[string]*node, len(snap.Nodes))
	instances := make(map[int64]bool, len(snap.Nodes))
	for i, sn := range snap.Nodes {
		if sn == nil {
			return nil, fmt.Errorf("node %d missing", i)
		}
		n, err := s.restoreNode(sn, byPath, instances, i == 0)
		if err != nil {
			return nil, fmt.Errorf("node %d (%q): %w", i, sn.Path, err)
		}
		byPath[n.path] = n
	}
	if s.root == nil {
		return nil, fmt.Errorf("no root directory")
	}

	return byPath, nil
}

// restoreSessions restores the sessions with their saved answers and
// queued events.
func (s *State) restoreSessions(snap *fsm.Snapshot) error {
	for i, ss := range snap.Sessions {
		if ss == nil {
			return fmt.Errorf("session %d missing", i)
		}
		if ss.Id < 1 || ss.Id >= s.nextSession {
			return fmt.Errorf("session id %d out of range", ss.Id)
		}
		if i > 0 && ss.Id <= snap.Sessions[i-1].Id {
			return fmt.Errorf("sessions not in ascending order at %d", ss.Id)
		}
		if len(ss.ClientName) > int(chubby.MAX_CLIENT_NAME_BYTES) {
			return fmt.Errorf("session %d: client name too long", ss.Id)
		}
		if ss.CreateTimeMs < 0 || ss.CreateTimeMs > s.now {
			return fmt.Errorf("session %d: create time %d out of range", ss.Id, ss.CreateTimeMs)
		}
		if ss.SeqFloor < 1 {
			return fmt.Errorf("session %d: request floor %d < 1", ss.Id, ss.SeqFloor)
		}
		principal := Anonymous
		if ss.Principal != nil {
			if err := checkPrincipal(*ss.Principal); err != nil {
				return fmt.Errorf("session %d: %s", ss.Id, err.Message)
			}
			principal = *ss.Principal
		}
		sess := &session{
			id:         ss.Id,
			clientName: ss.ClientName,
			caches:     ss.GetCache(),
			principal:  principal,
			ctime:      ss.CreateTimeMs,
			handles:    map[int64]*handle{},
			ephemerals: map[*node]struct{}{},
			floor:      ss.SeqFloor,
			answers:    make([]answer, 0, len(ss.Answers)),
		}
		for j, a := range ss.Answers {
			switch {
			case a == nil || a.Result_ == nil:
				return fmt.Errorf("session %d: saved answer %d missing", ss.Id, j)
			case a.Seq < ss.SeqFloor:
				return fmt.Errorf("session %d: saved answer of request %d below the floor %d", ss.Id, a.Seq, ss.SeqFloor)
			case j > 0 && a.Seq <= ss.Answers[j-1].Seq:
				return fmt.Errorf("session %d: saved answers not in ascending order at %d", ss.Id, a.Seq)
			}
			// A saved answer may be a refusal (apply saves those too), but
			// then it carries nothing else.
			if err := checkAnswer(a.Result_); err != nil {
				return fmt.Errorf("session %d: saved answer of request %d: %w", ss.Id, a.Seq, err)
			}
			sess.answers = append(sess.answers, answer{seq: a.Seq, res: a.Result_})
		}
		if snap.Version == 2 && (ss.IsSetLastEventSeq() || len(ss.Events) > 0) {
			return fmt.Errorf("session %d: events in a version 2 snapshot", ss.Id)
		}
		if err := s.restoreEvents(sess, ss); err != nil {
			return fmt.Errorf("session %d: %w", ss.Id, err)
		}
		s.sessions[ss.Id] = sess
		s.byPrincipal[sess.principal]++
	}

	return nil
}

// restoreHandles restores the handles, linked to their sessions and (when
// it still exists) their node, and counts those holding and waiting for a
// lock.
func (s *State) restoreHandles(snap *fsm.Snapshot, byPath map[string]*node) (held, waiting int, err error) {
	for i, sh := range snap.Handles {
		if sh == nil {
			return 0, 0, fmt.Errorf("handle %d missing", i)
		}
		if sh.Id < 1 || sh.Id >= s.nextHandle {
			return 0, 0, fmt.Errorf("handle id %d out of range", sh.Id)
		}
		if i > 0 && sh.Id <= snap.Handles[i-1].Id {
			return 0, 0, fmt.Errorf("handles not in ascending order at %d", sh.Id)
		}
		sess := s.sessions[sh.Session]
		if sess == nil {
			return 0, 0, fmt.Errorf("handle %d: session %d does not exist", sh.Id, sh.Session)
		}
		if _, err := parsePath(sh.Path); err != nil {
			return 0, 0, fmt.Errorf("handle %d: %s", sh.Id, err.Message)
		}
		if sh.Instance < 1 || sh.Instance >= s.nextInstance {
			return 0, 0, fmt.Errorf("handle %d: instance %d out of range", sh.Id, sh.Instance)
		}
		if sh.Mode != chubby.OpenMode_READ && sh.Mode != chubby.OpenMode_READ_WRITE {
			return 0, 0, fmt.Errorf("handle %d: open mode %d", sh.Id, sh.Mode)
		}
		if snap.Version != 2 && sh.EventMask&^chubby.EVENT_MASK_ALL != 0 {
			return 0, 0, fmt.Errorf("handle %d: event mask %#x", sh.Id, sh.EventMask)
		}
		h := &handle{
			id:        sh.Id,
			session:   sess,
			path:      sh.Path,
			instance:  sh.Instance,
			mode:      sh.Mode,
			eventMask: sh.EventMask,
			holdIdx:   -1,
		}
		if n := byPath[sh.Path]; n != nil && n.instance == sh.Instance {
			h.node = n
			if h.eventMask != 0 {
				n.watchers = append(n.watchers, h) // handles come ascending
			}
		}
		if sh.HeldMode != nil {
			if !validMode(*sh.HeldMode) || h.node == nil || sh.WaitMode != nil {
				return 0, 0, fmt.Errorf("handle %d: bad held lock", sh.Id)
			}
			h.held = *sh.HeldMode
			held++
		}
		if sh.WaitMode != nil {
			if !validMode(*sh.WaitMode) || h.node == nil {
				return 0, 0, fmt.Errorf("handle %d: bad lock wait", sh.Id)
			}
			h.wait = *sh.WaitMode
			waiting++
		}
		if !validDelay(sh.HeldLockDelayMs) || !validDelay(sh.WaitLockDelayMs) ||
			h.held == 0 && sh.HeldLockDelayMs != 0 || h.wait == 0 && sh.WaitLockDelayMs != 0 {
			return 0, 0, fmt.Errorf("handle %d: bad lock-delay", sh.Id)
		}
		h.heldDelay = sh.HeldLockDelayMs
		h.waitDelay = sh.WaitLockDelayMs
		s.handles[h.id] = h
		sess.handles[h.id] = h
	}

	return held, waiting, nil
}

// restoreLocks links every lock's holders and waiters to the handles that
// claim them (as many as the handles say), and rebuilds the lock-delay
// heap.
func (s *State) restoreLocks(snap *fsm.Snapshot, byPath map[string]*node, held, waiting int) error {
	linkedHeld, linkedWaiting := 0, 0
	for _, sn := range snap.Nodes {
		n := byPath[sn.Path]
		if sn.LockMode == nil && len(sn.LockHolders) == 0 && len(sn.LockWaiters) == 0 && sn.LockDelayUntilMs == 0 {
			continue
		}
		lk := s.lockOf(n)
		if sn.LockMode != nil {
			if !validMode(*sn.LockMode) {
				return fmt.Errorf("%s: lock mode %d", n.path, *sn.LockMode)
			}
			lk.mode = *sn.LockMode
			s.locksHeld++
		}
		for i, id := range sn.LockHolders {
			h := s.handles[id]
			if h == nil || h.node != n || h.held == 0 || h.held != lk.mode || h.holdIdx >= 0 || i > 0 && id <= sn.LockHolders[i-1] {
				return fmt.Errorf("%s: bad lock holder %d", n.path, id)
			}
			h.holdIdx = len(lk.holders)
			lk.holders = append(lk.holders, h)
			linkedHeld++
		}
		for _, id := range sn.LockWaiters {
			h := s.handles[id]
			if h == nil || h.node != n || h.wait == 0 || h.waitPrev != nil || lk.waitHead == h {
				return fmt.Errorf("%s: bad lock waiter %d", n.path, id)
			}
			s.enqueueRestored(lk, h)
		}
		linkedWaiting += lk.nwait
		if d := sn.LockDelayUntilMs; d != 0 {
			if d <= s.now || d > s.now+chubby.MAX_LOCK_DELAY_MS {
				return fmt.Errorf("%s: lock-delay end %d out of range (now %d)", n.path, d, s.now)
			}
			lk.delayUntil = d
			s.delays = append(s.delays, n)
			lk.heapIdx = len(s.delays) - 1
		}
	}
	if linkedHeld != held || linkedWaiting != waiting {
		return fmt.Errorf("%d holding and %d waiting handles, but locks list %d and %d", held, waiting, linkedHeld, linkedWaiting)
	}
	heap.Init(&s.delays)

	return nil
}

// restoreOwners gives each live session its ephemeral nodes.
func (s *State) restoreOwners(byPath map[string]*node) error {
	for _, n := range byPath {
		if n.owner == 0 {
			continue
		}
		if n.owner < 0 || n.owner >= s.nextSession {
			return fmt.Errorf("%s: ephemeral owner %d out of range", n.path, n.owner)
		}
		if sess := s.sessions[n.owner]; sess != nil {
			sess.ephemerals[n] = struct{}{}
		}
	}

	return nil
}

// enqueueRestored appends h to the wait queue of lk, for Restore.
func (s *State) enqueueRestored(lk *lockState, h *handle) {
	h.waitPrev = lk.waitTail
	if lk.waitTail != nil {
		lk.waitTail.waitNext = h
	} else {
		lk.waitHead = h
	}
	lk.waitTail = h
	lk.nwait++
	s.waiters++
}

// restoreNode validates one snapshot node and adds it to the tree.
func (s *State) restoreNode(sn *fsm.SnapNode, byPath map[string]*node, instances map[int64]bool, first bool) (*node, error) {
	comps, cerr := parsePath(sn.Path)
	if cerr != nil {
		return nil, fmt.Errorf("%s", cerr.Message)
	}
	if (len(comps) == 0) != first {
		return nil, fmt.Errorf("the root must come first, and once")
	}
	if sn.Kind != chubby.NodeKind_FILE && sn.Kind != chubby.NodeKind_DIRECTORY {
		return nil, fmt.Errorf("kind %d", sn.Kind)
	}
	if sn.Instance < 1 || sn.Instance >= s.nextInstance || instances[sn.Instance] {
		return nil, fmt.Errorf("instance %d out of range or repeated", sn.Instance)
	}
	instances[sn.Instance] = true
	if sn.ContentGeneration < 1 || sn.LockGeneration < 0 || sn.AclGeneration < 0 {
		return nil, fmt.Errorf("bad generations")
	}
	if sn.CreateTimeMs < 0 || sn.CreateTimeMs > sn.ModifyTimeMs || sn.ModifyTimeMs > s.now {
		return nil, fmt.Errorf("bad times %d/%d (now %d)", sn.CreateTimeMs, sn.ModifyTimeMs, s.now)
	}
	if sn.EphemeralOwner < 0 {
		return nil, fmt.Errorf("ephemeral owner %d", sn.EphemeralOwner)
	}
	if sn.Checksum < 0 || sn.Checksum > 0xffffffff || uint32(sn.Checksum) != crc32.Checksum(sn.Content, castagnoli) {
		return nil, fmt.Errorf("content checksum mismatch")
	}
	var names aclNames
	if sn.Acl != nil {
		var err *chubby.ChubbyError
		if names, err = namesFromWire(sn.Acl); err != nil {
			return nil, fmt.Errorf("%s", err.Message)
		}
	}
	n := &node{
		path:       sn.Path,
		kind:       sn.Kind,
		instance:   sn.Instance,
		contentGen: sn.ContentGeneration,
		lockGen:    sn.LockGeneration,
		aclGen:     sn.AclGeneration,
		checksum:   uint32(sn.Checksum),
		ctime:      sn.CreateTimeMs,
		mtime:      sn.ModifyTimeMs,
		owner:      sn.EphemeralOwner,
		nextSeq:    sn.NextSequence,
		acl:        names,
	}
	if n.isDir() {
		if len(sn.Content) != 0 {
			return nil, fmt.Errorf("directory with content")
		}
		if sn.NextSequence < 0 || sn.NextSequence > maxSequence+1 {
			return nil, fmt.Errorf("sequence counter %d", sn.NextSequence)
		}
		n.children = map[string]*node{}
	} else {
		if len(sn.Content) > int(chubby.MAX_CONTENT_BYTES) {
			return nil, fmt.Errorf("content of %d bytes", len(sn.Content))
		}
		if sn.NextSequence != 0 {
			return nil, fmt.Errorf("file with a sequence counter")
		}
		if len(sn.Content) > 0 {
			n.content = sn.Content
		}
	}
	if first {
		if !n.isDir() || n.owner != 0 {
			return nil, fmt.Errorf("the root must be a permanent directory")
		}
		s.root = n
		s.nodes = 1
		return n, nil
	}
	parent := byPath[parentPath(sn.Path)]
	if parent == nil || !parent.isDir() {
		return nil, fmt.Errorf("parent missing, later in the list, or a file")
	}
	n.name = comps[len(comps)-1]
	n.name = n.path[len(n.path)-len(n.name):]
	if parent.children[n.name] != nil {
		return nil, fmt.Errorf("repeated")
	}
	n.parent = parent
	parent.children[n.name] = n
	s.nodes++
	s.contentBytes += int64(len(n.content))
	s.memoACL(n)
	return n, nil
}

func validDelay(d int64) bool { return d >= 0 && d <= chubby.MAX_LOCK_DELAY_MS }

// restoreEvents validates the event queue of a snapshot session and gives
// it to sess: seqs gapless and ascending up to last_event_seq, EVENTS_LOST
// only first, per-handle kinds with a handle, a path and a time not in the
// future.
func (s *State) restoreEvents(sess *session, ss *fsm.SnapSession) error {
	last := ss.GetLastEventSeq()
	if last < 0 || last > maxEventSeq {
		return fmt.Errorf("last event seq %d", last)
	}
	sess.lastEvent = last
	for i, w := range ss.Events {
		if w == nil {
			return fmt.Errorf("event %d missing", i)
		}
		e := event{seq: w.Seq, kind: w.Kind, time: w.TimeMs}
		if e.time < 0 || e.time > s.now {
			return fmt.Errorf("event %d: time %d (now %d)", w.Seq, e.time, s.now)
		}
		switch {
		case w.Kind == chubby.EventKind_EVENTS_LOST:
			e.lostFrom = w.GetLostFrom()
			if i != 0 || e.lostFrom < 1 || e.lostFrom > e.seq {
				return fmt.Errorf("event %d: EVENTS_LOST not first or lost_from %d out of range", w.Seq, e.lostFrom)
			}
		case handleKind(w.Kind):
			e.handle, e.path, e.child = w.GetHandle(), w.GetPath(), w.GetChild()
			if e.handle < 1 || e.handle >= s.nextHandle {
				return fmt.Errorf("event %d: handle %d out of range", w.Seq, e.handle)
			}
			if _, err := parsePath(e.path); err != nil {
				return fmt.Errorf("event %d: %s", w.Seq, err.Message)
			}
			if childKind(w.Kind) {
				if err := checkName(e.child); err != nil {
					return fmt.Errorf("event %d: child: %s", w.Seq, err.Message)
				}
			} else if w.IsSetChild() {
				return fmt.Errorf("event %d: a child in a %v event", w.Seq, w.Kind)
			}
			switch w.Kind {
			case chubby.EventKind_FILE_CONTENTS_MODIFIED, chubby.EventKind_CHILD_MODIFIED:
				e.gen = w.GetContentGeneration()
			case chubby.EventKind_LOCK_ACQUIRED, chubby.EventKind_CONFLICTING_LOCK_REQUEST:
				e.gen, e.mode = w.GetLockGeneration(), w.GetLockMode()
				if !validMode(e.mode) {
					return fmt.Errorf("event %d: lock mode %d", w.Seq, e.mode)
				}
			}
			if e.gen < 0 {
				return fmt.Errorf("event %d: generation %d", w.Seq, e.gen)
			}
		default:
			return fmt.Errorf("event %d: kind %d cannot be queued", w.Seq, w.Kind)
		}
		if i > 0 && e.seq != ss.Events[i-1].Seq+1 || i == 0 && e.first() < 1 {
			return fmt.Errorf("event %d: seqs not gapless and ascending", w.Seq)
		}
		sess.events.push(e)
		s.events++
	}
	if n := len(ss.Events); n > 0 && ss.Events[n-1].Seq != last {
		return fmt.Errorf("newest event %d, last event seq %d", ss.Events[n-1].Seq, last)
	}
	return nil
}
