package cell

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
)

// TestBadInputs: every bad request gets the right typed error and changes
// nothing (the whole fs state is compared byte for byte before and after).
func TestBadInputs(t *testing.T) {
	// A frozen clock: every command carries the same time, so the state's
	// clock does not move and the snapshot bytes compare exactly.
	frozen := time.Unix(1_800_000_000, 0)
	tc := startCell(t, Config{Now: func() time.Time { return frozen }})
	a, b := tc.session("a"), tc.session("b")
	file := tc.open(a, "/f", chubby.CreateMode_CREATE_NEW, false)
	if _, err := tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: file, Content: []byte("v1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.cli.Mkdir(ctx, &chubby.MkdirRequest{Session: a, Path: "/d"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: a, Path: "/d/child"}); err != nil {
		t.Fatal(err)
	}
	dir := tc.open(a, "/d", chubby.CreateMode_OPEN_EXISTING, false)
	ro, err := tc.cli.Open(ctx, &chubby.OpenRequest{Session: b, Path: "/f", Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_EXISTING})
	if err != nil {
		t.Fatal(err)
	}
	// A handle to a node that was deleted and re-created.
	gone := tc.open(a, "/g", chubby.CreateMode_CREATE_NEW, false)
	if err := tc.cli.Delete(ctx, &chubby.DeleteRequest{Handle: gone}); err != nil {
		t.Fatal(err)
	}
	tc.open(a, "/g", chubby.CreateMode_CREATE_NEW, false)

	big := make([]byte, chubby.MAX_CONTENT_BYTES+1)
	wrongGen := int64(99)
	badDelay := int64(chubby.MAX_LOCK_DELAY_MS + 1)
	open := func(path string) error {
		_, err := tc.cli.Open(ctx, &chubby.OpenRequest{Session: a, Path: path, Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_OR_CREATE})
		return err
	}
	cases := []struct {
		name string
		call func() error
		want chubby.ErrorCode
	}{
		{"empty path", func() error { return open("") }, chubby.ErrorCode_INVALID_ARGUMENT},
		{"unreachable address too long", func() error {
			long := strings.Repeat("h", maxAddrBytes+1)
			_, err := tc.cli.GetMaster(ctx, &chubby.GetMasterRequest{Unreachable: &long})
			return err
		}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"relative path", func() error { return open("a/b") }, chubby.ErrorCode_INVALID_ARGUMENT},
		{"trailing slash", func() error { return open("/a/") }, chubby.ErrorCode_INVALID_ARGUMENT},
		{"empty component", func() error { return open("/a//b") }, chubby.ErrorCode_INVALID_ARGUMENT},
		{"dot-dot", func() error { return open("/a/..") }, chubby.ErrorCode_INVALID_ARGUMENT},
		{"bad character", func() error { return open("/a b") }, chubby.ErrorCode_INVALID_ARGUMENT},
		{"long component", func() error { return open("/" + strings.Repeat("x", 256)) }, chubby.ErrorCode_INVALID_ARGUMENT},
		{"too deep", func() error { return open(strings.Repeat("/x", 65)) }, chubby.ErrorCode_INVALID_ARGUMENT},
		{"oversize content", func() error {
			_, err := tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: file, Content: big})
			return err
		}, chubby.ErrorCode_TOO_LARGE},
		{"oversize create", func() error {
			_, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: a, Path: "/big", Content: big})
			return err
		}, chubby.ErrorCode_TOO_LARGE},
		{"unknown handle", func() error {
			_, err := tc.cli.GetStat(ctx, &chubby.HandleRequest{Handle: &chubby.Handle{Id: 424242, Session: a, Instance: file.Instance, Path: "/f"}})
			return err
		}, chubby.ErrorCode_HANDLE_INVALID},
		{"unknown handle write", func() error {
			_, err := tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: &chubby.Handle{Id: 424242, Session: a, Instance: 1, Path: "/f"}, Content: []byte("x")})
			return err
		}, chubby.ErrorCode_HANDLE_INVALID},
		{"another session's handle", func() error {
			h := *file
			h.Session = b
			_, err := tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: &h, Content: []byte("x")})
			return err
		}, chubby.ErrorCode_HANDLE_INVALID},
		{"handle of a re-created node", func() error {
			_, err := tc.cli.GetStat(ctx, &chubby.HandleRequest{Handle: gone})
			return err
		}, chubby.ErrorCode_HANDLE_INVALID},
		{"unknown session", func() error {
			_, err := tc.cli.Open(ctx, &chubby.OpenRequest{Session: 777777, Path: "/f", Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_EXISTING})
			return err
		}, chubby.ErrorCode_SESSION_EXPIRED},
		{"write to a directory", func() error {
			_, err := tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: dir, Content: []byte("x")})
			return err
		}, chubby.ErrorCode_IS_DIRECTORY},
		{"delete non-empty directory", func() error {
			return tc.cli.Delete(ctx, &chubby.DeleteRequest{Handle: dir})
		}, chubby.ErrorCode_NOT_EMPTY},
		{"release a lock not held", func() error {
			return tc.cli.Release(ctx, &chubby.HandleRequest{Handle: file})
		}, chubby.ErrorCode_LOCK_NOT_HELD},
		{"sequencer of a lock not held", func() error {
			_, err := tc.cli.GetSequencer(ctx, &chubby.HandleRequest{Handle: file})
			return err
		}, chubby.ErrorCode_LOCK_NOT_HELD},
		{"write through a read-only handle", func() error {
			_, err := tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: ro.Handle, Content: []byte("x")})
			return err
		}, chubby.ErrorCode_PERMISSION_DENIED},
		{"compare-and-swap on a stale generation", func() error {
			_, err := tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: file, Content: []byte("x"), ExpectedGeneration: &wrongGen})
			return err
		}, chubby.ErrorCode_GENERATION_MISMATCH},
		{"create existing", func() error {
			_, err := tc.cli.Open(ctx, &chubby.OpenRequest{Session: a, Path: "/f", Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_CREATE_NEW})
			return err
		}, chubby.ErrorCode_EXISTS},
		{"open missing", func() error {
			_, err := tc.cli.Open(ctx, &chubby.OpenRequest{Session: a, Path: "/missing", Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_EXISTING})
			return err
		}, chubby.ErrorCode_NOT_FOUND},
		{"missing parent", func() error {
			_, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: a, Path: "/no/such/dir"})
			return err
		}, chubby.ErrorCode_NOT_FOUND},
		{"file as parent", func() error {
			_, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: a, Path: "/f/child"})
			return err
		}, chubby.ErrorCode_NOT_DIRECTORY},
		{"read a file as a directory", func() error {
			_, err := tc.cli.ReadDir(ctx, &chubby.ReadDirRequest{Handle: file})
			return err
		}, chubby.ErrorCode_NOT_DIRECTORY},
		{"mkdir existing", func() error {
			_, err := tc.cli.Mkdir(ctx, &chubby.MkdirRequest{Session: a, Path: "/d"})
			return err
		}, chubby.ErrorCode_EXISTS},
		{"acquire without a wait", func() error {
			_, err := tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: file, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 0})
			return err
		}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"acquire with a bad mode", func() error {
			_, err := tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: file, Mode: chubby.LockMode(7)})
			return err
		}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"lock-delay over the bound", func() error {
			_, err := tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: file, Mode: chubby.LockMode_EXCLUSIVE, LockDelayMs: &badDelay})
			return err
		}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"empty KeepAlive", func() error {
			_, err := tc.cli.KeepAlive(ctx, &chubby.KeepAliveRequest{})
			return err
		}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"KeepAlive naming a session twice", func() error {
			_, err := tc.cli.KeepAlive(ctx, &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{{Session: a}, {Session: a}}})
			return err
		}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"client name too long", func() error {
			_, err := tc.cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: strings.Repeat("n", 300)})
			return err
		}, chubby.ErrorCode_INVALID_ARGUMENT},
		{"close an ended session", func() error {
			return tc.cli.CloseSession(ctx, &chubby.CloseSessionRequest{Session: 888888})
		}, chubby.ErrorCode_SESSION_EXPIRED},
		{"check a malformed sequencer", func() error {
			_, err := tc.cli.CheckSequencer(ctx, &chubby.CheckSequencerRequest{Sequencer: &chubby.Sequencer{Path: "nope", Mode: chubby.LockMode_EXCLUSIVE}})
			return err
		}, chubby.ErrorCode_INVALID_ARGUMENT},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := stateBytes(tc.s.m)
			wantCode(t, c.call(), c.want)
			if after := stateBytes(tc.s.m); !bytes.Equal(before, after) {
				t.Fatal("a refused request changed the state")
			}
		})
	}
	// And the data is what it was.
	r := must[*chubby.GetContentsAndStatResponse](t)(tc.cli.GetContentsAndStat(ctx, &chubby.HandleRequest{Handle: file}))
	if string(r.Content) != "v1" || r.Stat.ContentGeneration != 2 {
		t.Fatalf("content %q generation %d after refused requests", r.Content, r.Stat.ContentGeneration)
	}
}

// stateBytes encodes the master's state as it is now.
func stateBytes(m *machine) []byte {
	var b []byte
	m.read(func(st *fs.State) { b = st.Snapshot() })
	return b
}
