package fs

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// Builders of Multi requests.

func opMulti(sess chubby.SessionID, cs []*chubby.Compare, ops ...*chubby.MultiOp) *fsm.Op {
	return &fsm.Op{Multi: &chubby.MultiRequest{Session: sess, Compares: cs, Ops: ops}}
}

func compares(cs ...*chubby.Compare) []*chubby.Compare { return cs }

func mExists(p string) *chubby.Compare {
	return &chubby.Compare{Path: p, Kind: chubby.CompareKind_EXISTS}
}
func mNotExists(p string) *chubby.Compare {
	return &chubby.Compare{Path: p, Kind: chubby.CompareKind_NOT_EXISTS}
}
func mGenIs(p string, v int64) *chubby.Compare {
	return &chubby.Compare{Path: p, Kind: chubby.CompareKind_CONTENT_GENERATION, Value: &v}
}
func mInstanceIs(p string, v int64) *chubby.Compare {
	return &chubby.Compare{Path: p, Kind: chubby.CompareKind_INSTANCE, Value: &v}
}

// mCreate creates a file with content ("": none).
func mCreate(p, content string) *chubby.MultiOp {
	op := &chubby.MultiOp{Kind: chubby.MultiOpKind_CREATE, Path: p}
	if content != "" {
		op.Content = []byte(content)
	}
	return op
}
func mCreateEph(p string) *chubby.MultiOp {
	return &chubby.MultiOp{Kind: chubby.MultiOpKind_CREATE, Path: p, Ephemeral: ptr(true)}
}
func mMkdir(p string) *chubby.MultiOp {
	return &chubby.MultiOp{Kind: chubby.MultiOpKind_CREATE, Path: p, Directory: ptr(true)}
}
func mMkdirEph(p string) *chubby.MultiOp {
	return &chubby.MultiOp{Kind: chubby.MultiOpKind_CREATE, Path: p, Directory: ptr(true), Ephemeral: ptr(true)}
}
func mSet(p, content string) *chubby.MultiOp {
	return &chubby.MultiOp{Kind: chubby.MultiOpKind_SET_CONTENTS, Path: p, Content: []byte(content)}
}
func mSetIf(p, content string, gen int64) *chubby.MultiOp {
	return &chubby.MultiOp{Kind: chubby.MultiOpKind_SET_CONTENTS, Path: p, Content: []byte(content), ExpectedGeneration: &gen}
}
func mDelete(p string) *chubby.MultiOp {
	return &chubby.MultiOp{Kind: chubby.MultiOpKind_DELETE, Path: p}
}
func mDeleteAll(p string) *chubby.MultiOp {
	return &chubby.MultiOp{Kind: chubby.MultiOpKind_DELETE, Path: p, Recursive: ptr(true)}
}

// multi applies a Multi that must not be refused and returns its answer.
func (h *harness) multi(sess chubby.SessionID, cs []*chubby.Compare, ops ...*chubby.MultiOp) (*chubby.MultiResponse, Effects) {
	h.t.Helper()
	res, fx := h.ok(opMulti(sess, cs, ops...))
	if res.Multi == nil {
		h.t.Fatalf("Multi answered without a MultiResponse: %v", res)
	}
	return res.Multi, fx
}

// ticked returns the snapshot of the state as it is after a command at the
// harness clock that changes nothing.
func (h *harness) ticked() []byte {
	h.t.Helper()
	t, err := Restore(h.s.Snapshot(), h.s.limits)
	if err != nil {
		h.t.Fatal(err)
	}
	t.Apply(&fsm.Command{TimeMs: h.now, Op: opTick()})
	return t.Snapshot()
}

