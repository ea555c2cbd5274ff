package fs

import (
	"bytes"
	"slices"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// lockModel is what a client-side observer (the master) can know about
// locks from Results and Effects alone. TestRandomModel checks it against
// the state after every command: every Acquire is decided exactly once,
// every observed grant is visible through GetSequencer and CheckSequencer,
// and the counts agree.
type lockModel struct {
	pending map[int64]bool                 // handle → waiting (Result.waiting seen, no Wake yet)
	holding map[int64]chubby.LockMode      // handle → mode held
	handles map[int64]*chubby.Handle       // every handle handed out
	session map[int64]chubby.SessionID     // handle → session
	seqs    map[chubby.SessionID]*seqModel // exactly-once records of live sessions
	live    map[chubby.SessionID]bool      // sessions created and not ended
	limit   int                            // Limits.MaxSavedAnswersPerSession
}

// seqModel is the exactly-once record of a session as the package
// documentation describes it: the floor and the saved answers (encoded).
type seqModel struct {
	floor   int64
	answers map[int64][]byte
}

func TestRandomModel(t *testing.T) {
	seeds, steps := soak(12, 3000)
	for seed := int64(1); seed <= seeds; seed++ {
		g := newCmdGen(seed * 1009)
		h := newHarness(t)
		if seed%3 == 0 {
			// Tight limits, so that streams run into every one of them.
			h = newHarnessLimits(t, Limits{MaxNodes: 30, MaxSessions: 8, MaxHandles: 40, MaxHandlesPerSession: 6,
				MaxWaitersPerLock: 3, MaxChildren: 5, MaxContentBytes: 16, MaxTotalContentBytes: 100, MaxSavedAnswersPerSession: 3,
				MaxEventsPerSession: 4, MaxTotalEvents: 10})
		}
		m := &lockModel{pending: map[int64]bool{}, holding: map[int64]chubby.LockMode{}, handles: map[int64]*chubby.Handle{}, session: map[int64]chubby.SessionID{},
			seqs: map[chubby.SessionID]*seqModel{}, live: map[chubby.SessionID]bool{}, limit: h.s.Limits().MaxSavedAnswersPerSession}
		for i := 0; i < steps; i++ {
			// The "refused changes nothing" check is O(state) thrice: run it
			// on a prefix of each stream.
			h.strict = i < 400
			c := g.next()
			h.now = c.TimeMs
			res, fx := h.cmd(c)
			g.observe(c, res, fx)
			m.observe(t, seed, i, c, res, fx)
			m.check(t, seed, i, h.s)
		}
	}
}

func (m *lockModel) observe(t *testing.T, seed int64, step int, c *fsm.Command, res *fsm.Result_, fx Effects) {
	t.Helper()
	live := c.Session != nil && m.live[*c.Session] // before the command (it may end it)
	for _, w := range fx.Woken {
		if !m.pending[w.Handle] {
			t.Fatalf("seed %d step %d: wake for handle %d that was not waiting", seed, step, w.Handle)
		}
		if (w.Sequencer == nil) == (w.Err == nil) {
			t.Fatalf("seed %d step %d: wake %+v has not exactly one outcome", seed, step, w)
		}
		if w.Session != m.session[w.Handle] {
			t.Fatalf("seed %d step %d: wake names session %d, handle's is %d", seed, step, w.Session, m.session[w.Handle])
		}
		delete(m.pending, w.Handle)
		if w.Sequencer != nil {
			m.holding[w.Handle] = w.Sequencer.Mode
		}
	}
	if c.Op != nil && c.Op.CreateSession != nil && res.Session != nil {
		m.live[*res.Session] = true
	}
	for _, id := range fx.EndedSessions {
		delete(m.seqs, id)
		delete(m.live, id)
		for hid, sid := range m.session {
			if sid == id {
				if m.pending[hid] {
					t.Fatalf("seed %d step %d: session %d ended, handle %d still pending", seed, step, id, hid)
				}
				delete(m.holding, hid)
			}
		}
	}
	if c.Session != nil && c.Seq != nil && m.exactlyOnce(t, seed, step, c, live, res, fx) {
		// A retry answered from the exactly-once record changed nothing.
		return
	}
	if res.Err != nil {
		return
	}
	op := c.Op
	if res.Handle != nil {
		m.handles[res.Handle.Id] = res.Handle
		m.session[res.Handle.Id] = res.Handle.Session
	}
	switch {
	case op.Acquire != nil:
		id := op.Acquire.Handle.Id
		if res.Sequencer != nil {
			m.holding[id] = res.Sequencer.Mode
		}
		if res.GetWaiting() {
			m.pending[id] = true
		}
	case op.Release != nil:
		delete(m.holding, op.Release.Handle.Id)
	case op.Close != nil:
		if m.pending[op.Close.Handle.Id] {
			t.Fatalf("seed %d step %d: closed handle still pending", seed, step)
		}
		delete(m.holding, op.Close.Handle.Id)
	}
}

func (m *lockModel) check(t *testing.T, seed int64, step int, s *State) {
	t.Helper()
	// The exactly-once records are the model's: every answer saved (refusals
	// too) and nothing else.
	for id, sess := range s.sessions {
		q := m.seqs[id]
		if q == nil {
			q = &seqModel{floor: 1}
		}
		if sess.floor != q.floor || len(sess.answers) != len(q.answers) {
			t.Fatalf("seed %d step %d: session %d record: floor %d, %d answers; model floor %d, %d answers", seed, step, id, sess.floor, len(sess.answers), q.floor, len(q.answers))
		}
		for _, a := range sess.answers {
			if !bytes.Equal(EncodeResult(a.res), q.answers[a.seq]) {
				t.Fatalf("seed %d step %d: session %d: saved answer of %d: %v, not the model's", seed, step, id, a.seq, a.res)
			}
		}
	}
	// Holders silently lose their lock when their node is deleted: the
	// handle is invalid from then on.
	for id := range m.holding {
		if h := s.handles[id]; h == nil || !h.live() {
			delete(m.holding, id)
		}
	}
	for id, mode := range m.holding {
		sq, err := s.GetSequencer(m.handles[id])
		if err != nil || sq.Mode != mode {
			t.Fatalf("seed %d step %d: handle %d should hold %v: %v %v", seed, step, id, mode, sq, err)
		}
		// Anonymous may not read every node the streams lock.
		if ok, why, err := s.CheckSequencer(Anonymous, sq); !ok && Code(err) != chubby.ErrorCode_PERMISSION_DENIED {
			t.Fatalf("seed %d step %d: holder's sequencer invalid: %s %v", seed, step, why, err)
		}
	}
	for id := range m.pending {
		if h := s.handles[id]; h == nil || h.wait == 0 {
			t.Fatalf("seed %d step %d: handle %d should be waiting", seed, step, id)
		}
	}
	held := 0
	for _, h := range s.handles {
		if h.held != 0 {
			held++
		}
	}
	if len(m.holding) != held || len(m.pending) != s.Counts().Waiters {
		t.Fatalf("seed %d step %d: model holds %d waits %d; state holds %d waits %d", seed, step, len(m.holding), len(m.pending), held, s.Counts().Waiters)
	}
}

// exactlyOnce checks the outcome of a sequenced command against the
// session's record and updates the record. It reports whether the command
// was answered from the record. live: c's session was live before it.
func (m *lockModel) exactlyOnce(t *testing.T, seed int64, step int, c *fsm.Command, live bool, res *fsm.Result_, fx Effects) bool {
	t.Helper()
	seq, floor := *c.Seq, *c.Seq
	if c.SeqFloor != nil {
		floor = *c.SeqFloor
	}
	q := m.seqs[*c.Session]
	if q == nil {
		q = &seqModel{floor: 1, answers: map[int64][]byte{}}
	}
	// Refused before the operation, as it must be, and nothing saved: for
	// its operation, its session, its numbers (the session is checked
	// first), the floor or the limit. The model knows the live sessions.
	refused := func(codes ...chubby.ErrorCode) bool {
		return res.Err != nil && slices.Contains(codes, res.Err.Code)
	}
	op := c.Op
	named, hasNamed := chubby.SessionID(0), false
	if op != nil {
		named, hasNamed = opSession(op)
	}
	switch {
	case op == nil || op.CountSetFieldsOp() != 1 || op.CreateSession != nil || op.Tick != nil || op.TrimEvents != nil || op.InitAcl != nil,
		c.Principal != nil:
		if !refused(chubby.ErrorCode_INVALID_ARGUMENT) {
			t.Fatalf("seed %d step %d: bad operation for a session: %v", seed, step, res.Err)
		}
	case !live:
		if !refused(chubby.ErrorCode_SESSION_EXPIRED) {
			t.Fatalf("seed %d step %d: session %d is not live: %v", seed, step, *c.Session, res.Err)
		}
	case hasNamed && named != *c.Session:
		if !refused(chubby.ErrorCode_INVALID_ARGUMENT) {
			t.Fatalf("seed %d step %d: operation of session %d sent as %d: %v", seed, step, named, *c.Session, res.Err)
		}
	case seq <= 0 || floor < 1 || floor > seq:
		if !refused(chubby.ErrorCode_INVALID_ARGUMENT) {
			t.Fatalf("seed %d step %d: bad seq %d / floor %d: %v", seed, step, seq, floor, res.Err)
		}
	case seq < q.floor:
		if !refused(chubby.ErrorCode_INVALID_ARGUMENT) {
			t.Fatalf("seed %d step %d: seq %d below the floor %d: %v", seed, step, seq, q.floor, res.Err)
		}
	case q.answers[seq] != nil:
		// (Woken may list what the clock's advance granted, before.)
		if !bytes.Equal(EncodeResult(res), q.answers[seq]) || len(fx.EndedSessions) > 0 {
			t.Fatalf("seed %d step %d: retry of seq %d: %v %+v, not the saved answer", seed, step, seq, res, fx)
		}
		return true
	default:
		newFloor := max(q.floor, floor)
		kept := 0
		for s := range q.answers {
			if s >= newFloor {
				kept++
			}
		}
		if kept >= m.limit {
			if !refused(chubby.ErrorCode_LIMIT_EXCEEDED) {
				t.Fatalf("seed %d step %d: seq %d applied with %d answers kept, the limit is %d: %v", seed, step, seq, kept, m.limit, res.Err)
			}
			break
		}
		if slices.Contains(fx.EndedSessions, *c.Session) {
			break
		}
		// It reached the operation: its answer is saved, success or
		// refusal, and the floor raised.
		q.answers[seq] = EncodeResult(res)
		q.floor = newFloor
		for s := range q.answers {
			if s < q.floor {
				delete(q.answers, s)
			}
		}
		m.seqs[*c.Session] = q
	}
	return false
}
