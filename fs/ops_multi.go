package fs

import (
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// Multi: compares, then creates, writes and deletes as one command, all or
// nothing (see the package documentation, "Atomic multi-operation").
//
// How "nothing" is kept: an undo log, not a dry run. The ops apply for real,
// one after the other, each through the very code of the single call it
// stands for (createFile's and mkdir's planning, writeFile, deleteAt), so
// they have its rights, errors, messages and effects by construction, and a
// later op sees the earlier ones' changes as it would after them. A dry run
// would need a second model of the namespace (existence, kinds, parents,
// generations, rights under inherited names and rewritten ACL files,
// every limit, the orphaned ephemeral directories a delete collects...)
// that agrees with the real one in every decision and message, or the
// real pass panics; that is the larger thing to get wrong.
//
// While the ops apply, the state is tentative (State.tent): every change
// they make is either taken back on failure or held back until success:
//   - the namespace changes only through addNode, setContent and removeNode
//     (a Multi's creates make no parents and use no sequence counter, which
//     is not logged: commitCreate asserts it). Each of them, when
//     tentative, first logs an undo of what it overwrites on the node and
//     its parent, and of the owner's ephemeral set; the counters they move
//     (nodes, content bytes, the instance counter) are saved once when the
//     Multi begins;
//   - events are held back (queueEvent), in order, with what notify decided
//     when the change was made (who may read), and queued on success: the
//     same events, numbered and folded as the single calls would have;
//   - the locks of deleted nodes are dropped on success (removeNode), in
//     order, which wakes their waiters (Effects.Woken); dropLock asserts it
//     never runs tentatively;
//   - nothing else is written: the ops open no handle, take no lock, end no
//     session.
//
// The ops read nothing that is held back: no op looks at event queues, nor
// at the lock of a deleted node. So an op applied tentatively decides and
// changes exactly what it would have as a single command after the earlier
// ones. On failure the undo log runs backwards and the counters are put
// back: the state is the one before the first op, byte for byte. On success
// the held-back events and lock drops are carried out.

// tentative is what a Multi's ops changed so far (see above).
type tentative struct {
	undo   []func()
	events []heldEvent
	drops  []*node // deleted nodes whose locks are dropped on success

	nodes        int
	contentBytes int64
	nextInstance int64
}

// heldEvent is an event notify decided to queue for sess.
type heldEvent struct {
	sess *session
	e    event
}

// beginTentative makes the state tentative.
func (s *State) beginTentative() {
	assert(s.tent == nil, "a Multi inside a Multi")
	s.tent = &tentative{nodes: s.nodes, contentBytes: s.contentBytes, nextInstance: s.nextInstance}
}

// rollback takes back every tentative change.
func (s *State) rollback() {
	t := s.tent
	s.tent = nil
	for i := len(t.undo) - 1; i >= 0; i-- {
		t.undo[i]()
	}
	s.nodes, s.contentBytes, s.nextInstance = t.nodes, t.contentBytes, t.nextInstance
}

// commit keeps the tentative changes and carries out what they held back.
func (s *State) commit(fx *Effects) {
	t := s.tent
	s.tent = nil
	for _, h := range t.events {
		s.queueEvent(h.sess, h.e)
	}
	for _, n := range t.drops {
		s.dropLock(n, fx)
	}
}

// logAdd logs the undo of adding n under parent (owner: its ephemeral
// owner, or nil), before addNode changes parent.
func (t *tentative) logAdd(parent, n *node, owner *session) {
	gen, mtime := parent.contentGen, parent.mtime
	t.undo = append(t.undo, func() {
		delete(parent.children, n.name)
		parent.contentGen, parent.mtime = gen, mtime
		if owner != nil {
			delete(owner.ephemerals, n)
		}
	})
}

// logWrite logs the undo of replacing the content of n, before setContent.
func (t *tentative) logWrite(n *node) {
	content, sum, gen, mtime, acl := n.content, n.checksum, n.contentGen, n.mtime, n.aclFile
	t.undo = append(t.undo, func() {
		n.content, n.checksum, n.contentGen, n.mtime, n.aclFile = content, sum, gen, mtime, acl
	})
}

// logRemove logs the undo of removing n (owner: its live owner, or nil),
// before removeNode changes anything, and holds back the drop of its lock.
func (t *tentative) logRemove(n *node, owner *session) {
	old, parent := *n, n.parent
	gen, mtime := parent.contentGen, parent.mtime
	t.undo = append(t.undo, func() {
		*n = old
		parent.children[n.name] = n
		parent.contentGen, parent.mtime = gen, mtime
		if owner != nil {
			owner.ephemerals[n] = struct{}{}
		}
	})
	if n.lock != nil {
		t.drops = append(t.drops, n)
	}
}

// multi applies a MultiRequest. Faults in order: arguments, session, the
// compares' rights, the compares (an answer, not a fault), the ops.
func (s *State) multi(req *chubby.MultiRequest, fx *Effects) *fsm.Result_ {
	if err := s.checkMultiArgs(req); err != nil {
		return errResult(err)
	}
	sess := s.sessions[req.Session]
	if sess == nil {
		return errResult(sessionExpired(req.Session))
	}
	failed, err := s.compare(sess.principal, req.Compares)
	if err != nil {
		return errResult(err)
	}
	if failed >= 0 {
		i := int32(failed)
		return &fsm.Result_{Multi: &chubby.MultiResponse{FailedCompare: &i, Stats: []*chubby.Stat{}}}
	}
	stats, err := s.multiOps(sess, req.Ops, fx)
	if err != nil {
		return errResult(err)
	}
	return &fsm.Result_{Multi: &chubby.MultiResponse{Succeeded: true, Stats: stats}}
}

// multiOps applies ops in order, all or none: the Stat of each, or the
// first refusal, naming its op, with nothing changed. An op that leaves
// "/" or /acl without a principal holding change_acl, where both had one,
// is refused as its single call would be (see keepAdmin): the rule holds
// after every op, as for the single calls one after the other.
func (s *State) multiOps(sess *session, ops []*chubby.MultiOp, fx *Effects) ([]*chubby.Stat, *chubby.ChubbyError) {
	stats := make([]*chubby.Stat, 0, len(ops))
	kept := s.LockOut() == ""
	s.beginTentative()
	for i, op := range ops {
		st, err := s.multiOp(sess, op, fx)
		if err == nil && kept {
			if t := s.LockOut(); t != "" {
				err = lockOutErr(t)
			}
		}
		if err != nil {
			s.rollback()
			return nil, Errorf(err.Code, "op %d: %s", i, err.Message)
		}
		stats = append(stats, st)
	}
	s.commit(fx)
	return stats, nil
}

// multiOp applies one op (validated) as the single call it stands for and
// returns the node's Stat after it (DELETE: before).
func (s *State) multiOp(sess *session, op *chubby.MultiOp, fx *Effects) (*chubby.Stat, *chubby.ChubbyError) {
	comps, err := parsePath(op.Path)
	assert(err == nil, "Multi op path %q not validated", op.Path)
	if op.Kind == chubby.MultiOpKind_CREATE {
		n, err := s.multiCreate(sess, op, comps)
		if err != nil {
			return nil, err
		}
		return s.stat(n), nil
	}
	n, err := s.lookup(op.Path, comps)
	if err != nil {
		return nil, err
	}
	if op.Kind == chubby.MultiOpKind_SET_CONTENTS {
		if err := s.writeFile(sess.principal, n, op.Content, op.ExpectedGeneration); err != nil {
			return nil, err
		}
		return s.stat(n), nil
	}
	st := s.stat(n)
	if err := s.deleteAt(sess.principal, n, op.GetRecursive(), fx); err != nil {
		return nil, err
	}
	return st, nil
}

// multiCreate creates what a CREATE op asks for, as CreateFile (a file) or
// Mkdir (a directory) without make-parents do.
func (s *State) multiCreate(sess *session, op *chubby.MultiOp, comps []string) (*node, *chubby.ChubbyError) {
	plan, existing, err := s.planCreate(op.Path, comps, false, false)
	if err != nil {
		return nil, err
	}
	if existing != nil {
		return nil, s.existsErr(sess.principal, existing)
	}
	kind, content := chubby.NodeKind_FILE, op.Content
	if op.GetDirectory() {
		kind, content = chubby.NodeKind_DIRECTORY, nil
	}
	if err := s.allowedCreate(sess.principal, plan, len(content)); err != nil {
		return nil, err
	}
	return s.commitCreate(plan, kind, ownerIf(sess, op.GetEphemeral()), content), nil
}

// compare checks the compares against the state: first the read right of
// principal for each (an error), then whether each holds. It returns the
// index of the first that does not hold, -1 when all do.
func (s *State) compare(principal string, cs []*chubby.Compare) (int, *chubby.ChubbyError) {
	nodes := make([]*node, len(cs))
	for i, c := range cs {
		n, nearest := s.resolve(c.Path)
		if err := s.allowed(principal, nearest, ReadRight); err != nil {
			return 0, Errorf(err.Code, "compare %d: %s", i, err.Message)
		}
		nodes[i] = n
	}
	for i, c := range cs {
		if !compareHolds(c, nodes[i]) {
			return i, nil
		}
	}
	return -1, nil
}

// resolve returns the node at the valid path p (nil when there is none)
// and the node a compare of p needs the read right on: that node, or the
// nearest existing ancestor of p (a file, when p goes through one).
func (s *State) resolve(p string) (n, nearest *node) {
	comps, err := parsePath(p)
	assert(err == nil, "compare path %q not validated", p)
	cur := s.root
	for _, c := range comps {
		next := cur.children[c] // nil for a file
		if next == nil {
			return nil, cur
		}
		cur = next
	}
	return cur, cur
}

// compareHolds reports whether the validated compare c holds of n (nil: no
// node at its path).
func compareHolds(c *chubby.Compare, n *node) bool {
	switch c.Kind {
	case chubby.CompareKind_EXISTS:
		return n != nil
	case chubby.CompareKind_NOT_EXISTS:
		return n == nil
	case chubby.CompareKind_CONTENT_GENERATION:
		return n != nil && n.contentGen == *c.Value
	case chubby.CompareKind_INSTANCE:
		return n != nil && n.instance == *c.Value
	}
	panic("fs: compare kind not validated")
}

// checkMultiArgs validates a MultiRequest's arguments: the counts, each
// compare, each op, then the contents' total.
func (s *State) checkMultiArgs(req *chubby.MultiRequest) *chubby.ChubbyError {
	if n := len(req.Compares); n > int(chubby.MAX_MULTI_COMPARES) {
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "Multi carries %d compares, at most %d", n, chubby.MAX_MULTI_COMPARES)
	}
	if n := len(req.Ops); n == 0 || n > int(chubby.MAX_MULTI_OPS) {
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "Multi carries %d ops, want 1..%d", n, chubby.MAX_MULTI_OPS)
	}
	for i, c := range req.Compares {
		if err := checkCompare(c); err != nil {
			return Errorf(err.Code, "compare %d: %s", i, err.Message)
		}
	}
	total := 0
	for i, op := range req.Ops {
		if err := s.checkMultiOp(op); err != nil {
			return Errorf(err.Code, "op %d: %s", i, err.Message)
		}
		total += len(op.Content)
	}
	if total > int(chubby.MAX_MULTI_BYTES) {
		return Errorf(chubby.ErrorCode_TOO_LARGE, "the ops' contents are %d bytes together, more than %d", total, chubby.MAX_MULTI_BYTES)
	}
	return nil
}

