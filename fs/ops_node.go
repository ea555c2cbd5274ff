package fs

import (
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// The namespace commands: Open, CreateFile, Mkdir, SetContents, Delete.
// Each validates everything first and changes state only once nothing can
// fail any more.

func (s *State) open(req *chubby.OpenRequest) *fsm.Result_ {
	comps, err := s.checkOpenArgs(req)
	if err != nil {
		return errResult(err)
	}
	sess := s.sessions[req.Session]
	if sess == nil {
		return errResult(sessionExpired(req.Session))
	}
	n, plan, err := s.openTarget(sess, req, comps)
	if err != nil {
		return errResult(err)
	}
	if err := s.checkNewHandle(sess); err != nil {
		return errResult(err)
	}
	created := plan != nil
	if created {
		n = s.commitCreate(plan, chubby.NodeKind_FILE, ownerIf(sess, req.GetEphemeral()), req.GetInitialContent())
	}
	h := s.openHandle(sess, n, req.Mode, req.GetEventMask())
	return &fsm.Result_{Handle: h.wire(), Stat: s.stat(n), Created: &created}
}

// checkOpenArgs validates an Open's arguments and returns its path's
// components.
func (s *State) checkOpenArgs(req *chubby.OpenRequest) ([]string, *chubby.ChubbyError) {
	if req.Mode != chubby.OpenMode_READ && req.Mode != chubby.OpenMode_READ_WRITE {
		return nil, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "open mode %d is not READ or READ_WRITE", req.Mode)
	}
	create := req.Create
	if create != chubby.CreateMode_OPEN_EXISTING && create != chubby.CreateMode_OPEN_OR_CREATE && create != chubby.CreateMode_CREATE_NEW {
		return nil, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "create mode %d is not OPEN_EXISTING, OPEN_OR_CREATE or CREATE_NEW", create)
	}
	if create == chubby.CreateMode_OPEN_EXISTING && (req.IsSetEphemeral() || req.IsSetSequential() || req.IsSetInitialContent()) {
		return nil, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "ephemeral, sequential and initial_content apply to creation; OPEN_EXISTING never creates")
	}
	if m := req.GetEventMask(); m&^chubby.EVENT_MASK_ALL != 0 {
		return nil, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "event mask %#x has bits outside EVENT_MASK_ALL (%#x)", m, chubby.EVENT_MASK_ALL)
	}
	if len(req.InitialContent) > s.limits.MaxContentBytes {
		return nil, tooLarge(len(req.InitialContent), s.limits.MaxContentBytes)
	}
	comps, err := parsePath(req.Path)
	if err != nil {
		return nil, err
	}
	if create != chubby.CreateMode_OPEN_EXISTING {
		if err := checkACLContent(req.Path, req.InitialContent); err != nil {
			return nil, err
		}
	}
	return comps, nil
}

// openTarget finds the node an Open opens, or the plan of the file it
// creates, and checks the rights of the session's principal: read on the
// node (and write for READ_WRITE); to create, write on the directory too,
// with the node's rights checked on the names it will inherit.
func (s *State) openTarget(sess *session, req *chubby.OpenRequest, comps []string) (*node, *createPlan, *chubby.ChubbyError) {
	p := sess.principal
	if req.Create == chubby.CreateMode_OPEN_EXISTING {
		n, err := s.lookup(req.Path, comps)
		if err != nil {
			return nil, nil, err
		}
		return n, nil, s.allowedOpen(p, n.acl, n.path, req.Mode)
	}
	content := req.GetInitialContent()
	plan, existing, err := s.planCreate(req.Path, comps, false, req.GetSequential())
	switch {
	case err != nil:
		return nil, nil, err
	case existing != nil && req.Create == chubby.CreateMode_CREATE_NEW:
		return nil, nil, s.existsErr(p, existing)
	case existing != nil:
		return existing, nil, s.allowedOpen(p, existing.acl, existing.path, req.Mode)
	}
	if err := s.allowed(p, plan.parent, WriteRight); err != nil {
		return nil, nil, err
	}
	if err := s.allowedOpen(p, plan.parent.acl, plan.path(), req.Mode); err != nil {
		return nil, nil, err
	}
	return nil, plan, s.checkCreate(plan, len(content))
}

