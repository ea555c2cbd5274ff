package fs

import (
	"bytes"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/cloudwego/gopkg/protocol/thrift"
)

// harness drives a State in tests. After every command it checks the
// invariants, and for a refused command that it changed nothing but the
// clock (the state equals the state before plus a Tick at the same time) —
// and, for a sequenced command refused by its operation, its session's
// exactly-once record: the refusal saved as the answer of its seq and the
// floor raised to its seq_floor, exactly as apply does for a success.
// Whether the refusal had to be saved is checked by the exactly-once tests
// and the model (TestExactlyOnce, TestRandomModel), not here.
type harness struct {
	t   testing.TB
	s   *State
	now int64
	// strict enables the "refused changes nothing" check (3 snapshots per
	// command; off in the larger randomized tests).
	strict bool
}

func newHarness(t testing.TB) *harness { return newHarnessLimits(t, DefaultLimits()) }

func newHarnessLimits(t testing.TB, l Limits) *harness {
	return &harness{t: t, s: New(l), now: 1000, strict: true}
}

// cmd applies a command at the harness clock.
func (h *harness) cmd(c *fsm.Command) (*fsm.Result_, Effects) {
	h.t.Helper()
	c.TimeMs = h.now
	var want []byte
	var ticked *State
	if h.strict {
		// The expected state if c is refused: the same state ticked to c's time.
		t, err := Restore(h.s.Snapshot(), h.s.limits)
		if err != nil {
			h.t.Fatalf("restore before command: %v", err)
		}
		if c.TimeMs >= 0 && c.TimeMs <= MaxTimeMs {
			t.Apply(&fsm.Command{TimeMs: c.TimeMs, Op: &fsm.Op{Tick: &fsm.Tick{}}})
		}
		ticked = t
	}
	res, fx := h.s.Apply(c)
	if res == nil {
		h.t.Fatalf("nil result")
	}
	if err := h.s.checkInvariants(); err != nil {
		h.t.Fatalf("invariant broken after %v: %v", c, err)
	}
	if h.strict && res.Err != nil {
		// A refusal newly saved under c's seq (it was not there before):
		// expect exactly that answer and c's floor in the record, nothing else.
		if c.Session != nil && c.Seq != nil {
			before, after := ticked.sessions[*c.Session], h.s.sessions[*c.Session]
			if before != nil && after != nil {
				_, had := before.findAnswer(*c.Seq)
				_, has := after.findAnswer(*c.Seq)
				if !had && has {
					floor := *c.Seq
					if c.SeqFloor != nil {
						floor = *c.SeqFloor
					}
					before.saveAnswer(*c.Seq, cloneResult(res))
					before.raiseFloor(floor)
				}
			}
		}
		want = ticked.Snapshot()
	}
	if h.strict && res.Err != nil && !bytes.Equal(want, h.s.Snapshot()) {
		// The one exception: a TryAcquire refused with LOCK_HELD tells
		// the holders (CONFLICTING_LOCK_REQUEST).
		conflict := c.Op != nil && c.Op.Acquire != nil && res.Err.Code == chubby.ErrorCode_LOCK_HELD
		if !conflict || !bytes.Equal(withoutEvents(h.t, want), withoutEvents(h.t, h.s.Snapshot())) {
			h.t.Fatalf("refused command %v (%v) changed the state", c, res.Err)
		}
	}
	return res, fx
}

// withoutEvents returns snapshot b with every session's event queue
// removed.
func withoutEvents(t testing.TB, b []byte) []byte {
	t.Helper()
	snap, err := decodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, ss := range snap.Sessions {
		ss.LastEventSeq, ss.Events = nil, nil
	}
	return thrift.FastMarshal(snap)
}

func (h *harness) op(op *fsm.Op) (*fsm.Result_, Effects) {
	h.t.Helper()
	return h.cmd(&fsm.Command{Op: op})
}

// ok applies op and fails the test if it is refused.
func (h *harness) ok(op *fsm.Op) (*fsm.Result_, Effects) {
	h.t.Helper()
	res, fx := h.op(op)
	if res.Err != nil {
		h.t.Fatalf("%v: unexpected error %v", op, res.Err)
	}
	return res, fx
}

// fail applies op and checks it is refused with code.
func (h *harness) fail(code chubby.ErrorCode, op *fsm.Op) *chubby.ChubbyError {
	h.t.Helper()
	res, fx := h.op(op)
	if res.Err == nil || res.Err.Code != code {
		h.t.Fatalf("%v: got %v, want %v", op, res.Err, code)
	}
	if len(fx.Woken) != 0 || len(fx.EndedSessions) != 0 || len(fx.Notified) != 0 && op.Acquire == nil {
		h.t.Fatalf("%v: refused command has effects %+v", op, fx)
	}
	return res.Err
}