// TestMultiCompares: each kind of compare, holding and not, against the
// state before any op; a compare that does not hold is an answer naming
// it, and nothing is applied.
func TestMultiCompares(t *testing.T) {
	h := newHarness(t)
	a := h.session()
	h.write(a, "/d/f", "1")
	h.ok(opSet(h.rw(a, "/d/f"), "2")) // content generation 2
	f, d := h.node("/d/f"), h.node("/d")
	tests := []struct {
		name  string
		c     *chubby.Compare
		holds bool
	}{
		{"EXISTS of a file", mExists("/d/f"), true},
		{"EXISTS of a directory", mExists("/d"), true},
		{"EXISTS of the root", mExists("/"), true},
		{"EXISTS of a missing node", mExists("/d/g"), false},
		{"EXISTS through a file", mExists("/d/f/g"), false},
		{"NOT_EXISTS of a missing node", mNotExists("/d/g"), true},
		{"NOT_EXISTS under a missing directory", mNotExists("/e/g"), true},
		{"NOT_EXISTS of a file", mNotExists("/d/f"), false},
		{"CONTENT_GENERATION equal", mGenIs("/d/f", 2), true},
		{"CONTENT_GENERATION of a directory", mGenIs("/d", d.contentGen), true},
		{"CONTENT_GENERATION different", mGenIs("/d/f", 1), false},
		{"CONTENT_GENERATION of a missing node", mGenIs("/d/g", 1), false},
		{"INSTANCE equal", mInstanceIs("/d/f", f.instance), true},
		{"INSTANCE different", mInstanceIs("/d/f", f.instance+1), false},
		{"INSTANCE of a missing node", mInstanceIs("/d/g", f.instance), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.t = t
			h.now += 10
			want := h.ticked()
			r, _ := h.multi(a, compares(mExists("/"), tt.c), mCreate("/new", "x"))
			if !tt.holds {
				if r.Succeeded || r.GetFailedCompare() != 1 || r.Stats == nil || len(r.Stats) != 0 {
					t.Fatalf("got %v, want failed_compare 1 and no stats", r)
				}
				if !bytes.Equal(want, h.s.Snapshot()) {
					t.Fatal("a Multi whose compare failed changed the state")
				}
				return
			}
			if !r.Succeeded || r.IsSetFailedCompare() || len(r.Stats) != 1 || !h.exists("/new") {
				t.Fatalf("got %v, want succeeded with one Stat", r)
			}
			h.ok(opDelete(h.rw(a, "/new"), false))
		})
	}
}

// TestMultiComparesFirstFailing: the first compare that does not hold is
// named, and compares see the state before any op.
func TestMultiComparesFirstFailing(t *testing.T) {
	h := newHarness(t)
	a := h.session()
	h.write(a, "/f", "")
	r, _ := h.multi(a, compares(mExists("/f"), mNotExists("/f"), mExists("/g")), mCreate("/g", ""))
	if r.Succeeded || r.GetFailedCompare() != 1 {
		t.Fatalf("got %v, want compare 1 named", r)
	}
	r, _ = h.multi(a, compares(mNotExists("/g"), mExists("/f")), mCreate("/g", ""), mDelete("/f"))
	if !r.Succeeded || !h.exists("/g") || h.exists("/f") {
		t.Fatalf("compares against the state before the ops: %v", r)
	}
}

// TestMultiTogether: creates, writes and deletes applied together, each
// with its single call's Stat, events (in op order) and effects.
func TestMultiTogether(t *testing.T) {
	h := newHarness(t)
	a, w, b := h.session(), h.session(), h.session()
	h.mkdir(a, "/d")
	h.write(a, "/d/w", "w")
	h.write(a, "/d/old", "o")
	all := int32(chubby.EVENT_MASK_ALL)
	hd, hw, hold := h.watch(w, "/d", rd, all), h.watch(w, "/d/w", rd, all), h.watch(w, "/d/old", rd, all)
	h.ok(opAcquire(h.rw(b, "/d/old"), excl, false, 0))
	waiter := h.rw(w, "/d/old")
	h.ok(opAcquire(waiter, excl, true, 0))
	old := h.node("/d/old").instance
	h.ok(&fsm.Op{TrimEvents: &fsm.TrimEvents{Acks: []*fsm.EventAck{{Session: w, Acked: h.s.LastEvent(w)}}}})

	r, fx := h.multi(a, nil,
		mMkdir("/d/sub"), mCreate("/d/sub/f", "a"), mSet("/d/w", "b"),
		mDelete("/d/old"), mCreate("/d/old", "new"), mSetIf("/d/old", "newer", 1))

	if !r.Succeeded || len(r.Stats) != 6 {
		t.Fatalf("got %v", r)
	}
	st := r.Stats
	switch {
	case st[0].Path != "/d/sub" || st[0].Kind != chubby.NodeKind_DIRECTORY || st[0].Size != 0:
		t.Errorf("mkdir: %v (its Stat after it: still empty)", st[0])
	case st[1].Path != "/d/sub/f" || st[1].ContentGeneration != 1 || st[1].Size != 1:
		t.Errorf("create: %v", st[1])
	case st[2].Path != "/d/w" || st[2].ContentGeneration != 2:
		t.Errorf("write: %v", st[2])
	case st[3].Instance != old || st[3].Lock.Holders != 1 || st[3].Lock.Waiters != 1:
		t.Errorf("delete: %v, want the Stat before it, lock and all", st[3])
	case st[4].Instance == old || st[4].ContentGeneration != 1 || st[4].Lock.Holders != 0:
		t.Errorf("re-create: %v", st[4])
	case st[5].Instance != st[4].Instance || st[5].ContentGeneration != 2 || string(h.node("/d/old").content) != "newer":
		t.Errorf("compare-and-swap: %v", st[5])
	}
	if len(fx.Woken) != 1 || fx.Woken[0].Handle != waiter.Id || Code(fx.Woken[0].Err) != chubby.ErrorCode_HANDLE_INVALID {
		t.Errorf("woken %+v, want the waiter of the deleted lock with HANDLE_INVALID", fx.Woken)
	}
	if len(fx.Notified) != 1 || fx.Notified[0] != w {
		t.Errorf("notified %v, want [%d]", fx.Notified, w)
	}
	wantEvents(t, h.queued(w),
		fmt.Sprintf("2 CHILD_ADDED h%d /d child=sub", hd.Id),
		fmt.Sprintf("3 FILE_CONTENTS_MODIFIED h%d /d/w cgen=2", hw.Id),
		fmt.Sprintf("4 CHILD_MODIFIED h%d /d child=w cgen=2", hd.Id),
		fmt.Sprintf("5 HANDLE_INVALID h%d /d/old", hold.Id),
		fmt.Sprintf("6 CHILD_REMOVED h%d /d child=old", hd.Id),
		fmt.Sprintf("7 CHILD_ADDED h%d /d child=old", hd.Id),
		fmt.Sprintf("8 CHILD_MODIFIED h%d /d child=old cgen=2", hd.Id),
	)
}