// checkCompare validates one compare: its kind, its path, and a value
// exactly for the kinds that compare one.
func checkCompare(c *chubby.Compare) *chubby.ChubbyError {
	if c == nil {
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "missing")
	}
	if c.Kind < chubby.CompareKind_EXISTS || c.Kind > chubby.CompareKind_INSTANCE {
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "kind %d is not EXISTS, NOT_EXISTS, CONTENT_GENERATION or INSTANCE", c.Kind)
	}
	if _, err := parsePath(c.Path); err != nil {
		return err
	}
	needs := c.Kind == chubby.CompareKind_CONTENT_GENERATION || c.Kind == chubby.CompareKind_INSTANCE
	switch {
	case needs && !c.IsSetValue():
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "%s needs a value", c.Kind)
	case !needs && c.IsSetValue():
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "%s takes no value", c.Kind)
	}
	return nil
}

// checkMultiOp validates one op's arguments as the single call it stands
// for does, and that it carries only the fields of its kind.
func (s *State) checkMultiOp(op *chubby.MultiOp) *chubby.ChubbyError {
	if op == nil {
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "missing")
	}
	if op.Kind < chubby.MultiOpKind_CREATE || op.Kind > chubby.MultiOpKind_DELETE {
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "kind %d is not CREATE, SET_CONTENTS or DELETE", op.Kind)
	}
	if _, err := parsePath(op.Path); err != nil {
		return err
	}
	if err := checkOpFields(op); err != nil {
		return err
	}
	if len(op.Content) > s.limits.MaxContentBytes {
		return tooLarge(len(op.Content), s.limits.MaxContentBytes)
	}
	if op.Kind == chubby.MultiOpKind_DELETE && op.Path == "/" {
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "the root directory cannot be deleted")
	}
	if op.Kind != chubby.MultiOpKind_DELETE && !op.GetDirectory() {
		return checkACLContent(op.Path, op.Content)
	}
	return nil
}