func (h *harness) session() chubby.SessionID {
	h.t.Helper()
	res, _ := h.ok(opCreateSession("test"))
	return *res.Session
}

func (h *harness) open(sess chubby.SessionID, path string, mode chubby.OpenMode, create chubby.CreateMode) *chubby.Handle {
	h.t.Helper()
	res, _ := h.ok(opOpen(&chubby.OpenRequest{Session: sess, Path: path, Mode: mode, Create: create}))
	return res.Handle
}

// rw opens path READ_WRITE, creating a file if missing.
func (h *harness) rw(sess chubby.SessionID, path string) *chubby.Handle {
	h.t.Helper()
	return h.open(sess, path, chubby.OpenMode_READ_WRITE, chubby.CreateMode_OPEN_OR_CREATE)
}

func (h *harness) mkdir(sess chubby.SessionID, path string) {
	h.t.Helper()
	h.ok(opMkdir(sess, path, true, false))
}

func (h *harness) write(sess chubby.SessionID, path, content string) {
	h.t.Helper()
	h.ok(opCreateFile(&chubby.CreateFileRequest{Session: sess, Path: path, Content: []byte(content), MakeParents: ptr(true)}))
}

func (h *harness) stat(hd *chubby.Handle) *chubby.Stat {
	h.t.Helper()
	st, err := h.s.GetStat(hd)
	if err != nil {
		h.t.Fatalf("GetStat %v: %v", hd, err)
	}
	return st
}

func (h *harness) exists(path string) bool {
	comps, err := parsePath(path)
	if err != nil {
		h.t.Fatalf("bad path %q", path)
	}
	_, lerr := h.s.lookup(path, comps)
	return lerr == nil
}

func ptr[T any](v T) *T { return &v }

func opCreateSession(name string) *fsm.Op {
	return &fsm.Op{CreateSession: &chubby.CreateSessionRequest{ClientName: name}}
}
func opEnd(id chubby.SessionID, expired bool) *fsm.Op {
	return &fsm.Op{EndSession: &fsm.EndSession{Session: id, Expired: expired}}
}
func opOpen(req *chubby.OpenRequest) *fsm.Op { return &fsm.Op{Open: req} }
func opClose(hd *chubby.Handle) *fsm.Op {
	return &fsm.Op{Close: &chubby.CloseRequest{Handle: hd}}
}
func opSet(hd *chubby.Handle, content string) *fsm.Op {
	return &fsm.Op{SetContents: &chubby.SetContentsRequest{Handle: hd, Content: []byte(content)}}
}
func opSetGen(hd *chubby.Handle, content string, gen int64) *fsm.Op {
	return &fsm.Op{SetContents: &chubby.SetContentsRequest{Handle: hd, Content: []byte(content), ExpectedGeneration: &gen}}
}
func opDelete(hd *chubby.Handle, recursive bool) *fsm.Op {
	return &fsm.Op{DeleteNode: &chubby.DeleteRequest{Handle: hd, Recursive: &recursive}}
}
func opMkdir(sess chubby.SessionID, path string, parents, ephemeral bool) *fsm.Op {
	return &fsm.Op{Mkdir: &chubby.MkdirRequest{Session: sess, Path: path, Parents: &parents, Ephemeral: &ephemeral}}
}
func opCreateFile(req *chubby.CreateFileRequest) *fsm.Op { return &fsm.Op{CreateFile: req} }
func opAcquire(hd *chubby.Handle, mode chubby.LockMode, wait bool, delay int64) *fsm.Op {
	return &fsm.Op{Acquire: &fsm.Acquire{Handle: hd, Mode: mode, Wait: wait, LockDelayMs: delay}}
}
func opRelease(hd *chubby.Handle) *fsm.Op {
	return &fsm.Op{Release: &chubby.HandleRequest{Handle: hd}}
}
func opCancel(hd *chubby.Handle) *fsm.Op {
	return &fsm.Op{CancelWait: &fsm.CancelWait{Handle: hd}}
}
func opTick() *fsm.Op { return &fsm.Op{Tick: &fsm.Tick{}} }

const (
	excl   = chubby.LockMode_EXCLUSIVE
	shared = chubby.LockMode_SHARED
	rd     = chubby.OpenMode_READ
	rdwr   = chubby.OpenMode_READ_WRITE
)
