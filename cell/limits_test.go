package cell

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
)

// The limit walk (issue 22, "one chain of limits"): every bound the IDL
// documents (idl/chubby.thrift: each const and each "at most" of a
// comment) is tried through the real Kitex server exactly at the bound,
// which must work, and one past it, which must get the documented typed
// error, change nothing (the master's whole state compared byte for byte)
// and leave the session usable. ReadDir's after/limit
// (TestReadDirRequestBounds, TestReadDirListsLargestDirectory) and the
// Multi content bound (TestMultiAtItsBoundCommits) are walked in their
// own tests; fs.Limits in TestFSLimitsAtTheirBounds.

// pathOf returns a valid path of exactly n bytes (n >= 2): components of
// 200 bytes, the last one shorter and made of last.
func pathOf(n int, last string) string {
	var b strings.Builder
	for n-b.Len() > 256 {
		b.WriteString("/" + strings.Repeat("p", 200))
	}
	b.WriteString("/" + strings.Repeat(last, n-b.Len()-1))
	return b.String()
}

// aclLines is an ACL file of n distinct principals of the given length.
func aclLines(n, length int) []byte {
	var b bytes.Buffer
	for i := range n {
		p := fmt.Sprintf("p%06d", i)
		b.WriteString(p + strings.Repeat("x", max(length-len(p), 0)) + "\n")
	}
	return b.Bytes()
}

// limitRow is one limit walked at its bound and one past it.
type limitRow struct {
	limit string           // the limit and its value
	doc   string           // where it is documented
	at    func() error     // a request exactly at the bound: works
	past  func() error     // one past it: refused with want
	want  chubby.ErrorCode // the documented code of the refusal
}

// walkLimits runs rows against tc: at works; past gets want and changes
// nothing; then probe (the session's next calls) works.
func walkLimits(t *testing.T, tc *testCell, rows []limitRow, probe func() error) {
	t.Helper()
	for _, r := range rows {
		t.Run(r.limit, func(t *testing.T) {
			if err := r.at(); err != nil {
				t.Fatalf("at the bound (%s): %v", r.doc, err)
			}
			before := stateBytes(tc.s.m)
			err := r.past()
			if got := codeOf(err); got != r.want {
				t.Fatalf("one past the bound (%s): %v (code %v), want %v", r.doc, err, got, r.want)
			}
			if after := stateBytes(tc.s.m); !bytes.Equal(before, after) {
				t.Fatalf("the refused request one past the bound (%s) changed the state", r.doc)
			}
			if err := probe(); err != nil {
				t.Fatalf("the session's next call after the refusal: %v", err)
			}
		})
	}
}