// TestMultiDependentOps: later ops see the effects of earlier ones.
func TestMultiDependentOps(t *testing.T) {
	tests := []struct {
		name  string
		setup func(h *harness, a chubby.SessionID)
		ops   []*chubby.MultiOp
		check func(h *harness, r *chubby.MultiResponse) string
	}{
		{"mkdir, then create inside", nil, []*chubby.MultiOp{mMkdir("/n"), mCreate("/n/f", "x")}, func(h *harness, r *chubby.MultiResponse) string {
			return want(string(h.node("/n/f").content) == "x", "no /n/f")
		}},
		{"create, then write", nil, []*chubby.MultiOp{mCreate("/f", "1"), mSetIf("/f", "2", 1)}, func(h *harness, r *chubby.MultiResponse) string {
			return want(string(h.node("/f").content) == "2" && r.Stats[1].ContentGeneration == 2, "not written")
		}},
		{"create, then delete", nil, []*chubby.MultiOp{mCreate("/f", ""), mDelete("/f")}, func(h *harness, r *chubby.MultiResponse) string {
			return want(!h.exists("/f") && r.Stats[1].Instance == r.Stats[0].Instance, "still there, or another node deleted")
		}},
		{"delete, then create again", func(h *harness, a chubby.SessionID) { h.write(a, "/f", "old") }, []*chubby.MultiOp{mDelete("/f"), mCreate("/f", "new")},
			func(h *harness, r *chubby.MultiResponse) string {
				return want(r.Stats[1].Instance > r.Stats[0].Instance && string(h.node("/f").content) == "new", "not re-created")
			}},
		{"create in a directory, then delete it recursively", func(h *harness, a chubby.SessionID) { h.mkdir(a, "/d") },
			[]*chubby.MultiOp{mCreate("/d/f", ""), mDeleteAll("/d")}, func(h *harness, r *chubby.MultiResponse) string {
				return want(!h.exists("/d"), "/d still there")
			}},
		{"delete a tree, then build another in its place", func(h *harness, a chubby.SessionID) { h.write(a, "/d/x/y", "") },
			[]*chubby.MultiOp{mDeleteAll("/d"), mMkdir("/d"), mCreate("/d/f", "")}, func(h *harness, r *chubby.MultiResponse) string {
				return want(h.exists("/d/f") && !h.exists("/d/x"), "not rebuilt")
			}},
		{"a delete makes room under the node limit", func(h *harness, a chubby.SessionID) {
			h.write(a, "/f", "")
			h.s.limits.MaxNodes = h.s.nodes
		}, []*chubby.MultiOp{mDelete("/f"), mCreate("/g", "")}, func(h *harness, r *chubby.MultiResponse) string {
			return want(h.exists("/g"), "no /g")
		}},
		{"a write makes room under the content limit", func(h *harness, a chubby.SessionID) {
			h.write(a, "/f", "0123456789")
			h.s.limits.MaxTotalContentBytes = h.s.contentBytes
		}, []*chubby.MultiOp{mSet("/f", ""), mCreate("/g", "0123456789")}, func(h *harness, r *chubby.MultiResponse) string {
			return want(h.exists("/g"), "no /g")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			a := h.session()
			if tt.setup != nil {
				tt.setup(h, a)
			}
			r, _ := h.multi(a, nil, tt.ops...)
			if !r.Succeeded || len(r.Stats) != len(tt.ops) {
				t.Fatalf("got %v", r)
			}
			if msg := tt.check(h, r); msg != "" {
				t.Fatal(msg)
			}
		})
	}
}

