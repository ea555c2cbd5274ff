package fs

import (
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// aclFixture is a cell with ACLs, for the rights tests:
//
//	/acl/admin     root             /            admin, admin, admin
//	/acl/readers   alice, bob       /team        readers, writers, changers
//	/acl/writers   alice            /team/x      readers, writers, changers  (a file)
//	/acl/changers  root, alice      /team/sub    readers, writers, changers  (holds y)
//	/acl/everyone  *                /team/locked readers, writers, changers  (holds inner)
//	/acl/anon      anonymous        /team/locked/inner  readers, admin, changers  (holds z)
//	                                /wonly       missing, writers, changers
//	                                /star        everyone, everyone, everyone
//	                                /anon        anon, anon, anon
//
// carol is listed nowhere; anonymous only in /acl/anon. Every principal
// has a READ_WRITE handle on every node but /acl's, opened before any name
// was set.
type aclFixture struct {
	h    *harness
	sess map[string]chubby.SessionID
	hd   map[string]*chubby.Handle // principal + " " + path
}

var fixturePrincipals = []string{"root", "alice", "bob", "carol", Anonymous}

func newACLFixture(t *testing.T) *aclFixture {
	h := newHarness(t)
	f := &aclFixture{h: h, sess: map[string]chubby.SessionID{}, hd: map[string]*chubby.Handle{}}
	for _, p := range fixturePrincipals {
		f.sess[p] = h.sessionAs(p)
	}
	root := f.sess["root"]
	for _, d := range []string{"/team/sub", "/team/locked/inner", "/wonly"} {
		h.mkdir(root, d)
	}
	for _, file := range []string{"/team/x", "/team/sub/y", "/team/locked/inner/z", "/star", "/anon"} {
		h.write(root, file, "data")
	}
	paths := []string{"/", "/team", "/team/x", "/team/sub", "/team/sub/y", "/team/locked", "/team/locked/inner", "/team/locked/inner/z", "/wonly", "/star", "/anon"}
	for _, p := range fixturePrincipals {
		for _, path := range paths {
			f.hd[p+" "+path] = h.rw(f.sess[p], path)
		}
	}
	// Names children first: once named, a node's change_acl is root's and alice's.
	set := func(path, r, w, c string) { h.ok(opSetACL(f.hd["root "+path], aclNamesOf(r, w, c))) }
	set("/team/locked/inner/z", "readers", "writers", "changers")
	set("/team/locked/inner", "readers", "admin", "changers")
	for _, p := range []string{"/team/locked", "/team/sub/y", "/team/sub", "/team/x", "/team"} {
		set(p, "readers", "writers", "changers")
	}
	set("/wonly", "missing", "writers", "changers")
	set("/star", "everyone", "everyone", "everyone")
	set("/anon", "anon", "anon", "anon")
	h.ok(opInitACL("root"))
	for name, content := range map[string]string{
		"readers": "alice\nbob\n", "writers": "alice\n", "changers": "root\nalice\n",
		"everyone": "*\n", "anon": "anonymous\n",
	} {
		h.ok(opCreateFile(&chubby.CreateFileRequest{Session: root, Path: "/acl/" + name, Content: []byte(content)}))
	}
	return f
}

// handle returns principal's READ_WRITE handle on path.
func (f *aclFixture) handle(principal, path string) *chubby.Handle {
	f.h.t.Helper()
	hd := f.hd[principal+" "+path]
	if hd == nil {
		f.h.t.Fatalf("no handle of %s on %s", principal, path)
	}
	return hd
}

// run applies op and returns its refusal, failing the test if a refused
// command had effects (the harness checks it changed nothing but the
// clock).
func (f *aclFixture) run(op *fsm.Op) error {
	f.h.t.Helper()
	res, fx := f.h.op(op)
	if res.Err != nil && (len(fx.Woken) > 0 || len(fx.EndedSessions) > 0 || len(fx.Notified) > 0) {
		f.h.t.Fatalf("%v: refused with effects %+v", op, fx)
	}
	return asError(res.Err)
}

// wantDenied checks that err is PERMISSION_DENIED naming the principal,
// the node and the right.
func wantDenied(t *testing.T, err error, principal, path string, right Right) {
	t.Helper()
	if Code(err) != chubby.ErrorCode_PERMISSION_DENIED {
		t.Fatalf("got %v, want PERMISSION_DENIED", err)
	}
	want := "principal \"" + principal + "\" lacks the " + right.String() + " right on \"" + path + "\" (ACL "
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("message %q does not say %q", err.Error(), want)
	}
}

