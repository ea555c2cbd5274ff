package fs

import (
	"bytes"
	"math/rand"
	"reflect"
	"slices"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// TestMultiIsItsOps: for random states (random command streams, with ACLs
// on odd seeds and tight limits on every third) and random Multis on them,
// a Multi is exactly its ops applied one by one as single commands when
// they all apply — the same Stats, effects and state, byte for byte — and
// nothing at all otherwise: refused with the first failing op's own error,
// or answered with the first compare that does not hold, the state as
// before.
func TestMultiIsItsOps(t *testing.T) {
	seeds, steps := soak(12, 400)
	outcomes := map[string]int{}
	for seed := int64(1); seed <= seeds; seed++ {
		g := newCmdGen(seed * 7)
		l := DefaultLimits()
		if seed%3 == 0 {
			l = Limits{MaxNodes: 30, MaxSessions: 8, MaxHandles: 40, MaxHandlesPerSession: 6,
				MaxWaitersPerLock: 3, MaxChildren: 5, MaxContentBytes: 16, MaxTotalContentBytes: 100, MaxSavedAnswersPerSession: 3,
				MaxEventsPerSession: 4, MaxTotalEvents: 10}
		}
		s := New(l)
		for i := range steps {
			c := g.next()
			res, fx := s.Apply(c)
			g.observe(c, res, fx)
			if i%2 == 0 {
				req := multiFor(g.r, s)
				outcomes[multiIsItsOps(t, s, req)]++
			}
		}
	}
	t.Logf("outcomes: %v", outcomes)
	for _, o := range []string{"applied", "compare failed", "refused by a compare's right", "refused by an op", "refused by an op after others applied", "refused by its arguments"} {
		if outcomes[o] < 20 {
			t.Errorf("only %d Multis %s: the generator does not exercise it", outcomes[o], o)
		}
	}
}

// multiIsItsOps applies req to a copy of s, and its ops one by one as
// single commands to another, and checks that they agree (see
// TestMultiIsItsOps). It returns the outcome.
func multiIsItsOps(t *testing.T, s *State, req *chubby.MultiRequest) string {
	t.Helper()
	snap := s.Snapshot()
	multi, _ := Restore(snap, s.limits)
	res, fx := multi.Apply(&fsm.Command{TimeMs: s.now, Op: &fsm.Op{Multi: req}})
	if err := multi.checkInvariants(); err != nil {
		t.Fatalf("%v: invariant: %v", req, err)
	}
	unchanged := func(outcome string) string {
		t.Helper()
		if !bytes.Equal(multi.Snapshot(), snap) || len(fx.Woken)+len(fx.Notified)+len(fx.EndedSessions) > 0 {
			t.Fatalf("%v: %s, but the state changed or there are effects %+v", req, outcome, fx)
		}
		return outcome
	}
	one, _ := Restore(snap, s.limits)
	if err := one.checkMultiArgs(req); err != nil {
		if !sameError(res.Err, err) {
			t.Fatalf("%v: %v, want the arguments' %v", req, res.Err, err)
		}
		return unchanged("refused by its arguments")
	}
	sess := one.sessions[req.Session]
	if sess == nil {
		if Code(asError(res.Err)) != chubby.ErrorCode_SESSION_EXPIRED {
			t.Fatalf("%v: %v, want SESSION_EXPIRED", req, res.Err)
		}
		return unchanged("refused for its session")
	}
	if i, err := referenceCompares(one, sess.principal, req.Compares); err != nil || i >= 0 {
		switch {
		case err != nil && !sameError(res.Err, err):
			t.Fatalf("%v: %v, want the compares' %v", req, res.Err, err)
		case err == nil && (res.Multi == nil || res.Multi.Succeeded || res.Multi.GetFailedCompare() != int32(i) || res.Multi.Stats == nil || len(res.Multi.Stats) > 0):
			t.Fatalf("%v: %v, want compare %d failed", req, res, i)
		case err != nil:
			return unchanged("refused by a compare's right")
		}
		return unchanged("compare failed")
	}
	var stats []*chubby.Stat
	var want Effects
	for i, op := range req.Ops {
		st, err := applySingle(one, sess, op, &want)
		if err != nil {
			if wantErr := Errorf(err.Code, "op %d: %s", i, err.Message); !sameError(res.Err, wantErr) {
				t.Fatalf("%v: %v, want %v", req, res.Err, wantErr)
			}
			if i > 0 {
				return unchanged("refused by an op after others applied")
			}
			return unchanged("refused by an op")
		}
		stats = append(stats, st)
	}
	if res.Err != nil || res.Multi == nil || !res.Multi.Succeeded || res.Multi.IsSetFailedCompare() {
		t.Fatalf("%v: %v, want it applied as its ops were", req, res)
	}
	if !bytes.Equal(EncodeResult(res), EncodeResult(&fsm.Result_{Multi: &chubby.MultiResponse{Succeeded: true, Stats: stats}})) {
		t.Fatalf("%v: Stats\n%v\nwant the single calls'\n%v", req, res.Multi.Stats, stats)
	}
	if !reflect.DeepEqual(fx, want) {
		t.Fatalf("%v: effects %+v, want the single calls' %+v", req, fx, want)
	}
	if !bytes.Equal(multi.Snapshot(), one.Snapshot()) {
		t.Fatalf("%v: the state differs from its ops applied one by one", req)
	}
	return "applied"
}

func sameError(got, want *chubby.ChubbyError) bool {
	return got != nil && want != nil && got.Code == want.Code && got.Message == want.Message
}

// referenceCompares evaluates compares as the package documentation says,
// through the public reads: first the read right of principal on each
// node, or on its nearest existing ancestor, then the first that does not
// hold (-1: none).
func referenceCompares(s *State, principal string, cs []*chubby.Compare) (int, *chubby.ChubbyError) {
	for i, c := range cs {
		nearest := c.Path
		for s.Allowed(principal, nearest, ReadRight) != nil && Code(s.Allowed(principal, nearest, ReadRight)) != chubby.ErrorCode_PERMISSION_DENIED {
			nearest = parentPath(nearest) // no node there
		}
		if err := s.Allowed(principal, nearest, ReadRight); err != nil {
			ce := err.(*chubby.ChubbyError)
			return 0, Errorf(ce.Code, "compare %d: %s", i, ce.Message)
		}
	}
	for i, c := range cs {
		comps, _ := parsePath(c.Path)
		n, err := s.lookup(c.Path, comps)
		exists := err == nil
		holds := false
		switch c.Kind {
		case chubby.CompareKind_EXISTS:
			holds = exists
		case chubby.CompareKind_NOT_EXISTS:
			holds = !exists
		case chubby.CompareKind_CONTENT_GENERATION:
			holds = exists && n.contentGen == *c.Value
		case chubby.CompareKind_INSTANCE:
			holds = exists && n.instance == *c.Value
		}
		if !holds {
			return i, nil
		}
	}
	return -1, nil
}

// applySingle applies op to s as the single command it stands for,
// adding its effects to fx: CreateFile or Mkdir (without parents), and
// SetContents or Delete through a READ_WRITE handle of sess opened on the
// node at op's path for the command and forgotten after it, leaving no
// trace (no event mask, no lock, its id given back). It returns the Stat
// Multi answers for the op.
func applySingle(s *State, sess *session, op *chubby.MultiOp, fx *Effects) (*chubby.Stat, *chubby.ChubbyError) {
	var res *fsm.Result_
	var got Effects
	var before *chubby.Stat
	switch op.Kind {
	case chubby.MultiOpKind_CREATE:
		if op.GetDirectory() {
			res, got = s.Apply(&fsm.Command{TimeMs: s.now, Op: &fsm.Op{Mkdir: &chubby.MkdirRequest{Session: sess.id, Path: op.Path, Ephemeral: op.Ephemeral}}})
		} else {
			res, got = s.Apply(&fsm.Command{TimeMs: s.now, Op: &fsm.Op{CreateFile: &chubby.CreateFileRequest{Session: sess.id, Path: op.Path, Content: op.Content, Ephemeral: op.Ephemeral}}})
		}
	default:
		comps, _ := parsePath(op.Path)
		n, err := s.lookup(op.Path, comps)
		if err != nil {
			return nil, err
		}
		before = s.stat(n)
		h := s.openHandle(sess, n, chubby.OpenMode_READ_WRITE, 0)
		o := &fsm.Op{SetContents: &chubby.SetContentsRequest{Handle: h.wire(), Content: op.Content, ExpectedGeneration: op.ExpectedGeneration}}
		if op.Kind == chubby.MultiOpKind_DELETE {
			o = &fsm.Op{DeleteNode: &chubby.DeleteRequest{Handle: h.wire(), Recursive: op.Recursive}}
		}
		res, got = s.Apply(&fsm.Command{TimeMs: s.now, Op: o})
		s.forgetHandle(h)
		s.nextHandle--
	}
	if res.Err != nil {
		return nil, res.Err
	}
	fx.Woken = append(fx.Woken, got.Woken...)
	for _, id := range got.Notified {
		if !slices.Contains(fx.Notified, id) {
			fx.Notified = append(fx.Notified, id)
		}
	}
	if op.Kind == chubby.MultiOpKind_DELETE {
		return before, nil
	}
	return res.Stat, nil
}

// multiFor returns a random Multi for the state s: mostly meaningful
// (ops on its nodes and on what earlier ops create, compares that mostly
// hold), sometimes with a bad argument.
func multiFor(r *rand.Rand, s *State) *chubby.MultiRequest {
	var nodes []*node
	var walk func(n *node)
	walk = func(n *node) {
		nodes = append(nodes, n)
		for _, name := range sortedNames(n) {
			walk(n.children[name])
		}
	}
	walk(s.root)
	var made []string // paths the earlier ops may create
	anyNode := func() string { return nodes[r.Intn(len(nodes))].path }
	somePath := func() string {
		if len(made) > 0 && r.Intn(2) == 0 {
			return made[r.Intn(len(made))]
		}
		return anyNode()
	}
	newPath := func() string {
		p := joinPath(somePath(), genACLPaths[r.Intn(len(genACLPaths))])
		made = append(made, p)
		return p
	}
	req := &chubby.MultiRequest{Session: chubby.SessionID(r.Intn(3))}
	if ids := s.Sessions(); len(ids) > 0 && r.Intn(15) > 0 {
		req.Session = ids[r.Intn(len(ids))]
	}
	for range 1 + r.Intn(6) {
		op := &chubby.MultiOp{Kind: chubby.MultiOpKind(1 + r.Intn(3))}
		switch op.Kind {
		case chubby.MultiOpKind_CREATE:
			op.Path = newPath()
			if r.Intn(5) == 0 {
				op.Path = somePath() // EXISTS, mostly
			}
			if r.Intn(3) == 0 {
				op.Directory = ptr(true)
			} else {
				op.Content = multiContent(r)
			}
			if r.Intn(4) == 0 {
				op.Ephemeral = ptr(true)
			}
		case chubby.MultiOpKind_SET_CONTENTS:
			op.Path = somePath()
			op.Content = multiContent(r)
			if r.Intn(3) == 0 {
				op.ExpectedGeneration = ptr(int64(1 + r.Intn(3)))
			}
		default:
			op.Path = somePath()
			for i := 0; op.Path == "/" && i < 3; i++ {
				op.Path = somePath() // mostly not the root: a bad argument for DELETE
			}
			if r.Intn(2) == 0 {
				op.Recursive = ptr(true)
			}
		}
		if r.Intn(40) == 0 {
			op.Path = "/" // the root: EXISTS, IS_DIRECTORY, or a bad argument
		}
		req.Ops = append(req.Ops, op)
	}
	for range r.Intn(3) {
		req.Compares = append(req.Compares, compareFor(r, nodes[r.Intn(len(nodes))], newPath()))
	}
	return req
}

// compareFor returns a compare of n that mostly holds, or of the path of
// a node that does not exist yet (whose absence mostly holds).
func compareFor(r *rand.Rand, n *node, missing string) *chubby.Compare {
	c := &chubby.Compare{Path: n.path}
	switch r.Intn(5) {
	case 0:
		c.Kind = chubby.CompareKind_EXISTS
	case 1:
		c.Kind, c.Path = chubby.CompareKind_NOT_EXISTS, missing
	case 2:
		c.Kind, c.Value = chubby.CompareKind_CONTENT_GENERATION, ptr(n.contentGen)
	default:
		c.Kind, c.Value = chubby.CompareKind_INSTANCE, ptr(n.instance)
	}
	if r.Intn(8) == 0 && c.Value != nil {
		*c.Value += 1
	}
	return c
}

// multiContent is an op's content: none, an ACL file's (valid or not), or
// a few random bytes, now and then too many.
func multiContent(r *rand.Rand) []byte {
	switch r.Intn(8) {
	case 0:
		return nil
	case 1, 2:
		return []byte(genACLContents[r.Intn(len(genACLContents))])
	case 3:
		return bytes.Repeat([]byte("x"), 10+r.Intn(20))
	}
	b := make([]byte, r.Intn(12))
	r.Read(b)
	return b
}
