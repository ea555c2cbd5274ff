package cell_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/rpc/tlsconf"
	"github.com/chubbygo/chubby/rpc/tlsconf/tlstest"
)

// pki is a CA and the files it issued, in a temporary directory.
type pki struct {
	ca  *tlstest.CA
	dir string
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	ca, err := tlstest.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{ca: ca, dir: t.TempDir()}
	if err := tlstest.WriteAtomic(p.caFile(), ca.PEM); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pki) caFile() string { return filepath.Join(p.dir, "ca.crt") }

// reloader issues a certificate for cn and returns the TLS material of a
// party holding it that trusts trust's CA.
func (p *pki) reloader(t *testing.T, cn string, u tlstest.Usage, trust *pki) *tlsconf.Reloader {
	t.Helper()
	l, err := p.ca.Issue(cn, u)
	if err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(p.dir, cn+".crt"), filepath.Join(p.dir, cn+".key")
	for path, b := range map[string][]byte{cert: l.CertPEM, key: l.KeyPEM} {
		if err := tlstest.WriteAtomic(path, b); err != nil {
			t.Fatal(err)
		}
	}
	r, err := tlsconf.New(tlsconf.Config{Files: tlsconf.Files{Cert: cert, Key: key, CA: trust.caFile()}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (p *pki) client(t *testing.T, addrs []string, cn string) *client.Client {
	t.Helper()
	r := p.reloader(t, cn, tlstest.Client, p)
	c, err := client.Connect(context.Background(), client.Config{Addrs: addrs, TLS: r.ClientConfig(), CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A replica whose certificate another CA signed, in the place of one of the
// cell's replicas (same id, same addresses), neither receives the cell's
// traffic nor disturbs it: the master stays, in its epoch, and keeps
// committing; the impostor never becomes master.
func TestTLSImpostorReplica(t *testing.T) {
	good, bad := newPKI(t, "cell"), newPKI(t, "intruder")
	var peers []cell.Peer
	rc := celltest.StartStaticWith(t, 3, func(cfg *cell.Config) {
		cfg.TLS = good.reloader(t, fmt.Sprintf("replica-%d", cfg.ID), tlstest.Both, good)
		peers = cfg.Peers
	})
	m := rc.Master()
	c := good.client(t, rc.Addrs(), "alice")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateFile(ctx, "/before", []byte("x"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	victim := (m + 1) % 3
	epoch := rc.Server(m).Epoch()
	rc.Stop(victim)
	p := peers[victim]
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := net.Listen("tcp", p.PeerAddr)
	if err != nil {
		t.Fatal(err)
	}
	imp, err := cell.New(cell.Config{ID: p.ID, Peers: peers, Listener: ln, PeerListener: pl, DataDir: t.TempDir(),
		TLS: bad.reloader(t, fmt.Sprintf("replica-%d", p.ID), tlstest.Both, good), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- imp.Serve(context.Background()) }()
	defer func() { imp.Stop(); <-done }()

	for i := range 30 {
		if _, err := s.CreateFile(ctx, fmt.Sprintf("/during-%d", i), []byte("x"), client.CreateOptions{}); err != nil {
			t.Fatalf("write %d with the impostor up: %v", i, err)
		}
		if imp.IsMaster() {
			t.Fatal("the impostor became master")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !rc.Server(m).IsMaster() || rc.Server(m).Epoch() != epoch {
		t.Fatalf("the master changed (epoch %d → %d) with the impostor up", epoch, rc.Server(m).Epoch())
	}
	// Nor did it receive anything: its state is an empty cell's.
	// (It trusts our CA for its callers; we trust its CA to ask it.)
	ir := good.reloader(t, "curious", tlstest.Client, bad)
	ic, err := client.Connect(ctx, client.Config{Addrs: []string{imp.Addr()}, TLS: ir.ClientConfig(), CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	st, err := ic.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetNodes() > 1 {
		t.Errorf("the impostor holds %d nodes: it received the cell's state", st.GetNodes())
	}
}
