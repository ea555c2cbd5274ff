package fs

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// eoEnv is the setting of an exactly-once test: one session with a
// READ_WRITE handle on /f (content generation 1) and a directory /q for
// sequential files.
type eoEnv struct {
	h     *harness
	sess  chubby.SessionID
	f     *chubby.Handle
	first map[int64][]byte // the first answer of each seq (success or refusal), encoded
}

func newEOEnv(t *testing.T, l Limits) *eoEnv {
	h := newHarnessLimits(t, l)
	e := &eoEnv{h: h, sess: h.session(), first: map[int64][]byte{}}
	e.f = h.rw(e.sess, "/f")
	h.mkdir(e.sess, "/q")
	return e
}

// send applies op as request seq of the session, with floor (nil: unset).
func (e *eoEnv) send(seq int64, floor *int64, op *fsm.Op) (*fsm.Result_, Effects) {
	e.h.t.Helper()
	e.h.now += 10
	return e.h.cmd(&fsm.Command{Session: &e.sess, Seq: &seq, SeqFloor: floor, Op: op})
}

// record returns the session's floor and the numbers of its saved answers.
func (e *eoEnv) record() (int64, []int64) {
	sess := e.h.s.sessions[e.sess]
	seqs := []int64{}
	for _, a := range sess.answers {
		seqs = append(seqs, a.seq)
	}
	return sess.floor, seqs
}

func fl(v int64) *int64 { return &v }

// errCode is the code of a possibly nil error (0: none).
func errCode(e *chubby.ChubbyError) chubby.ErrorCode {
	if e == nil {
		return 0
	}
	return e.Code
}

// eoStep is one request of a test case.
type eoStep struct {
	seq   int64
	floor *int64 // nil: unset
	op    string // set: SetContents of /f; cas1, cas2, cas99: the same expecting generation 1, 2, 99; seqfile: sequential CreateFile in /q
	code  chubby.ErrorCode
	msg   string // when refused: part of the message
	saved bool   // answered from the record: the first answer of seq again
}

// preDispatch reports whether st expects a refusal checked before the
// operation (bad numbers, below the floor, too many in flight), which is
// not saved; any other answer is the first answer of its seq, and saved.
func (st eoStep) preDispatch() bool {
	return st.code == invalid || st.msg == limitMsg
}

func (e *eoEnv) op(name string) *fsm.Op {
	switch name {
	case "set":
		return opSet(e.f, "x")
	case "cas1":
		return opSetGen(e.f, "x", 1)
	case "cas2":
		return opSetGen(e.f, "x", 2)
	case "cas99":
		return opSetGen(e.f, "x", 99)
	case "seqfile":
		return opCreateFile(&chubby.CreateFileRequest{Session: e.sess, Path: "/q/n", Sequential: ptr(true)})
	}
	panic("unknown op " + name)
}

const (
	invalid  = chubby.ErrorCode_INVALID_ARGUMENT
	belowMsg = "request already finished (below the session's floor)"
	limitMsg = "too many requests in flight; raise your floor"
)

