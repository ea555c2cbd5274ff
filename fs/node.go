package fs

import (
	"hash/crc32"
	"slices"
	"strings"

	"github.com/chubbygo/chubby/gen/chubby"
)

// castagnoli is the CRC-32C table used for content checksums.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// node is one file or directory of the namespace.
type node struct {
	name   string // last component; "" for the root
	path   string // absolute path; name is its suffix
	parent *node  // nil for the root
	kind   chubby.NodeKind

	instance   int64 // unique per creation: a re-created node gets a new one
	contentGen int64 // 1 at creation, bumped by every write (directories: every child added or removed)
	lockGen    int64 // bumped each time the lock goes from free to held
	aclGen     int64 // bumped by every SetACL of the node (and by InitACL on the nodes it names)
	checksum   uint32
	content    []byte // files only; never modified in place, only replaced
	ctime      int64
	mtime      int64
	owner      chubby.SessionID // ephemeral owner; 0 when permanent

	children map[string]*node // directories only
	nextSeq  int64            // directories only: the next sequential-name counter

	// acl names the node's ACL files, one per right ("" grants the right
	// to everybody); a new node copies its parent's.
	acl aclNames
	// aclFile is the parsed content of n when n is an ACL file (a file
	// directly in /acl) whose content parses, nil otherwise: a memo that
	// addNode, setContent and Restore keep in step with the content, so
	// that a check never parses. It is not part of the snapshot.
	aclFile *ACL

	lock    *lockState // nil while free, with no waiters and no lock-delay
	deleted bool       // set when removed from the tree; handles may still point here

	// watchers are the handles on n with a non-zero event mask, ascending
	// by id (events.go); nil once n is deleted.
	watchers []*handle
}

func (n *node) isDir() bool { return n.kind == chubby.NodeKind_DIRECTORY }

// lookup returns the node at the path p with components comps.
func (s *State) lookup(p string, comps []string) (*node, *chubby.ChubbyError) {
	cur := s.root
	for i, c := range comps {
		if !cur.isDir() {
			return nil, Errorf(chubby.ErrorCode_NOT_DIRECTORY, "%s is a file, not a directory (looking up %s)", cur.path, p)
		}
		next := cur.children[c]
		if next == nil {
			if i == len(comps)-1 {
				return nil, Errorf(chubby.ErrorCode_NOT_FOUND, "no node at %s", p)
			}
			return nil, Errorf(chubby.ErrorCode_NOT_FOUND, "no node at %s (%s does not exist)", p, joinPath(cur.path, c))
		}
		cur = next
	}
	return cur, nil
}

// createPlan is a validated node creation, computed without changing
// anything, so that a refused command changes nothing.
type createPlan struct {
	parent  *node    // deepest existing directory
	missing []string // directories to create under parent first (make-parents)
	name    string   // name of the new node, counter included
	seq     int64    // counter used for a sequential name; -1 when not sequential
}

// path returns the path of the node the plan creates.
func (plan *createPlan) path() string {
	p := plan.parent.path
	for _, c := range plan.missing {
		p = joinPath(p, c)
	}
	return joinPath(p, plan.name)
}

// planCreate resolves creating a node at the path p (components comps):
// the directory it goes in, the parents to make, its name. When the path
// already names a node and the name is not sequential, it returns that
// node and no plan: the caller decides whether that is an error (EXISTS)
// or an open. The caller checks the rights, then the limits (checkCreate).
func (s *State) planCreate(p string, comps []string, makeParents, sequential bool) (*createPlan, *node, *chubby.ChubbyError) {
	if len(comps) == 0 {
		if sequential {
			return nil, nil, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "a sequential name needs a last component; / has none")
		}
		return nil, s.root, nil
	}
	base := comps[len(comps)-1]
	if sequential {
		if len(base)+sequenceDigits > int(chubby.MAX_NAME_BYTES) {
			return nil, nil, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "sequential name %q is %d bytes; with the %d-digit counter it would exceed %d", base, len(base), sequenceDigits, chubby.MAX_NAME_BYTES)
		}
		if len(p)+sequenceDigits > int(chubby.MAX_PATH_BYTES) {
			return nil, nil, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "path %q with the %d-digit counter would exceed %d bytes", p, sequenceDigits, chubby.MAX_PATH_BYTES)
		}
	}
	plan := &createPlan{parent: s.root, seq: -1}
	for i, c := range comps[:len(comps)-1] {
		cur := plan.parent
		if !cur.isDir() {
			return nil, nil, Errorf(chubby.ErrorCode_NOT_DIRECTORY, "%s is a file, not a directory (creating %s)", cur.path, p)
		}
		next := cur.children[c]
		if next == nil {
			if !makeParents {
				return nil, nil, Errorf(chubby.ErrorCode_NOT_FOUND, "parent directory %s does not exist (creating %s)", joinPath(cur.path, c), p)
			}
			plan.missing = comps[i : len(comps)-1]
			break
		}
		plan.parent = next
	}
	if !plan.parent.isDir() {
		return nil, nil, Errorf(chubby.ErrorCode_NOT_DIRECTORY, "%s is a file, not a directory (creating %s)", plan.parent.path, p)
	}
	plan.name = base
	if sequential {
		plan.seq = 0
		if len(plan.missing) == 0 {
			// The counter skips names someone created by hand, so that a
			// sequential create never fails on a taken name.
			plan.seq = plan.parent.nextSeq
			for ; plan.seq <= maxSequence; plan.seq++ {
				if plan.parent.children[sequentialName(base, plan.seq)] == nil {
					break
				}
			}
			if plan.seq > maxSequence {
				return nil, nil, Errorf(chubby.ErrorCode_LIMIT_EXCEEDED, "sequential counter of %s is exhausted", plan.parent.path)
			}
		}
		plan.name = sequentialName(base, plan.seq)
	} else if len(plan.missing) == 0 {
		if existing := plan.parent.children[base]; existing != nil {
			return nil, existing, nil
		}
	}
	return plan, nil, nil
}

