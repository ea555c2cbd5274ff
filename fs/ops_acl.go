package fs

import (
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// The access-control commands: SetACL, InitACL.

// aclAdmin is the name of the ACL file InitACL creates, and the name it
// gives every right of "/", /acl and that file.
const aclAdmin = "admin"

// setACL replaces the ACL names of the handle's node; the session's
// principal needs change_acl on it. With expected_acl_generation it is a
// compare-and-swap on acl_generation.
func (s *State) setACL(req *chubby.SetACLRequest) *fsm.Result_ {
	names, err := namesFromWire(req.Acl)
	if err != nil {
		return errResult(err)
	}
	h, err := s.handleFor(req.Handle, true)
	if err != nil {
		return errResult(err)
	}
	n := h.node
	if err := s.allowed(h.session.principal, n, ChangeACLRight); err != nil {
		return errResult(err)
	}
	if req.IsSetExpectedAclGeneration() && *req.ExpectedAclGeneration != n.aclGen {
		return errResult(Errorf(chubby.ErrorCode_GENERATION_MISMATCH, "%s is at ACL generation %d, not %d", n.path, n.aclGen, *req.ExpectedAclGeneration))
	}
	n.acl = names
	n.aclGen++
	return &fsm.Result_{Stat: s.stat(n)}
}

// initACL gives a cell nobody configured its first administrator: when "/"
// has no ACL names and /acl does not exist, it creates the directory /acl
// and the file /acl/admin listing admin, then names "admin" for every right
// of "/", /acl and /acl/admin. Otherwise it changes nothing.
func (s *State) initACL(req *fsm.InitACL) *fsm.Result_ {
	if err := checkPrincipal(req.Admin); err != nil {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "InitACL admin: %s", err.Message))
	}
	if !s.root.acl.empty() || s.root.children[aclDir] != nil {
		return &fsm.Result_{} // configured already
	}
	p := joinPath(joinPath("/", aclDir), aclAdmin)
	content := []byte(req.Admin + "\n")
	plan, _, err := s.planCreate(p, []string{aclDir, aclAdmin}, true, false)
	if err == nil {
		err = s.checkCreate(plan, len(content))
	}
	if err != nil {
		return errResult(err) // a limit of the cell
	}
	file := s.commitCreate(plan, chubby.NodeKind_FILE, nil, content)
	// Named after creating, so that the create events are queued as in a
	// cell without ACLs.
	names := aclNames{aclAdmin, aclAdmin, aclAdmin}
	for _, n := range []*node{s.root, file.parent, file} {
		n.acl = names
		n.aclGen++
	}
	return &fsm.Result_{}
}