// TestRights: every operation, tried by a principal without the right it
// needs (refused with PERMISSION_DENIED naming principal, node and right,
// changing nothing but the clock) and by one with it (applied).
func TestRights(t *testing.T) {
	open := func(f *aclFixture, who, path string, mode chubby.OpenMode, create chubby.CreateMode) error {
		return f.run(opOpen(&chubby.OpenRequest{Session: f.sess[who], Path: path, Mode: mode, Create: create}))
	}
	tests := []struct {
		name    string
		do      func(f *aclFixture, who string) error
		denied  string // a principal without the right
		path    string // the node the refusal names
		right   Right
		allowed string // a principal with it
	}{
		{"Open READ: read", func(f *aclFixture, who string) error {
			return open(f, who, "/team/x", rd, chubby.CreateMode_OPEN_EXISTING)
		}, "carol", "/team/x", ReadRight, "bob"},
		{"Open READ_WRITE: write too", func(f *aclFixture, who string) error {
			return open(f, who, "/team/x", rdwr, chubby.CreateMode_OPEN_OR_CREATE)
		}, "bob", "/team/x", WriteRight, "alice"},
		{"Open of the root", func(f *aclFixture, who string) error {
			return open(f, who, "/", rd, chubby.CreateMode_OPEN_EXISTING)
		}, "alice", "/", ReadRight, "root"},
		{"Open that creates: write on the directory", func(f *aclFixture, who string) error {
			return open(f, who, "/team/new", rd, chubby.CreateMode_OPEN_OR_CREATE)
		}, "bob", "/team", WriteRight, "alice"},
		{"Open that creates: read on the node as it will be", func(f *aclFixture, who string) error {
			return open(f, who, "/wonly/new", rd, chubby.CreateMode_CREATE_NEW)
		}, "alice", "/wonly/new", ReadRight, ""},
		{"Open that creates a sequential name", func(f *aclFixture, who string) error {
			return f.run(opOpen(&chubby.OpenRequest{Session: f.sess[who], Path: "/team/seq-", Mode: rdwr, Create: chubby.CreateMode_CREATE_NEW, Sequential: ptr(true)}))
		}, "bob", "/team", WriteRight, "alice"},
		{"Open CREATE_NEW of an existing node: write on the directory before EXISTS", func(f *aclFixture, who string) error {
			return open(f, who, "/team/x", rd, chubby.CreateMode_CREATE_NEW)
		}, "bob", "/team", WriteRight, ""},
		{"CreateFile: write on the directory", func(f *aclFixture, who string) error {
			return f.run(opCreateFile(&chubby.CreateFileRequest{Session: f.sess[who], Path: "/team/f", Content: []byte("c")}))
		}, "bob", "/team", WriteRight, "alice"},
		{"CreateFile with parents: write on the deepest existing ancestor", func(f *aclFixture, who string) error {
			return f.run(opCreateFile(&chubby.CreateFileRequest{Session: f.sess[who], Path: "/team/p/q/f", MakeParents: ptr(true)}))
		}, "bob", "/team", WriteRight, "alice"},
		{"CreateFile of an existing file", func(f *aclFixture, who string) error {
			return f.run(opCreateFile(&chubby.CreateFileRequest{Session: f.sess[who], Path: "/team/x"}))
		}, "bob", "/team", WriteRight, ""},
		{"Mkdir: write on the directory", func(f *aclFixture, who string) error {
			return f.run(opMkdir(f.sess[who], "/team/d", false, false))
		}, "bob", "/team", WriteRight, "alice"},
		{"Mkdir with parents", func(f *aclFixture, who string) error {
			return f.run(opMkdir(f.sess[who], "/team/d/e/f", true, false))
		}, "carol", "/team", WriteRight, "alice"},
		{"Mkdir with parents of an existing directory: read on it", func(f *aclFixture, who string) error {
			return f.run(opMkdir(f.sess[who], "/team/sub", true, false))
		}, "carol", "/team/sub", ReadRight, "bob"},
		{"SetContents: write", func(f *aclFixture, who string) error {
			return f.run(opSet(f.handle(who, "/team/x"), "new"))
		}, "bob", "/team/x", WriteRight, "alice"},
		{"Delete: write on the directory", func(f *aclFixture, who string) error {
			return f.run(opDelete(f.handle(who, "/team/x"), false))
		}, "bob", "/team", WriteRight, "alice"},
		{"Delete recursive: write on every directory it empties", func(f *aclFixture, who string) error {
			return f.run(opDelete(f.handle(who, "/team/sub"), true))
		}, "bob", "/team", WriteRight, "alice"},
		{"Delete recursive: a directory deep inside", func(f *aclFixture, who string) error {
			return f.run(opDelete(f.handle(who, "/team/locked"), true))
		}, "alice", "/team/locked/inner", WriteRight, ""},
		{"Delete in a directory", func(f *aclFixture, who string) error {
			return f.run(opDelete(f.handle(who, "/team/locked/inner/z"), false))
		}, "alice", "/team/locked/inner", WriteRight, "root"},
		{"Multi CREATE: write on the directory, as CreateFile", func(f *aclFixture, who string) error {
			return f.run(opMulti(f.sess[who], nil, mCreate("/team/m", "c")))
		}, "bob", "/team", WriteRight, "alice"},
		{"Multi CREATE of a directory, as Mkdir", func(f *aclFixture, who string) error {
			return f.run(opMulti(f.sess[who], nil, mMkdir("/team/md")))
		}, "bob", "/team", WriteRight, "alice"},
		{"Multi CREATE of an existing node: write on the directory before EXISTS", func(f *aclFixture, who string) error {
			return f.run(opMulti(f.sess[who], nil, mCreate("/team/x", "")))
		}, "bob", "/team", WriteRight, ""},
		{"Multi SET_CONTENTS: write", func(f *aclFixture, who string) error {
			return f.run(opMulti(f.sess[who], nil, mSet("/team/x", "new")))
		}, "bob", "/team/x", WriteRight, "alice"},
		{"Multi DELETE: write on the directory", func(f *aclFixture, who string) error {
			return f.run(opMulti(f.sess[who], nil, mDelete("/team/x")))
		}, "bob", "/team", WriteRight, "alice"},
		{"Multi DELETE recursive: a directory deep inside", func(f *aclFixture, who string) error {
			return f.run(opMulti(f.sess[who], nil, mDeleteAll("/team/locked")))
		}, "alice", "/team/locked/inner", WriteRight, ""},
		{"Multi compare: read on the node", func(f *aclFixture, who string) error {
			return f.run(opMulti(f.sess[who], compares(mExists("/team/x")), mSet("/star", "s")))
		}, "carol", "/team/x", ReadRight, "bob"},
		{"Multi compare of a missing node: read on the nearest existing ancestor", func(f *aclFixture, who string) error {
			return f.run(opMulti(f.sess[who], compares(mNotExists("/team/nope/deeper")), mSet("/star", "s")))
		}, "carol", "/team", ReadRight, "bob"},
		{"Multi compare through a file: read on the file", func(f *aclFixture, who string) error {
			return f.run(opMulti(f.sess[who], compares(mNotExists("/team/x/y")), mSet("/star", "s")))
		}, "carol", "/team/x", ReadRight, "bob"},
		{"Multi compares' rights before the compares", func(f *aclFixture, who string) error {
			return f.run(opMulti(f.sess[who], compares(mExists("/star/nope"), mExists("/team/x")), mSet("/star", "s")))
		}, "carol", "/team/x", ReadRight, ""},
		{"TryAcquire: write", func(f *aclFixture, who string) error {
			return f.run(opAcquire(f.handle(who, "/team/x"), excl, false, 0))
		}, "bob", "/team/x", WriteRight, "alice"},
		{"Acquire: write", func(f *aclFixture, who string) error {
			return f.run(opAcquire(f.handle(who, "/team/x"), shared, true, 0))
		}, "bob", "/team/x", WriteRight, "alice"},
		{"SetACL: change_acl", func(f *aclFixture, who string) error {
			return f.run(opSetACL(f.handle(who, "/team/x"), aclNamesOf("", "", "")))
		}, "bob", "/team/x", ChangeACLRight, "alice"},
		{"SetACL of the root", func(f *aclFixture, who string) error {
			return f.run(opSetACL(f.handle(who, "/"), aclNamesOf("admin", "admin", "admin")))
		}, "alice", "/", ChangeACLRight, "root"},
		{"GetContentsAndStat: read", func(f *aclFixture, who string) error {
			_, _, err := f.h.s.GetContentsAndStat(f.handle(who, "/team/x"))
			return err
		}, "carol", "/team/x", ReadRight, "bob"},
		{"GetStat: read", func(f *aclFixture, who string) error {
			_, err := f.h.s.GetStat(f.handle(who, "/team/sub"))
			return err
		}, "carol", "/team/sub", ReadRight, "bob"},
		{"ReadDir: read", func(f *aclFixture, who string) error {
			_, err := f.h.s.ReadDir(f.handle(who, "/team"))
			return err
		}, "carol", "/team", ReadRight, "bob"},
		{"CheckSequencer: read", func(f *aclFixture, who string) error {
			f.h.ok(opAcquire(f.handle("alice", "/team/x"), excl, false, 0))
			seq, err := f.h.s.GetSequencer(f.handle("alice", "/team/x"))
			if err != nil {
				return err
			}
			valid, reason, err := f.h.s.CheckSequencer(who, seq)
			if err == nil && !valid {
				t.Fatalf("CheckSequencer: not valid: %s", reason)
			}
			return err
		}, "carol", "/team/x", ReadRight, "bob"},
		{"Allowed", func(f *aclFixture, who string) error {
			return f.h.s.Allowed(who, "/team", ChangeACLRight)
		}, "bob", "/team", ChangeACLRight, "alice"},
		{"star: not anonymous", func(f *aclFixture, who string) error {
			return open(f, who, "/star", rd, chubby.CreateMode_OPEN_EXISTING)
		}, Anonymous, "/star", ReadRight, "carol"},
		{"anonymous when listed", func(f *aclFixture, who string) error {
			return open(f, who, "/anon", rd, chubby.CreateMode_OPEN_EXISTING)
		}, "carol", "/anon", ReadRight, Anonymous},
		{"a missing ACL file grants nobody", func(f *aclFixture, who string) error {
			_, err := f.h.s.GetStat(f.handle(who, "/wonly"))
			return err
		}, "root", "/wonly", ReadRight, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newACLFixture(t)
			wantDenied(t, tt.do(f, tt.denied), tt.denied, tt.path, tt.right)
			if tt.allowed != "" {
				f := newACLFixture(t)
				if err := tt.do(f, tt.allowed); err != nil {
					t.Fatalf("%s: %v", tt.allowed, err)
				}
			}
		})
	}
}