// TestLimitsAtTheirBounds walks every request limit of the IDL on one
// cell (on disk: a row writes 256 KiB in one entry) whose clock is frozen,
// so that the state's bytes compare exactly across a refusal.
func TestLimitsAtTheirBounds(t *testing.T) {
	frozen := time.Unix(1_800_000_000, 0)
	tc := startCell(t, Config{Now: func() time.Time { return frozen }, Lease: time.Minute})
	s := tc.session("limits")
	yes := true
	str := func(v string) *string { return &v }
	create := func(path string, content []byte) error {
		_, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: s, Path: path, Content: content, MakeParents: &yes})
		return err
	}
	createSeq := func(path string) error {
		_, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: s, Path: path, Sequential: &yes, MakeParents: &yes})
		return err
	}
	mkdir := func(path string) error {
		_, err := tc.cli.Mkdir(ctx, &chubby.MkdirRequest{Session: s, Path: path, Parents: &yes})
		return err
	}
	openCreate := func(path string, content []byte) error {
		_, err := tc.cli.Open(ctx, &chubby.OpenRequest{Session: s, Path: path, Mode: chubby.OpenMode_READ_WRITE,
			Create: chubby.CreateMode_OPEN_OR_CREATE, InitialContent: content})
		return err
	}
	content := func(n int) []byte { return bytes.Repeat([]byte{'c'}, n) }

	probe := tc.open(s, "/probe", chubby.CreateMode_CREATE_NEW, false)
	file := tc.open(s, "/content", chubby.CreateMode_CREATE_NEW, false)
	lock := tc.open(s, "/lock", chubby.CreateMode_CREATE_NEW, false)
	if err := mkdir("/d"); err != nil {
		t.Fatal(err)
	}
	aclNode := tc.open(s, "/aclnode", chubby.CreateMode_CREATE_NEW, false)
	longACL := strings.Repeat("a", int(chubby.MAX_NAME_BYTES))
	if err := create("/acl/"+longACL, []byte("anonymous\n")); err != nil {
		t.Fatal(err)
	}
	setACL := func(name string) error {
		_, err := tc.cli.SetACL(ctx, &chubby.SetACLRequest{Handle: aclNode, Acl: &chubby.ACLNames{ReadAcl: name, WriteAcl: name, ChangeAcl: name}})
		return err
	}

	multiOps := func(prefix string, n int) error {
		req := &chubby.MultiRequest{Session: s}
		for i := range n {
			req.Ops = append(req.Ops, &chubby.MultiOp{Kind: chubby.MultiOpKind_CREATE, Path: fmt.Sprintf("/d/%s%03d", prefix, i)})
		}
		_, err := tc.cli.Multi(ctx, req)
		return err
	}
	multiCompares := func(name string, n int) error {
		req := &chubby.MultiRequest{Session: s, Ops: []*chubby.MultiOp{{Kind: chubby.MultiOpKind_CREATE, Path: "/d/" + name}}}
		for range n {
			req.Compares = append(req.Compares, &chubby.Compare{Path: "/d", Kind: chubby.CompareKind_EXISTS})
		}
		r, err := tc.cli.Multi(ctx, req)
		if err == nil && !r.Succeeded {
			return fmt.Errorf("Multi of %d compares did not succeed: compare %d failed", n, r.GetFailedCompare())
		}
		return err
	}
	keepAlive := func(n int) error {
		items := []*chubby.KeepAliveItem{{Session: s}}
		for i := 1; i < n; i++ {
			items = append(items, &chubby.KeepAliveItem{Session: chubby.SessionID(1_000_000_000 + i)}) // ended: answered at once
		}
		r, err := tc.cli.KeepAlive(ctx, &chubby.KeepAliveRequest{Sessions: items})
		if err == nil && len(r.Results) != n {
			return fmt.Errorf("KeepAlive of %d sessions: %d results", n, len(r.Results))
		}
		return err
	}
	lockDelay := func(d int64) error {
		if _, err := tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: lock, Mode: chubby.LockMode_EXCLUSIVE, LockDelayMs: &d}); err != nil {
			return err
		}
		return tc.cli.Release(ctx, &chubby.HandleRequest{Handle: lock})
	}
	acquireWait := func(w int64) error {
		if _, err := tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: lock, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: w}); err != nil {
			return err
		}
		return tc.cli.Release(ctx, &chubby.HandleRequest{Handle: lock})
	}
	timestamps := func(n int32) error {
		r, err := tc.cli.GetTimestamps(ctx, &chubby.GetTimestampsRequest{Count: n})
		if err != nil {
			return err
		}
		if r.Count != n {
			return fmt.Errorf("asked %d timestamps, got %d", n, r.Count)
		}
		return nil
	}
	// oracleSettled waits (bounded) until the reservation a large
	// GetTimestamps set off in the background has committed: the window
	// holds a whole call again, so nothing more is proposed.
	oracleSettled := func() error {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			tc.s.oracle.mu.Lock()
			left := tc.s.oracle.o.Available()
			tc.s.oracle.mu.Unlock()
			if left >= int64(chubby.MAX_TIMESTAMPS_PER_CALL) {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the oracle's window holds %d timestamps 10 s after a call", left)
			}
		}
	}
	checkSequencer := func(path string) error {
		r, err := tc.cli.CheckSequencer(ctx, &chubby.CheckSequencerRequest{Sequencer: &chubby.Sequencer{Path: path, Mode: chubby.LockMode_EXCLUSIVE, LockGeneration: 1, Instance: 1}})
		if err == nil && r.Valid {
			return fmt.Errorf("a sequencer of a node that does not exist is valid")
		}
		return err
	}
	clientName := func(n int) error {
		_, err := tc.cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: strings.Repeat("n", n)})
		return err
	}
	getMasterWait := func(ms int64) error {
		// Held only while this replica believes in unreachable and does
		// not serve; the master answers at once.
		_, err := tc.cli.GetMaster(ctx, &chubby.GetMasterRequest{Unreachable: str(tc.s.Addr()), WaitMs: &ms})
		return err
	}
	getMaster := func(n int) error {
		_, err := tc.cli.GetMaster(ctx, &chubby.GetMasterRequest{Unreachable: str(strings.Repeat("h", n))})
		return err
	}

	const (
		invalid  = chubby.ErrorCode_INVALID_ARGUMENT
		tooLarge = chubby.ErrorCode_TOO_LARGE
	)
	path, depth, name := int(chubby.MAX_PATH_BYTES), int(chubby.MAX_PATH_DEPTH), int(chubby.MAX_NAME_BYTES)
	maxContent := int(chubby.MAX_CONTENT_BYTES)
	const seqDigits = 10 // OpenRequest.sequential: "a 10-digit per-parent counter"
	rows := []limitRow{
		{"MAX_PATH_BYTES 4096 (CreateFile)", "chubby.thrift MAX_PATH_BYTES",
			func() error { return create(pathOf(path, "f"), nil) }, func() error { return create(pathOf(path+1, "f"), nil) }, invalid},
		{"MAX_PATH_BYTES 4096 (Mkdir)", "chubby.thrift MAX_PATH_BYTES",
			func() error { return mkdir(pathOf(path, "d")) }, func() error { return mkdir(pathOf(path+1, "d")) }, invalid},
		{"MAX_PATH_BYTES 4096 (Open)", "chubby.thrift MAX_PATH_BYTES",
			func() error { return openCreate(pathOf(path, "o"), nil) }, func() error { return openCreate(pathOf(path+1, "o"), nil) }, invalid},
		{"MAX_PATH_DEPTH 64", "chubby.thrift MAX_PATH_DEPTH",
			func() error { return mkdir(strings.Repeat("/x", depth)) }, func() error { return mkdir(strings.Repeat("/x", depth+1)) }, invalid},
		{"MAX_NAME_BYTES 255", "chubby.thrift MAX_NAME_BYTES",
			func() error { return create("/"+strings.Repeat("n", name), nil) }, func() error { return create("/"+strings.Repeat("m", name+1), nil) }, invalid},
		{"MAX_NAME_BYTES 255 with the sequential counter", "chubby.thrift OpenRequest.sequential, fs/doc.go",
			func() error { return createSeq("/" + strings.Repeat("s", name-seqDigits)) },
			func() error { return createSeq("/" + strings.Repeat("t", name-seqDigits+1)) }, invalid},
		{"MAX_PATH_BYTES 4096 with the sequential counter", "chubby.thrift OpenRequest.sequential, fs/doc.go",
			func() error { return createSeq(pathOf(path-seqDigits, "s")) },
			func() error { return createSeq(pathOf(path-seqDigits+1, "s")) }, invalid},
		{"MAX_CONTENT_BYTES 256 KiB (SetContents)", "chubby.thrift MAX_CONTENT_BYTES",
			func() error {
				_, err := tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: file, Content: content(maxContent)})
				return err
			}, func() error {
				_, err := tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: file, Content: content(maxContent + 1)})
				return err
			}, tooLarge},
		{"MAX_CONTENT_BYTES 256 KiB (CreateFile)", "chubby.thrift MAX_CONTENT_BYTES",
			func() error { return create("/big1", content(maxContent)) }, func() error { return create("/big2", content(maxContent+1)) }, tooLarge},
		{"MAX_CONTENT_BYTES 256 KiB (Open initial_content)", "chubby.thrift MAX_CONTENT_BYTES",
			func() error { return openCreate("/big3", content(maxContent)) }, func() error { return openCreate("/big4", content(maxContent+1)) }, tooLarge},
		{"MAX_MULTI_OPS 64", "chubby.thrift MAX_MULTI_OPS, MultiRequest.ops",
			func() error { return multiOps("a", int(chubby.MAX_MULTI_OPS)) }, func() error { return multiOps("b", int(chubby.MAX_MULTI_OPS)+1) }, invalid},
		{"MAX_MULTI_COMPARES 64", "chubby.thrift MAX_MULTI_COMPARES, MultiRequest.compares",
			func() error { return multiCompares("c", int(chubby.MAX_MULTI_COMPARES)) },
			func() error { return multiCompares("e", int(chubby.MAX_MULTI_COMPARES)+1) }, invalid},
		{"MAX_ACL_ENTRIES 1000", "chubby.thrift MAX_ACL_ENTRIES, fs/doc.go (ACL file)",
			func() error { return create("/acl/many", aclLines(int(chubby.MAX_ACL_ENTRIES), 8)) },
			func() error { return create("/acl/toomany", aclLines(int(chubby.MAX_ACL_ENTRIES)+1, 8)) }, invalid},
		{"MAX_PRINCIPAL_BYTES 128 in an ACL file", "chubby.thrift MAX_PRINCIPAL_BYTES, fs.ValidPrincipal",
			func() error { return create("/acl/long", aclLines(1, int(chubby.MAX_PRINCIPAL_BYTES))) },
			func() error { return create("/acl/toolong", aclLines(1, int(chubby.MAX_PRINCIPAL_BYTES)+1)) }, invalid},
		{"ACL file at MAX_ACL_ENTRIES of MAX_PRINCIPAL_BYTES", "chubby.thrift MAX_ACL_ENTRIES, MAX_PRINCIPAL_BYTES",
			func() error {
				return create("/acl/largest", aclLines(int(chubby.MAX_ACL_ENTRIES), int(chubby.MAX_PRINCIPAL_BYTES)))
			}, func() error {
				return create("/acl/over", append(aclLines(int(chubby.MAX_ACL_ENTRIES), int(chubby.MAX_PRINCIPAL_BYTES)), "z\n"...))
			}, invalid},
		{"ACL name MAX_NAME_BYTES 255 (SetACL)", "chubby.thrift ACLNames (one path component)",
			func() error { return setACL(longACL) }, func() error { return setACL(longACL + "a") }, invalid},
		{"MAX_CLIENT_NAME_BYTES 256", "chubby.thrift CreateSessionRequest.client_name",
			func() error { return clientName(int(chubby.MAX_CLIENT_NAME_BYTES)) }, func() error { return clientName(int(chubby.MAX_CLIENT_NAME_BYTES) + 1) }, invalid},
		{"MAX_SESSIONS_PER_KEEPALIVE 10000", "chubby.thrift KeepAliveRequest.sessions",
			func() error { return keepAlive(int(chubby.MAX_SESSIONS_PER_KEEPALIVE)) },
			func() error { return keepAlive(int(chubby.MAX_SESSIONS_PER_KEEPALIVE) + 1) }, invalid},
		{"MAX_LOCK_DELAY_MS 60000", "chubby.thrift AcquireRequest.lock_delay_ms",
			func() error { return lockDelay(chubby.MAX_LOCK_DELAY_MS) }, func() error { return lockDelay(chubby.MAX_LOCK_DELAY_MS + 1) }, invalid},
		{"MAX_ACQUIRE_WAIT_MS 600000", "chubby.thrift AcquireRequest.wait_ms",
			func() error { return acquireWait(chubby.MAX_ACQUIRE_WAIT_MS) }, func() error { return acquireWait(chubby.MAX_ACQUIRE_WAIT_MS + 1) }, invalid},
		{"MAX_TIMESTAMPS_PER_CALL 1000000", "chubby.thrift GetTimestampsRequest.count",
			func() error {
				if err := timestamps(chubby.MAX_TIMESTAMPS_PER_CALL); err != nil {
					return err
				}
				return oracleSettled()
			}, func() error { return timestamps(chubby.MAX_TIMESTAMPS_PER_CALL + 1) }, invalid},
		{"Sequencer path MAX_PATH_BYTES 4096", "chubby.thrift Sequencer, MAX_PATH_BYTES",
			func() error { return checkSequencer(pathOf(path, "l")) }, func() error { return checkSequencer(pathOf(path+1, "l")) }, invalid},
		{"GetMaster unreachable 512 bytes", "cell/handler.go maxAddrBytes",
			func() error { return getMaster(maxAddrBytes) }, func() error { return getMaster(maxAddrBytes + 1) }, invalid},
		{"MAX_GET_MASTER_WAIT_MS 30000", "chubby.thrift GetMasterRequest.wait_ms",
			func() error { return getMasterWait(chubby.MAX_GET_MASTER_WAIT_MS) }, func() error { return getMasterWait(chubby.MAX_GET_MASTER_WAIT_MS + 1) }, invalid},
	}
	if got := len(pathOf(path, "x")); got != path {
		t.Fatalf("pathOf(%d) is %d bytes", path, got)
	}
	walkLimits(t, tc, rows, func() error {
		if _, err := tc.cli.GetStat(ctx, &chubby.HandleRequest{Handle: probe}); err != nil {
			return err
		}
		_, err := tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: probe, Content: []byte("still here"), ExpectedGeneration: nil})
		return err
	})
}