// want returns msg unless ok.
func want(ok bool, msg string) string {
	if ok {
		return ""
	}
	return msg
}

// multiFixture is the cell of the refusal tests, with something of
// everything for the ops applied before a failing one to take back:
//
//	/acl/admin   anonymous, the admin (InitACL); the other nodes have no names
//	/g/w         a file watched by session w (every event), as is /g
//	/g/locked    held by session b, waited for by w
//	/g/tree/x    a tree (content "x")
//	/g/ea        an ephemeral file of a
//	/g/orph/o    a file in the ephemeral directory of an ended session
//	/t/x         a file, content generation 1 (content "x")
//	/t/full/y    a directory with an entry
//	/t/ro/z      a directory nobody may write in (its write ACL names a missing file)
//	/t/eph       an ephemeral directory of b
//
// A case may lower the limits. The clock is past the last change.
type multiFixture struct {
	h       *harness
	a, w, b chubby.SessionID
}

func newMultiFixture(t *testing.T) *multiFixture {
	h := newHarness(t)
	f := &multiFixture{h: h, a: h.session(), w: h.session(), b: h.session()}
	for _, p := range []string{"/g/tree/x", "/t/x", "/t/full/y", "/t/ro/z"} {
		h.write(f.a, p, "x")
	}
	h.write(f.a, "/g/w", "")
	h.ok(opCreateFile(&chubby.CreateFileRequest{Session: f.a, Path: "/g/ea", Ephemeral: ptr(true)}))
	c := h.session()
	h.ok(opMkdir(c, "/g/orph", false, true))
	h.write(c, "/g/orph/o", "")
	h.ok(opEnd(c, false))
	h.ok(opMkdir(f.b, "/t/eph", false, true))
	h.watch(f.w, "/g/w", rd, chubby.EVENT_MASK_ALL)
	h.watch(f.w, "/g", rd, chubby.EVENT_MASK_ALL)
	h.ok(opAcquire(h.rw(f.b, "/g/locked"), excl, false, 0))
	h.ok(opAcquire(h.rw(f.w, "/g/locked"), excl, true, 0))
	h.ok(opSetACL(h.open(f.a, "/t/ro", rd, chubby.CreateMode_OPEN_EXISTING), aclNamesOf("", "nobody", "")))
	h.ok(opInitACL(Anonymous))
	h.now += 100 // so that a modify time taken back shows
	return f
}

// goodOps succeed on the fixture, whatever op is put among them: they
// write (an ACL file too), create (ephemeral too) and delete (a lock with
// a waiter and watchers, an ephemeral file, the last entry of an orphaned
// directory, which goes with it), and never create in a directory of 4
// entries or more.
var goodOps = []*chubby.MultiOp{
	mSet("/acl/admin", "anonymous\nalice\n"), mSet("/g/w", "w2"), mDeleteAll("/g/tree"), mDelete("/g/ea"), mDelete("/g/orph/o"),
	mCreate("/g/new", "n"), mCreateEph("/g/e"), mDelete("/g/locked"), mMkdir("/g/newdir"),
}

