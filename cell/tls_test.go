package cell_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/rpc/tlsconf"
	"github.com/chubbygo/chubby/rpc/tlsconf/tlstest"
)

// connectAs connects to addrs as principal cn, trusting p's CA.
func connectAs(t *testing.T, p *tlstest.PKI, addrs []string, cn string) *client.Client {
	t.Helper()
	c, err := client.Connect(context.Background(), client.Config{Addrs: addrs, TLS: p.ClientTLS(t, cn), CallTimeout: 5 * time.Second})
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
	good, bad := tlstest.NewPKI(t, "cell"), tlstest.NewPKI(t, "intruder")
	var peers []cell.Peer
	rc := celltest.StartStaticWith(t, 3, func(cfg *cell.Config) {
		cfg.TLS = good.Reloader(t, fmt.Sprintf("replica-%d", cfg.ID), tlstest.Both, good)
		peers = cfg.Peers
	})
	m := rc.Master()
	c := connectAs(t, good, rc.Addrs(), "alice")
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
		TLS: bad.Reloader(t, fmt.Sprintf("replica-%d", p.ID), tlstest.Both, good), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
	ir := good.Reloader(t, "curious", tlstest.Client, bad)
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

// ACLs are replicated state: set on one master, enforced by the next.
// Meanwhile the replicas' certificates are renewed on disk, and a client
// cycling a lock loses no call through the renewals and the failover
// (Acquire and Release are retried by the client across the failover, as
// always).
func TestTLSACLsSurviveFailoverAndRotation(t *testing.T) {
	p := tlstest.NewPKI(t, "cell")
	var reloaders []*tlsconf.Reloader
	rc := celltest.StartStaticWith(t, 3, func(cfg *cell.Config) {
		cfg.TLS = p.Reloader(t, fmt.Sprintf("replica-%d", cfg.ID), tlstest.Both, p)
		reloaders = append(reloaders, cfg.TLS)
		cfg.Admin = "admin"
		cfg.Lease = 2 * time.Second
	})
	m := rc.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, alice, bob := connectAs(t, p, rc.Addrs(), "admin"), connectAs(t, p, rc.Addrs(), "alice"), connectAs(t, p, rc.Addrs(), "bob")
	as := mustSession(t, ctx, admin)
	// /acl/team lists alice; /team is readable and writable by her only.
	if _, err := as.CreateFile(ctx, "/acl/team", []byte("alice\n"), client.CreateOptions{}); err != nil {
		t.Fatalf("admin writes /acl/team: %v", err)
	}
	if _, err := as.Mkdir(ctx, "/team", client.MkdirOptions{}); err != nil {
		t.Fatal(err)
	}
	h, err := as.Open(ctx, "/team", client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.SetACL(ctx, client.ACL{Read: "team", Write: "team", ChangeACL: "admin"}); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		s := mustSession(t, ctx, alice)
		defer s.Close(ctx)
		if _, err := s.CreateFile(ctx, fmt.Sprintf("/team/by-alice-%s", when), nil, client.CreateOptions{}); err != nil {
			t.Errorf("%s: alice cannot write /team: %v", when, err)
		}
		b := mustSession(t, ctx, bob)
		defer b.Close(ctx)
		_, err := b.CreateFile(ctx, "/team/by-bob", nil, client.CreateOptions{})
		if !client.IsCode(err, chubby.ErrorCode_PERMISSION_DENIED) {
			t.Errorf("%s: bob writing /team: %v, want PERMISSION_DENIED", when, err)
		}
	}
	check("before")

	// A locker runs through everything that follows.
	ls := mustSession(t, ctx, alice)
	lh, err := ls.Open(ctx, "/team/lock", client.OpenOptions{Create: chubby.CreateMode_OPEN_OR_CREATE})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	cycles, failed := 0, 0
	var lockErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := lh.Acquire(cctx, chubby.LockMode_EXCLUSIVE, 10*time.Second, client.LockOptions{})
			if err == nil {
				err = lh.Release(cctx)
			}
			ccancel()
			if err != nil {
				failed++
				lockErr = err
				return
			}
			cycles++
		}
	}()
	var serials []string
	for id := 1; id <= 3; id++ {
		serials = append(serials, reloaders[id-1].Leaf().SerialNumber.String())
		p.Files(t, fmt.Sprintf("replica-%d", id), tlstest.Both)
	}
	time.Sleep(1500 * time.Millisecond) // past the reloaders' check interval
	rc.Stop(m)
	m2 := rc.Master(m)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	<-done
	if failed > 0 {
		t.Errorf("a lock cycle failed through the rotation and the failover: %v", lockErr)
	}
	t.Logf("%d lock cycles, master %d → %d", cycles, m, m2)
	check("after-failover")
	// The replicas present their renewed certificates.
	if st, err := admin.Status(ctx); err != nil || !strings.Contains(st.GetSecurity(), "mutual TLS") {
		t.Errorf("status security %q, %v", st.GetSecurity(), err)
	}
	for i, r := range reloaders {
		if r.Leaf().SerialNumber.String() == serials[i] {
			t.Errorf("replica %d still uses its first certificate", i+1)
		}
	}
}

func mustSession(t *testing.T, ctx context.Context, c *client.Client) *client.Session {
	t.Helper()
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