// fsLimitCell is a row's own cell: its session and a handle on "/".
type fsLimitCell struct {
	tc    *testCell
	s     chubby.SessionID
	root  *chubby.Handle
	spare *chubby.Handle // holdLock: a second handle on the lock
}

func (f *fsLimitCell) create(path string, content []byte) error {
	_, err := f.tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: f.s, Path: path, Content: content})
	return err
}

func (f *fsLimitCell) openRoot(s chubby.SessionID) error {
	_, err := f.tc.cli.Open(ctx, &chubby.OpenRequest{Session: s, Path: "/", Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_EXISTING})
	return err
}

func (f *fsLimitCell) newSession() (chubby.SessionID, error) {
	r, err := f.tc.cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: "more"})
	if err != nil {
		return 0, err
	}
	return r.Session, nil
}

// parkAcquire opens path in a new session and parks an Acquire of its
// lock in the background (answered when the cell stops), then waits
// (bounded) until the cell counts parked Acquires and the lock of path
// counts waiters (this one among them).
func (f *fsLimitCell) parkAcquire(t *testing.T, path string, parked, waiters int) error {
	s, err := f.newSession()
	if err != nil {
		return err
	}
	h := f.tc.open(s, path, chubby.CreateMode_OPEN_EXISTING, false)
	go func() {
		_, _ = f.tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: h, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: chubby.MAX_ACQUIRE_WAIT_MS},
			callopt.WithRPCTimeout(time.Minute))
	}()
	for deadline := time.Now().Add(10 * time.Second); f.tc.s.m.parkedAcquires() < parked; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d Acquires parked after 10 s, want %d", f.tc.s.m.parkedAcquires(), parked)
		}
	}
	// Parked is not yet queued: the Acquire's command may still be on its
	// way through the log, and would change the state the row compares.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		st, err := f.tc.cli.GetStat(ctx, &chubby.HandleRequest{Handle: h})
		if err != nil {
			return err
		}
		if st.Lock != nil && st.Lock.Waiters >= int32(waiters) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the parked Acquire of %s is not queued after 10 s", path)
		}
	}
}