// TestNoRightsNeeded: Release, CancelWait, Close, GetSequencer and
// EndSession need no right, and the system's commands are not checked.
func TestNoRightsNeeded(t *testing.T) {
	h := newHarness(t)
	carol, other := h.sessionAs("carol"), h.sessionAs("dave")
	held, waiting := h.rw(carol, "/l"), h.rw(other, "/l")
	h.ok(opAcquire(held, excl, false, 1000))
	h.ok(opAcquire(waiting, excl, true, 0))
	h.ok(opInitACL("root")) // "/" is root's now
	root := h.sessionAs("root")
	h.ok(opSetACL(h.rw(root, "/l"), aclNamesOf("admin", "admin", "admin")))
	if _, err := h.s.GetSequencer(held); err != nil {
		t.Fatalf("GetSequencer: %v", err)
	}
	h.ok(opCancel(waiting))
	h.ok(opRelease(held))
	h.ok(opAcquire(h.rw(root, "/l"), excl, false, 1000))
	h.ok(opClose(held))
	h.ok(opEnd(other, false))
	h.ok(opEnd(root, true))
	h.now += 2000
	h.ok(opTick())
	h.ok(&fsm.Op{TrimEvents: &fsm.TrimEvents{Acks: []*fsm.EventAck{{Session: carol, Acked: 5}}}})
}

