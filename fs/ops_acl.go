package fs

import (
	"slices"
	"strings"

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
	if s.tent != nil {
		s.tent.logACL(n)
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
		if req.GetRecover() && s.LockOut() != "" {
			return s.recoverAdmin(req.Admin)
		}
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

// recoverAdmin gives a cell where "/" or /acl has no principal holding
// change_acl (a state from before the rule that refuses such a change)
// the administrator admin back: /acl is created if missing, /acl/admin is
// created permanent or rewritten to its entries plus admin, and "/", /acl
// and /acl/admin name "admin" for change_acl (their other names stay). It
// refuses (INVALID_ARGUMENT, changing nothing) when something is in the
// way that it will not remove: /acl that is a file, /acl/admin that is a
// directory or ephemeral; and LIMIT_EXCEEDED when the cell is full.
func (s *State) recoverAdmin(admin string) *fsm.Result_ {
	dirPath := joinPath("/", aclDir)
	p := joinPath(dirPath, aclAdmin)
	dir := s.root.children[aclDir]
	var file *node
	switch {
	case dir != nil && !dir.isDir():
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "InitACL recover: %s is a file; delete it first", dirPath))
	case dir != nil:
		file = dir.children[aclAdmin]
	}
	switch {
	case file != nil && file.isDir():
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "InitACL recover: %s is a directory; delete it first", p))
	case file != nil && file.owner != 0:
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "InitACL recover: %s is ephemeral; delete it first", p))
	}
	content := []byte(admin + "\n")
	if file != nil && file.aclFile != nil && !file.aclFile.Allows(admin) {
		entries := append(file.aclFile.Entries(), admin)
		slices.Sort(entries)
		content = []byte(strings.Join(entries, "\n") + "\n")
	}
	if file != nil && file.aclFile != nil && file.aclFile.Allows(admin) {
		content = nil // it lists admin: the names are what is wrong
	}
	if file == nil {
		plan, _, err := s.planCreate(p, []string{aclDir, aclAdmin}, true, false)
		if err == nil {
			err = s.checkCreate(plan, len(content))
		}
		if err != nil {
			return errResult(err) // a limit of the cell
		}
		file = s.commitCreate(plan, chubby.NodeKind_FILE, nil, content)
	} else if content != nil {
		if len(file.aclFile.Entries()) >= int(chubby.MAX_ACL_ENTRIES) {
			content = []byte(admin + "\n") // no room for one more: admin alone
		}
		if err := s.checkContent(len(content), len(file.content)); err != nil {
			return errResult(err)
		}
		s.setContent(file, content)
	}
	for _, n := range []*node{s.root, file.parent, file} {
		n.acl[ChangeACLRight] = aclAdmin
		n.aclGen++
	}
	return &fsm.Result_{}
}
