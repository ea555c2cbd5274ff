package cell

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	chubbyclient "github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
	"github.com/chubbygo/chubby/rpc"
)

// fillDir creates n files named f000000.. in dir (which it creates), in
// Multis of MAX_MULTI_OPS creates from 8 goroutines.
func fillDir(t *testing.T, cli combineservice.Client, s chubby.SessionID, dir string, from, n int) {
	t.Helper()
	yes := true
	if from == 0 {
		if _, err := cli.Mkdir(ctx, &chubby.MkdirRequest{Session: s, Path: dir, Parents: &yes}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	batches := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				var ops []*chubby.MultiOp
				for i := b; i < min(b+int(chubby.MAX_MULTI_OPS), from+n); i++ {
					ops = append(ops, &chubby.MultiOp{Kind: chubby.MultiOpKind_CREATE, Path: fmt.Sprintf("%s/f%06d", dir, i)})
				}
				if _, err := cli.Multi(ctx, &chubby.MultiRequest{Session: s, Ops: ops}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for b := from; b < from+n; b += int(chubby.MAX_MULTI_OPS) {
		batches <- b
	}
	close(batches)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// TestReadDirListsLargestDirectory lists a directory of fs's limit of
// children (100,000): the raw pages are bounded and chain by their
// cursor; the Go client returns every name, in order; one child more is
// refused. Before paging the reply of ~20,600 children or more exceeded
// the payload limit.
func TestReadDirListsLargestDirectory(t *testing.T) {
	// The raw session sends no KeepAlive: a lease that outlasts filling
	// 100,000 nodes on a loaded machine.
	tc := startCell(t, Config{InMemory: true, Lease: 5 * time.Minute})
	s := tc.session("big")
	maxChildren := fs.DefaultLimits().MaxChildren
	fillDir(t, tc.cli, s, "/big", 0, maxChildren)

	// One past the limit: refused, and nothing changed.
	_, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: s, Path: "/big/one-too-many"})
	if fs.Code(err) != chubby.ErrorCode_LIMIT_EXCEEDED {
		t.Fatalf("child %d: %v, want LIMIT_EXCEEDED", maxChildren+1, err)
	}

	// Raw pages: each within the entry and byte bounds, chained by after.
	h := tc.open(s, "/big", chubby.CreateMode_OPEN_EXISTING, false)
	yes := true
	var names []string
	pages := 0
	req := &chubby.ReadDirRequest{Handle: h, Cache: &yes}
	for {
		r, err := tc.cli.ReadDir(ctx, req)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		if n := len(r.Entries); n == 0 || n > int(chubby.MAX_READDIR_ENTRIES) {
			t.Fatalf("page %d has %d entries", pages, n)
		}
		if r.GetCacheable() {
			t.Fatalf("page %d of a paged listing is cacheable", pages)
		}
		if r.GetContentGeneration() == 0 {
			t.Fatalf("page %d carries no content generation", pages)
		}
		for _, e := range r.Entries {
			names = append(names, e.Name)
		}
		if !r.GetMore() {
			break
		}
		last := r.Entries[len(r.Entries)-1].Name
		req = &chubby.ReadDirRequest{Handle: h, After: &last}
	}
	if len(names) != maxChildren || !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != maxChildren {
		t.Fatalf("raw pages gave %d names (sorted %v), want %d distinct sorted", len(names), slices.IsSorted(names), maxChildren)
	}
	t.Logf("%d children in %d raw pages", len(names), pages)

	// The Go client pages underneath.
	c, err := chubbyclient.Connect(ctx, chubbyclient.Config{Addrs: []string{tc.s.Addr()}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cs, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	ch, err := cs.Open(ctx, "/big", chubbyclient.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es, err := ch.ReadDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != maxChildren {
		t.Fatalf("client ReadDir: %d entries, want %d", len(es), maxChildren)
	}
	for i, e := range es {
		if e.Name != names[i] || e.Stat == nil || e.Stat.Path != "/big/"+e.Name {
			t.Fatalf("client entry %d: %q %+v, want %q", i, e.Name, e.Stat, names[i])
		}
	}
}

// TestReadDirPageWorstCase lists a directory whose children have the
// longest paths (MAX_PATH_BYTES) and ACL names (MAX_NAME_BYTES each)
// there can be, held locks included: every page is within
// readDirPageBytes and its reply within the payload limit, and the pages
// hold every child.
func TestReadDirPageWorstCase(t *testing.T) {
	tc := startCell(t, Config{})
	s := tc.session("worst")
	yes := true
	comp := func(c byte) string { return strings.Repeat(string(c), int(chubby.MAX_NAME_BYTES)) }
	// 15 components of 255 bytes: children of 255 bytes make 4096-byte paths.
	var dir strings.Builder
	for i := range 15 {
		dir.WriteString("/" + comp(byte('a'+i)))
	}
	acl := comp('z')
	if _, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: s, Path: "/acl/" + acl, Content: []byte("anonymous\n"), MakeParents: &yes}); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.cli.Mkdir(ctx, &chubby.MkdirRequest{Session: s, Path: dir.String(), Parents: &yes}); err != nil {
		t.Fatal(err)
	}
	dh := tc.open(s, dir.String(), chubby.CreateMode_OPEN_EXISTING, false)
	if _, err := tc.cli.SetACL(ctx, &chubby.SetACLRequest{Handle: dh, Acl: &chubby.ACLNames{ReadAcl: acl, WriteAcl: acl, ChangeAcl: acl}}); err != nil {
		t.Fatal(err)
	}
	// Enough worst-case children for several pages.
	n := 2*readDirPageBytes/fs.MaxDirEntryBytes + 10
	for b := 0; b < n; b += int(chubby.MAX_MULTI_OPS) {
		var ops []*chubby.MultiOp
		for i := b; i < min(b+int(chubby.MAX_MULTI_OPS), n); i++ {
			name := fmt.Sprintf("%06d", i) + comp('y')[6:]
			ops = append(ops, &chubby.MultiOp{Kind: chubby.MultiOpKind_CREATE, Path: dir.String() + "/" + name})
		}
		if _, err := tc.cli.Multi(ctx, &chubby.MultiRequest{Session: s, Ops: ops}); err != nil {
			t.Fatal(err)
		}
	}
	// Hold the lock of the first child: its LockInfo carries a mode.
	first := dir.String() + "/" + fmt.Sprintf("%06d", 0) + comp('y')[6:]
	if _, err := tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: tc.open(s, first, chubby.CreateMode_OPEN_EXISTING, false), Mode: chubby.LockMode_EXCLUSIVE}); err != nil {
		t.Fatal(err)
	}
	got, pages := 0, 0
	req := &chubby.ReadDirRequest{Handle: dh}
	for {
		r, err := tc.cli.ReadDir(ctx, req)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		bytes := 0
		for _, e := range r.Entries {
			if len(e.Stat.Path) != int(chubby.MAX_PATH_BYTES) {
				t.Fatalf("a child's path is %d bytes, want %d", len(e.Stat.Path), chubby.MAX_PATH_BYTES)
			}
			bytes += e.BLength()
		}
		if bytes > readDirPageBytes || r.BLength() > rpc.DefaultMaxPayloadBytes {
			t.Fatalf("page %d: entries of %d bytes (bound %d), reply of %d (payload limit %d)", pages, bytes, readDirPageBytes, r.BLength(), rpc.DefaultMaxPayloadBytes)
		}
		got += len(r.Entries)
		if !r.GetMore() {
			break
		}
		last := r.Entries[len(r.Entries)-1].Name
		req = &chubby.ReadDirRequest{Handle: dh, After: &last}
	}
	if got != n || pages < 3 {
		t.Fatalf("%d entries in %d pages, want %d in at least 3", got, pages, n)
	}
	t.Logf("%d worst-case entries in %d pages", got, pages)
}

// TestReadDirRequestBounds: limit and after are checked at the edge.
func TestReadDirRequestBounds(t *testing.T) {
	tc := startCell(t, Config{InMemory: true})
	s := tc.session("bounds")
	fillDir(t, tc.cli, s, "/d", 0, 5)
	h := tc.open(s, "/d", chubby.CreateMode_OPEN_EXISTING, false)
	i32 := func(v int32) *int32 { return &v }
	str := func(v string) *string { return &v }
	for _, c := range []struct {
		name    string
		req     *chubby.ReadDirRequest
		entries int
		more    bool
		code    chubby.ErrorCode
	}{
		{"limit 1", &chubby.ReadDirRequest{Handle: h, Limit: i32(1)}, 1, true, 0},
		{"limit 5", &chubby.ReadDirRequest{Handle: h, Limit: i32(5)}, 5, false, 0},
		{"limit at the bound", &chubby.ReadDirRequest{Handle: h, Limit: i32(chubby.MAX_READDIR_ENTRIES)}, 5, false, 0},
		{"limit one past", &chubby.ReadDirRequest{Handle: h, Limit: i32(chubby.MAX_READDIR_ENTRIES + 1)}, 0, false, chubby.ErrorCode_INVALID_ARGUMENT},
		{"limit negative", &chubby.ReadDirRequest{Handle: h, Limit: i32(-1)}, 0, false, chubby.ErrorCode_INVALID_ARGUMENT},
		{"after the second", &chubby.ReadDirRequest{Handle: h, After: str("f000001")}, 3, false, 0},
		{"after the last", &chubby.ReadDirRequest{Handle: h, After: str("f000004")}, 0, false, 0},
		{"after at the name bound", &chubby.ReadDirRequest{Handle: h, After: str(strings.Repeat("a", int(chubby.MAX_NAME_BYTES)))}, 5, false, 0},
		{"after one past the name bound", &chubby.ReadDirRequest{Handle: h, After: str(strings.Repeat("a", int(chubby.MAX_NAME_BYTES)+1))}, 0, false, chubby.ErrorCode_INVALID_ARGUMENT},
		{"after not a name", &chubby.ReadDirRequest{Handle: h, After: str("a/b")}, 0, false, chubby.ErrorCode_INVALID_ARGUMENT},
	} {
		r, err := tc.cli.ReadDir(ctx, c.req)
		if c.code != 0 {
			if fs.Code(err) != c.code {
				t.Errorf("%s: %v, want %v", c.name, err, c.code)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if len(r.Entries) != c.entries || r.GetMore() != c.more {
			t.Errorf("%s: %d entries more=%v, want %d more=%v", c.name, len(r.Entries), r.GetMore(), c.entries, c.more)
		}
	}
}
