package fs

import (
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
)

func TestSequentialNames(t *testing.T) {
	h := newHarness(t)
	sess := h.session()
	h.mkdir(sess, "/q")
	seq := func(path string, create chubby.CreateMode) string {
		t.Helper()
		res, _ := h.ok(opOpen(&chubby.OpenRequest{Session: sess, Path: path, Mode: rdwr, Create: create, Sequential: ptr(true)}))
		if res.Handle.Path != res.Stat.Path || !res.GetCreated() {
			t.Fatalf("sequential open result %v", res)
		}
		return res.Stat.Path
	}
	cf := func(path string, parents bool) string {
		t.Helper()
		res, _ := h.ok(opCreateFile(&chubby.CreateFileRequest{Session: sess, Path: path, Sequential: ptr(true), MakeParents: &parents}))
		return res.Stat.Path
	}
	got := []string{
		seq("/q/lock-", chubby.CreateMode_CREATE_NEW),
		seq("/q/lock-", chubby.CreateMode_OPEN_OR_CREATE), // sequential always creates
		cf("/q/other-", false),                            // one counter per parent, whatever the base
		cf("/r/s/n", true),                                // a new parent starts at 0
		cf("/r/s/n", true),
	}
	want := []string{"/q/lock-0000000000", "/q/lock-0000000001", "/q/other-0000000002", "/r/s/n0000000000", "/r/s/n0000000001"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("sequential names\n got %v\nwant %v", got, want)
	}
	// Never reused after deletes.
	h.ok(opDelete(h.rw(sess, "/q/other-0000000002"), false))
	if p := cf("/q/x", false); p != "/q/x0000000003" {
		t.Fatalf("after delete: %s", p)
	}
	// A name taken by hand is skipped.
	h.write(sess, "/q/lock-0000000004", "")
	h.write(sess, "/q/lock-0000000005", "")
	if p := cf("/q/lock-", false); p != "/q/lock-0000000006" {
		t.Fatalf("skip taken: %s", p)
	}
	// Per parent: the root has its own counter.
	if p := cf("/top", false); p != "/top0000000000" {
		t.Fatalf("root counter: %s", p)
	}
	// Length: 245 bytes of base fit, 246 do not.
	if p := cf("/q/"+strings.Repeat("b", 245), false); len(p) != 3+255 {
		t.Fatalf("long name %d", len(p))
	}
	h.fail(chubby.ErrorCode_INVALID_ARGUMENT, opCreateFile(&chubby.CreateFileRequest{Session: sess, Path: "/q/" + strings.Repeat("b", 246), Sequential: ptr(true)}))
	h.fail(chubby.ErrorCode_INVALID_ARGUMENT, opCreateFile(&chubby.CreateFileRequest{Session: sess, Path: "/", Sequential: ptr(true)}))
	h.fail(chubby.ErrorCode_NOT_FOUND, opCreateFile(&chubby.CreateFileRequest{Session: sess, Path: "/nope/x", Sequential: ptr(true)}))
	// An exhausted counter is LIMIT_EXCEEDED.
	q := h.s.root.children["q"]
	q.nextSeq = maxSequence
	if p := cf("/q/end", false); p != "/q/end9999999999" {
		t.Fatalf("last counter: %s", p)
	}
	h.fail(chubby.ErrorCode_LIMIT_EXCEEDED, opCreateFile(&chubby.CreateFileRequest{Session: sess, Path: "/q/end", Sequential: ptr(true)}))
}

