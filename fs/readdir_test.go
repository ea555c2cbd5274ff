package fs

import (
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
)

// TestMaxDirEntryBytes checks the arithmetic of MaxDirEntryBytes: a
// DirEntry with every field set at its longest encodes to exactly that.
func TestMaxDirEntryBytes(t *testing.T) {
	name := strings.Repeat("n", int(chubby.MAX_NAME_BYTES))
	mode := chubby.LockMode_EXCLUSIVE
	e := &chubby.DirEntry{Name: name, Stat: &chubby.Stat{
		Path: strings.Repeat("p", int(chubby.MAX_PATH_BYTES)), Kind: chubby.NodeKind_FILE,
		Instance: -1, ContentGeneration: -1, LockGeneration: -1, AclGeneration: -1, Checksum: -1,
		Size: -1, CreateTimeMs: -1, ModifyTimeMs: -1, Ephemeral: true, EphemeralOwner: -1,
		Lock: &chubby.LockInfo{Mode: &mode, Holders: -1, Waiters: -1, DelayRemainingMs: -1},
		Acl:  &chubby.ACLNames{ReadAcl: name, WriteAcl: name, ChangeAcl: name},
	}}
	if got := e.BLength(); got != MaxDirEntryBytes {
		t.Fatalf("worst-case DirEntry encodes to %d bytes, MaxDirEntryBytes is %d", got, MaxDirEntryBytes)
	}
}

// TestReadDirPageBounds: pages respect limit and maxBytes, chain by
// their cursor and always make progress.
func TestReadDirPageBounds(t *testing.T) {
	hn := newHarness(t)
	sess := hn.session()
	hn.mkdir(sess, "/d")
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		hn.write(sess, "/d/"+n, "")
	}
	h := hn.open(sess, "/d", chubby.OpenMode_READ, chubby.CreateMode_OPEN_EXISTING)
	st := hn.s
	one, err := st.ReadDirPage(h, "", 100, 1)
	if err != nil || len(one.Entries) != 1 || !one.More {
		t.Fatalf("a byte bound below one entry: %d entries more=%v err=%v, want 1 and more", len(one.Entries), one.More, err)
	}
	var names []string
	after := ""
	for {
		p, err := st.ReadDirPage(h, after, 2, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Entries) > 2 {
			t.Fatalf("limit 2: %d entries", len(p.Entries))
		}
		for _, e := range p.Entries {
			names = append(names, e.Name)
		}
		if !p.More {
			break
		}
		after = p.Entries[len(p.Entries)-1].Name
	}
	if strings.Join(names, ",") != "a,b,c,d,e" {
		t.Fatalf("pages gave %v", names)
	}
}

// TestReadDirPageReadACL: a page carries the directory's read ACL name as
// it was read, the right a cached copy of the page stands for.
func TestReadDirPageReadACL(t *testing.T) {
	hn := newHarness(t)
	sess := hn.session()
	hn.mkdir(sess, "/acl")
	hn.write(sess, "/acl/team", "anonymous\n")
	hn.mkdir(sess, "/d")
	h := hn.open(sess, "/d", chubby.OpenMode_READ, chubby.CreateMode_OPEN_EXISTING)
	for _, name := range []string{"", "team"} {
		hn.ok(opSetACL(h, aclNamesOf(name, "", "")))
		p, err := hn.s.ReadDirPage(h, "", 10, 1<<20)
		if err != nil || p.ReadACL != name {
			t.Fatalf("read ACL %q: page says %q, %v", name, p.ReadACL, err)
		}
	}
}
