package fs

import (
	"bytes"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

func TestSessionCommands(t *testing.T) {
	h := newHarness(t)
	a, b := h.session(), h.session()
	if a != 1 || b != 2 {
		t.Fatalf("session ids %d %d, want 1 2", a, b)
	}
	h.fail(chubby.ErrorCode_INVALID_ARGUMENT, opCreateSession(strings.Repeat("n", 257)))
	h.ok(opCreateSession(strings.Repeat("n", 256)))
	if got := h.s.Sessions(); len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 { // the refused create used no id
		t.Fatalf("Sessions() = %v", got)
	}
	_, fx := h.ok(opEnd(a, false))
	if len(fx.EndedSessions) != 1 || fx.EndedSessions[0] != a {
		t.Fatalf("EndedSessions %v", fx.EndedSessions)
	}
	if h.s.SessionExists(a) || !h.s.SessionExists(b) {
		t.Fatal("SessionExists wrong")
	}
	h.fail(chubby.ErrorCode_SESSION_EXPIRED, opEnd(a, true))
	h.fail(chubby.ErrorCode_SESSION_EXPIRED, opEnd(99, true))
	h.fail(chubby.ErrorCode_SESSION_EXPIRED, opOpen(&chubby.OpenRequest{Session: a, Path: "/x", Mode: rd, Create: chubby.CreateMode_OPEN_OR_CREATE}))
	h.fail(chubby.ErrorCode_SESSION_EXPIRED, opMkdir(a, "/d", false, false))
	h.fail(chubby.ErrorCode_SESSION_EXPIRED, opCreateFile(&chubby.CreateFileRequest{Session: a, Path: "/f"}))
	// A new session never reuses an ended id.
	if c := h.session(); c != 4 {
		t.Fatalf("new session id %d, want 4", c)
	}
}

func TestCommandValidation(t *testing.T) {
	h := newHarness(t)
	sess := h.session()
	tests := []struct {
		name string
		cmd  *fsm.Command
		code chubby.ErrorCode
	}{
		{"nil op", &fsm.Command{}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"empty op", &fsm.Command{Op: &fsm.Op{}}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"two ops", &fsm.Command{Op: &fsm.Op{Tick: &fsm.Tick{}, CreateSession: &chubby.CreateSessionRequest{}}}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"seq without session", &fsm.Command{Seq: ptr(int64(1)), Op: opTick()}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"session on tick", &fsm.Command{Session: &sess, Op: opTick()}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"session on create", &fsm.Command{Session: &sess, Op: opCreateSession("x")}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"unknown command session", &fsm.Command{Session: ptr(chubby.SessionID(77)), Op: opMkdir(77, "/d", false, false)}, chubby.ErrorCode_SESSION_EXPIRED},
		{"session mismatch", &fsm.Command{Session: &sess, Op: opMkdir(sess+1, "/d", false, false)}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"zero seq", &fsm.Command{Session: &sess, Seq: ptr(int64(0)), Op: opMkdir(sess, "/d", false, false)}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"floor without seq", &fsm.Command{Session: &sess, SeqFloor: ptr(int64(1)), Op: opMkdir(sess, "/d", false, false)}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"floor without session", &fsm.Command{SeqFloor: ptr(int64(1)), Op: opMkdir(sess, "/d", false, false)}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"zero floor", &fsm.Command{Session: &sess, Seq: ptr(int64(1)), SeqFloor: ptr(int64(0)), Op: opMkdir(sess, "/d", false, false)}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"floor above seq", &fsm.Command{Session: &sess, Seq: ptr(int64(1)), SeqFloor: ptr(int64(2)), Op: opMkdir(sess, "/d", false, false)}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"nil handle", &fsm.Command{Op: &fsm.Op{Release: &chubby.HandleRequest{}}}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"nil close handle", &fsm.Command{Op: &fsm.Op{Close: &chubby.CloseRequest{}}}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"nil acquire handle", &fsm.Command{Op: opAcquire(nil, excl, false, 0)}, chubby.ErrorCode_INVALID_ARGUMENT},
	}
	for _, tt := range tests {
		res, fx := h.cmd(tt.cmd)
		if res.Err == nil || res.Err.Code != tt.code || len(fx.Woken) > 0 {
			t.Errorf("%s: got %v, want %v", tt.name, res.Err, tt.code)
		}
	}
	if res, _ := h.s.Apply(nil); res.Err.GetCode() != chubby.ErrorCode_INVALID_ARGUMENT {
		t.Errorf("nil command: %v", res.Err)
	}
	before := h.s.Snapshot()
	for _, tm := range []int64{-1, MaxTimeMs + 1} {
		if res, _ := h.s.Apply(&fsm.Command{TimeMs: tm, Op: opTick()}); res.Err.GetCode() != chubby.ErrorCode_INVALID_ARGUMENT {
			t.Errorf("time %d: %v", tm, res.Err)
		}
	}
	if !bytes.Equal(before, h.s.Snapshot()) {
		t.Error("a command with a bad time changed the state")
	}
}

func TestOpen(t *testing.T) {
	h := newHarness(t)
	sess := h.session()
	h.write(sess, "/dir/file", "x")
	req := func(path string, mode chubby.OpenMode, create chubby.CreateMode) *chubby.OpenRequest {
		return &chubby.OpenRequest{Session: sess, Path: path, Mode: mode, Create: create}
	}
	tests := []struct {
		name    string
		req     *chubby.OpenRequest
		code    chubby.ErrorCode // 0: success
		created bool
	}{
		{"existing file", req("/dir/file", rd, chubby.CreateMode_OPEN_EXISTING), 0, false},
		{"existing dir", req("/dir", rd, chubby.CreateMode_OPEN_EXISTING), 0, false},
		{"root", req("/", rdwr, chubby.CreateMode_OPEN_OR_CREATE), 0, false},
		{"missing", req("/dir/nope", rd, chubby.CreateMode_OPEN_EXISTING), chubby.ErrorCode_NOT_FOUND, false},
		{"missing parent", req("/nope/x", rd, chubby.CreateMode_OPEN_EXISTING), chubby.ErrorCode_NOT_FOUND, false},
		{"through a file", req("/dir/file/x", rd, chubby.CreateMode_OPEN_EXISTING), chubby.ErrorCode_NOT_DIRECTORY, false},
		{"create through a file", req("/dir/file/x", rd, chubby.CreateMode_OPEN_OR_CREATE), chubby.ErrorCode_NOT_DIRECTORY, false},
		{"create missing parent", req("/nope/x", rd, chubby.CreateMode_OPEN_OR_CREATE), chubby.ErrorCode_NOT_FOUND, false},
		{"open or create existing", req("/dir/file", rdwr, chubby.CreateMode_OPEN_OR_CREATE), 0, false},
		{"open or create new", req("/dir/new1", rdwr, chubby.CreateMode_OPEN_OR_CREATE), 0, true},
		{"create new exists", req("/dir/file", rdwr, chubby.CreateMode_CREATE_NEW), chubby.ErrorCode_EXISTS, false},
		{"create new root", req("/", rdwr, chubby.CreateMode_CREATE_NEW), chubby.ErrorCode_EXISTS, false},
		{"create new", req("/dir/new2", rd, chubby.CreateMode_CREATE_NEW), 0, true},
		{"bad path", req("dir", rd, chubby.CreateMode_OPEN_EXISTING), chubby.ErrorCode_INVALID_ARGUMENT, false},
		{"bad mode", req("/dir", 0, chubby.CreateMode_OPEN_EXISTING), chubby.ErrorCode_INVALID_ARGUMENT, false},
		{"bad create", req("/dir", rd, 9), chubby.ErrorCode_INVALID_ARGUMENT, false},
		{"ephemeral without create", &chubby.OpenRequest{Session: sess, Path: "/dir", Mode: rd, Create: chubby.CreateMode_OPEN_EXISTING, Ephemeral: ptr(true)}, chubby.ErrorCode_INVALID_ARGUMENT, false},
		{"sequential without create", &chubby.OpenRequest{Session: sess, Path: "/dir", Mode: rd, Create: chubby.CreateMode_OPEN_EXISTING, Sequential: ptr(false)}, chubby.ErrorCode_INVALID_ARGUMENT, false},
		{"content without create", &chubby.OpenRequest{Session: sess, Path: "/dir", Mode: rd, Create: chubby.CreateMode_OPEN_EXISTING, InitialContent: []byte{}}, chubby.ErrorCode_INVALID_ARGUMENT, false},
		{"content too large", &chubby.OpenRequest{Session: sess, Path: "/dir/big", Mode: rd, Create: chubby.CreateMode_CREATE_NEW, InitialContent: make([]byte, chubby.MAX_CONTENT_BYTES+1)}, chubby.ErrorCode_TOO_LARGE, false},
		{"unknown session", &chubby.OpenRequest{Session: 42, Path: "/dir", Mode: rd, Create: chubby.CreateMode_OPEN_EXISTING}, chubby.ErrorCode_SESSION_EXPIRED, false},
	}
	for _, tt := range tests {
		res, _ := h.op(opOpen(tt.req))
		if tt.code != 0 {
			if res.Err == nil || res.Err.Code != tt.code {
				t.Errorf("%s: got %v, want %v", tt.name, res.Err, tt.code)
			}
			continue
		}
		if res.Err != nil {
			t.Errorf("%s: unexpected %v", tt.name, res.Err)
			continue
		}
		if res.GetCreated() != tt.created || res.Handle.Path != tt.req.Path || res.Stat.Path != tt.req.Path ||
			res.Handle.Session != sess || res.Handle.Instance != res.Stat.Instance {
			t.Errorf("%s: result %v", tt.name, res)
		}
	}
	// Initial content and ephemeral on create.
	res, _ := h.ok(opOpen(&chubby.OpenRequest{Session: sess, Path: "/dir/init", Mode: rdwr, Create: chubby.CreateMode_CREATE_NEW, InitialContent: []byte("hello"), Ephemeral: ptr(true)}))
	data, st, err := h.s.GetContentsAndStat(res.Handle)
	if err != nil || string(data) != "hello" || !st.Ephemeral || st.EphemeralOwner != sess || st.Size != 5 {
		t.Fatalf("init content: %q %v %v", data, st, err)
	}
	// OPEN_OR_CREATE of an existing node ignores the creation flags.
	res, _ = h.ok(opOpen(&chubby.OpenRequest{Session: sess, Path: "/dir/file", Mode: rdwr, Create: chubby.CreateMode_OPEN_OR_CREATE, InitialContent: []byte("ignored"), Ephemeral: ptr(true)}))
	data, st, _ = h.s.GetContentsAndStat(res.Handle)
	if string(data) != "x" || st.Ephemeral || res.GetCreated() {
		t.Fatalf("open or create existing changed it: %q %v", data, st)
	}
	// Handle ids are a counter.
	h1 := h.open(sess, "/dir", rd, chubby.CreateMode_OPEN_EXISTING)
	h2 := h.open(sess, "/dir", rd, chubby.CreateMode_OPEN_EXISTING)
	if h2.Id != h1.Id+1 {
		t.Fatalf("handle ids %d %d", h1.Id, h2.Id)
	}
}

func TestCreateFileAndMkdir(t *testing.T) {
	h := newHarness(t)
	sess := h.session()
	h.ok(opMkdir(sess, "/a", false, false))
	h.write(sess, "/a/f", "data")
	cf := func(path string, parents bool) *fsm.Op {
		return opCreateFile(&chubby.CreateFileRequest{Session: sess, Path: path, Content: []byte("c"), MakeParents: &parents})
	}
	tests := []struct {
		name    string
		op      *fsm.Op
		code    chubby.ErrorCode
		path    string
		created bool
		kind    chubby.NodeKind
	}{
		{"mkdir", opMkdir(sess, "/a/b", false, false), 0, "/a/b", true, chubby.NodeKind_DIRECTORY},
		{"mkdir exists", opMkdir(sess, "/a/b", false, false), chubby.ErrorCode_EXISTS, "", false, 0},
		{"mkdir -p exists", opMkdir(sess, "/a/b", true, false), 0, "/a/b", false, chubby.NodeKind_DIRECTORY},
		{"mkdir -p root", opMkdir(sess, "/", true, false), 0, "/", false, chubby.NodeKind_DIRECTORY},
		{"mkdir root", opMkdir(sess, "/", false, false), chubby.ErrorCode_EXISTS, "", false, 0},
		{"mkdir over file", opMkdir(sess, "/a/f", true, false), chubby.ErrorCode_EXISTS, "", false, 0},
		{"mkdir missing parent", opMkdir(sess, "/x/y", false, false), chubby.ErrorCode_NOT_FOUND, "", false, 0},
		{"mkdir -p deep", opMkdir(sess, "/x/y/z", true, false), 0, "/x/y/z", true, chubby.NodeKind_DIRECTORY},
		{"mkdir under file", opMkdir(sess, "/a/f/g", true, false), chubby.ErrorCode_NOT_DIRECTORY, "", false, 0},
		{"mkdir bad path", opMkdir(sess, "/a/", false, false), chubby.ErrorCode_INVALID_ARGUMENT, "", false, 0},
		{"create", cf("/a/g", false), 0, "/a/g", true, chubby.NodeKind_FILE},
		{"create exists", cf("/a/g", false), chubby.ErrorCode_EXISTS, "", false, 0},
		{"create root", cf("/", false), chubby.ErrorCode_EXISTS, "", false, 0},
		{"create missing parent", cf("/p/q/r", false), chubby.ErrorCode_NOT_FOUND, "", false, 0},
		{"create make parents", cf("/p/q/r", true), 0, "/p/q/r", true, chubby.NodeKind_FILE},
		{"create under file", cf("/a/f/x", true), chubby.ErrorCode_NOT_DIRECTORY, "", false, 0},
		{"create bad path", cf("/a/x y", false), chubby.ErrorCode_INVALID_ARGUMENT, "", false, 0},
		{"create too large", opCreateFile(&chubby.CreateFileRequest{Session: sess, Path: "/big", Content: make([]byte, chubby.MAX_CONTENT_BYTES+1)}), chubby.ErrorCode_TOO_LARGE, "", false, 0},
		{"create max size", opCreateFile(&chubby.CreateFileRequest{Session: sess, Path: "/big", Content: make([]byte, chubby.MAX_CONTENT_BYTES)}), 0, "/big", true, chubby.NodeKind_FILE},
	}
	for _, tt := range tests {
		res, _ := h.op(tt.op)
		if tt.code != 0 {
			if res.Err == nil || res.Err.Code != tt.code {
				t.Errorf("%s: got %v, want %v", tt.name, res.Err, tt.code)
			}
			continue
		}
		if res.Err != nil || res.Stat.Path != tt.path || res.GetCreated() != tt.created || res.Stat.Kind != tt.kind {
			t.Errorf("%s: got %v", tt.name, res)
		}
	}
	// Missing parents are permanent directories even for an ephemeral leaf.
	h.ok(opCreateFile(&chubby.CreateFileRequest{Session: sess, Path: "/e1/e2/leaf", Ephemeral: ptr(true), MakeParents: ptr(true)}))
	hd := h.open(sess, "/e1/e2", rd, chubby.CreateMode_OPEN_EXISTING)
	if st := h.stat(hd); st.Ephemeral || st.Kind != chubby.NodeKind_DIRECTORY {
		t.Fatalf("made parent: %v", st)
	}
}

func TestMetadata(t *testing.T) {
	h := newHarness(t)
	sess := h.session()
	h.now = 5000
	res, _ := h.ok(opOpen(&chubby.OpenRequest{Session: sess, Path: "/f", Mode: rdwr, Create: chubby.CreateMode_CREATE_NEW, InitialContent: []byte("one")}))
	hd := res.Handle
	st := res.Stat
	if st.ContentGeneration != 1 || st.LockGeneration != 0 || st.AclGeneration != 0 || st.CreateTimeMs != 5000 || st.ModifyTimeMs != 5000 ||
		st.Size != 3 || st.Checksum != int64(crc32.Checksum([]byte("one"), castagnoli)) || st.Kind != chubby.NodeKind_FILE || st.Instance < 2 {
		t.Fatalf("new file stat %v", st)
	}
	h.now = 6000
	res, _ = h.ok(opSet(hd, "two!"))
	if st := res.Stat; st.ContentGeneration != 2 || st.ModifyTimeMs != 6000 || st.CreateTimeMs != 5000 || st.Size != 4 ||
		st.Checksum != int64(crc32.Checksum([]byte("two!"), castagnoli)) {
		t.Fatalf("after write %v", st)
	}
	res, _ = h.ok(opSet(hd, "two!")) // same bytes: still a write
	if res.Stat.ContentGeneration != 3 {
		t.Fatalf("generation %d", res.Stat.ContentGeneration)
	}
	h.ok(opAcquire(hd, excl, false, 0))
	if st := h.stat(hd); st.LockGeneration != 1 || st.Lock.GetMode() != excl || st.Lock.Holders != 1 {
		t.Fatalf("locked stat %v", st)
	}
	h.ok(opRelease(hd))
	if st := h.stat(hd); st.LockGeneration != 1 || st.Lock.IsSetMode() || st.Lock.Holders != 0 {
		t.Fatalf("released stat %v", st)
	}
	// Directory: size counts entries, generation bumps per entry change.
	root := h.open(sess, "/", rd, chubby.CreateMode_OPEN_EXISTING)
	st0 := h.stat(root)
	h.now = 7000
	h.write(sess, "/g", "")
	st1 := h.stat(root)
	if st1.Size != st0.Size+1 || st1.ContentGeneration != st0.ContentGeneration+1 || st1.ModifyTimeMs != 7000 || st1.Checksum != 0 {
		t.Fatalf("dir stat %v -> %v", st0, st1)
	}
	// The clock never goes back.
	h.now = 10
	h.ok(opTick())
	if h.s.Now() != 7000 {
		t.Fatalf("clock went back to %d", h.s.Now())
	}
	res, _ = h.ok(opSet(hd, "three"))
	if res.Stat.ModifyTimeMs != 7000 {
		t.Fatalf("modify time %d", res.Stat.ModifyTimeMs)
	}
}

func TestSetContents(t *testing.T) {
	h := newHarnessLimits(t, func() Limits { l := DefaultLimits(); l.MaxTotalContentBytes = 10; return l }())
	sess := h.session()
	w := h.rw(sess, "/f")
	r := h.open(sess, "/f", rd, chubby.CreateMode_OPEN_EXISTING)
	dir := h.open(sess, "/", rdwr, chubby.CreateMode_OPEN_EXISTING)
	tests := []struct {
		name string
		op   *fsm.Op
		code chubby.ErrorCode
		gen  int64
	}{
		{"write", opSet(w, "abc"), 0, 2},
		{"cas ok", opSetGen(w, "abcd", 2), 0, 3},
		{"cas stale", opSetGen(w, "x", 2), chubby.ErrorCode_GENERATION_MISMATCH, 0},
		{"read handle", opSet(r, "x"), chubby.ErrorCode_PERMISSION_DENIED, 0},
		{"directory", opSet(dir, "x"), chubby.ErrorCode_IS_DIRECTORY, 0},
		{"too large", &fsm.Op{SetContents: &chubby.SetContentsRequest{Handle: w, Content: make([]byte, chubby.MAX_CONTENT_BYTES+1)}}, chubby.ErrorCode_TOO_LARGE, 0},
		{"cell total", opSet(w, "0123456789x"), chubby.ErrorCode_LIMIT_EXCEEDED, 0},
		{"cell total exactly", opSet(w, "0123456789"), 0, 4},
		{"empty", opSet(w, ""), 0, 5},
		{"bad handle id", opSet(&chubby.Handle{Id: 999, Session: sess, Instance: w.Instance, Path: w.Path}, "x"), chubby.ErrorCode_HANDLE_INVALID, 0},
		{"bad handle instance", opSet(&chubby.Handle{Id: w.Id, Session: sess, Instance: 999, Path: w.Path}, "x"), chubby.ErrorCode_HANDLE_INVALID, 0},
		{"bad handle path", opSet(&chubby.Handle{Id: w.Id, Session: sess, Instance: w.Instance, Path: "/g"}, "x"), chubby.ErrorCode_HANDLE_INVALID, 0},
		{"other session", opSet(&chubby.Handle{Id: w.Id, Session: h.session(), Instance: w.Instance, Path: w.Path}, "x"), chubby.ErrorCode_HANDLE_INVALID, 0},
		{"unknown session", opSet(&chubby.Handle{Id: w.Id, Session: 99, Instance: w.Instance, Path: w.Path}, "x"), chubby.ErrorCode_SESSION_EXPIRED, 0},
	}
	for _, tt := range tests {
		res, _ := h.op(tt.op)
		if tt.code != 0 {
			if res.Err == nil || res.Err.Code != tt.code {
				t.Errorf("%s: got %v, want %v", tt.name, res.Err, tt.code)
			}
			continue
		}
		if res.Err != nil || res.Stat.ContentGeneration != tt.gen {
			t.Errorf("%s: got %v", tt.name, res)
		}
	}
	if c := h.s.Counts(); c.ContentBytes != 0 {
		t.Fatalf("content bytes %d", c.ContentBytes)
	}
}

func TestReads(t *testing.T) {
	h := newHarness(t)
	sess := h.session()
	for _, p := range []string{"/d/b", "/d/a", "/d/c-1", "/d/c"} {
		h.write(sess, p, p)
	}
	h.mkdir(sess, "/d/sub")
	d := h.open(sess, "/d", rd, chubby.CreateMode_OPEN_EXISTING)
	f := h.open(sess, "/d/a", rd, chubby.CreateMode_OPEN_EXISTING)

	entries, err := h.s.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
		if e.Stat.Path != "/d/"+e.Name {
			t.Errorf("entry %s has stat path %s", e.Name, e.Stat.Path)
		}
	}
	if strings.Join(names, ",") != "a,b,c,c-1,sub" {
		t.Fatalf("ReadDir names %v", names)
	}
	if _, err := h.s.ReadDir(f); Code(err) != chubby.ErrorCode_NOT_DIRECTORY {
		t.Errorf("ReadDir(file): %v", err)
	}
	data, st, err := h.s.GetContentsAndStat(f)
	if err != nil || string(data) != "/d/a" || st.Path != "/d/a" {
		t.Fatalf("GetContentsAndStat: %q %v %v", data, st, err)
	}
	data[0] = 'X' // the copy is the caller's
	if data2, _, _ := h.s.GetContentsAndStat(f); string(data2) != "/d/a" {
		t.Fatal("GetContentsAndStat returned shared memory")
	}
	if _, _, err := h.s.GetContentsAndStat(d); Code(err) != chubby.ErrorCode_IS_DIRECTORY {
		t.Errorf("GetContentsAndStat(dir): %v", err)
	}
	if _, err := h.s.GetSequencer(f); Code(err) != chubby.ErrorCode_LOCK_NOT_HELD {
		t.Errorf("GetSequencer: %v", err)
	}
	bad := []struct {
		h    *chubby.Handle
		code chubby.ErrorCode
	}{
		{nil, chubby.ErrorCode_INVALID_ARGUMENT},
		{&chubby.Handle{Id: 999, Session: sess, Instance: f.Instance, Path: f.Path}, chubby.ErrorCode_HANDLE_INVALID},
		{&chubby.Handle{Id: f.Id, Session: 999, Instance: f.Instance, Path: f.Path}, chubby.ErrorCode_SESSION_EXPIRED},
		{&chubby.Handle{Id: f.Id, Session: sess, Instance: 1, Path: f.Path}, chubby.ErrorCode_HANDLE_INVALID},
	}
	for _, b := range bad {
		if _, err := h.s.GetStat(b.h); Code(err) != b.code {
			t.Errorf("GetStat(%v): %v, want %v", b.h, err, b.code)
		}
		if _, _, err := h.s.GetContentsAndStat(b.h); Code(err) != b.code {
			t.Errorf("GetContentsAndStat(%v): %v, want %v", b.h, err, b.code)
		}
		if _, err := h.s.ReadDir(b.h); Code(err) != b.code {
			t.Errorf("ReadDir(%v): %v, want %v", b.h, err, b.code)
		}
		if _, err := h.s.GetSequencer(b.h); Code(err) != b.code {
			t.Errorf("GetSequencer(%v): %v, want %v", b.h, err, b.code)
		}
	}
	if got := h.s.SessionHandles(sess); len(got) != 2 || got[0] != d.Id || got[1] != f.Id {
		t.Errorf("SessionHandles %v", got)
	}
	c := h.s.Counts()
	if c.Sessions != 1 || c.Nodes != 7 || c.Handles != 2 || c.LocksHeld != 0 || c.Waiters != 0 || c.ContentBytes != 4*4+2 {
		t.Errorf("Counts %+v", c)
	}
}

