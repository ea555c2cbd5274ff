package fs

import (
	"bytes"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// sessionAs creates a session acting as principal.
func (h *harness) sessionAs(principal string) chubby.SessionID {
	h.t.Helper()
	res, _ := h.cmd(&fsm.Command{Principal: &principal, Op: opCreateSession(principal)})
	if res.Err != nil {
		h.t.Fatalf("CreateSession as %q: %v", principal, res.Err)
	}
	return *res.Session
}

// TestSessionPrincipal: CreateSession stores Command.principal (Anonymous
// when unset); a bad one is refused and makes no session; no other
// command may carry one.
func TestSessionPrincipal(t *testing.T) {
	tests := []struct {
		name      string
		principal *string
		want      string           // the session's principal
		code      chubby.ErrorCode // 0: created
	}{
		{"unset", nil, Anonymous, 0},
		{"a principal", ptr("bob@EXAMPLE"), "bob@EXAMPLE", 0},
		{"anonymous", ptr(Anonymous), Anonymous, 0},
		{"empty", ptr(""), "", chubby.ErrorCode_INVALID_ARGUMENT},
		{"a space", ptr("bob smith"), "", chubby.ErrorCode_INVALID_ARGUMENT},
		{"star", ptr("*"), "", chubby.ErrorCode_INVALID_ARGUMENT},
		{"too long", ptr(strings.Repeat("b", 129)), "", chubby.ErrorCode_INVALID_ARGUMENT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			res, _ := h.cmd(&fsm.Command{Principal: tt.principal, Op: opCreateSession("c")})
			if tt.code != 0 {
				if res.Err.GetCode() != tt.code || len(h.s.Sessions()) != 0 {
					t.Fatalf("got %v, sessions %v; want %v and none", res.Err, h.s.Sessions(), tt.code)
				}
				return
			}
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if p, ok := h.s.SessionPrincipal(*res.Session); !ok || p != tt.want {
				t.Fatalf("SessionPrincipal = %q, %v; want %q", p, ok, tt.want)
			}
		})
	}
	h := newHarness(t)
	if p, ok := h.s.SessionPrincipal(1); ok || p != "" {
		t.Fatalf("SessionPrincipal of no session = %q, %v", p, ok)
	}
	a := h.session()
	for name, op := range map[string]*fsm.Op{
		"Tick":       opTick(),
		"Mkdir":      opMkdir(a, "/d", false, false),
		"EndSession": opEnd(a, false),
		"InitACL":    {InitAcl: &fsm.InitACL{Admin: "root"}},
	} {
		if res, _ := h.cmd(&fsm.Command{Principal: ptr("root"), Op: op}); res.Err.GetCode() != chubby.ErrorCode_INVALID_ARGUMENT {
			t.Errorf("%s with a principal: %v, want INVALID_ARGUMENT", name, res.Err)
		}
	}
	if !h.s.SessionExists(a) || h.exists("/d") {
		t.Fatal("a command with a principal was applied")
	}
}