// checkCreate checks the limits of the cell for carrying out plan with
// content of the given size.
func (s *State) checkCreate(plan *createPlan, size int) *chubby.ChubbyError {
	if s.nodes+len(plan.missing)+1 > s.limits.MaxNodes {
		return Errorf(chubby.ErrorCode_LIMIT_EXCEEDED, "the cell holds %d nodes, the limit is %d", s.nodes, s.limits.MaxNodes)
	}
	if len(plan.parent.children)+1 > s.limits.MaxChildren {
		return Errorf(chubby.ErrorCode_LIMIT_EXCEEDED, "directory %s has %d entries, the limit is %d", plan.parent.path, len(plan.parent.children), s.limits.MaxChildren)
	}
	return s.checkContent(size, 0)
}

// checkContent validates replacing content of size old by content of size
// size: the per-file limit (TOO_LARGE) and the cell total (LIMIT_EXCEEDED).
func (s *State) checkContent(size, old int) *chubby.ChubbyError {
	if size > s.limits.MaxContentBytes {
		return tooLarge(size, s.limits.MaxContentBytes)
	}
	if total := s.contentBytes - int64(old) + int64(size); total > s.limits.MaxTotalContentBytes {
		return Errorf(chubby.ErrorCode_LIMIT_EXCEEDED, "the cell would hold %d content bytes, the limit is %d", total, s.limits.MaxTotalContentBytes)
	}
	return nil
}

// sequentialName appends the zero-padded counter to base.
func sequentialName(base string, seq int64) string {
	var b strings.Builder
	b.Grow(len(base) + sequenceDigits)
	b.WriteString(base)
	var digits [sequenceDigits]byte
	for i := sequenceDigits - 1; i >= 0; i-- {
		digits[i] = byte('0' + seq%10)
		seq /= 10
	}
	b.Write(digits[:])
	return b.String()
}

// commitCreate carries out a plan: the missing parents (permanent
// directories), then the node itself.
func (s *State) commitCreate(plan *createPlan, kind chubby.NodeKind, owner *session, content []byte) *node {
	// A Multi's undo log covers addNode, not the sequence counter.
	assert(s.tent == nil || plan.seq < 0, "a sequential create in a Multi")
	cur := plan.parent
	for _, c := range plan.missing {
		cur = s.addNode(cur, c, chubby.NodeKind_DIRECTORY, nil, nil)
	}
	if plan.seq >= 0 {
		cur.nextSeq = plan.seq + 1
	}
	return s.addNode(cur, plan.name, kind, owner, content)
}

// addNode creates one node under parent. The caller has validated it.
func (s *State) addNode(parent *node, name string, kind chubby.NodeKind, owner *session, content []byte) *node {
	assert(parent.isDir() && !parent.deleted, "addNode under %s", parent.path)
	assert(parent.children[name] == nil, "addNode over existing %s/%s", parent.path, name)
	p := joinPath(parent.path, name)
	n := &node{
		name:       p[len(p)-len(name):],
		path:       p,
		parent:     parent,
		kind:       kind,
		instance:   s.nextInstance,
		contentGen: 1,
		ctime:      s.now,
		mtime:      s.now,
		acl:        parent.acl,
	}
	if s.tent != nil {
		s.tent.logAdd(parent, n, owner)
	}
	s.nextInstance++
	if kind == chubby.NodeKind_DIRECTORY {
		n.children = map[string]*node{}
	} else if len(content) > 0 {
		n.content = slices.Clone(content)
		n.checksum = crc32.Checksum(n.content, castagnoli)
		s.contentBytes += int64(len(n.content))
	}
	if owner != nil {
		n.owner = owner.id
		owner.ephemerals[n] = struct{}{}
	}
	parent.children[n.name] = n
	parent.contentGen++
	parent.mtime = s.now
	s.nodes++
	s.memoACL(n)
	s.notify(parent, event{kind: chubby.EventKind_CHILD_ADDED, child: n.name})
	return n
}