// TestMultiRefusedChangesNothing: an op that cannot be applied, first,
// in the middle or last, refuses the whole command with its error naming
// its index, and the state is exactly as before (the harness compares the
// snapshots: no node, content, lock, event or counter changed) with no
// effects.
func TestMultiRefusedChangesNothing(t *testing.T) {
	big := strings.Repeat("b", int(chubby.MAX_CONTENT_BYTES)+1)
	tests := []struct {
		name   string
		code   chubby.ErrorCode
		bad    *chubby.MultiOp
		limits func(s *State)    // lowers the fixture's limits
		good   []*chubby.MultiOp // nil: goodOps
		msg    string
	}{
		{"create over a file", chubby.ErrorCode_EXISTS, mCreate("/t/x", ""), nil, nil, "/t/x exists and is a file"},
		{"mkdir over a directory", chubby.ErrorCode_EXISTS, mMkdir("/t/full"), nil, nil, "/t/full exists and is a directory"},
		{"create without its parent", chubby.ErrorCode_NOT_FOUND, mCreate("/t/nope/f", ""), nil, nil, "parent directory /t/nope does not exist"},
		{"write a missing file", chubby.ErrorCode_NOT_FOUND, mSet("/t/nope", "x"), nil, nil, "no node at /t/nope"},
		{"delete a missing node", chubby.ErrorCode_NOT_FOUND, mDelete("/t/full/nope"), nil, nil, "no node at /t/full/nope"},
		{"create under a file", chubby.ErrorCode_NOT_DIRECTORY, mCreate("/t/x/f", ""), nil, nil, "/t/x is a file"},
		{"delete a directory with entries", chubby.ErrorCode_NOT_EMPTY, mDelete("/t/full"), nil, nil, "directory /t/full has 1 entries"},
		{"write a directory", chubby.ErrorCode_IS_DIRECTORY, mSet("/t/full", "x"), nil, nil, "/t/full is a directory"},
		{"compare-and-swap on a stale generation", chubby.ErrorCode_GENERATION_MISMATCH, mSetIf("/t/x", "x", 99), nil, nil, "at content generation 1, not 99"},
		{"create where the ACL says nobody writes", chubby.ErrorCode_PERMISSION_DENIED, mCreate("/t/ro/f", ""), nil, nil, `lacks the write right on "/t/ro"`},
		{"delete where the ACL says nobody writes", chubby.ErrorCode_PERMISSION_DENIED, mDelete("/t/ro/z"), nil, nil, `lacks the write right on "/t/ro"`},
		{"the cell's node limit", chubby.ErrorCode_LIMIT_EXCEEDED, mCreate("/t/ro2", ""),
			func(s *State) { s.limits.MaxNodes = s.nodes },
			[]*chubby.MultiOp{mSet("/g/w", "w2"), mSet("/t/x", "x2"), mSetIf("/g/w", "w3", 2)}, "nodes, the limit is"},
		{"a directory's entry limit", chubby.ErrorCode_LIMIT_EXCEEDED, mCreate("/t/new", ""),
			func(s *State) { s.limits.MaxChildren = 4 }, nil, "directory /t has 4 entries, the limit is 4"},
		{"the cell's content limit", chubby.ErrorCode_LIMIT_EXCEEDED, mSet("/t/x", strings.Repeat("c", 50)),
			func(s *State) { s.limits.MaxTotalContentBytes = s.contentBytes + 10 }, nil, "content bytes, the limit is"},
		{"content over the file limit", chubby.ErrorCode_TOO_LARGE, mCreate("/g/big", big), nil, nil, "more than 262144"},
		{"the root deleted", chubby.ErrorCode_INVALID_ARGUMENT, mDelete("/"), nil, nil, "the root directory cannot be deleted"},
		{"a bad ACL file", chubby.ErrorCode_INVALID_ARGUMENT, mCreate("/acl/team", "bob smith\n"), nil, nil, "/acl/team is an ACL file"},
	}
	for _, tt := range tests {
		good := tt.good
		if good == nil {
			good = goodOps
		}
		for _, pos := range []int{0, len(good) / 2, len(good)} {
			t.Run(fmt.Sprintf("%s at %d", tt.name, pos), func(t *testing.T) {
				f := newMultiFixture(t)
				if tt.limits != nil {
					tt.limits(f.h.s)
				}
				ops := append(append(append([]*chubby.MultiOp{}, good[:pos]...), tt.bad), good[pos:]...)
				err := f.h.fail(tt.code, opMulti(f.a, nil, ops...))
				if prefix := fmt.Sprintf("op %d: ", pos); !strings.HasPrefix(err.Message, prefix) || !strings.Contains(err.Message, tt.msg) {
					t.Fatalf("message %q, want %q and %q", err.Message, prefix, tt.msg)
				}
				// Without the failing op, the others apply.
				f.h.multi(f.a, nil, good...)
			})
		}
	}
}