// acquire asks a lock for h, waiting at most 2 s: a request one past a
// bound that were wrongly queued fails with TIMED_OUT soon.
func (f *fsLimitCell) acquire(h *chubby.Handle) error {
	_, err := f.tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: h, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 2000},
		callopt.WithRPCTimeout(time.Minute))
	return err
}

// holdLock makes the row's session hold path's lock (a file it creates)
// and opens f.spare on it, for the request one past the bound.
func (f *fsLimitCell) holdLock(path string) error {
	h := f.tc.open(f.s, path, chubby.CreateMode_CREATE_NEW, false)
	_, err := f.tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: h, Mode: chubby.LockMode_EXCLUSIVE})
	f.spare = f.tc.open(f.s, path, chubby.CreateMode_OPEN_EXISTING, false)
	return err
}

// TestFSLimitsAtTheirBounds walks fs.Limits (fs.DefaultLimits, fs/limits.go)
// and the cell's caps on parked calls (cell.Config) at their bounds and one
// past, each on a cell of its own with that one limit lowered (the check
// is the same whatever its value; the defaults — a million nodes, 200,000
// sessions — would take minutes to fill): the request that reaches the
// bound works, the next is refused with the code fs/limits.go and
// cell/config.go document, changes nothing, and the session still reads.
func TestFSLimitsAtTheirBounds(t *testing.T) {
	rid := func(seq int64) *chubby.RequestID { return &chubby.RequestID{Seq: seq, Floor: 1} }
	const exceeded = chubby.ErrorCode_LIMIT_EXCEEDED
	for _, r := range []struct {
		limit string
		cfg   func(*Config)
		fill  func(*fsLimitCell) error // up to one below the bound
		at    func(*testing.T, *fsLimitCell) error
		past  func(*fsLimitCell) error
		want  chubby.ErrorCode
	}{
		{"MaxNodes 5 (root included)", func(c *Config) { c.Limits.MaxNodes = 5 },
			func(f *fsLimitCell) error {
				return errors.Join(f.create("/a", nil), f.create("/b", nil), f.create("/c", nil))
			},
			func(_ *testing.T, f *fsLimitCell) error { return f.create("/d", nil) },
			func(f *fsLimitCell) error { return f.create("/e", nil) }, exceeded},
		{"MaxChildren 3", func(c *Config) { c.Limits.MaxChildren = 3 },
			func(f *fsLimitCell) error { return errors.Join(f.create("/a", nil), f.create("/b", nil)) },
			func(_ *testing.T, f *fsLimitCell) error { return f.create("/c", nil) },
			func(f *fsLimitCell) error { return f.create("/d", nil) }, exceeded},
		{"MaxSessions 3", func(c *Config) { c.Limits.MaxSessions = 3 },
			func(f *fsLimitCell) error { _, err := f.newSession(); return err },
			func(_ *testing.T, f *fsLimitCell) error { _, err := f.newSession(); return err },
			func(f *fsLimitCell) error { _, err := f.newSession(); return err }, exceeded},
		{"MaxSessionsPerPrincipal 3", func(c *Config) { c.Limits.MaxSessionsPerPrincipal = 3 },
			func(f *fsLimitCell) error { _, err := f.newSession(); return err },
			func(_ *testing.T, f *fsLimitCell) error { _, err := f.newSession(); return err },
			func(f *fsLimitCell) error { _, err := f.newSession(); return err }, exceeded},
		{"MaxHandlesPerSession 3", func(c *Config) { c.Limits.MaxHandlesPerSession = 3 },
			func(f *fsLimitCell) error { return f.openRoot(f.s) },
			func(_ *testing.T, f *fsLimitCell) error { return f.openRoot(f.s) },
			func(f *fsLimitCell) error { return f.openRoot(f.s) }, exceeded},
		{"MaxHandles 4 (every session)", func(c *Config) { c.Limits.MaxHandles = 4 },
			func(f *fsLimitCell) error {
				s2, err := f.newSession()
				return errors.Join(err, f.openRoot(s2), f.openRoot(s2))
			},
			func(_ *testing.T, f *fsLimitCell) error { return f.openRoot(f.s) },
			func(f *fsLimitCell) error { return f.openRoot(f.s) }, exceeded},
		{"MaxContentBytes 1000", func(c *Config) { c.Limits.MaxContentBytes = 1000 },
			func(f *fsLimitCell) error { return nil },
			func(_ *testing.T, f *fsLimitCell) error { return f.create("/a", make([]byte, 1000)) },
			func(f *fsLimitCell) error { return f.create("/b", make([]byte, 1001)) }, chubby.ErrorCode_TOO_LARGE},
		{"MaxTotalContentBytes 3000", func(c *Config) { c.Limits.MaxTotalContentBytes = 3000 },
			func(f *fsLimitCell) error { return f.create("/a", make([]byte, 2000)) },
			func(_ *testing.T, f *fsLimitCell) error { return f.create("/b", make([]byte, 1000)) },
			func(f *fsLimitCell) error { return f.create("/c", make([]byte, 1)) }, exceeded},
		{"MaxSavedAnswersPerSession 3", func(c *Config) { c.Limits.MaxSavedAnswersPerSession = 3 },
			func(f *fsLimitCell) error {
				return errors.Join(
					func() error {
						_, err := f.tc.cli.Mkdir(ctx, &chubby.MkdirRequest{Session: f.s, Path: "/r1", Rid: rid(1)})
						return err
					}(),
					func() error {
						_, err := f.tc.cli.Mkdir(ctx, &chubby.MkdirRequest{Session: f.s, Path: "/r2", Rid: rid(2)})
						return err
					}())
			},
			func(_ *testing.T, f *fsLimitCell) error {
				_, err := f.tc.cli.Mkdir(ctx, &chubby.MkdirRequest{Session: f.s, Path: "/r3", Rid: rid(3)})
				return err
			},
			func(f *fsLimitCell) error {
				_, err := f.tc.cli.Mkdir(ctx, &chubby.MkdirRequest{Session: f.s, Path: "/r4", Rid: rid(4)})
				return err
			}, exceeded},
		{"MaxWaitersPerLock 2", func(c *Config) { c.Limits.MaxWaitersPerLock = 2 },
			func(f *fsLimitCell) error { return f.holdLock("/l") },
			func(t *testing.T, f *fsLimitCell) error {
				return errors.Join(f.parkAcquire(t, "/l", 1, 1), f.parkAcquire(t, "/l", 2, 2))
			},
			func(f *fsLimitCell) error { return f.acquire(f.spare) }, exceeded},
		{"MaxParkedAcquires 2 (cell.Config)", func(c *Config) { c.MaxParkedAcquires = 2 },
			func(f *fsLimitCell) error { return errors.Join(f.holdLock("/m"), f.holdLock("/l")) },
			func(t *testing.T, f *fsLimitCell) error {
				return errors.Join(f.parkAcquire(t, "/l", 1, 1), f.parkAcquire(t, "/m", 2, 1))
			},
			func(f *fsLimitCell) error { return f.acquire(f.spare) }, chubby.ErrorCode_UNAVAILABLE},
	} {
		t.Run(r.limit, func(t *testing.T) {
			frozen := time.Unix(1_800_000_000, 0)
			l := fs.DefaultLimits()
			cfg := Config{InMemory: true, Now: func() time.Time { return frozen }, Lease: time.Minute, Limits: &l}
			r.cfg(&cfg)
			f := &fsLimitCell{tc: startCell(t, cfg)}
			f.s = f.tc.session("row")
			f.root = f.tc.open(f.s, "/", chubby.CreateMode_OPEN_EXISTING, false)
			if err := r.fill(f); err != nil {
				t.Fatalf("filling up to the bound: %v", err)
			}
			if err := r.at(t, f); err != nil {
				t.Fatalf("at the bound: %v", err)
			}
			before := stateBytes(f.tc.s.m)
			err := r.past(f)
			if got := codeOf(err); got != r.want {
				t.Fatalf("one past the bound: %v (code %v), want %v", err, got, r.want)
			}
			if after := stateBytes(f.tc.s.m); !bytes.Equal(before, after) {
				t.Fatal("the refused request one past the bound changed the state")
			}
			if _, err := f.tc.cli.GetStat(ctx, &chubby.HandleRequest{Handle: f.root}); err != nil {
				t.Fatalf("the session's next call: %v", err)
			}
			if _, err := f.tc.cli.ReadDir(ctx, &chubby.ReadDirRequest{Handle: f.root}); err != nil {
				t.Fatalf("the session's next call: %v", err)
			}
		})
	}
}
