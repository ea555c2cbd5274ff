package cell

import (
	"fmt"
	"testing"

	chubbyclient "github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// BenchmarkACLFileWrite10kCached: a write to an ACL file that governs the
// read right of 10,000 nodes a reader caches, through the real server and
// the Go client: the write returns once the reader has dropped all of
// them (one KeepAlive round trip carrying an invalidate_all past 1,024
// paths). Each iteration's refill of the reader's cache is not timed.
func BenchmarkACLFileWrite10kCached(b *testing.B) {
	const nodes = 10000
	tc := startCell(b, Config{InMemory: true, MaxCachedPerSession: 2 * nodes})
	c, err := chubbyclient.Connect(ctx, chubbyclient.Config{Addrs: []string{tc.s.Addr()}, Logger: quietLogger(), CacheMaxEntries: 2 * nodes})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	w, _ := c.NewSession(ctx)
	r, _ := c.NewSession(ctx)
	if _, err := w.CreateFile(ctx, "/acl/readers", []byte("anonymous\n"), chubbyclient.CreateOptions{MakeParents: true}); err != nil {
		b.Fatal(err)
	}
	if _, err := w.Mkdir(ctx, "/data", chubbyclient.MkdirOptions{}); err != nil {
		b.Fatal(err)
	}
	d, err := w.Open(ctx, "/data", chubbyclient.OpenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := d.SetACL(ctx, chubbyclient.ACL{Read: "readers"}); err != nil {
		b.Fatal(err)
	}
	hs := make([]*chubbyclient.Handle, nodes)
	for i := range hs {
		p := fmt.Sprintf("/data/f%d", i)
		if _, err := w.CreateFile(ctx, p, []byte("v"), chubbyclient.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if hs[i], err = r.Open(ctx, p, chubbyclient.OpenOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	acl, err := w.Open(ctx, "/acl/readers", chubbyclient.OpenOptions{Mode: chubby.OpenMode_READ_WRITE})
	if err != nil {
		b.Fatal(err)
	}
	fill := func() {
		for _, h := range hs {
			if _, _, err := h.GetContentsAndStat(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if _, n := tc.s.changes.stats(); n < nodes {
			b.Fatalf("%d nodes cached, want %d", n, nodes)
		}
	}
	// Against the same write with nothing cached.
	for _, cached := range []bool{false, true} {
		b.Run(fmt.Sprintf("cached=%v", cached), func(b *testing.B) {
			for range b.N {
				if cached {
					b.StopTimer()
					fill()
					b.StartTimer()
				}
				if _, err := acl.SetContents(ctx, []byte("anonymous\n")); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if _, n := tc.s.changes.stats(); n != 0 {
				b.Fatalf("%d nodes still cached after the write", n)
			}
		})
	}
}
