package fs

import (
	"fmt"
	"slices"
	"strings"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// session is a live client session. Ended sessions are forgotten entirely;
// ids are never reused, so an ended id stays unknown forever.
type session struct {
	id         chubby.SessionID
	clientName string
	caches     bool   // CreateSessionRequest.cache: the client caches
	principal  string // who the client is (Command.principal); Anonymous without one
	ctime      int64
	handles    map[int64]*handle
	ephemerals map[*node]struct{} // ephemeral nodes it owns

	// Exactly-once record (see apply). Every request numbered below floor
	// is finished (the client said so): it is refused, never applied.
	// answers holds the saved results (successes and refusals alike) of
	// the sequenced commands applied at or above floor, ascending by seq.
	floor   int64
	answers []answer

	// Events (events.go): the queue not yet acknowledged, and the seq of
	// the newest event ever queued (the queue's last, when not empty).
	events    eventRing
	lastEvent int64
	notified  bool // got an event in the command being applied (State.notified)
}

// answer is the saved result of one sequenced command.
type answer struct {
	seq int64
	res *fsm.Result_
}

// checkAnswer checks a saved result: a success, or a refusal that carries
// its error and nothing else (as errResult makes it).
func checkAnswer(res *fsm.Result_) error {
	switch {
	case res == nil:
		return fmt.Errorf("missing")
	case res.Err == nil:
		return nil
	case res.Err.Code <= 0 || res.Err.Code > chubby.ErrorCode_INTERNAL:
		return fmt.Errorf("error code %d", res.Err.Code)
	case res.Session != nil || res.Handle != nil || res.Stat != nil || res.Sequencer != nil || res.Created != nil || res.Waiting != nil ||
		res.TimestampsReserved != nil || res.Multi != nil:
		return fmt.Errorf("a refusal with results")
	}
	if m := res.Multi; m != nil && slices.Contains(m.Stats, nil) {
		return fmt.Errorf("a Multi answer with a missing Stat")
	}
	return nil
}

// findAnswer returns the index of seq in sess.answers, or where it would go,
// and whether it is there.
func (sess *session) findAnswer(seq int64) (int, bool) {
	return slices.BinarySearchFunc(sess.answers, seq, func(a answer, seq int64) int {
		switch {
		case a.seq < seq:
			return -1
		case a.seq > seq:
			return 1
		}
		return 0
	})
}

// answersFrom returns how many saved answers are numbered floor or above.
func (sess *session) answersFrom(floor int64) int {
	i, _ := sess.findAnswer(floor)
	return len(sess.answers) - i
}

// saveAnswer saves res as the answer of seq, which has none yet.
func (sess *session) saveAnswer(seq int64, res *fsm.Result_) {
	i, found := sess.findAnswer(seq)
	if found {
		panic("fs: saveAnswer: sequence answered twice")
	}
	sess.answers = slices.Insert(sess.answers, i, answer{seq: seq, res: res})
}

// raiseFloor raises the session's floor to floor (never lowers it) and
// forgets the answers below it.
func (sess *session) raiseFloor(floor int64) {
	if floor <= sess.floor {
		return
	}
	sess.floor = floor
	i, _ := sess.findAnswer(floor)
	sess.answers = slices.Delete(sess.answers, 0, i)
}

// createSession applies CreateSession. The session acts as principal
// (Anonymous when unset) in every command it sends.
func (s *State) createSession(req *chubby.CreateSessionRequest, principal *string) *fsm.Result_ {
	if len(req.ClientName) > int(chubby.MAX_CLIENT_NAME_BYTES) {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "client name is %d bytes, more than %d", len(req.ClientName), chubby.MAX_CLIENT_NAME_BYTES))
	}
	p := Anonymous
	if principal != nil {
		if err := checkPrincipal(*principal); err != nil {
			return errResult(err)
		}
		p = strings.Clone(*principal)
	}
	if len(s.sessions) >= s.limits.MaxSessions {
		return errResult(Errorf(chubby.ErrorCode_LIMIT_EXCEEDED, "the cell has %d sessions, the limit is %d", len(s.sessions), s.limits.MaxSessions))
	}
	if n, max := s.byPrincipal[p], s.limits.MaxSessionsPerPrincipal; max > 0 && n >= max {
		return errResult(Errorf(chubby.ErrorCode_LIMIT_EXCEEDED, "principal %q has %d sessions, the limit per principal is %d", p, n, max))
	}
	sess := &session{
		id:         s.nextSession,
		clientName: strings.Clone(req.ClientName),
		caches:     req.GetCache(),
		principal:  p,
		ctime:      s.now,
		handles:    map[int64]*handle{},
		ephemerals: map[*node]struct{}{},
		floor:      1,
	}
	s.nextSession++
	s.sessions[sess.id] = sess
	s.byPrincipal[p]++
	id := sess.id
	return &fsm.Result_{Session: &id}
}

