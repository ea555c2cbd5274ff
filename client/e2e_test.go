package client

import (
	"bytes"
	"context"
	"errors"
	"github.com/chubbygo/chubby/cell/celltest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/rpc"
)

// End-to-end tests: the client against a real chubbyd (see chubbyd_test.go).

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must[T any](t *testing.T, what string) func(T, error) T {
	t.Helper()
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

func wantCode(t *testing.T, what string, err error, code chubby.ErrorCode) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v", what, code)
	}
	if got, ok := Code(err); !ok || got != code {
		t.Fatalf("%s: error %v, want code %v", what, err, code)
	}
	var oe *OpError
	if !errors.As(err, &oe) {
		t.Fatalf("%s: error %T is not an *OpError", what, err)
	}
}

// TestE2EBlocking exercises every call in its blocking form.
func TestE2EBlocking(t *testing.T) {
	addr := startCell(t)
	c := connect(t, addr)
	ctx := testCtx(t)

	status := must[*chubby.CellStatus](t, "Status")(c.Status(ctx))
	if status.GetMasterAddress() != addr || len(status.GetReplicas()) != 1 ||
		status.GetReplicas()[0].GetRole() != chubby.ReplicaRole_MASTER {
		t.Errorf("Status = %+v", status)
	}
	master := must[*chubby.GetMasterResponse](t, "GetMaster")(c.GetMaster(ctx))
	if master.GetMasterAddress() != addr || master.GetEpoch() != status.GetEpoch() {
		t.Errorf("GetMaster = %+v", master)
	}

	s := newSession(t, c)
	if s.ID() == 0 || s.Err() != nil {
		t.Fatalf("new session: id %d, err %v", s.ID(), s.Err())
	}
	if r := s.LeaseRemaining(); r <= 0 || r > 12*time.Second {
		t.Errorf("LeaseRemaining = %v", r)
	}

	dir := must[*chubby.Stat](t, "Mkdir")(s.Mkdir(ctx, "/b", MkdirOptions{}))
	if dir.GetKind() != chubby.NodeKind_DIRECTORY || dir.GetPath() != "/b" {
		t.Errorf("Mkdir stat = %+v", dir)
	}
	must[*chubby.Stat](t, "Mkdir -p")(s.Mkdir(ctx, "/b/x/y", MkdirOptions{Parents: true}))
	must[*chubby.Stat](t, "Mkdir -p existing")(s.Mkdir(ctx, "/b/x", MkdirOptions{Parents: true}))
	f := must[*chubby.Stat](t, "CreateFile")(s.CreateFile(ctx, "/b/f", []byte("one"), CreateOptions{}))
	if f.GetKind() != chubby.NodeKind_FILE || f.GetSize() != 3 {
		t.Errorf("CreateFile stat = %+v", f)
	}
	sq := must[*chubby.Stat](t, "CreateFile sequential")(s.CreateFile(ctx, "/b/job-", nil, CreateOptions{Sequential: true}))
	if !regexp.MustCompile(`^/b/job-[0-9]{10}$`).MatchString(sq.GetPath()) {
		t.Errorf("sequential file path %q", sq.GetPath())
	}
	must[*chubby.Stat](t, "CreateFile with parents")(s.CreateFile(ctx, "/b/p/q/r", []byte("r"), CreateOptions{MakeParents: true}))

	h := must[*Handle](t, "Open")(s.Open(ctx, "/b/f", OpenOptions{Mode: chubby.OpenMode_READ_WRITE}))
	if h.Created() || h.Path() != "/b/f" || h.Stat().GetSize() != 3 || h.Session() != s {
		t.Errorf("Open: created %v path %q stat %+v", h.Created(), h.Path(), h.Stat())
	}
	data, st, err := h.GetContentsAndStat(ctx)
	if err != nil || string(data) != "one" || st.GetSize() != 3 {
		t.Fatalf("GetContentsAndStat = %q, %+v, %v", data, st, err)
	}
	st2 := must[*chubby.Stat](t, "SetContents")(h.SetContents(ctx, []byte("two")))
	if st2.GetContentGeneration() <= st.GetContentGeneration() {
		t.Errorf("content generation %d after write, was %d", st2.GetContentGeneration(), st.GetContentGeneration())
	}
	_, err = h.SetContents(ctx, []byte("stale"), IfGeneration(st.GetContentGeneration()))
	wantCode(t, "SetContents with a stale generation", err, chubby.ErrorCode_GENERATION_MISMATCH)
	st3 := must[*chubby.Stat](t, "SetContents CAS")(h.SetContents(ctx, []byte("three"), IfGeneration(st2.GetContentGeneration())))
	if h.Stat() != st3 {
		t.Errorf("Handle.Stat is not the latest stat")
	}
	gs := must[*chubby.Stat](t, "GetStat")(h.GetStat(ctx))
	if gs.GetSize() != 5 || gs.GetContentGeneration() != st3.GetContentGeneration() {
		t.Errorf("GetStat = %+v", gs)
	}

	dh := must[*Handle](t, "Open dir")(s.Open(ctx, "/b", OpenOptions{}))
	entries := must[[]*chubby.DirEntry](t, "ReadDir")(dh.ReadDir(ctx))
	var names []string
	for _, e := range entries {
		names = append(names, e.GetName())
	}
	wantNames := []string{"f", strings.TrimPrefix(sq.GetPath(), "/b/"), "p", "x"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("ReadDir = %v, want %v", names, wantNames)
	}

	seq := must[*chubby.Sequencer](t, "TryAcquire")(h.TryAcquire(ctx, chubby.LockMode_EXCLUSIVE, LockOptions{}))
	if seq.GetPath() != "/b/f" || seq.GetMode() != chubby.LockMode_EXCLUSIVE || seq.GetLockGeneration() <= 0 {
		t.Errorf("sequencer %+v", seq)
	}
	if got := must[*chubby.Sequencer](t, "GetSequencer")(h.GetSequencer(ctx)); *got != *seq {
		t.Errorf("GetSequencer = %+v, want %+v", got, seq)
	}
	if valid, reason, err := c.CheckSequencer(ctx, seq); err != nil || !valid {
		t.Errorf("CheckSequencer(held) = %v, %q, %v", valid, reason, err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if valid, reason, err := c.CheckSequencer(ctx, seq); err != nil || valid || reason == "" {
		t.Errorf("CheckSequencer(released) = %v, %q, %v", valid, reason, err)
	}
	seq2 := must[*chubby.Sequencer](t, "Acquire")(h.Acquire(ctx, chubby.LockMode_SHARED, time.Second, LockOptions{LockDelay: NoLockDelay}))
	if seq2.GetMode() != chubby.LockMode_SHARED || seq2.GetLockGeneration() <= seq.GetLockGeneration() {
		t.Errorf("second sequencer %+v after %+v", seq2, seq)
	}
	if back, err := ParseSequencer(FormatSequencer(seq2)); err != nil || *back != *seq2 {
		t.Errorf("sequencer text round trip: %v, %v", back, err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}

	nh := must[*Handle](t, "Open create")(s.Open(ctx, "/b/new", OpenOptions{
		Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE, InitialContent: []byte("init")}))
	if !nh.Created() {
		t.Error("Open OPEN_OR_CREATE of a missing file: Created() = false")
	}
	if data, _, err := nh.GetContentsAndStat(ctx); err != nil || string(data) != "init" {
		t.Errorf("initial content = %q, %v", data, err)
	}
	if err := nh.Delete(ctx, false); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatalf("Handle.Close: %v", err)
	}

	rm := must[*Handle](t, "Open dir rw")(s.Open(ctx, "/b", OpenOptions{Mode: chubby.OpenMode_READ_WRITE}))
	wantCode(t, "Delete non-empty", rm.Delete(ctx, false), chubby.ErrorCode_NOT_EMPTY)
	if err := rm.Delete(ctx, true); err != nil {
		t.Fatalf("Delete recursive: %v", err)
	}

	if err := s.Close(ctx); err != nil {
		t.Fatalf("Session.Close: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done not closed after Close")
	}
	if !errors.Is(s.Err(), ErrSessionClosed) || s.LeaseRemaining() != 0 {
		t.Errorf("after Close: Err %v, LeaseRemaining %v", s.Err(), s.LeaseRemaining())
	}
	if err := s.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Open(ctx, "/", OpenOptions{}); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("Open on a closed session: %v", err)
	}
}

func await1[T any](t *testing.T, what string, f *rpc.Future[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := f.Wait(ctx)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// TestE2EAsync exercises every call in its asynchronous form.
func TestE2EAsync(t *testing.T) {
	addr := startCell(t)
	c := connect(t, addr)
	ctx := testCtx(t)

	// Several calls in flight at once.
	statusF, masterF := c.StatusAsync(ctx), c.GetMasterAsync(ctx)
	sessF := c.NewSessionAsync(ctx)
	if st := await1(t, "StatusAsync", statusF); st.GetMasterAddress() != addr {
		t.Errorf("status %+v", st)
	}
	if m := await1(t, "GetMasterAsync", masterF); m.GetMasterAddress() != addr {
		t.Errorf("master %+v", m)
	}
	s := await1(t, "NewSessionAsync", sessF)
	t.Cleanup(func() { s.Close(context.Background()) })

	then := make(chan error, 1)
	s.MkdirAsync(ctx, "/a", MkdirOptions{}).Then(func(_ *chubby.Stat, err error) { then <- err })
	if err := <-then; err != nil {
		t.Fatalf("MkdirAsync: %v", err)
	}
	fs := []*rpc.Future[*chubby.Stat]{
		s.CreateFileAsync(ctx, "/a/1", []byte("x"), CreateOptions{}),
		s.CreateFileAsync(ctx, "/a/2", []byte("y"), CreateOptions{}),
		s.CreateFileAsync(ctx, "/a/3", []byte("z"), CreateOptions{Ephemeral: true}),
	}
	for i, f := range fs {
		if st := await1(t, "CreateFileAsync", f); st.GetSize() != 1 {
			t.Errorf("file %d: %+v", i, st)
		}
	}
	h := await1(t, "OpenAsync", s.OpenAsync(ctx, "/a/1", OpenOptions{Mode: chubby.OpenMode_READ_WRITE}))
	if r := await1(t, "GetContentsAndStatAsync", h.GetContentsAndStatAsync(ctx)); string(r.GetContent()) != "x" {
		t.Errorf("content %q", r.GetContent())
	}
	st := await1(t, "SetContentsAsync", h.SetContentsAsync(ctx, []byte("xx"), IfGeneration(h.Stat().GetContentGeneration())))
	if gs := await1(t, "GetStatAsync", h.GetStatAsync(ctx)); gs.GetSize() != 2 || gs.GetContentGeneration() != st.GetContentGeneration() {
		t.Errorf("stat %+v", gs)
	}
	dh := await1(t, "OpenAsync dir", s.OpenAsync(ctx, "/a", OpenOptions{}))
	if es := await1(t, "ReadDirAsync", dh.ReadDirAsync(ctx)); len(es) != 3 {
		t.Errorf("ReadDir: %d entries", len(es))
	}
	seq := await1(t, "TryAcquireAsync", h.TryAcquireAsync(ctx, chubby.LockMode_EXCLUSIVE, LockOptions{LockDelay: time.Second}))
	if got := await1(t, "GetSequencerAsync", h.GetSequencerAsync(ctx)); *got != *seq {
		t.Errorf("GetSequencerAsync %+v, want %+v", got, seq)
	}
	if chk := await1(t, "CheckSequencerAsync", c.CheckSequencerAsync(ctx, seq)); !chk.Valid {
		t.Errorf("CheckSequencerAsync: %+v", chk)
	}
	await1(t, "ReleaseAsync", h.ReleaseAsync(ctx))
	await1(t, "AcquireAsync", h.AcquireAsync(ctx, chubby.LockMode_EXCLUSIVE, time.Second, LockOptions{}))
	await1(t, "ReleaseAsync", h.ReleaseAsync(ctx))
	d := await1(t, "OpenAsync 2", s.OpenAsync(ctx, "/a/2", OpenOptions{Mode: chubby.OpenMode_READ_WRITE}))
	await1(t, "DeleteAsync", d.DeleteAsync(ctx, false))
	await1(t, "CloseAsync handle", h.CloseAsync(ctx))
	await1(t, "CloseAsync session", s.CloseAsync(ctx))
	if !errors.Is(s.Err(), ErrSessionClosed) {
		t.Errorf("Err after CloseAsync: %v", s.Err())
	}

	// The ephemeral file went with the session.
	s2 := newSession(t, c)
	_, err := s2.OpenAsync(ctx, "/a/3", OpenOptions{}).Wait(ctx)
	wantCode(t, "open ephemeral file of a closed session", err, chubby.ErrorCode_NOT_FOUND)
}

// TestE2EExclusiveContention: the second session's Acquire is parked until
// the first releases; the fencing token moves on.
func TestE2EExclusiveContention(t *testing.T) {
	addr := startCell(t)
	ctx := testCtx(t)
	s1, s2 := newSession(t, connect(t, addr)), newSession(t, connect(t, addr))
	h1 := must[*Handle](t, "open 1")(s1.Open(ctx, "/lock", OpenOptions{Create: chubby.CreateMode_OPEN_OR_CREATE}))
	h2 := must[*Handle](t, "open 2")(s2.Open(ctx, "/lock", OpenOptions{}))

	seq1 := must[*chubby.Sequencer](t, "Acquire 1")(h1.Acquire(ctx, chubby.LockMode_EXCLUSIVE, time.Second, LockOptions{}))
	_, err := h2.TryAcquire(ctx, chubby.LockMode_EXCLUSIVE, LockOptions{})
	wantCode(t, "TryAcquire of a held lock", err, chubby.ErrorCode_LOCK_HELD)

	f := h2.AcquireAsync(ctx, chubby.LockMode_EXCLUSIVE, 20*time.Second, LockOptions{})
	select {
	case <-f.Done():
		v, err, _ := f.Result()
		t.Fatalf("second Acquire finished while the lock was held: %v, %v", v, err)
	case <-time.After(500 * time.Millisecond):
	}
	if st := must[*chubby.Stat](t, "GetStat")(h1.GetStat(ctx)); st.GetLock().GetWaiters() != 1 {
		t.Errorf("lock info while one waits: %+v", st.GetLock())
	}
	released := time.Now()
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	seq2 := await1(t, "parked Acquire", f)
	if d := time.Since(released); d > 2*time.Second {
		t.Errorf("parked Acquire granted %v after the release", d)
	}
	if seq2.GetLockGeneration() <= seq1.GetLockGeneration() {
		t.Errorf("lock generation did not move on: %d then %d", seq1.GetLockGeneration(), seq2.GetLockGeneration())
	}
	c := s1.Client()
	if valid, _, err := c.CheckSequencer(ctx, seq1); err != nil || valid {
		t.Errorf("old holder's sequencer: valid=%v err=%v", valid, err)
	}
	if valid, reason, err := c.CheckSequencer(ctx, seq2); err != nil || !valid {
		t.Errorf("new holder's sequencer: valid=%v %q err=%v", valid, reason, err)
	}

	// Closing the holder's session releases the lock (no lock-delay: clean).
	f1 := h1.AcquireAsync(ctx, chubby.LockMode_EXCLUSIVE, 20*time.Second, LockOptions{})
	time.Sleep(200 * time.Millisecond)
	if err := s2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	await1(t, "Acquire after the holder's session closed", f1)
}

// TestE2ESharedHolders: shared holders coexist; an exclusive request waits
// for them and times out.
func TestE2ESharedHolders(t *testing.T) {
	addr := startCell(t)
	ctx := testCtx(t)
	c := connect(t, addr)
	var hs []*Handle
	for i := range 3 {
		s := newSession(t, c)
		h := must[*Handle](t, "open")(s.Open(ctx, "/shared", OpenOptions{Create: chubby.CreateMode_OPEN_OR_CREATE}))
		hs = append(hs, h)
		if i < 2 {
			must[*chubby.Sequencer](t, "shared Acquire")(h.Acquire(ctx, chubby.LockMode_SHARED, time.Second, LockOptions{}))
		}
	}
	st := must[*chubby.Stat](t, "GetStat")(hs[0].GetStat(ctx))
	if st.GetLock().GetMode() != chubby.LockMode_SHARED || st.GetLock().GetHolders() != 2 {
		t.Errorf("lock info %+v", st.GetLock())
	}
	_, err := hs[2].TryAcquire(ctx, chubby.LockMode_EXCLUSIVE, LockOptions{})
	wantCode(t, "exclusive TryAcquire among shared holders", err, chubby.ErrorCode_LOCK_HELD)
	start := time.Now()
	_, err = hs[2].Acquire(ctx, chubby.LockMode_EXCLUSIVE, 300*time.Millisecond, LockOptions{})
	wantCode(t, "exclusive Acquire among shared holders", err, chubby.ErrorCode_TIMED_OUT)
	if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("TIMED_OUT after %v, want about 300ms", d)
	}
	must[*chubby.Sequencer](t, "third shared")(hs[2].TryAcquire(ctx, chubby.LockMode_SHARED, LockOptions{}))
}

// TestE2EErrors: refused calls come back as *chubby.ChubbyError with the
// right code, wrapped in an *OpError.
func TestE2EErrors(t *testing.T) {
	addr := startCell(t)
	ctx := testCtx(t)
	s := newSession(t, connect(t, addr))
	must[*chubby.Stat](t, "CreateFile")(s.CreateFile(ctx, "/file", []byte("x"), CreateOptions{}))
	must[*chubby.Stat](t, "Mkdir")(s.Mkdir(ctx, "/dir", MkdirOptions{}))

	_, err := s.Open(ctx, "/missing", OpenOptions{})
	wantCode(t, "open missing", err, chubby.ErrorCode_NOT_FOUND)
	if !strings.Contains(err.Error(), "open /missing: not found") {
		t.Errorf("error text %q", err)
	}
	_, err = s.Open(ctx, "/file", OpenOptions{Create: chubby.CreateMode_CREATE_NEW})
	wantCode(t, "CREATE_NEW existing", err, chubby.ErrorCode_EXISTS)
	_, err = s.Mkdir(ctx, "/dir", MkdirOptions{})
	wantCode(t, "mkdir existing", err, chubby.ErrorCode_EXISTS)
	_, err = s.CreateFile(ctx, "/file/child", nil, CreateOptions{})
	wantCode(t, "create under a file", err, chubby.ErrorCode_NOT_DIRECTORY)
	_, err = s.Open(ctx, "relative", OpenOptions{})
	wantCode(t, "malformed path", err, chubby.ErrorCode_INVALID_ARGUMENT)
	_, err = s.CreateFile(ctx, "/big", bytes.Repeat([]byte("x"), chubby.MAX_CONTENT_BYTES+1), CreateOptions{})
	wantCode(t, "oversize content", err, chubby.ErrorCode_TOO_LARGE)

	ro := must[*Handle](t, "open read-only")(s.Open(ctx, "/file", OpenOptions{}))
	_, err = ro.SetContents(ctx, []byte("y"))
	wantCode(t, "write through a READ handle", err, chubby.ErrorCode_PERMISSION_DENIED)
	wantCode(t, "release without a lock", ro.Release(ctx), chubby.ErrorCode_LOCK_NOT_HELD)
	_, err = ro.GetSequencer(ctx)
	wantCode(t, "sequencer without a lock", err, chubby.ErrorCode_LOCK_NOT_HELD)
	_, err = ro.Acquire(ctx, chubby.LockMode_EXCLUSIVE, 0, LockOptions{})
	wantCode(t, "Acquire with no wait", err, chubby.ErrorCode_INVALID_ARGUMENT)
	_, err = ro.Acquire(ctx, chubby.LockMode_EXCLUSIVE, time.Second, LockOptions{LockDelay: time.Hour})
	wantCode(t, "lock-delay over the limit", err, chubby.ErrorCode_INVALID_ARGUMENT)

	dh := must[*Handle](t, "open dir")(s.Open(ctx, "/dir", OpenOptions{Mode: chubby.OpenMode_READ_WRITE}))
	_, err = dh.SetContents(ctx, []byte("y"))
	wantCode(t, "write a directory", err, chubby.ErrorCode_IS_DIRECTORY)
	_, err = ro.ReadDir(ctx)
	wantCode(t, "ReadDir of a file", err, chubby.ErrorCode_NOT_DIRECTORY)

	// A handle to a deleted and re-created node is invalid.
	rw := must[*Handle](t, "open rw")(s.Open(ctx, "/file", OpenOptions{Mode: chubby.OpenMode_READ_WRITE}))
	if err := rw.Delete(ctx, false); err != nil {
		t.Fatal(err)
	}
	must[*chubby.Stat](t, "re-create")(s.CreateFile(ctx, "/file", []byte("new"), CreateOptions{}))
	_, _, err = ro.GetContentsAndStat(ctx)
	wantCode(t, "read through a stale handle", err, chubby.ErrorCode_HANDLE_INVALID)
	if err := dh.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = dh.GetStat(ctx)
	wantCode(t, "use a closed handle", err, chubby.ErrorCode_HANDLE_INVALID)

	// The sequencer of a lock that never existed is not valid.
	valid, reason, err := s.Client().CheckSequencer(ctx, &chubby.Sequencer{Path: "/nope", Mode: chubby.LockMode_EXCLUSIVE, LockGeneration: 1, Instance: 1})
	if err != nil || valid || reason == "" {
		t.Errorf("CheckSequencer(bogus) = %v, %q, %v", valid, reason, err)
	}
}

// TestE2ESessionEndedByCell: when the cell ends the session (here another
// client closes it), the parked KeepAlive returns SESSION_EXPIRED and the
// session ends: Done closes, Err wraps ErrSessionExpired, calls fail.
func TestE2ESessionEndedByCell(t *testing.T) {
	addr := startCell(t)
	ctx := testCtx(t)
	s := newSession(t, connect(t, addr))
	other := connect(t, addr)
	if err := other.kc.CloseSession(ctx, &chubby.CloseSessionRequest{Session: s.ID()}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("session not ended 5s after the cell closed it")
	}
	if !errors.Is(s.Err(), ErrSessionExpired) || !IsCode(s.Err(), chubby.ErrorCode_SESSION_EXPIRED) {
		t.Errorf("Err = %v", s.Err())
	}
	_, err := s.Mkdir(ctx, "/x", MkdirOptions{})
	wantCode(t, "call on an expired session", err, chubby.ErrorCode_SESSION_EXPIRED)
	if err := s.Close(ctx); !errors.Is(err, ErrSessionExpired) {
		t.Errorf("Close of an expired session = %v", err)
	}
}

// TestE2ESessionOutlivesLease: KeepAlives keep a session alive across many
// leases, and the local lease never runs out meanwhile.
func TestE2ESessionOutlivesLease(t *testing.T) {
	cell := startCellLease(t, time.Second)
	ctx := testCtx(t)
	s := newSession(t, connect(t, cell.Addr))
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		if err := s.Err(); err != nil {
			t.Fatalf("session ended after %v: %v", 4*time.Second-time.Until(deadline), err)
		}
		if r := s.LeaseRemaining(); r <= 0 || r > time.Second {
			t.Fatalf("LeaseRemaining = %v with a 1s lease", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	must[*chubby.Stat](t, "call after 4 leases")(s.Mkdir(ctx, "/still-here", MkdirOptions{}))
}

// TestE2ELocalLeaseRunsOut: when the cell goes away, the session expires
// locally once its lease and then its grace period run out.
func TestE2ELocalLeaseRunsOut(t *testing.T) {
	cell := startCellLease(t, time.Second)
	s := newSession(t, connectCfg(t, Config{Addrs: []string{cell.Addr}, GracePeriod: 500 * time.Millisecond}))
	ctx := testCtx(t)
	h := must[*Handle](t, "open")(s.Open(ctx, "/", OpenOptions{}))
	cell.Stop()
	select {
	case <-s.Done():
	case <-time.After(4 * time.Second):
		t.Fatalf("session alive 4s after the cell died with a 1s lease and a 0.5s grace period; LeaseRemaining %v, state %v",
			s.LeaseRemaining(), s.State())
	}
	if !errors.Is(s.Err(), ErrSessionExpired) {
		t.Errorf("Err = %v", s.Err())
	}
	_, err := h.GetStat(ctx)
	wantCode(t, "call after local expiry", err, chubby.ErrorCode_SESSION_EXPIRED)
}

// TestE2EAcquireCancelled: a parked Acquire returns promptly with the
// context's error when the context ends, and the cell drops the waiter.
func TestE2EAcquireCancelled(t *testing.T) {
	addr := startCell(t)
	ctx := testCtx(t)
	c := connect(t, addr)
	s1, s2 := newSession(t, c), newSession(t, c)
	h1 := must[*Handle](t, "open 1")(s1.Open(ctx, "/l", OpenOptions{Create: chubby.CreateMode_OPEN_OR_CREATE}))
	h2 := must[*Handle](t, "open 2")(s2.Open(ctx, "/l", OpenOptions{}))
	must[*chubby.Sequencer](t, "Acquire")(h1.TryAcquire(ctx, chubby.LockMode_EXCLUSIVE, LockOptions{}))

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := h2.Acquire(short, chubby.LockMode_EXCLUSIVE, 30*time.Second, LockOptions{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with an expiring context: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Acquire returned %v after its context's deadline of 300ms", d)
	}
	// Closing the handle drops any waiter that is left.
	if err := h2.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestE2EClientClose: closing the client ends its sessions locally and
// fails later calls.
func TestE2EClientClose(t *testing.T) {
	addr := startCell(t)
	ctx := testCtx(t)
	c := connect(t, addr)
	s := newSession(t, c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("session not ended by Client.Close")
	}
	if !errors.Is(s.Err(), ErrClientClosed) {
		t.Errorf("Err = %v", s.Err())
	}
	if _, err := c.Status(ctx); !errors.Is(err, ErrClientClosed) {
		t.Errorf("Status after Close: %v", err)
	}
	if _, err := c.NewSession(ctx); !errors.Is(err, ErrClientClosed) {
		t.Errorf("NewSession after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestUnreachable needs no cell: calls to a closed port fail with
// ErrUnreachable after a bounded number of quick retries, saying that
// nothing listens there (not the transport's "closed by peer").
func TestUnreachable(t *testing.T) {
	addr := celltest.FreeAddr(t) // nothing listens there any more
	c, err := Connect(context.Background(), Config{Addrs: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.NewSession(context.Background())
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("NewSession to a closed port: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %v", d)
	}
	if !strings.Contains(Describe(err), addr) {
		t.Errorf("Describe = %q, want the address in it", Describe(err))
	}
	if !strings.Contains(err.Error(), "nothing listens there (connection refused)") {
		t.Errorf("NewSession to a closed port: %q, want it to say nothing listens there", err)
	}
}