// TestMultiRefusedByEarlierOps: an op refused because of what an earlier
// op of the same Multi did; the earlier ones are taken back too.
func TestMultiRefusedByEarlierOps(t *testing.T) {
	tests := []struct {
		name   string
		code   chubby.ErrorCode
		limits func(s *State)
		ops    []*chubby.MultiOp
	}{
		{"created twice", chubby.ErrorCode_EXISTS, nil, []*chubby.MultiOp{mCreate("/a", ""), mCreate("/a", "")}},
		{"written after its delete", chubby.ErrorCode_NOT_FOUND, nil, []*chubby.MultiOp{mDelete("/t/x"), mSet("/t/x", "")}},
		{"created in a directory deleted before", chubby.ErrorCode_NOT_FOUND, nil, []*chubby.MultiOp{mDeleteAll("/g"), mCreate("/g/w2", "")}},
		{"swapped on the generation an earlier write moved", chubby.ErrorCode_GENERATION_MISMATCH, nil,
			[]*chubby.MultiOp{mSetIf("/t/x", "1", 1), mSetIf("/t/x", "2", 1)}},
		{"a directory filled before", chubby.ErrorCode_NOT_EMPTY, nil, []*chubby.MultiOp{mMkdir("/n"), mCreate("/n/f", ""), mDelete("/n")}},
		{"nodes created before", chubby.ErrorCode_LIMIT_EXCEEDED, func(s *State) { s.limits.MaxNodes = s.nodes + 2 },
			[]*chubby.MultiOp{mCreate("/a", ""), mCreate("/b", ""), mCreate("/c", "")}},
		{"entries created before", chubby.ErrorCode_LIMIT_EXCEEDED, func(s *State) { s.limits.MaxChildren = 4 },
			[]*chubby.MultiOp{mDelete("/t/x"), mCreate("/t/n1", ""), mCreate("/t/n2", "")}},
		{"content written before", chubby.ErrorCode_LIMIT_EXCEEDED, func(s *State) { s.limits.MaxTotalContentBytes = s.contentBytes + 4 },
			[]*chubby.MultiOp{mCreate("/a", "abc"), mSet("/t/x", "xyz")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newMultiFixture(t)
			if tt.limits != nil {
				tt.limits(f.h.s)
			}
			err := f.h.fail(tt.code, opMulti(f.a, nil, tt.ops...))
			if last := fmt.Sprintf("op %d: ", len(tt.ops)-1); !strings.HasPrefix(err.Message, last) {
				t.Fatalf("message %q does not name the last op", err.Message)
			}
		})
	}
}

// TestMultiRightsFromEarlierOps: an op is checked with the ACL files as
// the earlier ops left them.
func TestMultiRightsFromEarlierOps(t *testing.T) {
	f := newACLFixture(t)
	root := f.sess["root"]
	f.h.fail(chubby.ErrorCode_PERMISSION_DENIED, opMulti(root, nil, mCreate("/team/new", "")))
	// Root takes itself out of the admins: it may no longer write the ACL files.
	err := f.h.fail(chubby.ErrorCode_PERMISSION_DENIED, opMulti(root, nil, mSet("/acl/admin", "alice\n"), mSet("/acl/writers", "root\n")))
	wantDenied(t, asError(err), "root", "/acl/writers", WriteRight)
	// Root lists itself among the writers, then writes.
	r, _ := f.h.multi(root, nil, mSet("/acl/writers", "alice\nroot\n"), mCreate("/team/new", ""))
	if !r.Succeeded || !f.h.exists("/team/new") {
		t.Fatalf("got %v", r)
	}
}

