package master

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
)

// read registers a read of path by session id that saw the read ACL name
// name, as the cell's read path does: Register before the state is read,
// RegisterACL after. It reports whether the reply may say cacheable.
func read(c *Cache, id chubby.SessionID, path, name string) bool {
	ok, mark := c.RegisterRead(id, path)
	return ok && c.RegisterACL(id, path, name, mark)
}

// invalidated returns the paths attached to session id's next grant.
func invalidated(c *Cache, id chubby.SessionID) []string {
	gs := []*chubby.LeaseGrant{{Session: id}}
	c.Attach(gs)
	out := slices.Clone(gs[0].Invalidations)
	slices.Sort(out)
	return out
}

func forever(ids ...chubby.SessionID) func(chubby.SessionID) (Time, bool) {
	m := map[chubby.SessionID]Time{}
	for _, id := range ids {
		m[id] = 1 << 40
	}
	return leaseEnds(m)
}

// TestACLChangeInvalidatesTheNodesItGoverns: a change that may narrow an
// ACL name invalidates every session's copy of every node whose read
// right the name governs, and nothing else; all names' when AllACLs.
func TestACLChangeInvalidatesTheNodesItGoverns(t *testing.T) {
	tests := []struct {
		name   string
		scope  Scope
		wake   []chubby.SessionID
		inv1   []string // session 1's invalidations
		inv2   []string
		cached int // (session, node) pairs left
	}{
		{"one name", Scope{ACLs: []string{"team"}}, []chubby.SessionID{1, 2}, []string{"/a", "/d"}, []string{"/a"}, 3},
		{"another name", Scope{ACLs: []string{"ops"}}, []chubby.SessionID{1}, []string{"/b"}, nil, 5},
		{"a name nobody's read names", Scope{ACLs: []string{"nobody"}}, nil, nil, nil, 6},
		{"every name", Scope{AllACLs: true}, []chubby.SessionID{1, 2}, []string{"/a", "/b", "/d"}, []string{"/a"}, 2},
		{"a path, no name", Scope{Paths: []string{"/c"}}, []chubby.SessionID{1, 2}, []string{"/c"}, []string{"/c"}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCache(0, 0)
			c.Declare(1)
			c.Declare(2)
			for _, r := range []struct {
				id         chubby.SessionID
				path, name string
			}{{1, "/a", "team"}, {2, "/a", "team"}, {1, "/b", "ops"}, {1, "/c", ""}, {2, "/c", ""}, {1, "/d", "team"}} {
				if !read(c, r.id, r.path, r.name) {
					t.Fatalf("session %d may not cache %s", r.id, r.path)
				}
			}
			ch, wake := c.InvalidateScope(tt.scope, forever(1, 2))
			if !slices.Equal(wake, tt.wake) {
				t.Fatalf("wake %v, want %v", wake, tt.wake)
			}
			if got := invalidated(c, 1); !slices.Equal(got, tt.inv1) {
				t.Errorf("session 1 invalidated %v, want %v", got, tt.inv1)
			}
			if got := invalidated(c, 2); !slices.Equal(got, tt.inv2) {
				t.Errorf("session 2 invalidated %v, want %v", got, tt.inv2)
			}
			if _, n := c.Stats(); n != tt.cached {
				t.Errorf("%d pairs cached, want %d", n, tt.cached)
			}
			if ready, _ := c.Ready(ch, 0); ready != (len(tt.wake) == 0) {
				t.Errorf("ready %v before any ack", ready)
			}
			c.Done(ch)
		})
	}
}

// TestACLChangeMakesReadsUncachable: while a change that may narrow a name
// is in progress, a read that saw the name is served uncachable (its
// rights check may have used the old file); so is a read that registered
// before a change to any name began, or before one ended, and looked at
// the state in between. After, reads cache again, and a copy registered
// after is invalidated by the next change.
func TestACLChangeMakesReadsUncachable(t *testing.T) {
	c := NewCache(0, 0)
	c.Declare(1)
	ch, _ := c.InvalidateScope(Scope{ACLs: []string{"team"}}, forever(1))
	if read(c, 1, "/a", "team") {
		t.Fatal("cachable while its read ACL is being changed")
	}
	if !read(c, 1, "/b", "ops") || !read(c, 1, "/c", "") {
		t.Fatal("a change to team makes a node under another name, or none, uncachable")
	}
	// Registered while the change is in progress, read after it applied,
	// RegisterACL after Done: the read may have seen either file.
	ok, mark := c.RegisterRead(1, "/e")
	if !ok {
		t.Fatal("Register refused")
	}
	c.Done(ch)
	if c.RegisterACL(1, "/e", "team", mark) {
		t.Fatal("a read registered before the change ended is cachable")
	}
	// A change that begins between Register and RegisterACL.
	ok, mark = c.RegisterRead(1, "/f")
	if !ok {
		t.Fatal("Register refused")
	}
	ch2, _ := c.InvalidateScope(Scope{ACLs: []string{"other"}}, forever(1))
	c.Done(ch2)
	if c.RegisterACL(1, "/f", "team", mark) {
		t.Fatal("a read registered before a change to ACL names began is cachable")
	}
	// An invalidation of the session between the two.
	ok, mark = c.RegisterRead(1, "/g")
	if !ok {
		t.Fatal("Register refused")
	}
	ch3, _ := c.Invalidate([]string{"/b"}, nil, false, forever(1))
	c.Done(ch3)
	if c.RegisterACL(1, "/g", "team", mark) {
		t.Fatal("a read registered before an invalidation of its session is cachable")
	}
	if !read(c, 1, "/a", "team") {
		t.Fatal("not cachable once no change is in progress")
	}
	ch4, wake := c.InvalidateScope(Scope{ACLs: []string{"team"}}, forever(1))
	if len(wake) != 1 || !slices.Contains(invalidated(c, 1), "/a") {
		t.Fatalf("a copy cached after the last change is not invalidated by the next: wake %v", wake)
	}
	c.Done(ch4)
}