// TestRightsOrder: the faults come in order — arguments, session, handle,
// permission, state.
func TestRightsOrder(t *testing.T) {
	f := newACLFixture(t)
	bob := f.sess["bob"]
	bad := *f.handle("bob", "/team/x")
	bad.Instance++
	tests := []struct {
		name string
		op   *fsm.Op
		code chubby.ErrorCode
	}{
		{"a bad argument before permission", opSetACL(f.handle("bob", "/team/x"), aclNamesOf("a b", "", "")), chubby.ErrorCode_INVALID_ARGUMENT},
		{"a bad ACL file before the handle", opSet(&chubby.Handle{Id: 9999, Session: bob, Path: "/acl/readers", Instance: 1}, "not valid"), chubby.ErrorCode_INVALID_ARGUMENT},
		{"a bad handle before permission", opSet(&bad, "x"), chubby.ErrorCode_HANDLE_INVALID},
		{"permission before a generation mismatch", opSetGen(f.handle("bob", "/team/x"), "x", 99), chubby.ErrorCode_PERMISSION_DENIED},
		{"permission before LOCK_HELD", opAcquire(f.handle("bob", "/team/x"), excl, false, 0), chubby.ErrorCode_PERMISSION_DENIED},
		{"permission before NOT_EMPTY", opDelete(f.handle("bob", "/team/sub"), false), chubby.ErrorCode_PERMISSION_DENIED},
		{"permission before EXISTS", opMkdir(bob, "/team/sub", false, false), chubby.ErrorCode_PERMISSION_DENIED},
		{"permission before IS_DIRECTORY", opSet(f.handle("bob", "/team/sub"), "x"), chubby.ErrorCode_PERMISSION_DENIED},
		{"NOT_FOUND where the right would be checked", opMkdir(bob, "/nope/d", false, false), chubby.ErrorCode_NOT_FOUND},
	}
	f.h.ok(opAcquire(f.handle("alice", "/team/x"), excl, false, 0))
	for _, tt := range tests {
		if err := f.run(tt.op); Code(err) != tt.code {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.code)
		}
	}
}

