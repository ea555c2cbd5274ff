package client

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/rpc/tlsconf"
	"github.com/chubbygo/chubby/rpc/tlsconf/tlstest"
)

// testPKI is a CA with the files of a replica and of clients, in a
// temporary directory.
type testPKI struct {
	ca      *tlstest.CA
	dir     string
	replica tlstest.Files

	mu      sync.Mutex
	clients map[string]tlstest.Files // by common name: issued once
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := tlstest.NewCA("cell")
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{ca: ca, dir: t.TempDir()}
	p.replica = p.files(t, "replica-1", tlstest.Both)
	return p
}

func (p *testPKI) files(t *testing.T, cn string, u tlstest.Usage) tlstest.Files {
	t.Helper()
	f, err := p.ca.Write(p.dir, cn, u)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// startTLSCell starts a one-replica cell with mutual TLS and admin.
func (p *testPKI) startTLSCell(t *testing.T, admin string) *celltest.Cell {
	t.Helper()
	r, err := tlsconf.New(tlsconf.Config{Files: tlsconf.Files{Cert: p.replica.Cert, Key: p.replica.Key, CA: p.replica.CA}})
	if err != nil {
		t.Fatal(err)
	}
	return celltest.Start(t, celltest.Options{TLS: r, Admin: admin, Lease: 2 * time.Second})
}

// connectAs connects to addr as the principal cn ("" for anonymous).
func (p *testPKI) connectAs(t *testing.T, addr, cn string) *Client {
	t.Helper()
	var cert, key string
	if cn != "" {
		p.mu.Lock()
		f, ok := p.clients[cn]
		if !ok {
			f = p.files(t, cn, tlstest.Client)
			if p.clients == nil {
				p.clients = map[string]tlstest.Files{}
			}
			p.clients[cn] = f
		}
		p.mu.Unlock()
		cert, key = f.Cert, f.Key
	}
	tc, err := TLSFromFiles(p.replica.CA, cert, key, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Connect(testCtx(t), Config{Addrs: []string{addr}, TLS: tc, CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestTLSWhoAmI(t *testing.T) {
	p := newTestPKI(t)
	cl := p.startTLSCell(t, "")
	ctx := testCtx(t)
	for _, cn := range []string{"alice", ""} {
		c := p.connectAs(t, cl.Addr, cn)
		id, err := c.WhoAmI(ctx)
		want := cn
		if want == "" {
			want = "anonymous"
		}
		if err != nil || id.Principal != want || !id.TLS {
			t.Errorf("WhoAmI as %q = %+v, %v", cn, id, err)
		}
		// And the cell works over it.
		s := must[*Session](t, "session")(c.NewSession(ctx))
		must[any](t, "create")(func() (any, error) { return s.CreateFile(ctx, "/f-"+want, []byte("x"), CreateOptions{}) }())
		s.Close(ctx)
	}
	// A plaintext client gets nowhere.
	plain, err := Connect(ctx, Config{Addrs: []string{cl.Addr}, CallTimeout: time.Second, ConnectTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if id, err := plain.WhoAmI(sctx); err == nil {
		t.Errorf("a plaintext client reached a TLS cell: %+v", id)
	}
}