// TestSessionPrincipalSnapshot: principals survive a snapshot; an
// anonymous session is encoded as before principals existed; Restore
// refuses a bad principal.
func TestSessionPrincipalSnapshot(t *testing.T) {
	h := newHarness(t)
	anon := h.session()
	bob := h.sessionAs("bob")
	snap := h.s.Snapshot()
	r, err := Restore(snap, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := r.SessionPrincipal(anon); p != Anonymous {
		t.Fatalf("restored anonymous session acts as %q", p)
	}
	if p, _ := r.SessionPrincipal(bob); p != "bob" {
		t.Fatalf("restored session acts as %q, want bob", p)
	}
	sn, err := decodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	if sn.Sessions[0].Principal != nil || sn.Sessions[1].GetPrincipal() != "bob" {
		t.Fatalf("encoded principals %v / %v", sn.Sessions[0].Principal, sn.Sessions[1].Principal)
	}
	for _, bad := range []string{"", "bob smith", "*", strings.Repeat("p", 129)} {
		sn.Sessions[1].Principal = ptr(bad)
		if _, err := Restore(EncodeSnapshotForTest(sn), DefaultLimits()); err == nil {
			t.Errorf("restored a session with principal %q", bad)
		}
	}
	sn.Sessions[1].Principal = ptr(Anonymous)
	if r, err := Restore(EncodeSnapshotForTest(sn), DefaultLimits()); err != nil || r.sessions[bob].principal != Anonymous {
		t.Fatalf("an explicit anonymous principal: %v", err)
	}
}

func aclNamesOf(read, write, changeACL string) *chubby.ACLNames {
	return &chubby.ACLNames{ReadAcl: read, WriteAcl: write, ChangeAcl: changeACL}
}

func opSetACL(hd *chubby.Handle, acl *chubby.ACLNames) *fsm.Op {
	return &fsm.Op{SetAcl: &chubby.SetACLRequest{Handle: hd, Acl: acl}}
}

func opSetACLGen(hd *chubby.Handle, acl *chubby.ACLNames, gen int64) *fsm.Op {
	return &fsm.Op{SetAcl: &chubby.SetACLRequest{Handle: hd, Acl: acl, ExpectedAclGeneration: &gen}}
}

func opInitACL(admin string) *fsm.Op { return &fsm.Op{InitAcl: &fsm.InitACL{Admin: admin}} }

// node returns the node at path, failing the test when there is none.
func (h *harness) node(path string) *node {
	h.t.Helper()
	comps, err := parsePath(path)
	if err != nil {
		h.t.Fatalf("bad path %q", path)
	}
	n, lerr := h.s.lookup(path, comps)
	if lerr != nil {
		h.t.Fatalf("%s: %v", path, lerr)
	}
	return n
}

// names returns the ACL names of the node at path, as its Stat says.
func (h *harness) names(path string) *chubby.ACLNames {
	h.t.Helper()
	return h.s.stat(h.node(path)).Acl
}

func sameNames(a, b *chubby.ACLNames) bool {
	return a != nil && b != nil && *a == *b
}

// TestSetACL: SetACL validates the names, compares and swaps on
// acl_generation when asked, sets the names and bumps acl_generation and
// nothing else.
func TestSetACL(t *testing.T) {
	long := strings.Repeat("n", 256)
	tests := []struct {
		name string
		op   func(hd *chubby.Handle) *fsm.Op
		code chubby.ErrorCode // 0: applied
	}{
		{"names", func(hd *chubby.Handle) *fsm.Op { return opSetACL(hd, aclNamesOf("r", "w", "c")) }, 0},
		{"all empty", func(hd *chubby.Handle) *fsm.Op { return opSetACL(hd, aclNamesOf("", "", "")) }, 0},
		{"expected generation", func(hd *chubby.Handle) *fsm.Op { return opSetACLGen(hd, aclNamesOf("r", "", ""), 0) }, 0},
		{"stale generation", func(hd *chubby.Handle) *fsm.Op { return opSetACLGen(hd, aclNamesOf("r", "", ""), 1) }, chubby.ErrorCode_GENERATION_MISMATCH},
		{"a path", func(hd *chubby.Handle) *fsm.Op { return opSetACL(hd, aclNamesOf("/acl/r", "", "")) }, chubby.ErrorCode_INVALID_ARGUMENT},
		{"two components", func(hd *chubby.Handle) *fsm.Op { return opSetACL(hd, aclNamesOf("", "a/b", "")) }, chubby.ErrorCode_INVALID_ARGUMENT},
		{"dot-dot", func(hd *chubby.Handle) *fsm.Op { return opSetACL(hd, aclNamesOf("", "", "..")) }, chubby.ErrorCode_INVALID_ARGUMENT},
		{"a space", func(hd *chubby.Handle) *fsm.Op { return opSetACL(hd, aclNamesOf("a b", "", "")) }, chubby.ErrorCode_INVALID_ARGUMENT},
		{"too long", func(hd *chubby.Handle) *fsm.Op { return opSetACL(hd, aclNamesOf(long, "", "")) }, chubby.ErrorCode_INVALID_ARGUMENT},
		{"no names", func(hd *chubby.Handle) *fsm.Op { return opSetACL(hd, nil) }, chubby.ErrorCode_INVALID_ARGUMENT},
		{"no handle", func(hd *chubby.Handle) *fsm.Op { return opSetACL(nil, aclNamesOf("r", "", "")) }, chubby.ErrorCode_INVALID_ARGUMENT},
		{"stale handle", func(hd *chubby.Handle) *fsm.Op {
			stale := *hd
			stale.Instance++
			return opSetACL(&stale, aclNamesOf("r", "", ""))
		}, chubby.ErrorCode_HANDLE_INVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			a := h.session()
			hd := h.rw(a, "/f")
			h.ok(opSet(hd, "x"))
			before := h.stat(hd)
			op := tt.op(hd)
			if tt.code != 0 {
				h.fail(tt.code, op)
				return
			}
			res, _ := h.ok(op)
			st := res.Stat
			want := *before
			want.AclGeneration++
			want.Acl = op.SetAcl.Acl
			if st.String() != want.String() || h.s.stat(h.node("/f")).String() != want.String() {
				t.Fatalf("stat after SetACL:\n %v\nwant\n %v", st, &want)
			}
		})
	}
}