func TestDeleteAndHandleInvalidation(t *testing.T) {
	h := newHarness(t)
	sess := h.session()
	h.write(sess, "/d/e/f", "x")
	h.write(sess, "/d/g", "y")
	d := h.open(sess, "/d", rdwr, chubby.CreateMode_OPEN_EXISTING)
	dRead := h.open(sess, "/d", rd, chubby.CreateMode_OPEN_EXISTING)
	root := h.open(sess, "/", rdwr, chubby.CreateMode_OPEN_EXISTING)
	h.fail(chubby.ErrorCode_NOT_EMPTY, opDelete(d, false))
	h.fail(chubby.ErrorCode_PERMISSION_DENIED, opDelete(dRead, true))
	h.fail(chubby.ErrorCode_INVALID_ARGUMENT, opDelete(root, true))

	f := h.rw(sess, "/d/e/f")
	g := h.rw(sess, "/d/g")
	h.ok(opDelete(g, false))
	if h.exists("/d/g") {
		t.Fatal("/d/g still exists")
	}
	// Every use of a handle to a deleted node is HANDLE_INVALID, but Close.
	h.fail(chubby.ErrorCode_HANDLE_INVALID, opSet(g, "z"))
	h.fail(chubby.ErrorCode_HANDLE_INVALID, opDelete(g, false))
	h.fail(chubby.ErrorCode_HANDLE_INVALID, opAcquire(g, excl, false, 0))
	h.fail(chubby.ErrorCode_HANDLE_INVALID, opRelease(g))
	h.fail(chubby.ErrorCode_HANDLE_INVALID, opCancel(g))
	if _, err := h.s.GetStat(g); Code(err) != chubby.ErrorCode_HANDLE_INVALID {
		t.Fatalf("GetStat after delete: %v", err)
	}
	// Re-created: same path, new instance; the old handle stays invalid.
	g2 := h.rw(sess, "/d/g")
	if g2.Instance == g.Instance {
		t.Fatal("re-created node kept its instance")
	}
	h.fail(chubby.ErrorCode_HANDLE_INVALID, opSet(g, "z"))
	h.ok(opSet(g2, "z"))
	h.ok(opClose(g))
	h.fail(chubby.ErrorCode_HANDLE_INVALID, opClose(g))

	// Recursive.
	h.ok(opDelete(d, true))
	for _, p := range []string{"/d", "/d/e", "/d/e/f", "/d/g"} {
		if h.exists(p) {
			t.Fatalf("%s survived recursive delete", p)
		}
	}
	h.fail(chubby.ErrorCode_HANDLE_INVALID, opSet(f, "x"))
	if c := h.s.Counts(); c.Nodes != 1 || c.ContentBytes != 0 {
		t.Fatalf("counts after delete %+v", c)
	}
	// An empty directory needs no recursive flag.
	h.mkdir(sess, "/empty")
	h.ok(opDelete(h.rw(sess, "/empty"), false))
}
