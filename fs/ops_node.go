package fs

import (
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// The namespace commands: Open, CreateFile, Mkdir, SetContents, Delete.
// Each validates everything first and changes state only once nothing can
// fail any more.

func (s *State) open(req *chubby.OpenRequest) *fsm.Result_ {
	if req.Mode != chubby.OpenMode_READ && req.Mode != chubby.OpenMode_READ_WRITE {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "open mode %d is not READ or READ_WRITE", req.Mode))
	}
	create := req.Create
	if create != chubby.CreateMode_OPEN_EXISTING && create != chubby.CreateMode_OPEN_OR_CREATE && create != chubby.CreateMode_CREATE_NEW {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "create mode %d is not OPEN_EXISTING, OPEN_OR_CREATE or CREATE_NEW", create))
	}
	if create == chubby.CreateMode_OPEN_EXISTING && (req.IsSetEphemeral() || req.IsSetSequential() || req.IsSetInitialContent()) {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "ephemeral, sequential and initial_content apply to creation; OPEN_EXISTING never creates"))
	}
	if m := req.GetEventMask(); m&^chubby.EVENT_MASK_ALL != 0 {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "event mask %#x has bits outside EVENT_MASK_ALL (%#x)", m, chubby.EVENT_MASK_ALL))
	}
	if len(req.InitialContent) > s.limits.MaxContentBytes {
		return errResult(tooLarge(len(req.InitialContent), s.limits.MaxContentBytes))
	}
	comps, err := parsePath(req.Path)
	if err != nil {
		return errResult(err)
	}
	if create != chubby.CreateMode_OPEN_EXISTING {
		if err := checkACLContent(req.Path, req.InitialContent); err != nil {
			return errResult(err)
		}
	}
	sess := s.sessions[req.Session]
	if sess == nil {
		return errResult(sessionExpired(req.Session))
	}
	if err := s.checkNewHandle(sess); err != nil {
		return errResult(err)
	}
	var n *node
	created := false
	if create == chubby.CreateMode_OPEN_EXISTING {
		if n, err = s.lookup(req.Path, comps); err != nil {
			return errResult(err)
		}
	} else {
		content := req.GetInitialContent()
		plan, existing, err := s.planCreate(req.Path, comps, false, req.GetSequential(), len(content))
		if err != nil {
			return errResult(err)
		}
		if existing != nil {
			if create == chubby.CreateMode_CREATE_NEW {
				return errResult(Errorf(chubby.ErrorCode_EXISTS, "%s exists", existing.path))
			}
			n = existing
		} else {
			n = s.commitCreate(plan, chubby.NodeKind_FILE, ownerIf(sess, req.GetEphemeral()), content)
			created = true
		}
	}
	h := s.openHandle(sess, n, req.Mode, req.GetEventMask())
	return &fsm.Result_{Handle: h.wire(), Stat: s.stat(n), Created: &created}
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
	plan, existing, err := s.planCreate(req.Path, comps, req.GetMakeParents(), req.GetSequential(), len(req.Content))
	if err != nil {
		return errResult(err)
	}
	if existing != nil {
		return errResult(Errorf(chubby.ErrorCode_EXISTS, "%s exists", existing.path))
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
	plan, existing, err := s.planCreate(req.Path, comps, req.GetParents(), false, 0)
	if err != nil {
		return errResult(err)
	}
	created := false
	if existing != nil {
		if !existing.isDir() {
			return errResult(Errorf(chubby.ErrorCode_EXISTS, "%s exists and is a file", existing.path))
		}
		if !req.GetParents() {
			return errResult(Errorf(chubby.ErrorCode_EXISTS, "%s exists", existing.path))
		}
		return &fsm.Result_{Stat: s.stat(existing), Created: &created}
	}
	n := s.commitCreate(plan, chubby.NodeKind_DIRECTORY, ownerIf(sess, req.GetEphemeral()), nil)
	created = true
	return &fsm.Result_{Stat: s.stat(n), Created: &created}
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
	n := h.node
	if n.isDir() {
		return errResult(Errorf(chubby.ErrorCode_IS_DIRECTORY, "%s is a directory: it has no content", n.path))
	}
	if err := s.checkContent(len(req.Content), len(n.content)); err != nil {
		return errResult(err)
	}
	if req.IsSetExpectedGeneration() && *req.ExpectedGeneration != n.contentGen {
		return errResult(Errorf(chubby.ErrorCode_GENERATION_MISMATCH, "%s is at content generation %d, not %d", n.path, n.contentGen, *req.ExpectedGeneration))
	}
	s.setContent(n, req.Content)
	return &fsm.Result_{Stat: s.stat(n)}
}

func (s *State) deleteNode(req *chubby.DeleteRequest, fx *Effects) *fsm.Result_ {
	h, err := s.handleFor(req.Handle, true)
	if err != nil {
		return errResult(err)
	}
	if h.mode != chubby.OpenMode_READ_WRITE {
		return errResult(Errorf(chubby.ErrorCode_PERMISSION_DENIED, "handle %d on %s was opened READ; deleting needs READ_WRITE", h.id, h.path))
	}
	n := h.node
	if n == s.root {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "the root directory cannot be deleted"))
	}
	if n.isDir() && len(n.children) > 0 && !req.GetRecursive() {
		return errResult(Errorf(chubby.ErrorCode_NOT_EMPTY, "directory %s has %d entries; set recursive to delete them too", n.path, len(n.children)))
	}
	s.deleteTree(n, fx)
	return &fsm.Result_{}
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