// setContent replaces the content of the file n.
func (s *State) setContent(n *node, content []byte) {
	assert(!n.isDir() && !n.deleted, "setContent on %s", n.path)
	if s.tent != nil {
		s.tent.logWrite(n)
	}
	s.contentBytes -= int64(len(n.content))
	n.content = nil
	if len(content) > 0 {
		n.content = slices.Clone(content)
	}
	n.checksum = crc32.Checksum(n.content, castagnoli)
	s.contentBytes += int64(len(n.content))
	n.contentGen++
	n.mtime = s.now
	s.memoACL(n)
	s.notify(n, event{kind: chubby.EventKind_FILE_CONTENTS_MODIFIED, gen: n.contentGen})
	if n.parent != nil {
		s.notify(n.parent, event{kind: chubby.EventKind_CHILD_MODIFIED, child: n.name, gen: n.contentGen})
	}
}

// deleteTree deletes n and everything under it, children first in name
// order (so that the wakes it produces come in a fixed order), then deletes
// ephemeral directories it left empty above it.
func (s *State) deleteTree(n *node, fx *Effects) {
	parent := n.parent
	s.deleteSubtree(n, fx)
	s.collectEmptyEphemeral(parent, fx)
}

func (s *State) deleteSubtree(n *node, fx *Effects) {
	if n.isDir() && len(n.children) > 0 {
		for _, name := range sortedNames(n) {
			s.deleteSubtree(n.children[name], fx)
		}
	}
	s.removeNode(n, fx)
}

// collectEmptyEphemeral deletes n, and then its parents, while each is an
// empty ephemeral directory whose owner session has ended.
func (s *State) collectEmptyEphemeral(n *node, fx *Effects) {
	for n != nil && n != s.root && n.isDir() && len(n.children) == 0 && n.owner != 0 && s.sessions[n.owner] == nil {
		parent := n.parent
		s.removeNode(n, fx)
		n = parent
	}
}

// removeNode takes the childless node n out of the tree. Its lock goes with
// it: holders lose it, waiters are woken with HANDLE_INVALID, a pending
// lock-delay is dropped (in a Multi, once all its ops have applied). Handles
// on n become invalid (their node is gone).
func (s *State) removeNode(n *node, fx *Effects) {
	assert(n != s.root && !n.deleted && len(n.children) == 0, "removeNode %s", n.path)
	if s.tent != nil {
		s.tent.logRemove(n, s.sessions[n.owner])
	} else {
		s.dropLock(n, fx)
	}
	s.notify(n, event{kind: chubby.EventKind_HANDLE_INVALID})
	n.watchers = nil
	parent := n.parent
	delete(parent.children, n.name)
	parent.contentGen++
	parent.mtime = s.now
	s.contentBytes -= int64(len(n.content))
	s.nodes--
	if n.owner != 0 {
		if owner := s.sessions[n.owner]; owner != nil {
			delete(owner.ephemerals, n)
		}
	}
	n.deleted = true
	n.content = nil
	n.children = nil
	n.aclFile = nil
	s.notify(parent, event{kind: chubby.EventKind_CHILD_REMOVED, child: n.name})
}

// sortedNames returns the names of the children of the directory n in
// ascending byte order.
func sortedNames(n *node) []string {
	names := make([]string, 0, len(n.children))
	for name := range n.children {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// stat describes n as of now.
func (s *State) stat(n *node) *chubby.Stat {
	st := &chubby.Stat{
		Path:              n.path,
		Kind:              n.kind,
		Instance:          n.instance,
		ContentGeneration: n.contentGen,
		LockGeneration:    n.lockGen,
		AclGeneration:     n.aclGen,
		Checksum:          int64(n.checksum),
		Size:              int64(len(n.content)),
		CreateTimeMs:      n.ctime,
		ModifyTimeMs:      n.mtime,
		Ephemeral:         n.owner != 0,
		EphemeralOwner:    n.owner,
		Lock:              s.lockInfo(n),
		Acl:               n.acl.wire(),
	}
	if n.isDir() {
		st.Size = int64(len(n.children))
	}
	return st
}
