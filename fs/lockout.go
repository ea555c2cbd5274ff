package fs

import (
	"strings"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// No lock-out (see the package documentation, "Access control"): the
// change_acl right of "/" and of /acl decides who may give rights back,
// so no command may leave either without a principal holding it.

// keeperTrouble says why nobody holds change_acl on n: "" when somebody
// does. An empty name grants everybody; any other needs its ACL file to
// exist, be a permanent file (an ephemeral one goes with its session,
// which no rule here can refuse), parse, and list at least one entry.
func (s *State) keeperTrouble(n *node) string {
	name := n.acl[ChangeACLRight]
	if name == "" {
		return ""
	}
	p := joinPath("/"+aclDir, name)
	var f *node
	if dir := s.root.children[aclDir]; dir != nil && dir.isDir() {
		f = dir.children[name]
	}
	switch {
	case f == nil:
		return p + " does not exist"
	case f.isDir():
		return p + " is a directory"
	case f.aclFile == nil:
		return p + " is not a valid ACL file"
	case f.owner != 0:
		return p + " is ephemeral"
	case len(f.aclFile.principals) == 0 && !f.aclFile.everyone:
		return p + " lists nobody"
	}
	return ""
}

// LockOut says why "/" or /acl (when it exists) has no principal holding
// change_acl, naming the node and the ACL file: "" when both have one.
// The master asks it to decide whether chubbyd --admin recovers the cell
// (InitACL with recover).
func (s *State) LockOut() string {
	if t := s.keeperTrouble(s.root); t != "" {
		return `change_acl of "/" (ACL "` + s.root.acl[ChangeACLRight] + `"): ` + t
	}
	if d := s.root.children[aclDir]; d != nil {
		if t := s.keeperTrouble(d); t != "" {
			return `change_acl of "` + d.path + `" (ACL "` + d.acl[ChangeACLRight] + `"): ` + t
		}
	}
	return ""
}

// lockOutErr is the refusal of a change that would leave "/" or /acl
// without a principal holding change_acl.
func lockOutErr(trouble string) *chubby.ChubbyError {
	return Errorf(chubby.ErrorCode_PERMISSION_DENIED, "refused: nobody could change ACLs any more: after it, the %s (see chubbyd --admin for a cell already locked out)", trouble)
}

// mayLockOut reports whether a command through a handle on the valid path
// p may change who holds change_acl on "/" or /acl: one on "/", /acl or
// anything under /acl.
func mayLockOut(p string) bool {
	return p == "/" || p == "/"+aclDir || strings.HasPrefix(p, "/"+aclDir+"/")
}

// keepAdmin applies one command's operation, apply, and refuses it when
// it succeeds but leaves "/" or /acl without a principal holding
// change_acl where both had one: it is applied tentatively (as a Multi's
// ops are) and taken back, and the refusal says why. A cell that is
// locked out already (a state from before this rule) is left to apply as
// before: nothing is kept that is not there.
func (s *State) keepAdmin(fx *Effects, apply func() *fsm.Result_) *fsm.Result_ {
	if s.tent != nil || s.LockOut() != "" {
		return apply()
	}
	s.beginTentative()
	res := apply()
	if res.Err == nil {
		if t := s.LockOut(); t != "" {
			s.rollback()
			return errResult(lockOutErr(t))
		}
	}
	s.commit(fx)
	return res
}

// logACL logs the undo of replacing the ACL names of n (and its ACL
// generation), before SetACL changes them.
func (t *tentative) logACL(n *node) {
	names, gen := n.acl, n.aclGen
	t.undo = append(t.undo, func() { n.acl, n.aclGen = names, gen })
}