// TestACLIndexFollowsTheTable: the index holds only what sessions cache:
// a path's invalidation, a session's end and a new master epoch take their
// entries with them.
func TestACLIndexFollowsTheTable(t *testing.T) {
	c := NewCache(0, 0)
	c.Declare(1)
	c.Declare(2)
	read(c, 1, "/a", "team")
	read(c, 2, "/a", "team")
	read(c, 2, "/b", "team")
	ch, _ := c.Invalidate([]string{"/a"}, nil, false, forever(1, 2)) // a SetACL of /a, say
	c.Done(ch)
	if got := c.acls["team"]; len(got) != 1 || got["/b"] != 1 {
		t.Fatalf("after /a's invalidation the index holds %v", got)
	}
	c.Forget(2)
	if len(c.acls) != 0 {
		t.Fatalf("after the session's end the index holds %v", c.acls)
	}
	ch, wake := c.InvalidateScope(Scope{ACLs: []string{"team"}}, forever(1))
	if len(wake) != 0 {
		t.Fatalf("a change to an ACL nobody caches under woke %v", wake)
	}
	c.Done(ch)
	read(c, 1, "/c", "team")
	c.Reset(2, []chubby.SessionID{1})
	if len(c.acls) != 0 || len(c.aclPending) != 0 {
		t.Fatalf("a new epoch keeps the index %v, pending %v", c.acls, c.aclPending)
	}
}

// TestACLChangeOfManyNodes: a name that governs 10,000 cached nodes of
// several sessions invalidates every one of them.
func TestACLChangeOfManyNodes(t *testing.T) {
	const nodes, sessions = 10000, 4
	c := NewCache(0, 0)
	for id := chubby.SessionID(1); id <= sessions; id++ {
		c.Declare(id)
	}
	for i := range nodes {
		id := chubby.SessionID(1 + i%sessions)
		if !read(c, id, fmt.Sprintf("/n/%d", i), "team") {
			t.Fatalf("node %d not cachable", i)
		}
	}
	read(c, 1, "/other", "ops")
	_, wake := c.InvalidateScope(Scope{ACLs: []string{"team"}}, forever(1, 2, 3, 4))
	if len(wake) != sessions {
		t.Fatalf("woke %v", wake)
	}
	if _, n := c.Stats(); n != 1 {
		t.Fatalf("%d pairs left cached, want 1 (/other)", n)
	}
	gs := []*chubby.LeaseGrant{{Session: 1}, {Session: 2}}
	c.Attach(gs)
	for _, g := range gs {
		if !g.GetInvalidateAll() && len(g.Invalidations) != nodes/sessions {
			t.Errorf("session %d: %d invalidations, want %d or an invalidate_all", g.Session, len(g.Invalidations), nodes/sessions)
		}
	}
}

// BenchmarkACLInvalidate10k: the table's part of a write to an ACL file
// that governs 10,000 cached nodes (one session each: the per-session
// default): the index walk and the invalidations queued, and the reads
// that fill it again.
func BenchmarkACLInvalidate10k(b *testing.B) {
	const nodes = 10000
	c := NewCache(0, 0)
	c.Declare(1)
	paths := make([]string, nodes)
	for i := range paths {
		paths[i] = fmt.Sprintf("/n/%d", i)
	}
	fill := func() {
		for _, p := range paths {
			read(c, 1, p, "team")
		}
	}
	fill()
	b.ResetTimer()
	for range b.N {
		ch, _ := c.InvalidateScope(Scope{ACLs: []string{"team"}}, forever(1))
		c.Done(ch)
		b.StopTimer()
		c.Ack(0, []chubby.SessionID{1}, []int64{c.sessions[1].seq})
		fill()
		b.StartTimer()
	}
}

// BenchmarkRegisterRead: a cacheable read's two holds of the table (the
// cost of the index per read), against one before ACL names were indexed.
func BenchmarkRegisterRead(b *testing.B) {
	for _, name := range []string{"", "team"} {
		b.Run(fmt.Sprintf("acl=%q", name), func(b *testing.B) {
			c := NewCache(0, 0)
			c.Declare(1)
			for i := range b.N {
				read(c, 1, fmt.Sprintf("/n/%d", i%1000), name)
			}
		})
	}
}

// BenchmarkIndexBytes reports the table's heap per cached node, with and
// without a read ACL name to index it under (10,000 nodes of one session).
func BenchmarkIndexBytes(b *testing.B) {
	const nodes = 10000
	paths := make([]string, nodes)
	for i := range paths {
		paths[i] = fmt.Sprintf("/n/%d", i)
	}
	for _, name := range []string{"", "team"} {
		b.Run(fmt.Sprintf("acl=%q", name), func(b *testing.B) {
			var total uint64
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				c := NewCache(0, 0)
				c.Declare(1)
				for _, p := range paths {
					read(c, 1, p, name)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				total += after.HeapAlloc - before.HeapAlloc
				runtime.KeepAlive(c)
			}
			b.ReportMetric(float64(total)/float64(b.N)/nodes, "B/node")
		})
	}
}
