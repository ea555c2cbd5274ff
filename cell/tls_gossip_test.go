package cell

import (
	"crypto/tls"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/discovery"
	"github.com/chubbygo/chubby/rpc/tlsconf/tlstest"
)

// A cell that assembled itself over TLS gossip: a replica with a
// certificate of another CA can neither join it nor be added, and its
// handshake is refused on each of the three ports of a member.
func TestGossipTLSRefusesStrangers(t *testing.T) {
	if testing.Short() {
		t.Skip("gossip timings")
	}
	good, bad := tlstest.NewPKI(t, "cell"), tlstest.NewPKI(t, "intruder")
	var rs []*gossipReplica
	for i := range 3 {
		var join []string
		bootstrap := 1
		if i > 0 {
			join, bootstrap = []string{rs[0].gossipAddr()}, 0
		}
		rs = append(rs, startGossipReplicaTLS(t, bootstrap, join, t.TempDir(), good.Reloader(t, fmt.Sprintf("replica-%d", i), tlstest.Both, good)))
	}
	ids := []uint64{rs[0].s.cfg.ID, rs[1].s.cfg.ID, rs[2].s.cfg.ID}
	m := awaitConfig(t, rs, "three voters over TLS gossip", voters(ids...))

	stranger := startGossipReplicaTLS(t, 0, []string{rs[0].gossipAddr()}, t.TempDir(), bad.Reloader(t, "replica-x", tlstest.Both, good))
	time.Sleep(3 * time.Second) // ample for a join, a learner add and a promotion
	if i := m.log.Info(); len(i.Members) != 3 || i.PendingConfig != 0 {
		t.Errorf("the configuration changed with the stranger about: %+v", i.Members)
	}
	for _, r := range rs {
		for _, p := range r.s.disc.Members() {
			if p.Meta.ID == stranger.s.cfg.ID {
				t.Errorf("replica %d's gossip lists the stranger (%v)", r.s.cfg.ID, p.State)
			}
		}
	}
	for _, p := range stranger.s.disc.Members() {
		if p.Meta.ID != stranger.s.cfg.ID && p.State == discovery.Alive {
			t.Errorf("the stranger sees replica %d alive", p.Meta.ID)
		}
	}

	// Each port of a member refuses the stranger's certificate.
	cfg := bad.Reloader(t, "replica-y", tlstest.Both, good).ClientConfig()
	for _, port := range []struct{ name, addr string }{
		{"client", rs[0].s.Addr()}, {"peer", rs[0].s.peerAdvertise}, {"gossip", rs[0].gossipAddr()},
	} {
		if err := handshake(port.addr, cfg); err == nil {
			t.Errorf("the %s port at %s took a certificate of another CA", port.name, port.addr)
		} else {
			t.Logf("%s port: %v", port.name, err)
		}
	}
	// And a certificate of the cell's CA gets through all three.
	ok := good.Reloader(t, "replica-z", tlstest.Both, good).ClientConfig()
	for _, addr := range []string{rs[0].s.Addr(), rs[0].s.peerAdvertise, rs[0].gossipAddr()} {
		if err := handshake(addr, ok); err != nil {
			t.Errorf("a certificate of the cell's CA was refused at %s: %v", addr, err)
		}
	}
}

// handshake dials addr with cfg and reports whether the server accepted
// the handshake: in TLS 1.3 a refused client certificate shows on the
// first read, as an alert.
func handshake(addr string, cfg *tls.Config) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return nil // silence: the server waits for a request
	}
	return err
}