func (s *State) createFile(req *chubby.CreateFileRequest) *fsm.Result_ {
	if len(req.Content) > s.limits.MaxContentBytes {
		return errResult(tooLarge(len(req.Content), s.limits.MaxContentBytes))
	}
	comps, err := parsePath(req.Path)
	if err != nil {
		return errResult(err)
	}
	if err := checkACLContent(req.Path, req.Content); err != nil {
		return errResult(err)
	}
	sess := s.sessions[req.Session]
	if sess == nil {
		return errResult(sessionExpired(req.Session))
	}
	plan, existing, err := s.planCreate(req.Path, comps, req.GetMakeParents(), req.GetSequential())
	if err != nil {
		return errResult(err)
	}
	if existing != nil {
		return errResult(s.existsErr(sess.principal, existing))
	}
	if err := s.allowedCreate(sess.principal, plan, len(req.Content)); err != nil {
		return errResult(err)
	}
	n := s.commitCreate(plan, chubby.NodeKind_FILE, ownerIf(sess, req.GetEphemeral()), req.Content)
	created := true
	return &fsm.Result_{Stat: s.stat(n), Created: &created}
}

func (s *State) mkdir(req *chubby.MkdirRequest) *fsm.Result_ {
	comps, err := parsePath(req.Path)
	if err != nil {
		return errResult(err)
	}
	sess := s.sessions[req.Session]
	if sess == nil {
		return errResult(sessionExpired(req.Session))
	}
	plan, existing, err := s.planCreate(req.Path, comps, req.GetParents(), false)
	if err != nil {
		return errResult(err)
	}
	created := false
	if existing != nil {
		if !existing.isDir() || !req.GetParents() {
			return errResult(s.existsErr(sess.principal, existing))
		}
		if err := s.allowed(sess.principal, existing, ReadRight); err != nil {
			return errResult(err)
		}
		return &fsm.Result_{Stat: s.stat(existing), Created: &created}
	}
	if err := s.allowedCreate(sess.principal, plan, 0); err != nil {
		return errResult(err)
	}
	n := s.commitCreate(plan, chubby.NodeKind_DIRECTORY, ownerIf(sess, req.GetEphemeral()), nil)
	created = true
	return &fsm.Result_{Stat: s.stat(n), Created: &created}
}

// allowedCreate checks what carrying out plan needs once its path is
// resolved: write on the directory created in, then the cell's limits for
// content of the given size.
func (s *State) allowedCreate(principal string, plan *createPlan, size int) *chubby.ChubbyError {
	if err := s.allowed(principal, plan.parent, WriteRight); err != nil {
		return err
	}
	return s.checkCreate(plan, size)
}

// existsErr refuses a create over the existing node n: EXISTS, once the
// principal is known to hold the right the create needed, write on n's
// directory (so that it learns nothing it could not learn by trying).
func (s *State) existsErr(principal string, n *node) *chubby.ChubbyError {
	if n.parent != nil {
		if err := s.allowed(principal, n.parent, WriteRight); err != nil {
			return err
		}
	}
	if n.isDir() {
		return Errorf(chubby.ErrorCode_EXISTS, "%s exists and is a directory", n.path)
	}
	return Errorf(chubby.ErrorCode_EXISTS, "%s exists and is a file", n.path)
}

