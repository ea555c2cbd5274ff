package cell

import (
	"fmt"
	"testing"

	chubbyclient "github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// connectClient returns a Go client (its cache on) calling c's cell as
// principal p.
func (c *aclCell) connectClient(p string) *chubbyclient.Client {
	c.t.Helper()
	cl, err := chubbyclient.Connect(ctx, chubbyclient.Config{Addrs: []string{c.s.Addr()}, TLS: c.ca.ClientTLS(c.t, p), Logger: quietLogger()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// TestACLFileChangeInvalidatesCaches: a reader caches files and a listing
// whose read right the ACL file /acl/readers governs; the ACL file is
// rewritten without the reader, or deleted; the reader's next reads are
// refused PERMISSION_DENIED by the cell, not served from its cache. The
// write waits, as any change to a cached node, until the reader has
// dropped its copies. Through the real server on TLS, with the Go
// client's cache.
func TestACLFileChangeInvalidatesCaches(t *testing.T) {
	tests := []struct {
		name   string
		files  int
		revoke func(t *testing.T, acl *chubbyclient.Handle)
	}{
		{"rewritten", 1, func(t *testing.T, acl *chubbyclient.Handle) {
			if _, err := acl.SetContents(ctx, []byte("admin\n")); err != nil {
				t.Fatalf("rewrite /acl/readers: %v", err)
			}
		}},
		{"deleted", 1, func(t *testing.T, acl *chubbyclient.Handle) {
			if err := acl.Delete(ctx, false); err != nil {
				t.Fatalf("delete /acl/readers: %v", err)
			}
		}},
		{"named by many cached nodes", 300, func(t *testing.T, acl *chubbyclient.Handle) {
			if _, err := acl.SetContents(ctx, []byte("# nobody\n")); err != nil {
				t.Fatalf("rewrite /acl/readers: %v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := startACLCell(t)
			as, err := c.connectClient("admin").NewSession(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := as.CreateFile(ctx, "/acl/readers", []byte("bob\n"), chubbyclient.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := as.Mkdir(ctx, "/data", chubbyclient.MkdirOptions{}); err != nil {
				t.Fatal(err)
			}
			d, err := as.Open(ctx, "/data", chubbyclient.OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// Its files inherit the names.
			if _, err := d.SetACL(ctx, chubbyclient.ACL{Read: "readers", Write: "admin", ChangeACL: "admin"}); err != nil {
				t.Fatal(err)
			}
			for i := range tt.files {
				if _, err := as.CreateFile(ctx, fmt.Sprintf("/data/f%d", i), []byte("v"), chubbyclient.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			bs, err := c.connectClient("bob").NewSession(ctx)
			if err != nil {
				t.Fatal(err)
			}
			bd, err := bs.Open(ctx, "/data", chubbyclient.OpenOptions{})
			if err != nil {
				t.Fatalf("bob opens /data: %v", err)
			}
			hs := make([]*chubbyclient.Handle, tt.files)
			for i := range hs {
				if hs[i], err = bs.Open(ctx, fmt.Sprintf("/data/f%d", i), chubbyclient.OpenOptions{}); err != nil {
					t.Fatalf("bob opens f%d: %v", i, err)
				}
			}
			// Each read twice: the second from the cache.
			for range 2 {
				for i, h := range hs {
					if b, _, err := h.GetContentsAndStat(ctx); err != nil || string(b) != "v" {
						t.Fatalf("bob reads f%d: %q, %v", i, b, err)
					}
				}
				if es, err := bd.ReadDir(ctx); err != nil || len(es) != tt.files {
					t.Fatalf("bob lists /data: %d entries, %v", len(es), err)
				}
			}
			if st := bs.CacheStats(); st.Hits != uint64(tt.files+1) {
				t.Fatalf("bob's cache: %+v, want %d hits", st, tt.files+1)
			}
			acl, err := as.Open(ctx, "/acl/readers", chubbyclient.OpenOptions{Mode: chubby.OpenMode_READ_WRITE})
			if err != nil {
				t.Fatal(err)
			}
			tt.revoke(t, acl)
			// The write returned: bob has dropped every copy.
			for i, h := range hs {
				if b, _, err := h.GetContentsAndStat(ctx); !chubbyclient.IsCode(err, chubby.ErrorCode_PERMISSION_DENIED) {
					t.Fatalf("bob reads f%d after his right went: %q, %v; want PERMISSION_DENIED", i, b, err)
				}
			}
			if es, err := bd.ReadDir(ctx); !chubbyclient.IsCode(err, chubby.ErrorCode_PERMISSION_DENIED) {
				t.Fatalf("bob lists /data after his right went: %d entries, %v; want PERMISSION_DENIED", len(es), err)
			}
		})
	}
}
