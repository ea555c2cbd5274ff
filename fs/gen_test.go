package fs

import (
	"math/rand"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// cmdGen generates random command streams over a small namespace, mostly
// valid but with a steady share of bad sessions, stale handles, bad paths
// and bad arguments. It learns sessions and handles from the results.
type cmdGen struct {
	r        *rand.Rand
	now      int64
	sessions []chubby.SessionID
	handles  []*chubby.Handle
	hot      []*chubby.Handle // handles on the hot lock files, for contention
	seqs     map[chubby.SessionID]*genSeqs
	// acls: the stream has principals, SetACL, InitACL and ACL files
	// (odd seeds), the rest runs as in a cell nobody configured.
	acls bool
	// instances: the instance last seen at each path, for the INSTANCE
	// compares of Multi; seen: those paths, in the order first seen.
	instances map[string]int64
	seen      []string
}

// genSeqs is what a client numbering the requests of one session knows:
// the highest number it used and the floor it sends.
type genSeqs struct {
	hi, floor int64
}

// hotPaths are a few files most lock traffic goes to, so that locks are
// contended: queues, shared batches, lock-delays.
var hotPaths = []string{"/hot1", "/hot2"}

func newCmdGen(seed int64) *cmdGen {
	return &cmdGen{r: rand.New(rand.NewSource(seed)), now: 1000, seqs: map[chubby.SessionID]*genSeqs{}, acls: seed%2 != 0,
		instances: map[string]int64{}}
}

var genNames = []string{"a", "b", "c", "lock-"}

// genACLPaths are the names of the streams with ACLs: /acl/admin may be
// deleted and re-created, so that a stream is not locked out for good.
var genACLPaths = []string{"a", "b", "c", "lock-", "acl", "admin"}

// Principals, ACL names and ACL files the generator uses. Sessions are
// mostly anonymous, and InitACL mostly makes anonymous the admin, so that
// ACLs do not refuse most of a stream.
var (
	genPrincipals  = []string{Anonymous, "alice", "root", "bad principal", "*"}
	genACLNames    = []string{"", "", "a", "b", "admin", "bad/name"}
	genACLContents = []string{"anonymous\n", "*\n", "# team\nalice\r\nroot\n", "", "alice smith\n"}
)

func (g *cmdGen) path() string {
	switch g.r.Intn(40) {
	case 0:
		return "/a/"
	case 1:
		return "a"
	case 2:
		return "/"
	}
	names := genNames
	if g.acls {
		names = genACLPaths
	}
	p := ""
	for i := g.r.Intn(3); i >= 0; i-- {
		p += "/" + names[g.r.Intn(len(names))]
	}
	return p
}

func (g *cmdGen) session() chubby.SessionID {
	if len(g.sessions) == 0 || g.r.Intn(20) == 0 {
		return chubby.SessionID(g.r.Intn(3))
	}
	// Favour recent sessions: old ones are mostly ended.
	n := len(g.sessions)
	return g.sessions[n-1-g.r.Intn(min(n, 6))]
}

func (g *cmdGen) handle() *chubby.Handle {
	if len(g.hot) > 0 && g.r.Intn(3) > 0 {
		n := len(g.hot)
		h := *g.hot[n-1-g.r.Intn(min(n, 12))]
		return &h
	}
	if len(g.handles) == 0 || g.r.Intn(25) == 0 {
		return &chubby.Handle{Id: int64(g.r.Intn(5)), Session: g.session(), Instance: int64(g.r.Intn(5)), Path: g.path()}
	}
	n := len(g.handles)
	h := *g.handles[n-1-g.r.Intn(min(n, 30))]
	if g.r.Intn(30) == 0 {
		h.Instance++
	}
	return &h
}

func (g *cmdGen) mode() chubby.LockMode {
	if g.r.Intn(30) == 0 {
		return chubby.LockMode(g.r.Intn(4))
	}
	if g.r.Intn(2) == 0 {
		return chubby.LockMode_SHARED
	}
	return chubby.LockMode_EXCLUSIVE
}

func (g *cmdGen) flag() *bool {
	switch g.r.Intn(3) {
	case 0:
		return nil
	case 1:
		return ptr(false)
	}
	return ptr(true)
}

// eventMask is an Open's event mask: mostly none or some of the kinds,
// now and then a bad one.
func (g *cmdGen) eventMask() *int32 {
	switch g.r.Intn(6) {
	case 0, 1:
		return nil
	case 2:
		return ptr(int32(chubby.EVENT_MASK_ALL))
	case 3:
		if g.r.Intn(10) == 0 {
			return ptr(int32(1 << (7 + g.r.Intn(24))))
		}
	}
	return ptr(int32(g.r.Intn(int(chubby.EVENT_MASK_ALL) + 1)))
}

func (g *cmdGen) content() []byte {
	switch g.r.Intn(6) {
	case 0, 1:
		return nil
	case 2:
		return []byte(genACLContents[g.r.Intn(len(genACLContents))])
	}
	b := make([]byte, g.r.Intn(20))
	g.r.Read(b)
	return b
}

func (g *cmdGen) next() *fsm.Command {
	g.now += int64(g.r.Intn(400))
	if g.r.Intn(50) == 0 {
		g.now -= 500 // a master clock a little behind
	}
	c := &fsm.Command{TimeMs: g.now, Op: &fsm.Op{}}
	op := c.Op
	w := g.r.Intn(105)
	if !g.acls && w >= 100 {
		w = 96 // a Tick
	}
	switch {
	case g.r.Intn(25) == 0:
		op.Multi = g.multi()
	case w < 4:
		op.CreateSession = &chubby.CreateSessionRequest{ClientName: "gen"}
		if g.acls && g.r.Intn(4) == 0 {
			c.Principal = ptr(genPrincipals[g.r.Intn(len(genPrincipals))])
		}
	case w < 8:
		op.EndSession = &fsm.EndSession{Session: g.session(), Expired: g.r.Intn(2) == 0}
	case w < 17:
		op.Open = &chubby.OpenRequest{Session: g.session(), Path: hotPaths[g.r.Intn(len(hotPaths))], Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_OR_CREATE,
			EventMask: g.eventMask()}
	case w < 27:
		create := chubby.CreateMode(1 + g.r.Intn(3))
		req := &chubby.OpenRequest{Session: g.session(), Path: g.path(), Mode: chubby.OpenMode(1 + g.r.Intn(2)), Create: create}
		if create != chubby.CreateMode_OPEN_EXISTING || g.r.Intn(20) == 0 {
			req.Ephemeral = g.flag()
			if g.r.Intn(4) == 0 {
				req.Sequential = ptr(true)
			}
			req.InitialContent = g.content()
		}
		req.EventMask = g.eventMask()
		op.Open = req
	case w < 33:
		op.Close = &chubby.CloseRequest{Handle: g.handle()}
	case w < 41:
		req := &chubby.SetContentsRequest{Handle: g.handle(), Content: g.content()}
		if g.r.Intn(4) == 0 {
			req.ExpectedGeneration = ptr(int64(g.r.Intn(4)))
		}
		op.SetContents = req
	case w < 45:
		op.DeleteNode = &chubby.DeleteRequest{Handle: g.handle(), Recursive: g.flag()}
	case w < 51:
		op.Mkdir = &chubby.MkdirRequest{Session: g.session(), Path: g.path(), Parents: g.flag(), Ephemeral: g.flag()}
	case w < 58:
		op.CreateFile = &chubby.CreateFileRequest{Session: g.session(), Path: g.path(), Content: g.content(),
			Ephemeral: g.flag(), Sequential: g.flag(), MakeParents: g.flag()}
	case w < 80:
		delays := []int64{0, 0, 100, 1000, 5000}
		op.Acquire = &fsm.Acquire{Handle: g.handle(), Mode: g.mode(), Wait: g.r.Intn(3) > 0, LockDelayMs: delays[g.r.Intn(len(delays))]}
	case w < 90:
		op.Release = &chubby.HandleRequest{Handle: g.handle()}
	case w < 95:
		op.CancelWait = &fsm.CancelWait{Handle: g.handle()}
	case w < 98:
		op.Tick = &fsm.Tick{}
	case w < 100:
		t := &fsm.TrimEvents{}
		for i := g.r.Intn(4); i >= 0; i-- {
			t.Acks = append(t.Acks, &fsm.EventAck{Session: g.session(), Acked: int64(g.r.Intn(30)) - int64(g.r.Intn(2))})
		}
		op.TrimEvents = t
	case w < 103:
		op.SetAcl = g.setACL()
	case w == 104:
		op.ReserveTimestamps = &fsm.ReserveTimestamps{Upto: int64(g.r.Intn(1 << 20))}
	default:
		admin := Anonymous
		if g.r.Intn(4) == 0 {
			admin = genPrincipals[g.r.Intn(len(genPrincipals))]
		}
		op.InitAcl = &fsm.InitACL{Admin: admin}
	}
	if g.acls && g.r.Intn(200) == 0 {
		c.Principal = ptr("root") // refused but on CreateSession
	}
	// Exactly-once on a share of session commands, as a client with many
	// requests in flight sends them: new numbers (some skipped, to come
	// later: out of order), retries and late ones at or above the floor,
	// finished ones below it, and now and then a bad number or floor.
	if id, ok := opSession(op); ok && g.r.Intn(3) == 0 {
		c.Session = &id
		q := g.seqs[id]
		if q == nil {
			q = &genSeqs{floor: 1}
			g.seqs[id] = q
		}
		var seq int64
		switch k := g.r.Intn(20); {
		case k < 17 && k >= 10 && q.hi >= q.floor:
			seq = q.floor + g.r.Int63n(q.hi-q.floor+1)
		case k < 17:
			seq = q.hi + 1 + int64(g.r.Intn(3))
			q.hi = seq
		case k < 19:
			seq = q.floor - 1 - int64(g.r.Intn(3))
		default:
			seq = q.hi + 1 - int64(g.r.Intn(3))*(q.hi+1)
		}
		if g.r.Intn(6) == 0 && q.hi > q.floor {
			q.floor += 1 + g.r.Int63n(q.hi-q.floor)
		}
		if seq != 0 || g.r.Intn(10) == 0 {
			c.Seq = &seq
			floor := min(q.floor, max(seq, 1))
			switch g.r.Intn(15) {
			case 0:
				// unset: the floor is seq
			case 1:
				floor = seq + 1 - int64(g.r.Intn(2))*(seq+1)
				c.SeqFloor = &floor
			default:
				c.SeqFloor = &floor
			}
		}
	}
	return c
}

// setACL is a SetACL of random names, now and then a compare-and-swap.
func (g *cmdGen) setACL() *chubby.SetACLRequest {
	name := func() string { return genACLNames[g.r.Intn(len(genACLNames))] }
	req := &chubby.SetACLRequest{Handle: g.handle(), Acl: &chubby.ACLNames{ReadAcl: name(), WriteAcl: name(), ChangeAcl: name()}}
	if g.r.Intn(4) == 0 {
		req.ExpectedAclGeneration = ptr(int64(g.r.Intn(3)))
	}
	return req
}

// multi is a Multi of a few compares and ops, on paths of nodes seen in
// results and on the paths of its earlier ops (a directory made, then a
// file in it; a file created, then written or deleted), the compares
// with values that may hold; now and then a bad argument.
func (g *cmdGen) multi() *chubby.MultiRequest {
	req := &chubby.MultiRequest{Session: g.session()}
	var paths []string
	pick := func(create bool) string {
		var p string
		switch k := g.r.Intn(3); {
		case k == 0 && len(paths) > 0:
			p = paths[g.r.Intn(len(paths))]
		case k == 1 && len(g.seen) > 0:
			p = g.seen[len(g.seen)-1-g.r.Intn(min(len(g.seen), 20))]
		default:
			p = g.path()
			for _, err := parsePath(p); err != nil && g.r.Intn(8) > 0; _, err = parsePath(p) {
				p = g.path() // mostly valid: a bad one refuses the whole Multi
			}
		}
		if create && g.r.Intn(2) == 0 {
			p = joinPath(p, genNames[g.r.Intn(len(genNames))])
		}
		paths = append(paths, p)
		return p
	}
	n := 1 + g.r.Intn(5)
	switch g.r.Intn(60) {
	case 0:
		n = 0
	case 1:
		n = int(chubby.MAX_MULTI_OPS) + 1
	}
	for range n {
		op := g.multiOp()
		op.Path = pick(op.Kind == chubby.MultiOpKind_CREATE)
		req.Ops = append(req.Ops, op)
	}
	for i := g.r.Intn(4) - 1; i > 0; i-- {
		req.Compares = append(req.Compares, g.compare(pick(false)))
	}
	for _, op := range req.Ops {
		// A delete pinned to the node seen there (see reachMultiDelete).
		if inst, ok := g.instances[op.Path]; ok && op.Kind == chubby.MultiOpKind_DELETE && g.r.Intn(2) == 0 {
			req.Compares = append(req.Compares, &chubby.Compare{Kind: chubby.CompareKind_INSTANCE, Path: op.Path, Value: ptr(inst)})
		}
	}
	return req
}

// multiOp is one op (without its path), now and then with a field of
// another kind.
func (g *cmdGen) multiOp() *chubby.MultiOp {
	op := &chubby.MultiOp{Kind: chubby.MultiOpKind(1 + g.r.Intn(3))}
	if g.r.Intn(40) == 0 {
		op.Kind = chubby.MultiOpKind(g.r.Intn(2) * 4)
	}
	switch op.Kind {
	case chubby.MultiOpKind_CREATE:
		if g.r.Intn(3) == 0 {
			op.Directory = ptr(true)
		} else {
			op.Content = g.content()
		}
		if g.r.Intn(3) == 0 {
			op.Ephemeral = g.flag()
		}
	case chubby.MultiOpKind_SET_CONTENTS:
		op.Content = g.content()
		if g.r.Intn(3) == 0 {
			op.ExpectedGeneration = ptr(int64(g.r.Intn(4)))
		}
	case chubby.MultiOpKind_DELETE:
		op.Recursive = g.flag()
	}
	if g.r.Intn(40) == 0 {
		op.Recursive, op.Directory = ptr(true), ptr(false) // one of them does not apply
	}
	return op
}

// compare is a compare of p likely to hold: of existence where a node was
// seen, else of absence; its value the instance seen there or a small
// generation.
func (g *cmdGen) compare(p string) *chubby.Compare {
	kinds := []chubby.CompareKind{chubby.CompareKind_NOT_EXISTS, chubby.CompareKind_NOT_EXISTS, chubby.CompareKind_EXISTS, chubby.CompareKind_CONTENT_GENERATION}
	if _, ok := g.instances[p]; ok {
		kinds = []chubby.CompareKind{chubby.CompareKind_EXISTS, chubby.CompareKind_INSTANCE, chubby.CompareKind_INSTANCE, chubby.CompareKind_CONTENT_GENERATION, chubby.CompareKind_NOT_EXISTS}
	}
	c := &chubby.Compare{Kind: kinds[g.r.Intn(len(kinds))], Path: p}
	switch c.Kind {
	case chubby.CompareKind_CONTENT_GENERATION:
		c.Value = ptr(int64(1 + g.r.Intn(3)))
	case chubby.CompareKind_INSTANCE:
		c.Value = ptr(g.instances[p] + int64(g.r.Intn(6)/5))
	}
	if g.r.Intn(40) == 0 {
		c.Kind = chubby.CompareKind(g.r.Intn(2) * 5)
	}
	return c
}

// observe learns from a command and its outcome. It forgets most handles
// it knows are closed, keeping some to exercise HANDLE_INVALID.
func (g *cmdGen) observe(c *fsm.Command, res *fsm.Result_, fx Effects) {
	for _, id := range fx.EndedSessions {
		g.handles = slices.DeleteFunc(g.handles, func(h *chubby.Handle) bool { return h.Session == id && g.r.Intn(10) > 0 })
		g.hot = slices.DeleteFunc(g.hot, func(h *chubby.Handle) bool { return h.Session == id && g.r.Intn(10) > 0 })
		g.sessions = slices.DeleteFunc(g.sessions, func(s chubby.SessionID) bool { return s == id && g.r.Intn(10) > 0 })
	}
	if res.Err != nil {
		return
	}
	if c.Op.Close != nil && g.r.Intn(10) > 0 {
		id := c.Op.Close.Handle.Id
		g.handles = slices.DeleteFunc(g.handles, func(h *chubby.Handle) bool { return h.Id == id })
		g.hot = slices.DeleteFunc(g.hot, func(h *chubby.Handle) bool { return h.Id == id })
	}
	if res.Session != nil {
		g.sessions = append(g.sessions, *res.Session)
	}
	if res.Stat != nil {
		g.saw(res.Stat)
	}
	if res.Multi != nil {
		for _, st := range res.Multi.Stats {
			g.saw(st)
		}
	}
	if res.Handle != nil {
		g.handles = append(g.handles, res.Handle)
		if slices.Contains(hotPaths, res.Handle.Path) {
			g.hot = append(g.hot, res.Handle)
		}
	}
}

// saw learns the instance at a path.
func (g *cmdGen) saw(st *chubby.Stat) {
	if _, ok := g.instances[st.Path]; !ok {
		g.seen = append(g.seen, st.Path)
	}
	g.instances[st.Path] = st.Instance
}

// soak returns the seeds and steps of a randomized test: the defaults, a
// quarter with -short, or FS_SOAK times more (FS_SOAK=50 go test -run
// Random ./fs/) for a long run.
func soak(seeds int64, steps int) (int64, int) {
	if testing.Short() {
		return max(1, seeds/4), max(100, steps/4)
	}
	if f, err := strconv.Atoi(os.Getenv("FS_SOAK")); err == nil && f > 1 {
		return seeds * int64(f), steps
	}
	return seeds, steps
}
