package fs

import (
	"github.com/chubbygo/chubby/gen/chubby"
)

// Access checks (see the package documentation, "Access control").

// Allowed checks that principal holds right on the node at path: nil when
// it does, PERMISSION_DENIED when it does not, NOT_FOUND (or NOT_DIRECTORY)
// when there is no node, INVALID_ARGUMENT for a bad path or right. The
// master asks it for what it decides itself (RemoveMember: change_acl on
// "/").
func (s *State) Allowed(principal, path string, right Right) error {
	if right < 0 || right >= numRights {
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "right %d is not read, write or change_acl", int(right))
	}
	comps, err := parsePath(path)
	if err != nil {
		return err
	}
	n, err := s.lookup(path, comps)
	if err != nil {
		return err
	}
	return asError(s.allowed(principal, n, right))
}

// allowed checks that principal holds right on n.
func (s *State) allowed(principal string, n *node, right Right) *chubby.ChubbyError {
	return s.allowedNames(principal, n.acl, n.path, right)
}

// allowedNames checks that principal holds right on a node at path p
// with the ACL names names (a node about to be created has its parent's):
// an empty name grants it to everybody, any other the principals its ACL
// file lists.
func (s *State) allowedNames(principal string, names aclNames, p string, right Right) *chubby.ChubbyError {
	if s.holds(principal, names, right) {
		return nil
	}
	name := names[right]
	return Errorf(chubby.ErrorCode_PERMISSION_DENIED, "principal %q lacks the %s right on %q (ACL %q%s)", principal, right, p, name, s.aclFileTrouble(name))
}

// holds reports whether principal holds right on a node with the ACL
// names names.
func (s *State) holds(principal string, names aclNames, right Right) bool {
	name := names[right]
	return name == "" || s.aclFile(name).Allows(principal)
}

// aclFileTrouble says why the ACL file name grants nobody, if it does: ""
// when it is a valid ACL file.
func (s *State) aclFileTrouble(name string) string {
	dir := s.root.children[aclDir]
	var f *node
	if dir != nil && dir.isDir() {
		f = dir.children[name]
	}
	switch {
	case f == nil:
		return ": " + joinPath("/"+aclDir, name) + " does not exist"
	case f.isDir():
		return ": " + f.path + " is a directory"
	case f.aclFile == nil:
		return ": " + f.path + " is not a valid ACL file"
	}
	return ""
}

// allowedOpen checks the rights an Open in mode needs on a node at path p
// with the ACL names names: read, and write for READ_WRITE.
func (s *State) allowedOpen(principal string, names aclNames, p string, mode chubby.OpenMode) *chubby.ChubbyError {
	if err := s.allowedNames(principal, names, p, ReadRight); err != nil {
		return err
	}
	if mode == chubby.OpenMode_READ_WRITE {
		return s.allowedNames(principal, names, p, WriteRight)
	}
	return nil
}

// allowedToEmpty checks that principal holds write on every directory
// with entries in the subtree of n, n included: the directories whose
// entries a recursive Delete of n removes. It visits them parents first,
// siblings by name, so the first it refuses is always the same.
func (s *State) allowedToEmpty(principal string, n *node) *chubby.ChubbyError {
	if !n.isDir() || len(n.children) == 0 {
		return nil
	}
	if err := s.allowed(principal, n, WriteRight); err != nil {
		return err
	}
	for _, name := range sortedNames(n) {
		if err := s.allowedToEmpty(principal, n.children[name]); err != nil {
			return err
		}
	}
	return nil
}

// ACLNamesOf returns the ACL names of the node at path, for the master and
// operators (no right is checked): NOT_FOUND when there is no node.
func (s *State) ACLNamesOf(path string) (*chubby.ACLNames, error) {
	comps, err := parsePath(path)
	if err != nil {
		return nil, err
	}
	n, err := s.lookup(path, comps)
	if err != nil {
		return nil, err
	}
	return n.acl.wire(), nil
}