func TestExactlyOnce(t *testing.T) {
	tests := []struct {
		name    string
		limit   int // MaxSavedAnswersPerSession; 0: default
		steps   []eoStep
		gen     int64   // content generation of /f at the end
		files   int     // files in /q at the end
		floor   int64   // the session's floor at the end
		answers []int64 // its saved answers at the end
	}{
		{
			name: "in order, floor following",
			steps: []eoStep{
				{seq: 1, floor: fl(1), op: "set"},
				{seq: 2, floor: fl(2), op: "set"},
				{seq: 3, floor: fl(3), op: "set"},
			},
			gen: 4, floor: 3, answers: []int64{3},
		},
		{
			name: "floor unset is the request's own seq",
			steps: []eoStep{
				{seq: 1, op: "set"},
				{seq: 2, op: "set"},
				{seq: 1, op: "set", code: invalid, msg: belowMsg},
				{seq: 2, op: "set", saved: true},
			},
			gen: 3, floor: 2, answers: []int64{2},
		},
		{
			name: "out of order: 5 then 4",
			steps: []eoStep{
				{seq: 5, floor: fl(4), op: "set"},
				{seq: 4, floor: fl(4), op: "set"},
				{seq: 5, floor: fl(4), op: "set", saved: true},
				{seq: 4, floor: fl(4), op: "set", saved: true},
			},
			gen: 3, floor: 4, answers: []int64{4, 5},
		},
		{
			name: "out of order with a gap, then the floor passes all",
			steps: []eoStep{
				{seq: 1, floor: fl(1), op: "set"},
				{seq: 3, floor: fl(1), op: "set"},
				{seq: 2, floor: fl(1), op: "set"},
				{seq: 4, floor: fl(4), op: "set"},
				{seq: 2, floor: fl(2), op: "set", code: invalid, msg: belowMsg},
			},
			gen: 5, floor: 4, answers: []int64{4},
		},
		{
			name: "retried sequential CreateFile creates once",
			steps: []eoStep{
				{seq: 1, floor: fl(1), op: "seqfile"},
				{seq: 1, floor: fl(1), op: "seqfile", saved: true},
				{seq: 2, floor: fl(1), op: "seqfile"},
				{seq: 1, floor: fl(1), op: "seqfile", saved: true},
				{seq: 2, floor: fl(1), op: "seqfile", saved: true},
			},
			gen: 1, files: 2, floor: 1, answers: []int64{1, 2},
		},
		{
			name: "retried SetContents bumps the generation once",
			steps: []eoStep{
				{seq: 1, floor: fl(1), op: "set"},
				{seq: 1, floor: fl(1), op: "set", saved: true},
				{seq: 1, floor: fl(1), op: "set", saved: true},
			},
			gen: 2, floor: 1, answers: []int64{1},
		},
		{
			name: "retried compare-and-swap gets its success, not a mismatch",
			steps: []eoStep{
				{seq: 1, floor: fl(1), op: "cas1"},
				{seq: 1, floor: fl(1), op: "cas1", saved: true},
				{seq: 2, floor: fl(1), op: "cas1", code: chubby.ErrorCode_GENERATION_MISMATCH},
				{seq: 2, floor: fl(1), op: "cas1", code: chubby.ErrorCode_GENERATION_MISMATCH, saved: true},
			},
			gen: 2, floor: 1, answers: []int64{1, 2},
		},
		{
			name: "retry after later requests",
			steps: []eoStep{
				{seq: 1, floor: fl(1), op: "set"},
				{seq: 2, floor: fl(1), op: "set"},
				{seq: 3, floor: fl(1), op: "set"},
				{seq: 1, floor: fl(1), op: "set", saved: true},
				{seq: 2, floor: fl(1), op: "set", saved: true},
			},
			gen: 4, floor: 1, answers: []int64{1, 2, 3},
		},
		{
			name: "below the floor is refused",
			steps: []eoStep{
				{seq: 1, floor: fl(1), op: "set"},
				{seq: 2, floor: fl(1), op: "set"},
				{seq: 3, floor: fl(3), op: "set"},
				{seq: 1, floor: fl(1), op: "set", code: invalid, msg: belowMsg},
				{seq: 2, floor: fl(2), op: "set", code: invalid, msg: belowMsg},
				{seq: 3, floor: fl(3), op: "set", saved: true},
			},
			gen: 4, floor: 3, answers: []int64{3},
		},
		{
			name: "raising the floor forgets the answers below it",
			steps: []eoStep{
				{seq: 1, floor: fl(1), op: "set"},
				{seq: 2, floor: fl(1), op: "set"},
				{seq: 3, floor: fl(1), op: "set"},
				{seq: 4, floor: fl(3), op: "set"},
				{seq: 2, floor: fl(2), op: "set", code: invalid, msg: belowMsg},
				{seq: 3, floor: fl(3), op: "set", saved: true},
				{seq: 4, floor: fl(3), op: "set", saved: true},
			},
			gen: 5, floor: 3, answers: []int64{3, 4},
		},
		{
			name: "the floor never goes down",
			steps: []eoStep{
				{seq: 5, floor: fl(5), op: "set"},
				{seq: 6, floor: fl(2), op: "set"},
				{seq: 4, floor: fl(4), op: "set", code: invalid, msg: belowMsg},
			},
			gen: 3, floor: 5, answers: []int64{5, 6},
		},
		{
			name: "an answered retry raises no floor",
			steps: []eoStep{
				{seq: 1, floor: fl(1), op: "set"},
				{seq: 2, floor: fl(1), op: "set"},
				{seq: 2, floor: fl(2), op: "set", saved: true},
				{seq: 1, floor: fl(1), op: "set", saved: true},
			},
			gen: 3, floor: 1, answers: []int64{1, 2},
		},
		{
			// The first application decides: a retry gets the saved refusal
			// and applies nothing, even where it would succeed now.
			name: "a refused command is saved and raises the floor",
			steps: []eoStep{
				{seq: 1, floor: fl(1), op: "cas99", code: chubby.ErrorCode_GENERATION_MISMATCH},
				{seq: 1, floor: fl(1), op: "set", code: chubby.ErrorCode_GENERATION_MISMATCH, saved: true},
				{seq: 2, floor: fl(1), op: "cas2", code: chubby.ErrorCode_GENERATION_MISMATCH},
				{seq: 3, floor: fl(1), op: "set"},                                                           // now at generation 2
				{seq: 2, floor: fl(1), op: "cas2", code: chubby.ErrorCode_GENERATION_MISMATCH, saved: true}, // would succeed now
				{seq: 4, floor: fl(4), op: "cas99", code: chubby.ErrorCode_GENERATION_MISMATCH},             // raises the floor
				{seq: 3, floor: fl(3), op: "set", code: invalid, msg: belowMsg},
				{seq: 4, floor: fl(4), op: "cas2", code: chubby.ErrorCode_GENERATION_MISMATCH, saved: true},
			},
			gen: 2, floor: 4, answers: []int64{4},
		},
		{
			name:  "saved refusals take room",
			limit: 2,
			steps: []eoStep{
				{seq: 1, floor: fl(1), op: "cas99", code: chubby.ErrorCode_GENERATION_MISMATCH},
				{seq: 2, floor: fl(1), op: "cas99", code: chubby.ErrorCode_GENERATION_MISMATCH},
				{seq: 3, floor: fl(1), op: "set", code: chubby.ErrorCode_LIMIT_EXCEEDED, msg: limitMsg},
				{seq: 3, floor: fl(2), op: "set"},
				{seq: 2, floor: fl(2), op: "cas99", code: chubby.ErrorCode_GENERATION_MISMATCH, saved: true},
			},
			gen: 2, floor: 2, answers: []int64{2, 3},
		},
		{
			name: "bad numbers",
			steps: []eoStep{
				{seq: 0, op: "set", code: invalid},
				{seq: -1, floor: fl(1), op: "set", code: invalid},
				{seq: 3, floor: fl(4), op: "set", code: invalid},
				{seq: 3, floor: fl(0), op: "set", code: invalid},
				{seq: 3, floor: fl(-1), op: "set", code: invalid},
				{seq: 3, floor: fl(3), op: "set"},
			},
			gen: 2, floor: 3, answers: []int64{3},
		},
		{
			name:  "too many answers in flight",
			limit: 3,
			steps: []eoStep{
				{seq: 1, floor: fl(1), op: "set"},
				{seq: 2, floor: fl(1), op: "set"},
				{seq: 3, floor: fl(1), op: "set"},
				{seq: 4, floor: fl(1), op: "set", code: chubby.ErrorCode_LIMIT_EXCEEDED, msg: limitMsg},
				{seq: 1, floor: fl(1), op: "set", saved: true}, // nothing was forgotten
				{seq: 4, floor: fl(2), op: "set"},              // its own floor makes room
				{seq: 5, floor: fl(2), op: "set", code: chubby.ErrorCode_LIMIT_EXCEEDED, msg: limitMsg},
				{seq: 2, floor: fl(2), op: "set", saved: true},
				{seq: 5, floor: fl(5), op: "set"},
			},
			gen: 6, floor: 5, answers: []int64{5},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := DefaultLimits()
			if tt.limit > 0 {
				l.MaxSavedAnswersPerSession = tt.limit
			}
			e := newEOEnv(t, l)
			for i, st := range tt.steps {
				res, _ := e.send(st.seq, st.floor, e.op(st.op))
				switch {
				case st.code != 0 && (errCode(res.Err) != st.code || !strings.Contains(res.Err.Message, st.msg)):
					t.Fatalf("step %d (seq %d): got %v, want %v %q", i, st.seq, res.Err, st.code, st.msg)
				case st.code == 0 && res.Err != nil:
					t.Fatalf("step %d (seq %d): %v", i, st.seq, res.Err)
				case st.preDispatch():
					// Refused before the operation: nothing saved.
				case st.saved:
					if first := e.first[st.seq]; first == nil || !bytes.Equal(EncodeResult(res), first) {
						t.Fatalf("step %d (seq %d): %v is not the first answer", i, st.seq, res)
					}
				default:
					if e.first[st.seq] != nil {
						t.Fatalf("step %d (seq %d): answered twice", i, st.seq)
					}
					e.first[st.seq] = EncodeResult(res)
				}
			}
			if g := e.h.stat(e.f).ContentGeneration; g != tt.gen {
				t.Errorf("generation of /f %d, want %d", g, tt.gen)
			}
			if got, _ := e.h.s.ReadDir(e.h.open(e.sess, "/q", rd, chubby.CreateMode_OPEN_EXISTING)); len(got) != tt.files {
				t.Errorf("%d files in /q, want %d", len(got), tt.files)
			}
			floor, answers := e.record()
			if floor != tt.floor || !slices.Equal(answers, tt.answers) {
				t.Errorf("floor %d answers %v, want %d %v", floor, answers, tt.floor, tt.answers)
			}
		})
	}
}