func (s *State) setContents(req *chubby.SetContentsRequest) *fsm.Result_ {
	if len(req.Content) > s.limits.MaxContentBytes {
		return errResult(tooLarge(len(req.Content), s.limits.MaxContentBytes))
	}
	if req.Handle != nil {
		// The handle's path is its node's (handleFor checks it).
		if err := checkACLContent(req.Handle.Path, req.Content); err != nil {
			return errResult(err)
		}
	}
	h, err := s.handleFor(req.Handle, true)
	if err != nil {
		return errResult(err)
	}
	if h.mode != chubby.OpenMode_READ_WRITE {
		return errResult(Errorf(chubby.ErrorCode_PERMISSION_DENIED, "handle %d on %s was opened READ; writing needs READ_WRITE", h.id, h.path))
	}
	if err := s.writeFile(h.session.principal, h.node, req.Content, req.ExpectedGeneration); err != nil {
		return errResult(err)
	}
	return &fsm.Result_{Stat: s.stat(h.node)}
}

// writeFile replaces the content of n for principal, as SetContents does
// once its handle is valid: write on n, then IS_DIRECTORY, the content
// limits and, when expected is set, the compare-and-swap on
// content_generation.
func (s *State) writeFile(principal string, n *node, content []byte, expected *int64) *chubby.ChubbyError {
	if err := s.allowed(principal, n, WriteRight); err != nil {
		return err
	}
	if n.isDir() {
		return Errorf(chubby.ErrorCode_IS_DIRECTORY, "%s is a directory: it has no content", n.path)
	}
	if err := s.checkContent(len(content), len(n.content)); err != nil {
		return err
	}
	if expected != nil && *expected != n.contentGen {
		return Errorf(chubby.ErrorCode_GENERATION_MISMATCH, "%s is at content generation %d, not %d", n.path, n.contentGen, *expected)
	}
	s.setContent(n, content)
	return nil
}

func (s *State) deleteNode(req *chubby.DeleteRequest, fx *Effects) *fsm.Result_ {
	h, err := s.handleFor(req.Handle, true)
	if err != nil {
		return errResult(err)
	}
	if h.mode != chubby.OpenMode_READ_WRITE {
		return errResult(Errorf(chubby.ErrorCode_PERMISSION_DENIED, "handle %d on %s was opened READ; deleting needs READ_WRITE", h.id, h.path))
	}
	if err := s.deleteAt(h.session.principal, h.node, req.GetRecursive(), fx); err != nil {
		return errResult(err)
	}
	return &fsm.Result_{}
}

// deleteAt deletes n for principal, as Delete does once its handle is
// valid: never the root; write on n's directory and, when recursive, on
// every directory it empties; NOT_EMPTY for a directory with entries
// unless recursive.
func (s *State) deleteAt(principal string, n *node, recursive bool, fx *Effects) *chubby.ChubbyError {
	if n == s.root {
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "the root directory cannot be deleted")
	}
	if err := s.allowed(principal, n.parent, WriteRight); err != nil {
		return err
	}
	if recursive {
		if err := s.allowedToEmpty(principal, n); err != nil {
			return err
		}
	}
	if n.isDir() && len(n.children) > 0 && !recursive {
		return Errorf(chubby.ErrorCode_NOT_EMPTY, "directory %s has %d entries; set recursive to delete them too", n.path, len(n.children))
	}
	s.deleteTree(n, fx)
	return nil
}

// ownerIf returns sess when ephemeral, else nil (a permanent node).
func ownerIf(sess *session, ephemeral bool) *session {
	if ephemeral {
		return sess
	}
	return nil
}

func tooLarge(size, limit int) *chubby.ChubbyError {
	return Errorf(chubby.ErrorCode_TOO_LARGE, "content is %d bytes, more than %d", size, limit)
}

func sessionExpired(id chubby.SessionID) *chubby.ChubbyError {
	return Errorf(chubby.ErrorCode_SESSION_EXPIRED, "session %d is unknown or has ended", id)
}

func errResult(err *chubby.ChubbyError) *fsm.Result_ {
	assert(err != nil, "errResult(nil)")
	return &fsm.Result_{Err: err}
}