// TestSetACLExactlyOnce: a retried SetACL returns its first answer and
// bumps no generation again.
func TestSetACLExactlyOnce(t *testing.T) {
	h := newHarness(t)
	a := h.session()
	hd := h.rw(a, "/f")
	cmd := func() *fsm.Result_ {
		res, _ := h.cmd(&fsm.Command{Session: &a, Seq: ptr(int64(1)), Op: opSetACL(hd, aclNamesOf("r", "w", "c"))})
		return res
	}
	first, again := cmd(), cmd()
	if now := h.s.stat(h.node("/f")); first.Err != nil || first.Stat.AclGeneration != 1 || again.Stat.String() != first.Stat.String() || now.AclGeneration != 1 {
		t.Fatalf("first %v, again %v, now %v", first, again, now)
	}
}

// TestACLInheritance: a new node copies its parent's names — by
// Open-create, CreateFile, Mkdir, and each directory make-parents creates;
// nodes that existed keep theirs, and every Stat carries the names.
func TestACLInheritance(t *testing.T) {
	h := newHarness(t)
	a := h.session()
	h.mkdir(a, "/d")
	h.write(a, "/d/old", "")
	for _, f := range []string{"team-r", "team-w", "team-admin"} {
		h.write(a, "/acl/"+f, "anonymous\n")
	}
	team := aclNamesOf("team-r", "team-w", "team-admin")
	h.ok(opSetACL(h.open(a, "/d", rd, chubby.CreateMode_OPEN_EXISTING), team))
	opened, _ := h.ok(opOpen(&chubby.OpenRequest{Session: a, Path: "/d/opened", Mode: rdwr, Create: chubby.CreateMode_CREATE_NEW}))
	file, _ := h.ok(opCreateFile(&chubby.CreateFileRequest{Session: a, Path: "/d/file"}))
	dir, _ := h.ok(opMkdir(a, "/d/dir", false, false))
	deep, _ := h.ok(opCreateFile(&chubby.CreateFileRequest{Session: a, Path: "/d/p/q/f", MakeParents: ptr(true)}))
	for _, st := range []*chubby.Stat{opened.Stat, file.Stat, dir.Stat, deep.Stat} {
		if !sameNames(st.Acl, team) || st.AclGeneration != 0 {
			t.Errorf("%s: names %v, acl generation %d; want %v, 0", st.Path, st.Acl, st.AclGeneration, team)
		}
	}
	for _, p := range []string{"/d/p", "/d/p/q"} {
		if !sameNames(h.names(p), team) {
			t.Errorf("%s (made as a parent): names %v, want %v", p, h.names(p), team)
		}
	}
	for _, p := range []string{"/", "/d/old"} {
		if !sameNames(h.names(p), aclNamesOf("", "", "")) {
			t.Errorf("%s: names %v, want none", p, h.names(p))
		}
	}
	entries, err := h.s.ReadDir(h.open(a, "/d", rd, chubby.CreateMode_OPEN_EXISTING))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Stat.Acl == nil {
			t.Errorf("ReadDir entry %s has no ACL names", e.Name)
		}
	}
}