// TestExactlyOnceRefusalSaved reproduces the bug of saving only successes:
// a client's first attempt of request 7 (a compare-and-swap) times out and
// is still queued; its retry is applied first and refused, and the client
// takes the refusal as the answer. The state then changes so that the CAS
// would succeed, and the first attempt is applied. It must get the saved
// refusal and change nothing; before the fix it found no saved answer and
// succeeded: the write took effect after the client was told it was
// refused. The same for a TryAcquire refused with LOCK_HELD.
func TestExactlyOnceRefusalSaved(t *testing.T) {
	e := newEOEnv(t, DefaultLimits())
	h := e.h
	cas := opSetGen(e.f, "cas", 2) // /f is at generation 1: refused
	r1, fx := e.send(7, fl(7), cas)
	if errCode(r1.Err) != chubby.ErrorCode_GENERATION_MISMATCH || len(fx.Woken) != 0 {
		t.Fatalf("first application: %v %+v", r1.Err, fx)
	}
	// Another request moves /f to generation 2: the CAS would succeed now.
	if r, _ := e.send(8, fl(7), opSet(e.f, "other")); r.Err != nil || r.Stat.ContentGeneration != 2 {
		t.Fatalf("request 8: %v", r)
	}
	// The queued first attempt of 7 (the harness checks it changes nothing).
	r2, fx := e.send(7, fl(7), opSetGen(e.f, "cas", 2))
	if !bytes.Equal(EncodeResult(r2), EncodeResult(r1)) || len(fx.Woken) != 0 {
		t.Fatalf("second copy of request 7: %v %+v, want the saved %v", r2, fx, r1)
	}
	if st := h.stat(e.f); st.ContentGeneration != 2 {
		t.Fatalf("request 7 took effect: generation %d", st.ContentGeneration)
	}
	if c, _, _ := h.s.GetContentsAndStat(e.f); string(c) != "other" {
		t.Fatalf("request 7 took effect: contents %q", c)
	}
	if floor, answers := e.record(); floor != 7 || !slices.Equal(answers, []int64{7, 8}) {
		t.Fatalf("record: floor %d answers %v, want 7 [7 8]", floor, answers)
	}

	// TryAcquire refused with LOCK_HELD; the holder releases; the second
	// copy must not take the lock.
	other := h.session()
	ho := h.rw(other, "/l")
	h.ok(opAcquire(ho, excl, false, 0))
	hl := h.rw(e.sess, "/l")
	r3, _ := e.send(9, fl(9), opAcquire(hl, excl, false, 0))
	if errCode(r3.Err) != chubby.ErrorCode_LOCK_HELD {
		t.Fatalf("try-acquire: %v", r3.Err)
	}
	h.ok(opRelease(ho))
	if r4, fx := e.send(9, fl(9), opAcquire(hl, excl, false, 0)); !bytes.Equal(EncodeResult(r4), EncodeResult(r3)) || len(fx.Woken) != 0 {
		t.Fatalf("second copy of the try-acquire: %v %+v, want %v", r4, fx, r3)
	}
	if _, err := h.s.GetSequencer(hl); err == nil {
		t.Fatal("the second copy of a refused try-acquire took the lock")
	}

	// The saved refusal survives a snapshot.
	r, err := Restore(h.s.Snapshot(), h.s.limits)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := r.Apply(&fsm.Command{TimeMs: h.now, Session: &e.sess, Seq: ptr(int64(9)), SeqFloor: ptr(int64(9)), Op: opAcquire(hl, excl, false, 0)})
	if !bytes.Equal(EncodeResult(got), EncodeResult(r3)) {
		t.Fatalf("restored copy of the try-acquire: %v, want %v", got, r3)
	}
}

