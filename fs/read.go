package fs

import (
	"math"
	"slices"

	"github.com/chubbygo/chubby/gen/chubby"
)

// Reads. They change nothing and are not commands: the master serves them
// from its own state. Each validates its handle as commands do: the session
// is alive (else SESSION_EXPIRED), the handle exists with that session,
// instance and path, and its node still exists (else HANDLE_INVALID). The
// reads of a node (GetContentsAndStat, GetStat, ReadDir) then need the read
// right of the handle's session's principal on it (else
// PERMISSION_DENIED). Errors are *chubby.ChubbyError.

// readHandle validates the handle w for a read of its node.
func (s *State) readHandle(w *chubby.Handle) (*handle, *chubby.ChubbyError) {
	h, err := s.handleFor(w, true)
	if err != nil {
		return nil, err
	}
	if err := s.allowed(h.session.principal, h.node, ReadRight); err != nil {
		return nil, err
	}
	return h, nil
}

// GetContentsAndStat returns a copy of the content of the file h names, and
// its Stat.
func (s *State) GetContentsAndStat(w *chubby.Handle) ([]byte, *chubby.Stat, error) {
	h, err := s.readHandle(w)
	if err != nil {
		return nil, nil, err
	}
	n := h.node
	if n.isDir() {
		return nil, nil, Errorf(chubby.ErrorCode_IS_DIRECTORY, "%s is a directory: it has no content", n.path)
	}
	return slices.Clone(n.content), s.stat(n), nil
}

// GetStat returns the Stat of the node h names.
func (s *State) GetStat(w *chubby.Handle) (*chubby.Stat, error) {
	h, err := s.readHandle(w)
	if err != nil {
		return nil, err
	}
	return s.stat(h.node), nil
}

// ReadDir returns the entries of the directory h names, sorted by name:
// every one of them, in one slice (for tests and tools in the process;
// clients page with ReadDirPage).
func (s *State) ReadDir(w *chubby.Handle) ([]*chubby.DirEntry, error) {
	p, err := s.ReadDirPage(w, "", math.MaxInt, math.MaxInt)
	if err != nil {
		return nil, err
	}
	return p.Entries, nil
}

// DirPage is one page of a directory's listing.
type DirPage struct {
	Entries []*chubby.DirEntry // sorted by name
	// More: the directory has entries after the last of Entries.
	More bool
	// Generation is the directory's content generation as the page was
	// read: bumped by every child added or removed.
	Generation int64
	// Bytes is the Thrift binary encoding size of Entries' elements
	// together (DirEntry.BLength): the page's part of a reply.
	Bytes int
	// ReadACL is the directory's read ACL name as the page was read (""
	// grants everybody): the right a cached copy of the page stands for.
	ReadACL string
}

// MaxDirEntryBytes bounds the Thrift binary encoding of one DirEntry
// (DirEntry.BLength), whatever the node: each field is a 3-byte header
// and its value, a string a 4-byte length and its bytes, a struct ends in
// a 1-byte stop.
//
//	DirEntry  name 3+4+255 (MAX_NAME_BYTES), stat 3+Stat, stop 1   = 263+3+Stat+1
//	Stat      path 3+4+4096 (MAX_PATH_BYTES)                         4103
//	          kind i32 3+4                                              7
//	          8 × i64 (instance .. modify_time_ms) 8 × (3+8)           88
//	          ephemeral bool 3+1, ephemeral_owner 3+8                  15
//	          lock 3 + LockInfo(mode 7, holders 7, waiters 7,
//	                  delay 11, stop 1)                                36
//	          acl 3 + ACLNames(3 × (3+4+255), stop 1)                 790
//	          stop 1                                                    1
//	                                                                 5040
//
// so a DirEntry is at most 262 + 3 + 5040 + 1 = 5306 bytes
// (TestReadDirPageWorstCase builds one and checks its BLength against it).
const MaxDirEntryBytes = 5306

// ReadDirPage returns the entries of the directory h names whose names
// sort after after ("" : from the first), in name order: at most limit
// of them, and no more than fit in maxBytes of encoding (Bytes <=
// maxBytes), except that a page always holds at least one entry when
// there is one, so a caller with maxBytes >= MaxDirEntryBytes always
// makes progress and never gets more than maxBytes. limit and maxBytes
// must be positive.
func (s *State) ReadDirPage(w *chubby.Handle, after string, limit, maxBytes int) (DirPage, error) {
	h, err := s.readHandle(w)
	if err != nil {
		return DirPage{}, err
	}
	n := h.node
	if !n.isDir() {
		return DirPage{}, Errorf(chubby.ErrorCode_NOT_DIRECTORY, "%s is a file, not a directory", n.path)
	}
	names := namesAfter(n, after)
	page := DirPage{Generation: n.contentGen, ReadACL: n.acl[ReadRight]}
	for i, name := range names {
		if i == limit {
			page.More = true
			break
		}
		e := &chubby.DirEntry{Name: name, Stat: s.stat(n.children[name])}
		b := e.BLength()
		if i > 0 && page.Bytes+b > maxBytes {
			page.More = true
			break
		}
		page.Entries = append(page.Entries, e)
		page.Bytes += b
	}
	return page, nil
}

