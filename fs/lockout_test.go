package fs

import (
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// acl opens path READ_WRITE for the fixture's root (who holds every
// right), which must exist.
func (f *aclFixture) acl(path string) *chubby.Handle {
	f.h.t.Helper()
	return f.h.open(f.sess["root"], path, rdwr, chubby.CreateMode_OPEN_EXISTING)
}

// TestNoLockOut: every path by which "/" or /acl could be left without a
// principal holding change_acl is refused with PERMISSION_DENIED saying
// why, and changes nothing (the harness checks it); the changes that
// leave somebody are applied.
func TestNoLockOut(t *testing.T) {
	ephemeral := func(f *aclFixture) {
		f.h.ok(opCreateFile(&chubby.CreateFileRequest{Session: f.sess["root"], Path: "/acl/eph", Content: []byte("root\n"), Ephemeral: ptr(true)}))
	}
	emptyFile := func(f *aclFixture) {
		f.h.ok(opCreateFile(&chubby.CreateFileRequest{Session: f.sess["root"], Path: "/acl/nobody", Content: []byte("# nobody yet\n")}))
	}
	root := func(f *aclFixture) chubby.SessionID { return f.sess["root"] }
	for _, tc := range []struct {
		name    string
		prepare func(f *aclFixture)
		op      func(f *aclFixture) *fsm.Op
		refused string // in the refusal; "" when it applies
	}{
		{"delete /acl/admin", nil, func(f *aclFixture) *fsm.Op { return opDelete(f.acl("/acl/admin"), false) }, "/acl/admin does not exist"},
		{"empty /acl/admin", nil, func(f *aclFixture) *fsm.Op { return opSet(f.acl("/acl/admin"), "") }, "/acl/admin lists nobody"},
		{"/acl/admin only comments", nil, func(f *aclFixture) *fsm.Op { return opSet(f.acl("/acl/admin"), "# root left\n\n") }, "lists nobody"},
		{"delete /acl", nil, func(f *aclFixture) *fsm.Op { return opDelete(f.acl("/acl"), true) }, "/acl/admin does not exist"},
		{"/ names a missing file", nil, func(f *aclFixture) *fsm.Op {
			return opSetACL(f.handle("root", "/"), aclNamesOf("admin", "admin", "missing"))
		}, `change_acl of "/" (ACL "missing"): /acl/missing does not exist`},
		{"/ names an empty file", emptyFile, func(f *aclFixture) *fsm.Op {
			return opSetACL(f.handle("root", "/"), aclNamesOf("admin", "admin", "nobody"))
		}, "/acl/nobody lists nobody"},
		{"/ names a directory", func(f *aclFixture) { f.h.mkdir(root(f), "/acl/dir") }, func(f *aclFixture) *fsm.Op {
			return opSetACL(f.handle("root", "/"), aclNamesOf("", "", "dir"))
		}, "/acl/dir is a directory"},
		{"/ names an ephemeral file", ephemeral, func(f *aclFixture) *fsm.Op {
			return opSetACL(f.handle("root", "/"), aclNamesOf("", "", "eph"))
		}, "/acl/eph is ephemeral"},
		{"/acl names a missing file", nil, func(f *aclFixture) *fsm.Op {
			return opSetACL(f.acl("/acl"), aclNamesOf("admin", "admin", "missing"))
		}, `change_acl of "/acl" (ACL "missing")`},
		{"Multi deletes /acl/admin", nil, func(f *aclFixture) *fsm.Op {
			return opMulti(root(f), nil, mSet("/star", "v"), mDelete("/acl/admin"))
		}, "op 1: refused: nobody could change ACLs"},
		{"Multi empties /acl/admin", nil, func(f *aclFixture) *fsm.Op { return opMulti(root(f), nil, mSet("/acl/admin", "")) }, "op 0: refused"},
		{"Multi deletes /acl", nil, func(f *aclFixture) *fsm.Op { return opMulti(root(f), nil, mDeleteAll("/acl")) }, "op 0: refused"},
		{"Multi deletes and re-creates /acl/admin: each op as its single call", nil, func(f *aclFixture) *fsm.Op {
			return opMulti(root(f), nil, mDelete("/acl/admin"), mCreate("/acl/admin", "root\n"))
		}, "op 0: refused"},

		{"/acl/admin rewritten to another admin", nil, func(f *aclFixture) *fsm.Op { return opSet(f.acl("/acl/admin"), "alice\n") }, ""},
		{"/acl/admin rewritten to *", nil, func(f *aclFixture) *fsm.Op { return opSet(f.acl("/acl/admin"), "*\n") }, ""},
		{"/ open to everybody", nil, func(f *aclFixture) *fsm.Op { return opSetACL(f.handle("root", "/"), aclNamesOf("", "", "")) }, ""},
		{"/ names another file with somebody", nil, func(f *aclFixture) *fsm.Op {
			return opSetACL(f.handle("root", "/"), aclNamesOf("admin", "admin", "changers"))
		}, ""},
		{"an empty ACL file nobody keeps", nil, func(f *aclFixture) *fsm.Op { return opSet(f.acl("/acl/readers"), "") }, ""},
		{"an ACL file nobody keeps deleted", nil, func(f *aclFixture) *fsm.Op { return opDelete(f.acl("/acl/readers"), false) }, ""},
		{"Multi rewrites /acl/admin", nil, func(f *aclFixture) *fsm.Op { return opMulti(root(f), nil, mSet("/acl/admin", "root\nalice\n")) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newACLFixture(t)
			if tc.prepare != nil {
				tc.prepare(f)
			}
			err := f.run(tc.op(f))
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused == "":
				if f.h.s.LockOut() != "" {
					t.Fatalf("applied, and now locked out: %s", f.h.s.LockOut())
				}
			case Code(err) != chubby.ErrorCode_PERMISSION_DENIED || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "nobody could change ACLs"):
				t.Fatalf("got %v, want PERMISSION_DENIED saying %q", err, tc.refused)
			}
		})
	}
}