// TestExactlyOnceRecord covers the rest of the record: the saved copy is
// the state's own, an Acquire retried after its grant gets its original
// answer, commands without seq are not deduplicated, and the record ends
// with the session.
func TestExactlyOnceRecord(t *testing.T) {
	e := newEOEnv(t, DefaultLimits())
	h := e.h
	r1, _ := e.send(1, fl(1), e.op("seqfile"))
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	r1.Stat.Path = "changed" // the saved copy is not the caller's
	if r, _ := e.send(1, fl(1), e.op("seqfile")); r.Err != nil || r.Stat.Path != "/q/n0000000000" {
		t.Fatalf("saved result was changed through the caller's copy: %v", r)
	}
	r, _ := e.send(1, fl(1), e.op("seqfile"))
	r.Stat.Path = "changed again" // nor is a copy handed out for a retry
	if r, _ := e.send(1, fl(1), e.op("seqfile")); r.Stat.Path != "/q/n0000000000" {
		t.Fatalf("saved result was changed through a retry's copy: %v", r)
	}

	// An Acquire queued, then granted: its retry says queued again, and
	// neither queues nor grants a second time.
	other := h.session()
	ho := h.rw(other, "/l")
	h.ok(opAcquire(ho, excl, false, 0))
	hl := h.rw(e.sess, "/l")
	if r, _ := e.send(2, fl(1), opAcquire(hl, excl, true, 0)); !r.GetWaiting() {
		t.Fatalf("acquire: %v", r)
	}
	if _, fx := h.ok(opRelease(ho)); len(fx.Woken) != 1 || fx.Woken[0].Handle != hl.Id {
		t.Fatalf("grant: %+v", fx)
	}
	gen := h.stat(hl).LockGeneration
	if r, fx := e.send(2, fl(1), opAcquire(hl, excl, true, 0)); !r.GetWaiting() || len(fx.Woken) != 0 || h.stat(hl).LockGeneration != gen {
		t.Fatalf("acquire retry: %v %+v", r, fx)
	}
	if sq, err := h.s.GetSequencer(hl); err != nil || sq.LockGeneration != gen {
		t.Fatalf("holder after the retry: %v %v", sq, err)
	}

	// Without seq there is no dedupe, but the session is still checked.
	g := h.stat(e.f).ContentGeneration
	for i := range 2 {
		if r, _ := h.cmd(&fsm.Command{Session: &e.sess, Op: opSet(e.f, "d")}); r.Err != nil || r.Stat.ContentGeneration != g+1+int64(i) {
			t.Fatalf("no seq: %v", r)
		}
	}
	if r, _ := h.cmd(&fsm.Command{Session: &e.sess, Op: opSet(ho, "d")}); errCode(r.Err) != invalid {
		t.Fatalf("another session's handle: %v", r.Err)
	}

	// The record ends with the session; ending it saves nothing.
	e.send(3, fl(1), opEnd(e.sess, false))
	if r, _ := e.send(3, fl(1), opEnd(e.sess, false)); errCode(r.Err) != chubby.ErrorCode_SESSION_EXPIRED {
		t.Fatalf("after end: %v", r.Err)
	}
	if r, _ := e.send(1, fl(1), e.op("seqfile")); errCode(r.Err) != chubby.ErrorCode_SESSION_EXPIRED {
		t.Fatalf("answered request after end: %v", r.Err)
	}

	bad := DefaultLimits()
	bad.MaxSavedAnswersPerSession = 0
	if bad.Validate() == nil {
		t.Fatal("MaxSavedAnswersPerSession 0 accepted")
	}
}