func TestEphemeralFiles(t *testing.T) {
	h := newHarness(t)
	owner, other := h.session(), h.session()
	h.ok(opCreateFile(&chubby.CreateFileRequest{Session: owner, Path: "/svc/a", Ephemeral: ptr(true), MakeParents: ptr(true)}))
	res, _ := h.ok(opOpen(&chubby.OpenRequest{Session: owner, Path: "/svc/b", Mode: rdwr, Create: chubby.CreateMode_CREATE_NEW, Ephemeral: ptr(true)}))
	ownerHandle := res.Handle
	h.write(owner, "/svc/perm", "")
	// Another session holds a handle, a lock and a waiter on an ephemeral file.
	oh := h.rw(other, "/svc/a")
	ow := h.open(other, "/svc/a", rd, chubby.CreateMode_OPEN_EXISTING)
	h.ok(opAcquire(oh, excl, false, 0))
	if r, _ := h.ok(opAcquire(ow, shared, true, 0)); !r.GetWaiting() {
		t.Fatal("not waiting")
	}
	_, fx := h.ok(opEnd(owner, false))
	if h.exists("/svc/a") || h.exists("/svc/b") || !h.exists("/svc/perm") || !h.exists("/svc") {
		t.Fatal("wrong nodes deleted")
	}
	if len(fx.Woken) != 1 || fx.Woken[0].Handle != ow.Id || fx.Woken[0].Err.GetCode() != chubby.ErrorCode_HANDLE_INVALID {
		t.Fatalf("woken %+v", fx.Woken)
	}
	h.fail(chubby.ErrorCode_HANDLE_INVALID, opRelease(oh))
	h.fail(chubby.ErrorCode_SESSION_EXPIRED, opClose(ownerHandle))
	h.ok(opClose(oh))
	if c := h.s.Counts(); c.LocksHeld != 0 || c.Waiters != 0 || c.Handles != 1 {
		t.Fatalf("counts %+v", c)
	}
}

func TestEphemeralDirectories(t *testing.T) {
	h := newHarness(t)
	owner, other := h.session(), h.session()
	// Empty while the owner lives: kept.
	h.ok(opMkdir(owner, "/e", false, true))
	h.ok(opMkdir(owner, "/e2", false, true))
	h.ok(opMkdir(owner, "/e3", false, true))
	h.write(owner, "/e/own", "")
	h.ok(opCreateFile(&chubby.CreateFileRequest{Session: owner, Path: "/e/eph", Ephemeral: ptr(true)}))
	h.write(other, "/e2/keep", "")
	h.ok(opMkdir(owner, "/e3/sub", false, true))
	h.ok(opCreateFile(&chubby.CreateFileRequest{Session: owner, Path: "/e3/sub/f", Ephemeral: ptr(true)}))
	h.ok(opDelete(h.rw(owner, "/e/own"), false))
	if !h.exists("/e") {
		t.Fatal("empty ephemeral directory of a live session was deleted")
	}
	h.ok(opEnd(owner, true))
	switch {
	case h.exists("/e"):
		t.Fatal("/e: its ephemeral file went and it became empty: should be gone")
	case !h.exists("/e2/keep"):
		t.Fatal("/e2 holds another session's file: should stay")
	case h.exists("/e3"):
		t.Fatal("/e3 and /e3/sub: all ephemeral, should be gone")
	}
	// The orphan goes when it becomes empty.
	keep := h.rw(other, "/e2/keep")
	h.write(other, "/e2/more", "")
	h.ok(opDelete(keep, false))
	if !h.exists("/e2") {
		t.Fatal("/e2 is not empty yet")
	}
	h.ok(opDelete(h.rw(other, "/e2/more"), false))
	if h.exists("/e2") {
		t.Fatal("empty orphaned ephemeral directory survived")
	}
	if c := h.s.Counts(); c.Nodes != 1 {
		t.Fatalf("nodes %d", c.Nodes)
	}
	// Cascade: nested orphans go together.
	o2 := h.session()
	h.ok(opMkdir(o2, "/x", false, true))
	h.ok(opMkdir(o2, "/x/y", false, true))
	h.write(other, "/x/y/z", "")
	h.ok(opEnd(o2, true))
	if !h.exists("/x/y/z") {
		t.Fatal("permanent file lost")
	}
	h.ok(opDelete(h.rw(other, "/x/y/z"), false))
	if h.exists("/x") {
		t.Fatal("cascade of empty orphans failed")
	}
}