// TestRightsLimitAfterPermission: a create the principal may not make is
// PERMISSION_DENIED even when the cell is at a limit.
func TestRightsLimitAfterPermission(t *testing.T) {
	h := newHarnessLimits(t, Limits{MaxNodes: 4, MaxSessions: 5, MaxHandles: 10, MaxHandlesPerSession: 10,
		MaxWaitersPerLock: 1, MaxChildren: 10, MaxContentBytes: 100, MaxTotalContentBytes: 1000,
		MaxSavedAnswersPerSession: 2, MaxEventsPerSession: 10, MaxTotalEvents: 10})
	bob := h.sessionAs("bob")
	h.ok(opInitACL("root"))                // 3 nodes
	h.write(h.sessionAs("root"), "/f", "") // the fourth, the last
	wantDenied(t, asError(h.fail(chubby.ErrorCode_PERMISSION_DENIED, opCreateFile(&chubby.CreateFileRequest{Session: bob, Path: "/g"}))), "bob", "/", WriteRight)
}

// TestACLFileChanges: the memo of an ACL file follows every change of it
// exactly: a check right after a write, a delete and a re-create sees
// the new content.
func TestACLFileChanges(t *testing.T) {
	f := newACLFixture(t)
	h, root := f.h, f.sess["root"]
	readers := h.rw(root, "/acl/readers")
	bobReads := func() error {
		_, err := h.s.GetStat(f.handle("bob", "/team/x"))
		return err
	}
	if err := bobReads(); err != nil {
		t.Fatalf("before: %v", err)
	}
	steps := []struct {
		name      string
		do        func()
		bobMay    bool
		aliceMay  bool
		wantInMsg string
	}{
		{"bob removed", func() { h.ok(opSet(readers, "alice\n")) }, false, true, ""},
		{"bob back", func() { h.ok(opSet(readers, "alice\nbob\n")) }, true, true, ""},
		{"file deleted", func() { h.ok(opDelete(readers, false)) }, false, false, "/acl/readers does not exist"},
		{"re-created without bob", func() {
			h.ok(opCreateFile(&chubby.CreateFileRequest{Session: root, Path: "/acl/readers", Content: []byte("alice")}))
		}, false, true, ""},
		{"deleted again", func() { h.ok(opDelete(h.rw(root, "/acl/readers"), false)) }, false, false, ""},
		{"re-created as a directory", func() { h.mkdir(root, "/acl/readers") }, false, false, "/acl/readers is a directory"},
		{"the directory deleted, a file with bob", func() {
			h.ok(opDelete(h.open(root, "/acl/readers", rdwr, chubby.CreateMode_OPEN_EXISTING), false))
			h.ok(opOpen(&chubby.OpenRequest{Session: root, Path: "/acl/readers", Mode: rd, Create: chubby.CreateMode_CREATE_NEW, InitialContent: []byte("bob\n")}))
		}, true, false, ""},
		{"/acl deleted (\"/\" open to all first: no lock-out)", func() {
			h.ok(opSetACL(f.handle("root", "/"), aclNamesOf("", "", "")))
			h.ok(opDelete(h.open(root, "/acl", rdwr, chubby.CreateMode_OPEN_EXISTING), true))
		}, false, false, ""},
	}
	for _, st := range steps {
		st.do()
		err := bobReads()
		if (err == nil) != st.bobMay {
			t.Fatalf("%s: bob reads: %v, want allowed=%v", st.name, err, st.bobMay)
		}
		if err != nil && !strings.Contains(err.Error(), st.wantInMsg) {
			t.Fatalf("%s: %q does not say %q", st.name, err, st.wantInMsg)
		}
		if _, err := h.s.GetStat(f.handle("alice", "/team/x")); (err == nil) != st.aliceMay {
			t.Fatalf("%s: alice reads: %v, want allowed=%v", st.name, err, st.aliceMay)
		}
	}
}