// TestExactlyOnceSnapshot: the floor and the saved answers are part of the
// snapshot, in order; a restored state answers retries as the original
// does; Restore refuses a bad record.
func TestExactlyOnceSnapshot(t *testing.T) {
	e := newEOEnv(t, DefaultLimits())
	h := e.h
	b := h.session()
	hb := h.rw(b, "/g")
	for _, st := range []struct{ seq, floor int64 }{{7, 3}, {3, 3}, {9, 3}, {5, 3}} {
		if r, _ := e.send(st.seq, fl(st.floor), opSet(e.f, "x")); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if r, _ := h.cmd(&fsm.Command{Session: &b, Seq: ptr(int64(2)), SeqFloor: ptr(int64(2)), Op: opSet(hb, "y")}); r.Err != nil {
		t.Fatal(r.Err)
	}
	snap := h.s.Snapshot()
	dec, err := decodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, a := range dec.Sessions[0].Answers {
		seqs = append(seqs, a.Seq)
	}
	if dec.Sessions[0].SeqFloor != 3 || !slices.Equal(seqs, []int64{3, 5, 7, 9}) || dec.Sessions[1].SeqFloor != 2 || len(dec.Sessions[1].Answers) != 1 {
		t.Fatalf("snapshot record: floor %d answers %v; %+v", dec.Sessions[0].SeqFloor, seqs, dec.Sessions[1])
	}

	// A lower limit on restore keeps every answer (limits refuse growth only).
	low := DefaultLimits()
	low.MaxSavedAnswersPerSession = 2
	for _, l := range []Limits{DefaultLimits(), low} {
		r, err := Restore(snap, l)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(snap, r.Snapshot()) {
			t.Fatal("snapshot → restore → snapshot differs")
		}
		for _, seq := range []int64{3, 5, 7, 9} {
			c := &fsm.Command{TimeMs: h.now, Session: &e.sess, Seq: &seq, SeqFloor: ptr(int64(3)), Op: opSet(e.f, "x")}
			want, _ := h.s.Apply(c)
			got, _ := r.Apply(c)
			if got.Err != nil || !bytes.Equal(EncodeResult(want), EncodeResult(got)) {
				t.Fatalf("restored retry of %d: %v, want %v", seq, got, want)
			}
		}
		c := &fsm.Command{TimeMs: h.now, Session: &e.sess, Seq: ptr(int64(10)), SeqFloor: ptr(int64(3)), Op: opSet(e.f, "x")}
		if got, _ := r.Apply(c); l.MaxSavedAnswersPerSession == 2 && errCode(got.Err) != chubby.ErrorCode_LIMIT_EXCEEDED || l.MaxSavedAnswersPerSession > 2 && got.Err != nil {
			t.Fatalf("limit %d: new request: %v", l.MaxSavedAnswersPerSession, got.Err)
		}
		if r, _ := r.Apply(&fsm.Command{TimeMs: h.now, Session: &e.sess, Seq: ptr(int64(2)), SeqFloor: ptr(int64(2)), Op: opSet(e.f, "x")}); errCode(r.Err) != invalid {
			t.Fatalf("restored floor: %v", r.Err)
		}
	}

	mutate := func(name string, f func(ss *fsm.SnapSession)) {
		t.Helper()
		sn, err := decodeSnapshot(snap)
		if err != nil {
			t.Fatal(err)
		}
		f(sn.Sessions[0])
		if _, err := Restore(EncodeSnapshotForTest(sn), DefaultLimits()); err == nil {
			t.Errorf("%s: corrupt snapshot accepted", name)
		}
	}
	mutate("floor 0", func(ss *fsm.SnapSession) { ss.SeqFloor = 0 })
	mutate("answer below the floor", func(ss *fsm.SnapSession) { ss.SeqFloor = 4 })
	mutate("answers out of order", func(ss *fsm.SnapSession) { ss.Answers[0], ss.Answers[1] = ss.Answers[1], ss.Answers[0] })
	mutate("answer repeated", func(ss *fsm.SnapSession) { ss.Answers[1].Seq = ss.Answers[0].Seq })
	mutate("answer missing", func(ss *fsm.SnapSession) { ss.Answers[1] = nil })
	mutate("refusal with results", func(ss *fsm.SnapSession) { ss.Answers[1].Result_.Err = Errorf(chubby.ErrorCode_NOT_FOUND, "x") })
	mutate("refusal without a code", func(ss *fsm.SnapSession) {
		ss.Answers[1].Result_ = &fsm.Result_{Err: &chubby.ChubbyError{Message: "x"}}
	})

	// A saved refusal (a bare error) restores.
	sn, err := decodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	sn.Sessions[0].Answers[1].Result_ = &fsm.Result_{Err: Errorf(chubby.ErrorCode_GENERATION_MISMATCH, "x")}
	if _, err := Restore(EncodeSnapshotForTest(sn), DefaultLimits()); err != nil {
		t.Errorf("saved refusal refused: %v", err)
	}
}

// TestRequestFinished: a request is finished once the session's floor has
// passed it, and only then; an unknown session has none finished.
func TestRequestFinished(t *testing.T) {
	e := newEOEnv(t, DefaultLimits())
	write := func() *fsm.Op {
		return &fsm.Op{SetContents: &chubby.SetContentsRequest{Handle: e.f, Content: []byte("x")}}
	}
	e.send(4, fl(2), write()) // 2 and 3 (a blocking Acquire, say) still in flight
	for seq, want := range map[int64]bool{0: false, 1: true, 2: false, 3: false, 4: false, 9: false} {
		if got := e.h.s.RequestFinished(e.sess, seq); got != want {
			t.Errorf("floor 2: request %d finished %v, want %v", seq, got, want)
		}
	}
	e.send(6, fl(6), write()) // everything below 6 finished
	for seq, want := range map[int64]bool{3: true, 5: true, 6: false} {
		if got := e.h.s.RequestFinished(e.sess, seq); got != want {
			t.Errorf("floor 6: request %d finished %v, want %v", seq, got, want)
		}
	}
	if e.h.s.RequestFinished(e.sess+100, 1) {
		t.Error("a request of an unknown session is finished")
	}
}