// endSession ends sess. Its pending Acquires fail with SESSION_EXPIRED; its
// locks are released, with lock-delay when expired; its handles are closed;
// its ephemeral files are deleted, and its ephemeral directories too when
// empty (a non-empty one is deleted later, when it becomes empty). Only then
// are the freed locks granted to other waiters, so nothing is granted to a
// handle being closed or on a node being deleted.
func (s *State) endSession(sess *session, expired bool, fx *Effects) {
	ids := make([]int64, 0, len(sess.handles))
	for id := range sess.handles {
		ids = append(ids, id)
	}
	slices.Sort(ids)

	var affected []*node
	seen := map[*node]bool{}
	touch := func(n *node) {
		if !seen[n] {
			seen[n] = true
			affected = append(affected, n)
		}
	}
	for _, id := range ids {
		h := sess.handles[id]
		if h.wait != 0 {
			n := h.node
			s.dequeue(n, h)
			fx.Woken = append(fx.Woken, Wake{Handle: h.id, Session: sess.id,
				Err: Errorf(chubby.ErrorCode_SESSION_EXPIRED, "session %d ended while waiting for the lock of %s", sess.id, n.path)})
			touch(n)
		}
	}
	for _, id := range ids {
		h := sess.handles[id]
		if h.held != 0 {
			touch(h.node)
			s.releaseHold(h, expired)
		}
	}
	for _, id := range ids {
		s.forgetHandle(sess.handles[id])
	}
	s.dropEvents(sess)

	// Forget the session before deleting its nodes, so that its ephemeral
	// directories count as orphans (collectEmptyEphemeral).
	delete(s.sessions, sess.id)
	if s.byPrincipal[sess.principal]--; s.byPrincipal[sess.principal] <= 0 {
		delete(s.byPrincipal, sess.principal)
	}
	eph := make([]*node, 0, len(sess.ephemerals))
	for n := range sess.ephemerals {
		eph = append(eph, n)
	}
	// Descending path order visits children before their parents.
	slices.SortFunc(eph, func(a, b *node) int { return strings.Compare(b.path, a.path) })
	for _, n := range eph {
		if n.deleted || n.isDir() && len(n.children) > 0 {
			continue
		}
		parent := n.parent
		s.removeNode(n, fx)
		s.collectEmptyEphemeral(parent, fx)
	}
	sess.ephemerals = nil

	for _, n := range affected {
		s.promote(n, fx)
	}
	fx.EndedSessions = append(fx.EndedSessions, sess.id)
}

// RequestFinished reports whether request seq of session id is finished
// by its client's word: below the session's floor, which the client
// raises (RequestID.floor) only past requests it will not send again. A
// blocking Acquire is not an exactly-once command, so its own number is
// not in the session's record; a late attempt of it below the floor must
// not be queued again (the master answers it from the state).
func (s *State) RequestFinished(id chubby.SessionID, seq int64) bool {
	sess, ok := s.sessions[id]
	return ok && seq > 0 && seq < sess.floor
}