func TestLimits(t *testing.T) {
	l := Limits{MaxNodes: 4, MaxSessions: 2, MaxHandles: 3, MaxHandlesPerSession: 2, MaxWaitersPerLock: 1, MaxChildren: 2, MaxContentBytes: 8, MaxTotalContentBytes: 12, MaxSavedAnswersPerSession: 1, MaxEventsPerSession: 1, MaxTotalEvents: 1}
	h := newHarnessLimits(t, l)
	a, b := h.session(), h.session()
	h.fail(chubby.ErrorCode_LIMIT_EXCEEDED, opCreateSession("c"))

	h.write(a, "/f1", "12345678")
	h.fail(chubby.ErrorCode_TOO_LARGE, opCreateFile(&chubby.CreateFileRequest{Session: a, Path: "/f2", Content: []byte("123456789")}))
	h.fail(chubby.ErrorCode_LIMIT_EXCEEDED, opCreateFile(&chubby.CreateFileRequest{Session: a, Path: "/f2", Content: []byte("12345")}))
	h.write(a, "/f2", "1234")
	h.fail(chubby.ErrorCode_LIMIT_EXCEEDED, opMkdir(a, "/d", false, false)) // MaxChildren of /
	h.fail(chubby.ErrorCode_LIMIT_EXCEEDED, opCreateFile(&chubby.CreateFileRequest{Session: a, Path: "/f3"}))

	h1 := h.open(a, "/f1", rd, chubby.CreateMode_OPEN_EXISTING)
	hx := h.open(a, "/f1", rd, chubby.CreateMode_OPEN_EXISTING)
	h.fail(chubby.ErrorCode_LIMIT_EXCEEDED, opOpen(&chubby.OpenRequest{Session: a, Path: "/f1", Mode: rd, Create: chubby.CreateMode_OPEN_EXISTING}))
	h2 := h.open(b, "/f1", rd, chubby.CreateMode_OPEN_EXISTING)
	h.fail(chubby.ErrorCode_LIMIT_EXCEEDED, opOpen(&chubby.OpenRequest{Session: b, Path: "/f1", Mode: rd, Create: chubby.CreateMode_OPEN_EXISTING})) // MaxHandles

	// MaxWaitersPerLock: h1 holds, h2 waits, nobody else may queue.
	h.ok(opAcquire(h1, excl, false, 0))
	h.ok(opAcquire(h2, excl, true, 0))
	h.ok(opClose(h1))
	h3 := h.open(a, "/f1", rd, chubby.CreateMode_OPEN_EXISTING)
	h.fail(chubby.ErrorCode_LOCK_HELD, opAcquire(h3, shared, false, 0))
	h.ok(opRelease(h2))
	h.ok(opAcquire(h2, excl, false, 0))
	h.ok(opAcquire(h3, shared, true, 0))
	h.ok(opCancel(h3))
	h.ok(opAcquire(h3, shared, true, 0))
	h.ok(opClose(h2)) // h3 granted
	h.ok(opClose(h3))
	h.ok(opClose(hx))
	h4 := h.open(a, "/f1", rd, chubby.CreateMode_OPEN_EXISTING)
	h5 := h.open(a, "/f1", rd, chubby.CreateMode_OPEN_EXISTING)
	h6 := h.open(b, "/f1", rd, chubby.CreateMode_OPEN_EXISTING)
	h.ok(opAcquire(h4, excl, false, 0))
	h.ok(opAcquire(h5, excl, true, 0))
	h.fail(chubby.ErrorCode_LIMIT_EXCEEDED, opAcquire(h6, shared, true, 0))
	h.ok(opClose(h4))
	h.ok(opClose(h5))
	h.ok(opClose(h6))

	// MaxNodes: root + 2 files + 1 more.
	h.ok(opDelete(h.rw(a, "/f2"), false))
	h.fail(chubby.ErrorCode_LIMIT_EXCEEDED, opMkdir(a, "/d/x/y", true, false)) // needs 3
	h.ok(opMkdir(a, "/d", false, false))
	h.ok(opMkdir(a, "/d/e", false, false))
	h.fail(chubby.ErrorCode_LIMIT_EXCEEDED, opMkdir(a, "/d/e/f", false, false))

	if err := (Limits{}).Validate(); err == nil {
		t.Fatal("zero limits valid")
	}
	bad := DefaultLimits()
	bad.MaxContentBytes = int(chubby.MAX_CONTENT_BYTES) + 1
	if bad.Validate() == nil {
		t.Fatal("MaxContentBytes above the protocol limit accepted")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("New with invalid limits did not panic")
		}
	}()
	New(Limits{})
}
