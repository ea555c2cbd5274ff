package client

import (
	"context"
	"crypto/tls"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/rpc/tlsconf"
	"github.com/chubbygo/chubby/rpc/tlsconf/tlstest"
)

// testPKI is a CA with a replica's certificate and the clients' it issued.
type testPKI struct {
	*tlstest.PKI
	replica tlstest.Files

	mu      sync.Mutex
	clients map[string]*tls.Config // by common name: issued once
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{PKI: tlstest.NewPKI(t, "cell"), clients: map[string]*tls.Config{}}
	p.replica = p.Files(t, "replica-1", tlstest.Both)
	return p
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

// clientTLS is principal cn's configuration ("" anonymous), made once.
func (p *testPKI) clientTLS(t *testing.T, cn string) *tls.Config {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.clients[cn] == nil {
		p.clients[cn] = p.ClientTLS(t, cn)
	}
	return p.clients[cn]
}

// connectAs connects to addr as the principal cn ("" for anonymous).
func (p *testPKI) connectAs(t *testing.T, addr, cn string) *Client {
	t.Helper()
	c, err := Connect(testCtx(t), Config{Addrs: []string{addr}, TLS: p.clientTLS(t, cn), CallTimeout: 5 * time.Second})
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
