package fs

import (
	"bytes"
	"slices"
	"strings"

	"github.com/chubbygo/chubby/gen/chubby"
)

// ACL files (see the package documentation, "Access control"). An ACL is
// the set of principals an ACL file lists.

// aclEveryone is the entry that stands for every principal but Anonymous.
const aclEveryone = "*"

// ACL is a parsed ACL file: the principals it lists, and whether it lists
// "*" (every principal with a certificate). A nil *ACL grants nobody.
type ACL struct {
	everyone   bool
	principals map[string]struct{} // Anonymous included when listed
}

// ParseACL parses the content of an ACL file: lines split on '\n' (a
// trailing '\r' trimmed), each trimmed of spaces and tabs; empty lines and
// lines starting with '#' are ignored; every other line is one entry: a
// principal (ValidPrincipal; "anonymous" is Anonymous) or "*". At most
// chubby.MAX_ACL_ENTRIES entries (repeats count). A violation is an
// INVALID_ARGUMENT *chubby.ChubbyError naming the line and why.
func ParseACL(content []byte) (*ACL, error) {
	a, err := parseACL(content)
	if err != nil {
		return nil, err
	}
	return a, nil
}

func parseACL(content []byte) (*ACL, *chubby.ChubbyError) {
	a := &ACL{principals: map[string]struct{}{}}
	entries := 0
	for i, rest := 1, content; len(rest) > 0; i++ {
		line, tail, _ := bytes.Cut(rest, []byte{'\n'})
		rest = tail
		line = bytes.TrimSuffix(line, []byte{'\r'})
		line = bytes.Trim(line, " \t")
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if entries++; entries > int(chubby.MAX_ACL_ENTRIES) {
			return nil, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "line %d: more than %d entries", i, chubby.MAX_ACL_ENTRIES)
		}
		if string(line) == aclEveryone {
			a.everyone = true
			continue
		}
		p := string(line)
		if err := checkPrincipal(p); err != nil {
			return nil, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "line %d: %s", i, err.Message)
		}
		a.principals[p] = struct{}{}
	}
	return a, nil
}

// Allows reports whether the ACL grants its right to principal: "*" grants
// it to every principal but Anonymous, which needs "anonymous" listed.
func (a *ACL) Allows(principal string) bool {
	if a == nil {
		return false
	}
	if _, ok := a.principals[principal]; ok {
		return true
	}
	return a.everyone && principal != Anonymous
}

// Entries returns the ACL's entries, sorted and without repeats ("*" among
// them when listed): one per line, they are an ACL file that parses to the
// same ACL.
func (a *ACL) Entries() []string {
	if a == nil {
		return nil
	}
	out := make([]string, 0, len(a.principals)+1)
	if a.everyone {
		out = append(out, aclEveryone)
	}
	for p := range a.principals {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Right is one of the three rights a node's ACL names grant.
type Right int

const (
	ReadRight      Right = iota // Open, the read methods, CheckSequencer, events
	WriteRight                  // SetContents, locks; on a directory: creating and deleting entries
	ChangeACLRight              // SetACL; on "/": the cell's membership
	numRights
)

// String names the right as messages do: "read", "write" or "change_acl".
func (r Right) String() string {
	switch r {
	case ReadRight:
		return "read"
	case WriteRight:
		return "write"
	case ChangeACLRight:
		return "change_acl"
	}
	return "right(" + itoa(int64(r)) + ")"
}

// aclNames are a node's ACL names, one per Right: "" grants the right to
// everybody, any other name is the file /acl/name.
type aclNames [numRights]string

// empty reports whether every name is empty (a node nobody configured).
func (a aclNames) empty() bool { return a == aclNames{} }

// wire is the names as clients see them.
func (a aclNames) wire() *chubby.ACLNames {
	return &chubby.ACLNames{ReadAcl: a[ReadRight], WriteAcl: a[WriteRight], ChangeAcl: a[ChangeACLRight]}
}

// namesFromWire validates the names w carries (each empty or one path
// component) and returns them.
func namesFromWire(w *chubby.ACLNames) (aclNames, *chubby.ChubbyError) {
	if w == nil {
		return aclNames{}, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "ACL names are missing")
	}
	names := aclNames{w.ReadAcl, w.WriteAcl, w.ChangeAcl}
	for r, name := range names {
		if err := checkACLName(name); err != nil {
			return aclNames{}, Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "%s ACL name %q: %s", Right(r), name, err.Message)
		}
	}
	return names, nil
}

// checkACLName checks one ACL name: empty, or a valid path component.
func checkACLName(name string) *chubby.ChubbyError {
	if name == "" {
		return nil
	}
	return checkName(name)
}

// aclDir is the name of the directory in "/" that holds the ACL files: the
// name N refers to the file /acl/N.
const aclDir = "acl"

// isACLFile reports whether n is an ACL file: a file directly in /acl.
func (s *State) isACLFile(n *node) bool {
	return !n.isDir() && n.parent != nil && n.parent.parent == s.root && n.parent.name == aclDir
}

// isACLFilePath reports whether the valid path p names an ACL file's
// place: a direct child of /acl.
func isACLFilePath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/"+aclDir+"/")
	return ok && rest != "" && !strings.Contains(rest, "/")
}

// checkACLContent refuses content written at the path p when p is an ACL
// file's place and the content does not parse, so that a typo cannot lock
// everybody out.
func checkACLContent(p string, content []byte) *chubby.ChubbyError {
	if !isACLFilePath(p) {
		return nil
	}
	if _, err := parseACL(content); err != nil {
		return Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "%s is an ACL file, and this content is not one: %s", p, err.Message)
	}
	return nil
}

// memoACL brings the memo of n's parsed content up to date with its
// content: the parsed ACL for an ACL file whose content parses (content
// written before the rule may not), nil for every other node.
func (s *State) memoACL(n *node) {
	n.aclFile = nil
	if s.isACLFile(n) {
		if a, err := parseACL(n.content); err == nil {
			n.aclFile = a
		}
	}
}

// aclFile returns the parsed ACL file the name refers to: nil (grants
// nobody) when /acl/name is missing, is a directory or does not parse.
func (s *State) aclFile(name string) *ACL {
	dir := s.root.children[aclDir]
	if dir == nil || !dir.isDir() {
		return nil
	}
	if f := dir.children[name]; f != nil {
		return f.aclFile
	}
	return nil
}
