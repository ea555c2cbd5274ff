package fs

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// cachedViews returns what a client may cache of every node, by path, as
// it looks at time at (a later time than the state's clock: a cached Stat's
// lock-delay remaining is aged, as the client does): a file's contents and
// Stat, a directory's listing with its children's Stats.
func cachedViews(s *State, at int64) map[string]string {
	stat := func(n *node) string {
		st := s.stat(n)
		if l := st.Lock; l != nil && l.DelayRemainingMs > 0 {
			l.DelayRemainingMs = max(0, s.now+l.DelayRemainingMs-at)
		}
		return st.String()
	}
	out := map[string]string{}
	var walk func(n *node)
	walk = func(n *node) {
		if !n.isDir() {
			out[n.path] = fmt.Sprintf("%q %s", n.content, stat(n))
			return
		}
		var b strings.Builder
		for _, name := range sortedNames(n) {
			fmt.Fprintf(&b, "%s: %s\n", name, stat(n.children[name]))
			walk(n.children[name])
		}
		out[n.path] = b.String()
	}
	walk(s.root)
	return out
}

// outside returns the paths cached before (views at the time of after)
// that changed or went, and that the reach does not name.
func outside(r Reach, before, after map[string]string) []string {
	if r.All {
		return nil
	}
	var out []string
	for p, v := range before {
		if w, ok := after[p]; ok && w == v {
			continue
		}
		if _, ok := slices.BinarySearch(r.Paths, p); ok {
			continue
		}
		if slices.ContainsFunc(r.Trees, func(t string) bool { return strings.HasPrefix(p, t+"/") }) {
			continue
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// grants returns the parsed ACL file of every ACL name that has one (a
// name without grants nobody).
func grants(s *State) map[string]*ACL {
	out := map[string]*ACL{}
	if dir := s.root.children[aclDir]; dir != nil && dir.isDir() {
		for name, f := range dir.children {
			if f.aclFile != nil {
				out[name] = f.aclFile
			}
		}
	}
	return out
}

// covers reports whether after grants everybody before grants.
func covers(after, before *ACL) bool {
	if before == nil {
		return true
	}
	if after == nil || before.everyone && !after.everyone {
		return false
	}
	for p := range before.principals {
		if _, ok := after.principals[p]; !ok && !(after.everyone && p != Anonymous) {
			return false
		}
	}
	return true
}

// narrowedOutside returns the ACL names whose grant narrowed from before
// to after and that the reach does not name.
func narrowedOutside(r Reach, before, after map[string]*ACL) []string {
	if r.AllACLs {
		return nil
	}
	var out []string
	for name, a := range before {
		if _, ok := slices.BinarySearch(r.ACLs, name); !ok && !covers(after[name], a) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// TestReachSound: for random command streams, every cached view a command
// changes is in the reach computed before it applied, and so is every ACL
// name whose grant it narrows.
func TestReachSound(t *testing.T) {
	seeds, steps := soak(6, 1000) // FS_SOAK=2: the 12 seeds of the suite before
	for seed := range seeds {
		g := newCmdGen(seed)
		s := New(DefaultLimits())
		for i := range steps {
			c := g.next()
			r := s.Reach(c)
			at := max(s.now, c.TimeMs)
			before, acls := cachedViews(s, at), grants(s)
			res, fx := s.Apply(c)
			if miss := outside(r, before, cachedViews(s, at)); len(miss) > 0 {
				t.Fatalf("seed %d step %d: %v changed %v outside its reach %+v", seed, i, c, miss, r)
			}
			if miss := narrowedOutside(r, acls, grants(s)); len(miss) > 0 {
				t.Fatalf("seed %d step %d: %v narrowed the ACLs %v outside its reach %+v", seed, i, c, miss, r)
			}
			g.observe(c, res, fx)
		}
	}
}

// TestReachInFlight: the master computes a command's reach before the
// command is in the log, and other commands apply first, in any order.
// With the two conditions State.Reach names kept — stamps never
// decreasing in the order reaches are computed, every in-flight expired
// EndSession's Delayed added to each reach, and an EndSession's reach
// computed only when none of its session's commands is in flight, with
// none begun until it has applied — every command changes only what its
// reach names.
func TestReachInFlight(t *testing.T) {
	type flight struct {
		c *fsm.Command
		r Reach
	}
	seeds, steps := soak(20, 1000) // FS_SOAK=3 runs the 60 seeds of the suite before it had to hold on a busy machine
	for seed := range seeds {
		g := newCmdGen(seed)
		s := New(DefaultLimits())
		var (
			inFlight []*flight
			last     int64
		)
		ending := func(id chubby.SessionID) bool {
			return slices.ContainsFunc(inFlight, func(f *flight) bool {
				return f.c.Op.EndSession != nil && f.c.Op.EndSession.Session == id
			})
		}
		running := func(id chubby.SessionID) bool {
			return slices.ContainsFunc(inFlight, func(f *flight) bool {
				sid, ok := OpSession(f.c.Op)
				return ok && sid == id && f.c.Op.EndSession == nil
			})
		}
		for i := 0; i < steps; i++ {
			if len(inFlight) < 8 && (len(inFlight) == 0 || g.r.Intn(2) == 0) {
				switch g.r.Intn(8) {
				case 0:
					g.now += 1000 // past some lock-delays begun in flight
				case 1:
					g.now -= 1000 // a wall clock set back: the stamps still never decrease
				}
				c := g.next()
				id, ok := OpSession(c.Op)
				switch {
				case c.Op.EndSession != nil && running(id), c.Op.EndSession == nil && ok && ending(id):
					continue // the master holds it back (EndSession) or refuses it
				}
				c.TimeMs = max(c.TimeMs, last)
				last = c.TimeMs
				f := &flight{c: c, r: s.Reach(c)}
				for _, o := range inFlight {
					f.r.Paths = append(f.r.Paths, o.r.Delayed...)
				}
				slices.Sort(f.r.Paths)
				inFlight = append(inFlight, f)
				continue
			}
			k := g.r.Intn(len(inFlight))
			f := inFlight[k]
			inFlight = slices.Delete(inFlight, k, k+1)
			at := max(s.now, f.c.TimeMs)
			before, acls := cachedViews(s, at), grants(s)
			res, fx := s.Apply(f.c)
			if miss := outside(f.r, before, cachedViews(s, at)); len(miss) > 0 {
				t.Fatalf("seed %d step %d: %v changed %v outside its reach %+v", seed, i, f.c, miss, f.r)
			}
			if miss := narrowedOutside(f.r, acls, grants(s)); len(miss) > 0 {
				t.Fatalf("seed %d step %d: %v narrowed the ACLs %v outside its reach %+v", seed, i, f.c, miss, f.r)
			}
			g.observe(f.c, res, fx)
		}
	}
}

// TestReach: what the reach names, case by case: exact where the state
// says, no more.
func TestReach(t *testing.T) {
	type want struct {
		paths, trees, delayed []string
	}
	tests := []struct {
		name  string
		setup func(h *harness) *fsm.Command
		want  want
	}{
		{"tick with nothing due", func(h *harness) *fsm.Command {
			return &fsm.Command{TimeMs: h.now + 10, Op: opTick()}
		}, want{}},
		{"clock ends a lock-delay", func(h *harness) *fsm.Command {
			a, b := h.session(), h.session()
			h.mkdir(a, "/d")
			ha, hb := h.rw(a, "/d/l"), h.rw(b, "/d/l")
			h.ok(opAcquire(ha, excl, false, 100))
			h.ok(opAcquire(hb, excl, true, 0))
			h.rw(a, "/other")
			h.ok(opEnd(a, true))
			return &fsm.Command{TimeMs: h.now + 100, Op: opCreateSession("x")}
		}, want{paths: []string{"/d", "/d/l"}}},
		{"clock short of a lock-delay's end", func(h *harness) *fsm.Command {
			a := h.session()
			h.ok(opAcquire(h.rw(a, "/l"), excl, false, 100))
			h.ok(opEnd(a, true))
			return &fsm.Command{TimeMs: h.now + 99, Op: opTick()}
		}, want{}},
		{"session end: its locks, waits and ephemeral nodes", func(h *harness) *fsm.Command {
			a, b := h.session(), h.session()
			h.mkdir(a, "/d")
			h.ok(opAcquire(h.rw(b, "/d/w"), excl, false, 0))
			h.ok(opAcquire(h.rw(a, "/d/w"), excl, true, 0)) // a waits
			h.ok(opAcquire(h.rw(a, "/l"), shared, false, 0))
			h.rw(a, "/idle") // open, no lock: unchanged
			h.ok(opCreateFile(&chubby.CreateFileRequest{Session: a, Path: "/d/e/f", Ephemeral: ptr(true), MakeParents: ptr(true)}))
			return &fsm.Command{Op: opEnd(a, false)}
		}, want{paths: []string{"/", "/d", "/d/e", "/d/e/f", "/d/w", "/l"}}},
		{"expired session end: the lock-delays it starts", func(h *harness) *fsm.Command {
			a, b := h.session(), h.session()
			h.mkdir(a, "/d")
			h.ok(opAcquire(h.rw(a, "/d/l"), excl, false, 1000))
			h.ok(opAcquire(h.rw(a, "/n"), excl, false, 0)) // no lock-delay
			h.ok(opAcquire(h.rw(b, "/w"), excl, false, 0))
			h.ok(opAcquire(h.rw(a, "/w"), excl, true, 500)) // a lock-delay if granted first
			return &fsm.Command{Op: opEnd(a, true)}
		}, want{paths: []string{"/", "/d", "/d/l", "/n", "/w"}, delayed: []string{"/", "/d", "/d/l", "/w"}}},
		{"ephemeral directories above", func(h *harness) *fsm.Command {
			a, b := h.session(), h.session()
			h.ok(opMkdir(a, "/p", false, false))
			h.ok(opMkdir(a, "/p/e1", false, true))
			h.ok(opMkdir(b, "/p/e1/e2", false, true))
			f := h.rw(b, "/p/e1/e2/f")
			h.ok(opEnd(a, false)) // /p/e1 stays: not empty
			return &fsm.Command{Op: opDelete(f, false)}
		}, want{paths: []string{"/", "/p", "/p/e1", "/p/e1/e2", "/p/e1/e2/f"}, trees: []string{"/p/e1/e2/f"}}},
		{"delete under a permanent directory", func(h *harness) *fsm.Command {
			a := h.session()
			h.mkdir(a, "/a/b")
			return &fsm.Command{Op: opDelete(h.rw(a, "/a/b/f"), false)}
		}, want{paths: []string{"/a", "/a/b", "/a/b/f"}, trees: []string{"/a/b/f"}}},
		{"delete through a closed handle", func(h *harness) *fsm.Command {
			a := h.session()
			f := h.rw(a, "/f")
			h.ok(opClose(f))
			return &fsm.Command{Op: opDelete(f, false)}
		}, want{}},
		{"write", func(h *harness) *fsm.Command {
			a := h.session()
			h.mkdir(a, "/a/b")
			return &fsm.Command{Op: opSet(h.rw(a, "/a/b/f"), "x")}
		}, want{paths: []string{"/a/b", "/a/b/f"}}},
		{"create", func(h *harness) *fsm.Command {
			a := h.session()
			h.mkdir(a, "/a/b")
			return &fsm.Command{Op: opCreateFile(&chubby.CreateFileRequest{Session: a, Path: "/a/b/f"})}
		}, want{paths: []string{"/a", "/a/b", "/a/b/f"}}},
		{"create with parents", func(h *harness) *fsm.Command {
			a := h.session()
			return &fsm.Command{Op: opCreateFile(&chubby.CreateFileRequest{Session: a, Path: "/a/b/f", MakeParents: ptr(true)})}
		}, want{paths: []string{"/", "/a", "/a/b", "/a/b/f"}}},
		{"set ACL", func(h *harness) *fsm.Command {
			a := h.session()
			h.mkdir(a, "/a/b")
			return &fsm.Command{Op: opSetACL(h.rw(a, "/a/b/f"), aclNamesOf("r", "", ""))}
		}, want{paths: []string{"/a/b", "/a/b/f"}}},
		{"init ACL", func(h *harness) *fsm.Command {
			return &fsm.Command{Op: opInitACL("root")}
		}, want{paths: []string{"/", "/acl", "/acl/admin"}}},
		{"init ACL that will change nothing yet", func(h *harness) *fsm.Command {
			h.mkdir(h.session(), "/acl") // a command in between may delete it
			return &fsm.Command{Op: opInitACL("root")}
		}, want{paths: []string{"/", "/acl", "/acl/admin"}}},
		{"init ACL refused", func(h *harness) *fsm.Command {
			return &fsm.Command{Op: opInitACL("not a principal")}
		}, want{}},
		{"multi: a create and a write", func(h *harness) *fsm.Command {
			a := h.session()
			h.mkdir(a, "/a/b")
			return &fsm.Command{Op: opMulti(a, nil, mCreate("/a/b/f", ""), mSet("/a/b/f", "x"))}
		}, want{paths: []string{"/a", "/a/b", "/a/b/f"}}},
		{"multi: a delete by path, every ancestor", func(h *harness) *fsm.Command {
			a := h.session()
			h.write(a, "/a/b/f", "")
			return &fsm.Command{Op: opMulti(a, nil, mDelete("/a/b/f"))}
		}, want{paths: []string{"/", "/a", "/a/b", "/a/b/f"}, trees: []string{"/a/b/f"}}},
		{"multi: a delete pinned by an instance compare, as through a handle", func(h *harness) *fsm.Command {
			a := h.session()
			h.write(a, "/a/b/f", "")
			return &fsm.Command{Op: opMulti(a, compares(mInstanceIs("/a/b/f", h.node("/a/b/f").instance)), mDelete("/a/b/f"))}
		}, want{paths: []string{"/a", "/a/b", "/a/b/f"}, trees: []string{"/a/b/f"}}},
		{"multi: a pin does not outlive an earlier delete", func(h *harness) *fsm.Command {
			a := h.session()
			h.write(a, "/a/b/f", "")
			return &fsm.Command{Op: opMulti(a, compares(mInstanceIs("/a/b/f", h.node("/a/b/f").instance)),
				mDelete("/a/b/f"), mCreate("/a/b/f", ""), mDelete("/a/b/f"))}
		}, want{paths: []string{"/", "/a", "/a/b", "/a/b/f"}, trees: []string{"/a/b/f"}}},
		{"multi: a pin names another instance", func(h *harness) *fsm.Command {
			a := h.session()
			h.write(a, "/a/b/f", "")
			return &fsm.Command{Op: opMulti(a, compares(mInstanceIs("/a/b/f", 1)), mDelete("/a/b/f"))}
		}, want{paths: []string{"/", "/a", "/a/b", "/a/b/f"}, trees: []string{"/a/b/f"}}},
		{"multi: a pinned delete in an orphaned ephemeral directory", func(h *harness) *fsm.Command {
			a, b := h.session(), h.session()
			h.mkdir(a, "/p/q")
			h.ok(opMkdir(b, "/p/q/e", false, true))
			h.write(b, "/p/q/e/f", "")
			h.ok(opEnd(b, false))
			return &fsm.Command{Op: opMulti(a, compares(mInstanceIs("/p/q/e/f", h.node("/p/q/e/f").instance)), mDelete("/p/q/e/f"))}
		}, want{paths: []string{"/p", "/p/q", "/p/q/e", "/p/q/e/f"}, trees: []string{"/p/q/e/f"}}},
		{"multi refused for its arguments", func(h *harness) *fsm.Command {
			return &fsm.Command{Op: opMulti(h.session(), nil, mCreate("/a", ""), mDelete("/"))}
		}, want{}},
		{"open existing", func(h *harness) *fsm.Command {
			a := h.session()
			h.rw(a, "/f")
			return &fsm.Command{Op: opOpen(&chubby.OpenRequest{Session: a, Path: "/f", Mode: rd, Create: chubby.CreateMode_OPEN_EXISTING})}
		}, want{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			c := tt.setup(h)
			if c.TimeMs == 0 {
				c.TimeMs = h.now
			}
			r := h.s.Reach(c)
			got := want{r.Paths, r.Trees, r.Delayed}
			if r.All || !slices.Equal(got.paths, tt.want.paths) || !slices.Equal(got.trees, tt.want.trees) || !slices.Equal(got.delayed, tt.want.delayed) {
				t.Fatalf("reach %+v, want %+v", r, tt.want)
			}
		})
	}
}

// TestReachTooLarge: a reach of more than MaxReachPaths paths says All.
func TestReachTooLarge(t *testing.T) {
	s := New(DefaultLimits())
	res, _ := s.Apply(&fsm.Command{TimeMs: 1, Op: opCreateSession("a")})
	a := *res.Session
	for i := range MaxReachPaths {
		c := &fsm.Command{TimeMs: 1, Op: opCreateFile(&chubby.CreateFileRequest{Session: a, Path: fmt.Sprintf("/e%d", i), Ephemeral: ptr(true)})}
		if res, _ := s.Apply(c); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	if r := s.Reach(&fsm.Command{TimeMs: 1, Op: opEnd(a, false)}); !r.All || r.Paths != nil {
		t.Fatalf("the end of a session with %d ephemeral files: All %v, %d paths", MaxReachPaths, r.All, len(r.Paths))
	}
}

// TestReachACLs: the ACL names a command may narrow, case by case: a
// write or removal at an ACL file's place names it, a removal of /acl
// every name; a creation, a lock, a Close or a SetACL there none.
func TestReachACLs(t *testing.T) {
	type want struct {
		acls []string
		all  bool
	}
	// Each setup starts with /acl/team ("alice") and /acl/ops ("bob").
	tests := []struct {
		name  string
		setup func(h *harness, a chubby.SessionID) *fsm.Command
		want  want
	}{
		{"write an ACL file", func(h *harness, a chubby.SessionID) *fsm.Command {
			return &fsm.Command{Op: opSet(h.rw(a, "/acl/team"), "bob\n")}
		}, want{acls: []string{"team"}}},
		{"write another file", func(h *harness, a chubby.SessionID) *fsm.Command {
			h.mkdir(a, "/x/acl")
			return &fsm.Command{Op: opSet(h.rw(a, "/x/acl/team"), "bob\n")}
		}, want{}},
		{"delete an ACL file", func(h *harness, a chubby.SessionID) *fsm.Command {
			return &fsm.Command{Op: opDelete(h.rw(a, "/acl/ops"), false)}
		}, want{acls: []string{"ops"}}},
		{"delete /acl", func(h *harness, a chubby.SessionID) *fsm.Command {
			return &fsm.Command{Op: opDelete(h.rw(a, "/acl"), true)}
		}, want{all: true}},
		{"delete through a handle not opened yet", func(h *harness, a chubby.SessionID) *fsm.Command {
			return &fsm.Command{Op: opDelete(&chubby.Handle{Id: h.s.nextHandle + 5, Session: a, Path: "/acl/team", Instance: 1}, false)}
		}, want{acls: []string{"team"}}},
		{"create an ACL file", func(h *harness, a chubby.SessionID) *fsm.Command {
			return &fsm.Command{Op: opCreateFile(&chubby.CreateFileRequest{Session: a, Path: "/acl/new", Content: []byte("carol\n")})}
		}, want{}},
		{"lock, close and SetACL of an ACL file", func(h *harness, a chubby.SessionID) *fsm.Command {
			hd := h.rw(a, "/acl/team")
			h.ok(opAcquire(hd, excl, false, 0))
			h.ok(opSetACL(hd, aclNamesOf("ops", "", "")))
			return &fsm.Command{Op: opClose(hd)}
		}, want{}},
		{"multi: writes and deletes", func(h *harness, a chubby.SessionID) *fsm.Command {
			return &fsm.Command{Op: opMulti(a, nil, mSet("/acl/team", "carol\n"), mDelete("/acl/ops"), mCreate("/acl/new", ""), mSet("/other", "x"))}
		}, want{acls: []string{"ops", "team"}}},
		{"multi: delete /acl", func(h *harness, a chubby.SessionID) *fsm.Command {
			return &fsm.Command{Op: opMulti(a, nil, mDeleteAll("/acl"))}
		}, want{all: true}},
		{"session end: its ephemeral ACL file", func(h *harness, a chubby.SessionID) *fsm.Command {
			b := h.session()
			h.ok(opCreateFile(&chubby.CreateFileRequest{Session: b, Path: "/acl/eph", Ephemeral: ptr(true), Content: []byte("bob\n")}))
			return &fsm.Command{Op: opEnd(b, true)}
		}, want{acls: []string{"eph"}}},
		{"init ACL", func(h *harness, a chubby.SessionID) *fsm.Command {
			return &fsm.Command{Op: opInitACL("root")}
		}, want{acls: []string{"admin"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			a := h.session()
			h.mkdir(a, "/acl")
			h.write(a, "/acl/team", "alice\n")
			h.write(a, "/acl/ops", "bob\n")
			h.write(a, "/other", "")
			c := tt.setup(h, a)
			if c.TimeMs == 0 {
				c.TimeMs = h.now
			}
			r := h.s.Reach(c)
			if r.AllACLs != tt.want.all || !slices.Equal(r.ACLs, tt.want.acls) {
				t.Fatalf("reach %+v, want ACLs %v, all %v", r, tt.want.acls, tt.want.all)
			}
		})
	}
}