// TestACLFileContent: content that does not parse as an ACL file is
// refused at an ACL file's place (a direct child of /acl) on all three
// write paths, with the line and why; anywhere else it is content.
func TestACLFileContent(t *testing.T) {
	const bad = "# the team\nbob\nalice smith\n"
	h := newHarness(t)
	a := h.session()
	h.mkdir(a, "/acl")
	hd := h.rw(a, "/acl/team")
	for name, op := range map[string]*fsm.Op{
		"SetContents": opSet(hd, bad),
		"CreateFile":  opCreateFile(&chubby.CreateFileRequest{Session: a, Path: "/acl/other", Content: []byte(bad)}),
		"CreateFile with parents": opCreateFile(&chubby.CreateFileRequest{Session: a, Path: "/acl/other", Content: []byte(bad),
			MakeParents: ptr(true), Sequential: ptr(true)}),
		"Open-create": opOpen(&chubby.OpenRequest{Session: a, Path: "/acl/other", Mode: rdwr, Create: chubby.CreateMode_CREATE_NEW, InitialContent: []byte(bad)}),
		"Open-create of an existing file": opOpen(&chubby.OpenRequest{Session: a, Path: "/acl/team", Mode: rd, Create: chubby.CreateMode_OPEN_OR_CREATE,
			InitialContent: []byte(bad)}),
	} {
		err := h.fail(chubby.ErrorCode_INVALID_ARGUMENT, op)
		if !strings.Contains(err.Message, "line 3") || !strings.Contains(err.Message, "alice smith") {
			t.Errorf("%s: message %q does not say where and why", name, err.Message)
		}
	}
	h.ok(opSet(hd, "bob\n*\n"))
	h.ok(opCreateFile(&chubby.CreateFileRequest{Session: a, Path: "/acl/other", Content: []byte("anonymous")}))
	// Not an ACL file's place: any content.
	h.write(a, "/acl/sub/deeper", bad)
	h.write(a, "/aclx/f", bad)
	h.write(a, "/f", bad)
	// A directory in /acl has no content to check; writing one is IS_DIRECTORY.
	h.fail(chubby.ErrorCode_IS_DIRECTORY, opSet(h.rw(a, "/acl/sub"), "bob"))
}

