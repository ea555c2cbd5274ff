package fs

import (
	"slices"
	"strings"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// Reach is what a command may change of what clients cache. Clients cache
// by path: a file's contents with its Stat, and a directory's listing,
// which carries every child's Stat. So a change to a node's Stat (its
// lock, generations, size, mtime) reaches the node's path and its
// parent's; adding or removing a node reaches the node, its parent (the
// listing, and the parent's own Stat: size, content generation, mtime) and
// so its grandparent.
type Reach struct {
	// All: the command may change any cached node (its reach was too large
	// to list: more than MaxReachPaths paths).
	All bool
	// Paths whose cached contents, Stat or listing may change; sorted,
	// without duplicates.
	Paths []string
	// Trees are paths everything strictly under which may go (a recursive
	// delete; each is in Paths too); sorted.
	Trees []string
	// Delayed lists the paths that change when the lock-delays this command
	// may start end: the locks an expired EndSession's session holds or
	// waits for with a lock-delay, and their parents. Such a lock-delay is
	// ended by the clock of whichever command comes after it, so while
	// this command is in flight every command's reach includes them (see
	// State.Reach).
	Delayed []string
	// ACLs are the ACL names whose grant the command may narrow: N when it
	// may rewrite or remove the ACL file /acl/N (a SetContents, Delete or
	// Multi SET_CONTENTS or DELETE there, the end of the session owning an
	// ephemeral one, InitACL's /acl/admin); sorted, without duplicates. A
	// creation is not among them: the name of a missing file grants nobody,
	// so creating it only widens the grant.
	ACLs []string
	// AllACLs: the command may remove every ACL file (a Delete of /acl, or
	// a reach of more than MaxReachPaths names).
	AllACLs bool
}

// MaxReachPaths bounds the paths a Reach lists; past it the Reach says All.
const MaxReachPaths = 4096

// OpSession returns the session an operation acts for, directly or through
// its handle, when it names one: the only session whose handles, locks and
// ephemeral nodes it can add to.
func OpSession(op *fsm.Op) (chubby.SessionID, bool) {
	if op == nil {
		return 0, false
	}
	return opSession(op)
}

// Reach returns what cmd may change of what clients cache when it applies
// after everything applied now: computed against the state now, with
// cmd's time_ms, before cmd commits.
//
// Every command first advances the clock to its time_ms: the lock-delays
// that end by then are over and their queues are granted, which changes
// those locks' Stats although the command names none of them. Then its
// operation: a handle's operation (SetContents, Close, Acquire, Release,
// CancelWait, SetACL) changes its node and nothing else; a creation adds nodes
// under an existing directory; a Delete removes a subtree and the
// ephemeral directories it leaves empty above it; an EndSession changes
// the locks its session holds or waits for and removes its ephemeral nodes
// (and the ephemeral directories they leave empty); an InitACL creates
// /acl and /acl/admin and names ACLs on them and on "/"; a Multi changes
// what its ops change, each as the single call it stands for.
// CreateSession, Tick and TrimEvents change nothing cached beyond the
// clock's part.
//
// What a command may narrow of the ACL names' grants (Reach.ACLs) is read
// off the same operations: a write or removal at /acl/N names N, a
// removal of /acl every name. An ACL file is known by its place, so
// whatever applies in between, a command that rewrites or removes the file
// at /acl/N names it now.
//
// The master computes the reach before the command is in the log, and
// commands ahead of it may apply in between. The reach stays a superset of
// what the command changes then, on two conditions the master keeps:
//
//  1. No command that applies in between starts a lock-delay that ends by
//     cmd's time_ms unless its Delayed is in the reach. Only an expired
//     EndSession starts one, and it ends strictly after that EndSession's
//     clock, so the master stamps its commands in the order it computes
//     their reaches, never decreasing, and adds to each the Delayed of
//     every expired EndSession still in flight: one stamped later starts
//     lock-delays that end after cmd's time_ms, which cmd's clock cannot
//     end.
//  2. For an EndSession, no command of its own session applies in between:
//     only those add to the session's handles, locks and ephemeral nodes.
//     The master refuses the session's new commands once it begins to end
//     it, and computes the reach once those in flight are done.
//
// Everything else is bounded whatever applies in between. A handle's path
// never changes, and a command through a handle acts only if its node is
// live at that path at apply (handleFor), so its reach is that path and
// its parent. A creation's reach is its path with its parent and
// grandparent, and every ancestor when it creates missing parents, where
// the directory it creates under may be. A Delete acts only on a handle
// whose node is live now and at apply, so the node's ancestors are the
// same nodes then, with the same owners: the ephemeral ones among them
// that it may remove are known now; and everything under the node is a
// Tree, whatever is created there in between. A Multi's ops name paths,
// not nodes: a CREATE's reach is a creation's, a SET_CONTENTS' that of a
// handle on its path; a DELETE acts on whatever node is at its path at
// apply, under ancestors that may not be the ones now, so its reach is
// every ancestor, as for a Delete through a handle not opened yet —
// unless an INSTANCE compare of the Multi pins the node (see
// reachMultiDelete). Commands in between that remove what the reach lists
// only make it larger than needed.
func (s *State) Reach(cmd *fsm.Command) Reach {
	if cmd == nil || cmd.TimeMs < 0 || cmd.TimeMs > MaxTimeMs {
		return Reach{} // refused before the clock moves: changes nothing
	}
	r := reachSet{}
	s.reachClock(&r, cmd.TimeMs)
	if op := cmd.Op; op != nil && op.CountSetFieldsOp() == 1 {
		s.reachOp(&r, op)
	}
	return r.result()
}

// reachSet collects a Reach.
type reachSet struct {
	paths, trees, delayed, acls map[string]struct{}
	allACLs                     bool
}

func (r *reachSet) add(m *map[string]struct{}, p string) {
	if *m == nil {
		*m = map[string]struct{}{}
	}
	(*m)[p] = struct{}{}
}

// changed adds a change to the Stat of n: n and its parent's listing.
func (r *reachSet) changed(n *node) {
	r.add(&r.paths, n.path)
	if n.parent != nil {
		r.add(&r.paths, n.parent.path)
	}
}

// removed adds the removal of n: n, its parent (listing and Stat) and so
// its grandparent's listing; and the same for every ephemeral directory
// above n that collectEmptyEphemeral may remove after it (it stops at the
// first permanent directory).
func (r *reachSet) removed(n *node) {
	r.add(&r.paths, n.path)
	for p := n.parent; p != nil; p = p.parent {
		r.changed(p)
		if p.owner == 0 {
			break
		}
	}
}

// ancestors adds p's parent and grandparent, or every ancestor when all.
func (r *reachSet) ancestors(p string, all bool) {
	for i := 0; p != "/" && (all || i < 2); i++ {
		p = parentPath(p)
		r.add(&r.paths, p)
	}
}

func (r *reachSet) result() Reach {
	sorted := func(m map[string]struct{}) []string {
		if len(m) == 0 {
			return nil
		}
		out := make([]string, 0, len(m))
		for p := range m {
			out = append(out, p)
		}
		slices.Sort(out)
		return out
	}
	out := Reach{Paths: sorted(r.paths), Trees: sorted(r.trees), Delayed: sorted(r.delayed), AllACLs: r.allACLs}
	if len(out.Paths) > MaxReachPaths {
		out.All, out.Paths, out.Trees = true, nil, nil
	}
	if !out.AllACLs {
		out.ACLs = sorted(r.acls)
		if len(out.ACLs) > MaxReachPaths {
			out.AllACLs, out.ACLs = true, nil
		}
	}
	return out
}

// aclAt adds the ACL name whose file is at the valid path p, if p is an
// ACL file's place (a direct child of /acl): what a write or removal
// there may narrow.
func (r *reachSet) aclAt(p string) {
	if isACLFilePath(p) {
		r.add(&r.acls, p[len("/"+aclDir+"/"):])
	}
}

// aclGone adds the removal of everything at and under the valid path p:
// every ACL name when /acl goes with it ("/" or /acl itself), else p's
// name when p is an ACL file's place.
func (r *reachSet) aclGone(p string) {
	if p == "/" || p == "/"+aclDir {
		r.allACLs = true
		return
	}
	r.aclAt(p)
}

// reachClock adds the locks whose lock-delay ends once the clock reaches t.
// Every pending delay ends after s.now, so these are the delays ending in
// (s.now, t]; the heap is walked only where its keys are at most t.
func (s *State) reachClock(r *reachSet, t int64) {
	var walk func(i int)
	walk = func(i int) {
		if i >= len(s.delays) || s.delays[i].lock.delayUntil > t {
			return
		}
		r.changed(s.delays[i])
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
}

// reachOp adds what the operation itself may change (see Reach).
func (s *State) reachOp(r *reachSet, op *fsm.Op) {
	switch {
	case op.EndSession != nil:
		sess := s.sessions[op.EndSession.Session]
		if sess == nil {
			return // refused
		}
		for _, h := range sess.handles {
			if h.held == 0 && h.wait == 0 {
				continue
			}
			r.changed(h.node)
			// A waiting handle may hold by the time the session ends.
			if op.EndSession.Expired && (h.held != 0 && h.heldDelay > 0 || h.wait != 0 && h.waitDelay > 0) {
				r.add(&r.delayed, h.node.path)
				if h.node.parent != nil {
					r.add(&r.delayed, h.node.parent.path)
				}
			}
		}
		// Every ephemeral node, even a directory with children now: they
		// may be gone by the time the session ends.
		for n := range sess.ephemerals {
			r.removed(n)
			// An ephemeral directory goes only once empty: of ACL files,
			// only an ephemeral file at an ACL file's place goes.
			r.aclAt(n.path)
		}
	case op.Open != nil:
		if op.Open.Create != chubby.CreateMode_OPEN_EXISTING {
			r.created(op.Open.Path, op.Open.GetSequential(), false)
		}
	case op.Mkdir != nil:
		r.created(op.Mkdir.Path, false, op.Mkdir.GetParents())
	case op.CreateFile != nil:
		r.created(op.CreateFile.Path, op.CreateFile.GetSequential(), op.CreateFile.GetMakeParents())
	case op.DeleteNode != nil:
		s.reachDelete(r, op.DeleteNode.Handle)
	case op.Close != nil:
		s.handle(r, op.Close.Handle)
	case op.SetContents != nil:
		if s.handle(r, op.SetContents.Handle) {
			r.aclAt(op.SetContents.Handle.Path)
		}
	case op.Acquire != nil:
		s.handle(r, op.Acquire.Handle)
	case op.Release != nil:
		s.handle(r, op.Release.Handle)
	case op.CancelWait != nil:
		s.handle(r, op.CancelWait.Handle)
	case op.SetAcl != nil:
		s.handle(r, op.SetAcl.Handle)
	case op.InitAcl != nil:
		r.initACL(op.InitAcl)
	case op.Multi != nil:
		s.reachMulti(r, op.Multi)
	}
}

// handle adds what an operation through the handle w may change: its node
// (if live at apply, it is the node at w.Path: handleFor checks the
// handle's path) and its parent's listing. It reports whether the
// operation may apply at all: w names a valid path, and the handle is
// open and is w (its session, path and instance), or is not opened yet (a
// command ahead of this one may open it). A handle id below nextHandle
// that is not w's handle never will be (ids are not reused, and a
// handle's session, path and instance never change), so such an
// operation reaches nothing: else any session could make every cacher of
// any path drop its copy, and wait for it, by naming the path with a
// made-up handle.
func (s *State) handle(r *reachSet, w *chubby.Handle) bool {
	if w == nil {
		return false
	}
	if _, err := parsePath(w.Path); err != nil {
		return false // refused: no handle has that path
	}
	if w.Id < s.nextHandle {
		h := s.handles[w.Id]
		if h == nil || h.session.id != w.Session || h.instance != w.Instance || h.path != w.Path {
			return false // refused for good (handleFor)
		}
	}
	r.atPath(w.Path)
	return true
}

// HandleOpened reports whether id is the id of a handle opened so far
// (open now or closed since): a client only names handles an Open has
// answered, and a master serves only once it has applied every command
// committed before it, so a handle id at or past this bound in a request
// is made up.
func (s *State) HandleOpened(id int64) bool { return id > 0 && id < s.nextHandle }

// atPath adds a change to the Stat of the node at the valid path p: p and
// its parent's listing.
func (r *reachSet) atPath(p string) {
	r.add(&r.paths, p)
	if p != "/" {
		r.add(&r.paths, parentPath(p))
	}
}

// created adds a creation at p: p itself (a sequential name is p plus a
// counter, a path nobody caches yet: a cached copy of an earlier node of
// that name was invalidated when it went), the directory created under and
// its parent. Without make-parents that directory is p's parent; with
// them it may be any ancestor.
func (r *reachSet) created(p string, sequential, makeParents bool) {
	if _, err := parsePath(p); err != nil {
		return // refused
	}
	if !sequential {
		r.add(&r.paths, p)
	}
	r.ancestors(p, makeParents)
}

// initACL adds what InitACL may change: "/" (its names, and the listing
// and Stat /acl's creation changes), /acl and /acl/admin, and the name
// admin (with recover it rewrites /acl/admin: to a wider grant, but its
// old content is not known here). Whether it applies is decided by the
// state at apply, which commands in between may change: so always, unless
// it is refused.
func (r *reachSet) initACL(req *fsm.InitACL) {
	if checkPrincipal(req.Admin) != nil {
		return // refused
	}
	dir := joinPath("/", aclDir)
	for _, p := range []string{"/", dir, joinPath(dir, aclAdmin)} {
		r.add(&r.paths, p)
	}
	r.add(&r.acls, aclAdmin)
}

// reachDelete adds a Delete through w.
func (s *State) reachDelete(r *reachSet, w *chubby.Handle) {
	if w == nil {
		return
	}
	h := s.handles[w.Id]
	switch {
	case h != nil && h.session.id == w.Session && h.instance == w.Instance && h.path == w.Path && h.live():
		n := h.node
		if n == s.root {
			return // refused
		}
		r.add(&r.trees, n.path)
		r.removed(n)
		r.aclGone(n.path)
	case w.Id >= s.nextHandle:
		// A handle not opened yet: a command ahead of this one may open
		// it. Its node's ephemeral ancestors are not known: all of them.
		if _, err := parsePath(w.Path); err != nil || w.Path == "/" {
			return
		}
		r.add(&r.trees, w.Path)
		r.add(&r.paths, w.Path)
		r.ancestors(w.Path, true)
		r.aclGone(w.Path)
	}
	// Otherwise the handle is closed, or its node gone, for good: refused.
}

// reachMulti adds a Multi: the union of what its ops may change, each as
// the single call it stands for (see Reach). A refused Multi changes
// nothing, nor does one whose compare does not hold.
func (s *State) reachMulti(r *reachSet, req *chubby.MultiRequest) {
	if s.checkMultiArgs(req) != nil {
		return // refused
	}
	for i, op := range req.Ops {
		switch op.Kind {
		case chubby.MultiOpKind_CREATE:
			r.created(op.Path, false, false)
		case chubby.MultiOpKind_SET_CONTENTS:
			r.atPath(op.Path)
			r.aclAt(op.Path)
		case chubby.MultiOpKind_DELETE:
			s.reachMultiDelete(r, req, i)
		}
	}
}

// reachMultiDelete adds the DELETE op i of req: everything under its path
// (a Tree), the path, and every ancestor, since the node there at apply
// and its ancestors may be others than now, and the ephemeral ones among
// them may go with it. Unless the node is pinned (pinnedNode): then it is
// the node there now, under the same ancestors, and its reach is a Delete
// through a handle's.
func (s *State) reachMultiDelete(r *reachSet, req *chubby.MultiRequest, i int) {
	p := req.Ops[i].Path
	r.add(&r.trees, p)
	r.aclGone(p)
	if n := s.pinnedNode(req, i); n != nil {
		r.removed(n)
		return
	}
	r.add(&r.paths, p)
	r.ancestors(p, true)
}

// pinnedNode returns the node that op i of req (a DELETE) deletes when it
// applies at all, if that is known now: the live node at its path when an
// INSTANCE compare of req names it. Instances are never reused, so if the
// compare holds at apply the node there is this one, with the same
// ancestors; and it is still there when op i comes unless an earlier op
// deletes it or an ancestor (a CREATE cannot replace it). nil otherwise.
func (s *State) pinnedNode(req *chubby.MultiRequest, i int) *node {
	p := req.Ops[i].Path
	for _, op := range req.Ops[:i] {
		if op.Kind == chubby.MultiOpKind_DELETE && (op.Path == p || op.Path == "/" || strings.HasPrefix(p, op.Path+"/")) {
			return nil
		}
	}
	n, _ := s.resolve(p)
	if n == nil {
		return nil
	}
	for _, c := range req.Compares {
		if c.Kind == chubby.CompareKind_INSTANCE && c.Path == p && *c.Value == n.instance {
			return n
		}
	}
	return nil
}