// TestMultiArguments: malformed requests are refused before anything is
// looked at, naming the compare or op.
func TestMultiArguments(t *testing.T) {
	h := newHarness(t)
	a := h.session()
	ops := func(n int, op *chubby.MultiOp) []*chubby.MultiOp {
		out := make([]*chubby.MultiOp, n)
		for i := range out {
			out[i] = op
		}
		return out
	}
	many := make([]*chubby.Compare, chubby.MAX_MULTI_COMPARES+1)
	for i := range many {
		many[i] = mExists("/")
	}
	quarter := strings.Repeat("q", int(chubby.MAX_CONTENT_BYTES))
	tests := []struct {
		name string
		cs   []*chubby.Compare
		ops  []*chubby.MultiOp
		code chubby.ErrorCode
		msg  string
	}{
		{"no op", nil, nil, chubby.ErrorCode_INVALID_ARGUMENT, "0 ops, want 1..64"},
		{"too many ops", nil, ops(65, mCreate("/x", "")), chubby.ErrorCode_INVALID_ARGUMENT, "65 ops, want 1..64"},
		{"too many compares", many, ops(1, mCreate("/x", "")), chubby.ErrorCode_INVALID_ARGUMENT, "65 compares, at most 64"},
		{"a missing compare", compares(mExists("/"), nil), ops(1, mCreate("/x", "")), chubby.ErrorCode_INVALID_ARGUMENT, "compare 1: missing"},
		{"a compare of no kind", compares(&chubby.Compare{Path: "/"}), ops(1, mCreate("/x", "")), chubby.ErrorCode_INVALID_ARGUMENT, "compare 0: kind 0"},
		{"a compare of an unknown kind", compares(&chubby.Compare{Path: "/", Kind: 5}), ops(1, mCreate("/x", "")), chubby.ErrorCode_INVALID_ARGUMENT, "compare 0: kind 5"},
		{"a compare of a bad path", compares(mExists("/a/")), ops(1, mCreate("/x", "")), chubby.ErrorCode_INVALID_ARGUMENT, "compare 0: path"},
		{"a generation compare without a value", compares(&chubby.Compare{Path: "/", Kind: chubby.CompareKind_CONTENT_GENERATION}), ops(1, mCreate("/x", "")),
			chubby.ErrorCode_INVALID_ARGUMENT, "compare 0: CONTENT_GENERATION needs a value"},
		{"an instance compare without a value", compares(&chubby.Compare{Path: "/", Kind: chubby.CompareKind_INSTANCE}), ops(1, mCreate("/x", "")),
			chubby.ErrorCode_INVALID_ARGUMENT, "compare 0: INSTANCE needs a value"},
		{"an existence compare with a value", compares(&chubby.Compare{Path: "/", Kind: chubby.CompareKind_NOT_EXISTS, Value: ptr(int64(1))}), ops(1, mCreate("/x", "")),
			chubby.ErrorCode_INVALID_ARGUMENT, "compare 0: NOT_EXISTS takes no value"},
		{"a missing op", nil, []*chubby.MultiOp{mCreate("/x", ""), nil}, chubby.ErrorCode_INVALID_ARGUMENT, "op 1: missing"},
		{"an op of no kind", nil, ops(1, &chubby.MultiOp{Path: "/x"}), chubby.ErrorCode_INVALID_ARGUMENT, "op 0: kind 0"},
		{"an op of a bad path", nil, ops(1, mCreate("x", "")), chubby.ErrorCode_INVALID_ARGUMENT, "op 0: path \"x\" is not absolute"},
		{"directory on a write", nil, ops(1, &chubby.MultiOp{Kind: chubby.MultiOpKind_SET_CONTENTS, Path: "/x", Directory: ptr(false)}),
			chubby.ErrorCode_INVALID_ARGUMENT, "op 0: directory does not apply to SET_CONTENTS"},
		{"ephemeral on a delete", nil, ops(1, &chubby.MultiOp{Kind: chubby.MultiOpKind_DELETE, Path: "/x", Ephemeral: ptr(true)}),
			chubby.ErrorCode_INVALID_ARGUMENT, "op 0: ephemeral does not apply to DELETE"},
		{"recursive on a create", nil, ops(1, &chubby.MultiOp{Kind: chubby.MultiOpKind_CREATE, Path: "/x", Recursive: ptr(true)}),
			chubby.ErrorCode_INVALID_ARGUMENT, "op 0: recursive does not apply to CREATE"},
		{"expected_generation on a create", nil, ops(1, &chubby.MultiOp{Kind: chubby.MultiOpKind_CREATE, Path: "/x", ExpectedGeneration: ptr(int64(1))}),
			chubby.ErrorCode_INVALID_ARGUMENT, "op 0: expected_generation does not apply to CREATE"},
		{"content on a delete", nil, ops(1, &chubby.MultiOp{Kind: chubby.MultiOpKind_DELETE, Path: "/x", Content: []byte("c")}),
			chubby.ErrorCode_INVALID_ARGUMENT, "op 0: content does not apply to DELETE"},
		{"content on a directory", nil, ops(1, &chubby.MultiOp{Kind: chubby.MultiOpKind_CREATE, Path: "/x", Directory: ptr(true), Content: []byte("c")}),
			chubby.ErrorCode_INVALID_ARGUMENT, "op 0: content does not apply to CREATE of a directory"},
		{"content over the file limit", nil, []*chubby.MultiOp{mCreate("/x", ""), mSet("/x", quarter+"q")}, chubby.ErrorCode_TOO_LARGE, "op 1: content is 262145 bytes"},
		{"contents over the Multi limit", nil, ops(5, mSet("/x", quarter)), chubby.ErrorCode_TOO_LARGE, "1310720 bytes together, more than 1048576"},
		{"a bad ACL file written", nil, ops(1, mSet("/acl/x", "not valid")), chubby.ErrorCode_INVALID_ARGUMENT, "op 0: /acl/x is an ACL file"},
		{"the root deleted", nil, ops(1, mDeleteAll("/")), chubby.ErrorCode_INVALID_ARGUMENT, "op 0: the root directory cannot be deleted"},
		{"arguments before compares", compares(mExists("/nope")), ops(1, mCreate("x", "")), chubby.ErrorCode_INVALID_ARGUMENT, "op 0: path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.t = t
			err := h.fail(tt.code, opMulti(a, tt.cs, tt.ops...))
			if !strings.Contains(err.Message, tt.msg) {
				t.Fatalf("message %q does not say %q", err.Message, tt.msg)
			}
		})
	}
}