// TestInitACL: InitACL names its admin once, in a cell nobody configured;
// after that, or in a cell configured by hand, it changes nothing.
func TestInitACL(t *testing.T) {
	admin := aclNamesOf("admin", "admin", "admin")
	h := newHarness(t)
	a := h.session()
	h.watch(a, "/", rd, chubby.EVENT_MASK_ALL)
	h.fail(chubby.ErrorCode_INVALID_ARGUMENT, opInitACL("bad admin"))
	h.fail(chubby.ErrorCode_INVALID_ARGUMENT, opInitACL(""))
	if res, _ := h.cmd(&fsm.Command{Session: &a, Op: opInitACL("root")}); res.Err.GetCode() != chubby.ErrorCode_INVALID_ARGUMENT {
		t.Fatalf("InitACL with a session: %v", res.Err)
	}
	h.ok(opInitACL("root@cell"))
	for _, p := range []string{"/", "/acl", "/acl/admin"} {
		st := h.s.stat(h.node(p))
		if !sameNames(st.Acl, admin) || st.AclGeneration != 1 {
			t.Errorf("%s: names %v at generation %d, want %v at 1", p, st.Acl, st.AclGeneration, admin)
		}
	}
	if f := h.node("/acl/admin"); string(f.content) != "root@cell\n" || f.owner != 0 || h.node("/acl").owner != 0 || !f.aclFile.Allows("root@cell") {
		t.Fatalf("/acl/admin: %q, owner %d", f.content, f.owner)
	}
	wantEvents(t, h.queued(a), "1 CHILD_ADDED h1 / child=acl")

	// Once only.
	before := h.s.Snapshot()
	h.ok(opInitACL("mallory"))
	if !bytes.Equal(before, h.s.Snapshot()) {
		t.Fatal("a second InitACL changed the state")
	}

	// Configured by hand: "/" has names, or /acl exists.
	for name, setup := range map[string]func(h *harness, a chubby.SessionID){
		"root named": func(h *harness, a chubby.SessionID) {
			h.ok(opSetACL(h.open(a, "/", rd, chubby.CreateMode_OPEN_EXISTING), aclNamesOf("", "w", "")))
		},
		"/acl exists":         func(h *harness, a chubby.SessionID) { h.mkdir(a, "/acl") },
		"/acl exists, a file": func(h *harness, a chubby.SessionID) { h.write(a, "/acl", "x") },
	} {
		h := newHarness(t)
		a := h.session()
		setup(h, a)
		h.now += 10
		h.ok(opTick())
		before := h.s.Snapshot()
		h.ok(opInitACL("root"))
		if !bytes.Equal(before, h.s.Snapshot()) {
			t.Errorf("%s: InitACL changed the state", name)
		}
	}
}

// TestACLSnapshot: names and the sessions' principals survive a snapshot;
// a node without names is encoded as before ACLs; Restore refuses bad
// names and rebuilds the memo of the ACL files.
func TestACLSnapshot(t *testing.T) {
	h := newHarness(t)
	a := h.sessionAs("bob")
	h.write(a, "/other", "") // before InitACL: no names
	h.ok(opInitACL("bob"))
	h.write(a, "/acl/team", "bob\n")
	h.write(a, "/plain", "")
	h.ok(opSetACL(h.rw(a, "/plain"), aclNamesOf("team", "", "")))
	snap := h.s.Snapshot()
	r, err := Restore(snap, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.Snapshot(), snap) {
		t.Fatal("snapshot does not round-trip")
	}
	if err := r.checkInvariants(); err != nil || !r.aclFile("team").Allows("bob") || !r.aclFile("admin").Allows("bob") {
		t.Fatalf("restored memo: %v", err)
	}
	sn, err := decodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]*fsm.SnapNode{}
	for _, n := range sn.Nodes {
		byPath[n.Path] = n
	}
	if byPath["/other"].Acl != nil || !sameNames(byPath["/plain"].Acl, aclNamesOf("team", "", "")) {
		t.Fatalf("encoded names: /other %v, /plain %v", byPath["/other"].Acl, byPath["/plain"].Acl)
	}
	for _, bad := range []*chubby.ACLNames{aclNamesOf("a/b", "", ""), aclNamesOf("", "..", ""), aclNamesOf("", "", "a b")} {
		byPath["/other"].Acl = bad
		if _, err := Restore(EncodeSnapshotForTest(sn), DefaultLimits()); err == nil {
			t.Errorf("restored names %v", bad)
		}
	}
	// An ACL file written before the rule: restored, and it grants nobody.
	byPath["/other"].Acl = nil
	byPath["/acl/team"].Content = []byte("bob smith\n")
	byPath["/acl/team"].Checksum = crc(byPath["/acl/team"].Content)
	r, err = Restore(EncodeSnapshotForTest(sn), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if r.aclFile("team") != nil {
		t.Fatal("an ACL file that does not parse has a memo")
	}
}

func crc(b []byte) int64 { return int64(crc32.Checksum(b, castagnoli)) }