// checkOpFields refuses the fields that do not apply to the op's kind:
// directory and ephemeral are CREATE's, recursive DELETE's,
// expected_generation SET_CONTENTS', content a file's (CREATE of a file,
// SET_CONTENTS). Empty content counts as none.
func checkOpFields(op *chubby.MultiOp) *chubby.ChubbyError {
	create, set, del := op.Kind == chubby.MultiOpKind_CREATE, op.Kind == chubby.MultiOpKind_SET_CONTENTS, op.Kind == chubby.MultiOpKind_DELETE
	for _, f := range []struct {
		name    string
		given   bool
		applies bool
	}{
		{"directory", op.IsSetDirectory(), create},
		{"ephemeral", op.IsSetEphemeral(), create},
		{"recursive", op.IsSetRecursive(), del},
		{"expected_generation", op.IsSetExpectedGeneration(), set},
		{"content", len(op.Content) > 0, create && !op.GetDirectory() || set},
	} {
		if f.given && !f.applies {
			return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "%s does not apply to %s", f.name, opKindName(op))
		}
	}
	return nil
}

// opKindName names an op's kind as messages do.
func opKindName(op *chubby.MultiOp) string {
	if op.Kind == chubby.MultiOpKind_CREATE && op.GetDirectory() {
		return "CREATE of a directory"
	}
	return op.Kind.String()
}