// TestACLFileInvalidGrantsNobody: an ACL file whose content does not
// parse (written before the rule, restored from a snapshot) grants
// nobody, and once rewritten it grants as it says.
func TestACLFileInvalidGrantsNobody(t *testing.T) {
	f := newACLFixture(t)
	sn, err := decodeSnapshot(f.h.s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range sn.Nodes {
		if n.Path == "/acl/readers" {
			n.Content = []byte("alice\nbob the builder\n")
			n.Checksum = crc(n.Content)
		}
	}
	s, err := Restore(EncodeSnapshotForTest(sn), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"alice", "bob", "root"} {
		if err := s.Allowed(who, "/team", ReadRight); Code(err) != chubby.ErrorCode_PERMISSION_DENIED || !strings.Contains(err.Error(), "not a valid ACL file") {
			t.Errorf("%s: %v", who, err)
		}
	}
	f.h.s = s
	f.h.ok(opSet(f.h.rw(f.sess["root"], "/acl/readers"), "bob\n"))
	if err := s.Allowed("bob", "/team", ReadRight); err != nil {
		t.Fatalf("after the rewrite: %v", err)
	}
}

// TestAllowed: the master's check, for what it decides itself.
func TestAllowed(t *testing.T) {
	f := newACLFixture(t)
	s := f.h.s
	tests := []struct {
		principal, path string
		right           Right
		code            chubby.ErrorCode
	}{
		{"root", "/", ChangeACLRight, 0},
		{"alice", "/", ChangeACLRight, chubby.ErrorCode_PERMISSION_DENIED},
		{"alice", "/team/x", ReadRight, 0},
		{"alice", "/nope", ReadRight, chubby.ErrorCode_NOT_FOUND},
		{"alice", "nope", ReadRight, chubby.ErrorCode_INVALID_ARGUMENT},
		{"alice", "/team", Right(3), chubby.ErrorCode_INVALID_ARGUMENT},
		{"alice", "/team", Right(-1), chubby.ErrorCode_INVALID_ARGUMENT},
	}
	for _, tt := range tests {
		if err := s.Allowed(tt.principal, tt.path, tt.right); Code(err) != tt.code {
			t.Errorf("Allowed(%q, %q, %v) = %v, want %v", tt.principal, tt.path, tt.right, err, tt.code)
		}
	}
	// A cell nobody configured grants everything to everybody.
	if err := New(DefaultLimits()).Allowed(Anonymous, "/", ChangeACLRight); err != nil {
		t.Fatal(err)
	}
}

// TestEventsNeedRead: an event is queued for a handle only while its
// session's principal may read the handle's node; HANDLE_INVALID always.
func TestEventsNeedRead(t *testing.T) {
	h := newHarness(t)
	alice, carol := h.sessionAs("alice"), h.sessionAs("carol")
	h.write(alice, "/d/f", "")
	var files []*chubby.Handle
	for _, sess := range []chubby.SessionID{alice, carol} {
		h.watch(sess, "/d", rd, chubby.EVENT_MASK_ALL)
		files = append(files, h.watch(sess, "/d/f", rd, chubby.EVENT_MASK_ALL))
		h.ok(opAcquire(files[len(files)-1], shared, false, 0)) // alice: LOCK_ACQUIRED
	}
	h.ok(opInitACL("root"))
	root := h.sessionAs("root")
	h.write(root, "/acl/readers", "alice\nroot\n")
	for _, p := range []string{"/d/f", "/d"} {
		h.ok(opSetACL(h.open(root, p, rd, chubby.CreateMode_OPEN_EXISTING), aclNamesOf("readers", "", "")))
	}
	kinds := func(sess chubby.SessionID) []string {
		var out []string
		for _, e := range h.queued(sess) {
			out = append(out, e.Kind.String()+" "+e.GetPath())
		}
		return out
	}
	f := h.rw(root, "/d/f")
	h.ok(opSet(f, "x"))
	h.write(root, "/d/g", "")
	h.fail(chubby.ErrorCode_LOCK_HELD, opAcquire(f, excl, false, 0))
	// alice no longer reads: told nothing; then again, and the file goes.
	readers := h.rw(root, "/acl/readers")
	h.ok(opSet(readers, "root\n"))
	h.ok(opSet(f, "y"))
	h.ok(opSet(readers, "root\nalice\n"))
	h.ok(opRelease(files[0]))
	h.ok(opRelease(files[1]))
	h.ok(opDelete(f, false))
	want := map[chubby.SessionID][]string{
		alice: {
			"LOCK_ACQUIRED /d/f", "FILE_CONTENTS_MODIFIED /d/f", "CHILD_MODIFIED /d", "CHILD_ADDED /d", "CONFLICTING_LOCK_REQUEST /d/f",
			"HANDLE_INVALID /d/f", "CHILD_REMOVED /d",
		},
		carol: {"HANDLE_INVALID /d/f"},
	}
	for sess, w := range want {
		if got := kinds(sess); strings.Join(got, "; ") != strings.Join(w, "; ") {
			t.Errorf("session %d: events\n  %v\nwant\n  %v", sess, got, w)
		}
	}
}

// TestRightsRefusalSaved: a sequenced command refused for want of a right
// saves the refusal as its answer, like any refusal by its operation: a
// copy applied after the right is granted gets the refusal, not a write.
func TestRightsRefusalSaved(t *testing.T) {
	f := newACLFixture(t)
	h, bob := f.h, f.sess["bob"]
	hd := f.handle("bob", "/team/x")
	write := func() *fsm.Result_ {
		res, _ := h.cmd(&fsm.Command{Session: &bob, Seq: ptr(int64(1)), Op: opSet(hd, "bob was here")})
		return res
	}
	first := write()
	wantDenied(t, asError(first.Err), "bob", "/team/x", WriteRight)
	h.ok(opSet(h.rw(f.sess["root"], "/acl/writers"), "alice\nbob\n"))
	if again := write(); again.Err.GetMessage() != first.Err.Message || string(h.node("/team/x").content) != "data" {
		t.Fatalf("the copy applied after the grant: %v, content %q", again.Err, h.node("/team/x").content)
	}
	if res, _ := h.cmd(&fsm.Command{Session: &bob, Seq: ptr(int64(2)), Op: opSet(hd, "now")}); res.Err != nil {
		t.Fatalf("a new request after the grant: %v", res.Err)
	}
}