// namesAfter returns the names of the children of the directory n that
// sort after after, in ascending byte order.
func namesAfter(n *node, after string) []string {
	names := make([]string, 0, len(n.children))
	for name := range n.children {
		if name > after {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// DirSize returns the number of children of the directory h names (0
// when it names no readable directory): a hint, read without a right.
func (s *State) DirSize(w *chubby.Handle) int {
	h, err := s.handleFor(w, true)
	if err != nil || !h.node.isDir() {
		return 0
	}
	return len(h.node.children)
}

// GetSequencer returns the sequencer of the lock h holds (LOCK_NOT_HELD when
// it holds none; waiting is not holding).
func (s *State) GetSequencer(w *chubby.Handle) (*chubby.Sequencer, error) {
	h, err := s.handleFor(w, true)
	if err != nil {
		return nil, err
	}
	if h.held == 0 {
		return nil, Errorf(chubby.ErrorCode_LOCK_NOT_HELD, "handle %d does not hold the lock of %s", h.id, h.path)
	}
	return s.sequencer(h.node, h.held), nil
}

// CheckSequencer reports whether seq names a lock that is still held as it
// was when the sequencer was issued: the node at seq.path exists with
// seq.instance and its lock is held in seq.mode in seq.lock_generation.
// A shared sequencer stays valid while any shared holder of that generation
// holds (a sequencer names a holding period, not a holder). reason says why
// not, when not valid. It needs no session: downstream servers call it, as
// principal, which needs the read right on the node (else err is
// PERMISSION_DENIED); a missing node is just not valid.
func (s *State) CheckSequencer(principal string, seq *chubby.Sequencer) (valid bool, reason string, err error) {
	if seq == nil {
		return false, "sequencer is missing", nil
	}
	if !validMode(seq.Mode) {
		return false, "sequencer mode " + itoa(int64(seq.Mode)) + " is not EXCLUSIVE or SHARED", nil
	}
	comps, perr := parsePath(seq.Path)
	if perr != nil {
		return false, perr.Message, nil
	}
	n, lerr := s.lookup(seq.Path, comps)
	if lerr != nil {
		return false, lerr.Message, nil
	}
	if aerr := s.allowed(principal, n, ReadRight); aerr != nil {
		return false, "", aerr
	}
	valid, reason = s.checkSequencer(n, seq)
	return valid, reason, nil
}

// checkSequencer compares seq with the lock of n, the node at seq.path.
func (s *State) checkSequencer(n *node, seq *chubby.Sequencer) (valid bool, reason string) {
	if n.instance != seq.Instance {
		return false, seq.Path + " was re-created: its instance is " + itoa(n.instance) + ", the sequencer names " + itoa(seq.Instance)
	}
	l := n.lock
	if l == nil || l.mode == 0 {
		return false, "the lock of " + seq.Path + " is not held"
	}
	if n.lockGen != seq.LockGeneration {
		return false, "the lock of " + seq.Path + " is at generation " + itoa(n.lockGen) + ", the sequencer names " + itoa(seq.LockGeneration)
	}
	if l.mode != seq.Mode {
		return false, "the lock of " + seq.Path + " is held " + modeName(l.mode) + ", the sequencer names " + modeName(seq.Mode)
	}
	return true, ""
}

// SessionExists reports whether the session id is alive.
func (s *State) SessionExists(id chubby.SessionID) bool {
	return s.sessions[id] != nil
}

// SessionPrincipal returns the principal session id acts as (Anonymous
// when it was created without one), and whether the session is alive.
func (s *State) SessionPrincipal(id chubby.SessionID) (string, bool) {
	sess := s.sessions[id]
	if sess == nil {
		return "", false
	}
	return sess.principal, true
}

// Sessions returns the ids of the live sessions in ascending order. After a
// restart or failover the master rebuilds its lease table from it.
func (s *State) Sessions() []chubby.SessionID {
	ids := make([]chubby.SessionID, 0, len(s.sessions))
	for id := range s.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// CachingSessions returns, sorted, the sessions whose clients declared at
// CreateSession that they cache: a new master makes each flush
// its cache before any change commits.
func (s *State) CachingSessions() []chubby.SessionID {
	var ids []chubby.SessionID
	for id, sess := range s.sessions {
		if sess.caches {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// NextTimer returns the earliest pending lock-delay end. The master proposes
// a Tick (or any command) stamped at or after it, which ends the delay and
// grants the waiters. Ask again after every Apply: commands add and remove
// delays.
func (s *State) NextTimer() (atMs int64, ok bool) {
	if len(s.delays) == 0 {
		return 0, false
	}
	return s.delays[0].lock.delayUntil, true
}

// SessionHandles returns the ids of the open handles of session id in
// ascending order (nil when the session is not alive).
func (s *State) SessionHandles(id chubby.SessionID) []int64 {
	sess := s.sessions[id]
	if sess == nil {
		return nil
	}
	ids := make([]int64, 0, len(sess.handles))
	for hid := range sess.handles {
		ids = append(ids, hid)
	}
	slices.Sort(ids)
	return ids
}