// TestMultiFaultOrder: arguments, session, the compares' rights, the
// compares, the ops.
func TestMultiFaultOrder(t *testing.T) {
	h := newHarness(t)
	a, gone := h.session(), h.session()
	h.write(a, "/f", "")
	h.ok(opEnd(gone, false))
	h.fail(chubby.ErrorCode_INVALID_ARGUMENT, opMulti(gone, nil, mDelete("/")))
	h.fail(chubby.ErrorCode_SESSION_EXPIRED, opMulti(gone, nil, mCreate("/g", "")))
	h.fail(chubby.ErrorCode_SESSION_EXPIRED, opMulti(99, nil, mCreate("/g", "")))
	// A compare that does not hold is the answer, whatever the ops would do.
	if r, _ := h.multi(a, compares(mNotExists("/f")), mCreate("/f", "")); r.Succeeded || r.GetFailedCompare() != 0 {
		t.Fatalf("got %v, want compare 0 named before the op's EXISTS", r)
	}
	// The command's session must be the one the Multi names.
	res, _ := h.cmd(&fsm.Command{Session: &gone, Op: opMulti(a, nil, mCreate("/g", ""))})
	if Code(asError(res.Err)) != chubby.ErrorCode_SESSION_EXPIRED {
		t.Fatalf("an ended command session: %v", res.Err)
	}
	b := h.session()
	res, _ = h.cmd(&fsm.Command{Session: &b, Op: opMulti(a, nil, mCreate("/g", ""))})
	if Code(asError(res.Err)) != chubby.ErrorCode_INVALID_ARGUMENT || !strings.Contains(res.Err.Message, "names session") {
		t.Fatalf("another session's Multi: %v", res.Err)
	}
}

// TestMultiExactlyOnce: a sequenced Multi is applied once; a retry gets
// the first answer (success, refusal or failed compare) and applies
// nothing.
func TestMultiExactlyOnce(t *testing.T) {
	h := newHarness(t)
	a := h.session()
	send := func(seq int64, op *fsm.Op) *fsm.Result_ {
		h.now += 10
		res, _ := h.cmd(&fsm.Command{Session: &a, Seq: &seq, Op: op})
		return res
	}
	retry := func(seq int64, op *fsm.Op, first *fsm.Result_) {
		t.Helper()
		h.now += 10
		want := h.ticked()
		again, _ := h.cmd(&fsm.Command{Session: &a, Seq: &seq, Op: op})
		if !bytes.Equal(EncodeResult(again), EncodeResult(first)) {
			t.Fatalf("retry of %d: %v, first %v", seq, again, first)
		}
		if !bytes.Equal(h.s.Snapshot(), want) {
			t.Fatalf("retry of %d changed the state", seq)
		}
	}
	create := opMulti(a, nil, mCreate("/m", "x"), mCreate("/n", ""))
	first := send(1, create)
	if first.Multi == nil || !first.Multi.Succeeded {
		t.Fatalf("first: %v", first)
	}
	retry(1, create, first) // applied again, it would be EXISTS

	refused := opMulti(a, nil, mCreate("/o", ""), mCreate("/m", ""))
	first = send(2, refused)
	if Code(asError(first.Err)) != chubby.ErrorCode_EXISTS {
		t.Fatalf("first: %v", first)
	}
	h.ok(opDelete(h.rw(a, "/m"), false))
	retry(2, refused, first) // applied again, it would succeed now
	if h.exists("/o") || h.exists("/m") {
		t.Fatal("the retry of a refused Multi applied")
	}

	guarded := opMulti(a, compares(mExists("/p")), mSet("/p", "once"))
	first = send(3, guarded)
	if first.Multi == nil || first.Multi.Succeeded || first.Multi.GetFailedCompare() != 0 {
		t.Fatalf("first: %v", first)
	}
	h.write(a, "/p", "")
	retry(3, guarded, first) // its compare would hold now
	if len(h.node("/p").content) != 0 {
		t.Fatal("the retry of a Multi whose compare failed applied")
	}
}

// TestMultiEphemeral: ephemeral creates belong to the request's session
// and end with it, as CreateFile's and Mkdir's do.
func TestMultiEphemeral(t *testing.T) {
	h := newHarness(t)
	a, b := h.session(), h.session()
	r, _ := h.multi(a, nil, mMkdirEph("/e"), mCreateEph("/e/f"), mCreate("/e/p", ""), mCreateEph("/top"))
	for i, eph := range []bool{true, true, false, true} {
		if st := r.Stats[i]; st.Ephemeral != eph || eph && st.EphemeralOwner != a {
			t.Fatalf("op %d: %v", i, st)
		}
	}
	h.ok(opEnd(a, false))
	if h.exists("/e/f") || h.exists("/top") || !h.exists("/e/p") {
		t.Fatal("the session's ephemeral files did not end with it")
	}
	// The orphaned directory goes with its last entry.
	h.multi(b, nil, mDelete("/e/p"))
	if h.exists("/e") {
		t.Fatal("the orphaned ephemeral directory outlived its last entry")
	}
}