// lockedOut returns the fixture's state with "/" locked out as a cell
// from before the rule could be: edit changes the snapshot (e.g. drops
// /acl/admin) and the state is restored from it.
func lockedOut(t *testing.T, edit func(sn *fsm.Snapshot)) *aclFixture {
	t.Helper()
	f := newACLFixture(t)
	sn, err := decodeSnapshot(f.h.s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	edit(sn)
	s, err := Restore(EncodeSnapshotForTest(sn), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	f.h.s = s
	if s.LockOut() == "" {
		t.Fatal("the edited state is not locked out")
	}
	return f
}

// TestRecoverAdmin: a cell locked out before the rule (chubbyd --admin's
// way back in through the log): InitACL without recover changes nothing,
// with recover it gives "/" and /acl's change_acl back to the admin,
// whatever state /acl/admin was left in; and a cell that is not locked
// out is not touched.
func TestRecoverAdmin(t *testing.T) {
	setAdmin := func(content string) func(sn *fsm.Snapshot) {
		return func(sn *fsm.Snapshot) {
			for _, n := range sn.Nodes {
				if n.Path == "/acl/admin" {
					n.Content, n.Checksum = []byte(content), crc([]byte(content))
				}
			}
		}
	}
	drop := func(sn *fsm.Snapshot) {
		for i, n := range sn.Nodes {
			if n.Path == "/acl/admin" {
				sn.Nodes = append(sn.Nodes[:i], sn.Nodes[i+1:]...)
				return
			}
		}
	}
	for _, tc := range []struct {
		name string
		edit func(sn *fsm.Snapshot)
		want string // /acl/admin's content after recovery
	}{
		{"/acl/admin deleted", drop, "ops\n"},
		{"/acl/admin empty", setAdmin(""), "ops\n"},
		{"/acl/admin does not parse", setAdmin("not a principal!\n"), "ops\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := lockedOut(t, tc.edit)
			h := f.h
			if _, err := h.s.GetStat(f.handle("alice", "/team/x")); err != nil {
				t.Fatalf("a locked-out cell still serves what its names allow: %v", err)
			}
			h.ok(opInitACL("ops"))
			if h.s.LockOut() == "" {
				t.Fatal("InitACL without recover recovered")
			}
			h.ok(&fsm.Op{InitAcl: &fsm.InitACL{Admin: "ops", Recover: ptr(true)}})
			if lo := h.s.LockOut(); lo != "" {
				t.Fatalf("still locked out: %s", lo)
			}
			ops := h.sessionAs("ops")
			hd := h.open(ops, "/acl/admin", rdwr, chubby.CreateMode_OPEN_EXISTING)
			b, _, err := h.s.GetContentsAndStat(hd)
			if err != nil || string(b) != tc.want {
				t.Fatalf("/acl/admin: %q, %v; want %q", b, err, tc.want)
			}
			h.ok(opSetACL(h.open(ops, "/", rd, chubby.CreateMode_OPEN_EXISTING), aclNamesOf("admin", "admin", "admin")))
			// The rule holds again.
			if err := f.run(opSet(hd, "")); Code(err) != chubby.ErrorCode_PERMISSION_DENIED {
				t.Fatalf("emptying the recovered /acl/admin: %v", err)
			}
		})
	}
	t.Run("/acl/admin kept its admins", func(t *testing.T) {
		f := lockedOut(t, func(sn *fsm.Snapshot) {
			for _, n := range sn.Nodes {
				if n.Path == "/" && n.Acl != nil {
					n.Acl.ChangeAcl = "gone"
				}
			}
		})
		// Locked out already: the rule does not stand in the way of what
		// the names allow.
		f.h.ok(opSet(f.acl("/acl/admin"), "root\nalice\n"))
		f.h.ok(opSet(f.acl("/acl/admin"), "root\n"))
		f.h.ok(&fsm.Op{InitAcl: &fsm.InitACL{Admin: "ops", Recover: ptr(true)}})
		b, _, err := f.h.s.GetContentsAndStat(f.acl("/acl/admin"))
		if err != nil || string(b) != "ops\nroot\n" {
			t.Fatalf("/acl/admin: %q, %v", b, err)
		}
		if names, _ := f.h.s.ACLNamesOf("/"); names.ChangeAcl != "admin" || names.ReadAcl != "admin" {
			t.Fatalf("/ names %v", names)
		}
	})
	t.Run("not locked out: nothing", func(t *testing.T) {
		f := newACLFixture(t)
		before := f.h.s.Snapshot()
		res, _ := f.h.op(&fsm.Op{InitAcl: &fsm.InitACL{Admin: "ops", Recover: ptr(true)}})
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		f.h.ok(&fsm.Op{Tick: &fsm.Tick{}}) // the same clock for both
		ticked, _ := Restore(before, DefaultLimits())
		ticked.Apply(&fsm.Command{TimeMs: f.h.now, Op: &fsm.Op{Tick: &fsm.Tick{}}})
		if string(ticked.Snapshot()) != string(f.h.s.Snapshot()) {
			t.Fatal("InitACL recover changed a cell that was not locked out")
		}
	})
}

// TestSessionsPerPrincipal: one principal (Anonymous included) cannot
// hold more than MaxSessionsPerPrincipal sessions; others still can, an
// ended session makes room, and a restored state counts the same.
func TestSessionsPerPrincipal(t *testing.T) {
	l := DefaultLimits()
	l.MaxSessions, l.MaxSessionsPerPrincipal = 10, 3
	for _, p := range []string{"alice", Anonymous} {
		t.Run(p, func(t *testing.T) {
			h := newHarnessLimits(t, l)
			var ids []chubby.SessionID
			for range 3 {
				ids = append(ids, h.sessionAs(p))
			}
			create := &fsm.Command{Op: opCreateSession("one more")}
			if p != Anonymous {
				create.Principal = &p
			}
			res, _ := h.cmd(create)
			if res.Err == nil || res.Err.Code != chubby.ErrorCode_LIMIT_EXCEEDED || !strings.Contains(res.Err.Message, "limit per principal is 3") {
				t.Fatalf("a fourth session: %v", res.Err)
			}
			h.sessionAs("bob") // another principal is not held back
			s, err := Restore(h.s.Snapshot(), l)
			if err != nil {
				t.Fatal(err)
			}
			h.s = s
			if res, _ := h.cmd(create); res.Err.GetCode() != chubby.ErrorCode_LIMIT_EXCEEDED {
				t.Fatalf("after Restore: %v", res.Err)
			}
			h.ok(&fsm.Op{EndSession: &fsm.EndSession{Session: ids[0]}})
			if res, _ := h.cmd(create); res.Err != nil {
				t.Fatalf("after one ended: %v", res.Err)
			}
		})
	}
}
