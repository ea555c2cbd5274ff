package discovery

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/rpc/tlsconf/tlstest"
)

// tlsNodeConfig is nodeConfig with the gossip over TLS as id.
func tlsNodeConfig(t *testing.T, id identity, cell string, n uint64, join ...string) Config {
	cfg := nodeConfig(t, cell, n, join...)
	cfg.TLS = id.tlsConfig(t)
	return cfg
}

// startWith starts a Discovery whose transport limits edit changes.
func startWith(t *testing.T, cfg Config, edit func(*transportLimits)) *Discovery {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	d := newDiscovery(cfg)
	edit(&d.lim)
	if err := d.create(); err != nil {
		t.Fatalf("create: %v", err)
	}
	d.startLoops(context.Background())
	t.Cleanup(func() { _ = d.Shutdown() })
	return d
}

// clusterOf starts n replicas of cell "local", joined through the first,
// whose configurations mk makes, and waits until all see all alive.
func clusterOf(t *testing.T, n int, mk func(id uint64, join ...string) Config) []*Discovery {
	t.Helper()
	seed := start(t, mk(1))
	ds := []*Discovery{seed}
	for i := 2; i <= n; i++ {
		ds = append(ds, start(t, mk(uint64(i), seed.Local().Addr)))
	}
	for _, d := range ds {
		waitFor(t, fmt.Sprintf("replica %d to see all", d.meta.ID), func() bool { return sees(d, Alive, ds...) })
	}
	return ds
}

// tlsCluster starts n replicas with certificates of ca.
func tlsCluster(t *testing.T, ca *tlstest.CA, n int) []*Discovery {
	return clusterOf(t, n, func(id uint64, join ...string) Config {
		return tlsNodeConfig(t, newIdentity(t, ca, fmt.Sprintf("replica-%d", id)), "local", id, join...)
	})
}

// neverListsAlive reports whether d lists none of xs alive.
func neverListsAlive(d *Discovery, xs ...*Discovery) bool {
	for _, x := range xs {
		if p, ok := peerOf(d, x); ok && p.State == Alive {
			return false
		}
	}
	return true
}

func TestTLSClusterJoinsAndSeesACrash(t *testing.T) {
	ca := newCA(t, "cell-ca")
	for _, tc := range []struct {
		name string
		mk   func(t *testing.T, id uint64, join ...string) Config
	}{
		{"plaintext", func(t *testing.T, id uint64, join ...string) Config {
			return nodeConfig(t, "local", id, join...)
		}},
		{"tls", func(t *testing.T, id uint64, join ...string) Config {
			return tlsNodeConfig(t, newIdentity(t, ca, fmt.Sprintf("replica-%d", id)), "local", id, join...)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			begun := time.Now()
			ds := clusterOf(t, 3, func(id uint64, join ...string) Config { return tc.mk(t, id, join...) })
			t.Logf("%s: three members see each other alive after %v", tc.name, time.Since(begun))
			victim, observers := ds[2], ds[:2]
			killed := time.Now()
			if err := victim.Shutdown(); err != nil {
				t.Fatal(err)
			}
			for _, o := range observers {
				waitFor(t, "the crash to be seen", func() bool { p, _ := peerOf(o, victim); return p.State == Dead })
				p, _ := peerOf(o, victim)
				t.Logf("%s: replica %d saw the crash after %v", tc.name, o.meta.ID, p.Since.Sub(killed))
			}
			if !sees(observers[0], Alive, observers...) || !sees(observers[1], Alive, observers...) {
				t.Error("the survivors do not see each other alive")
			}
			for _, d := range ds {
				if d.tls != nil && d.tls.stats.refused.Load() != 0 {
					t.Errorf("replica %d refused %d connections", d.meta.ID, d.tls.stats.refused.Load())
				}
			}
		})
	}
}

// A replica whose certificate another CA signed gets as far as presenting
// it (it trusts the cell's CA, so it accepts the members' certificates),
// and is refused there.
func TestTLSOtherCARefused(t *testing.T) {
	cellCA, rogueCA := newCA(t, "cell-ca"), newCA(t, "rogue-ca")
	a := start(t, tlsNodeConfig(t, newIdentity(t, cellCA, "replica-1"), "local", 1))
	b := start(t, tlsNodeConfig(t, newIdentity(t, cellCA, "replica-2"), "local", 2, a.Local().Addr))
	rogue := newIdentity(t, rogueCA, "replica-3", cellCA, rogueCA)
	x := start(t, tlsNodeConfig(t, rogue, "local", 3, a.Local().Addr, b.Local().Addr))
	waitFor(t, "the cell to form", func() bool { return sees(a, Alive, a, b) && sees(b, Alive, a, b) })

	deadline := time.Now().Add(time.Second) // x tries to join every 200 ms at most
	for time.Now().Before(deadline) {
		for _, d := range []*Discovery{a, b} {
			if _, ok := peerOf(d, x); ok {
				t.Fatalf("replica %d lists the rogue", d.meta.ID)
			}
		}
		if !neverListsAlive(x, a, b) {
			t.Fatal("the rogue lists members of the cell alive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := a.ml.Join([]string{x.Local().Addr}); err == nil {
		t.Error("a member joined the rogue")
	}
	for _, d := range []*Discovery{a, b} {
		if n := d.ml.NumMembers(); n != 2 {
			t.Errorf("replica %d's memberlist has %d members; want 2", d.meta.ID, n)
		}
	}
	if ms := x.Members(); len(ms) != 1 || x.ml.NumMembers() != 1 {
		t.Errorf("the rogue lists %+v (memberlist: %d); want itself alone", ms, x.ml.NumMembers())
	}
	// Counted by the accept goroutines, which a busy machine may run late.
	refused := func() int64 { return a.tls.stats.refused.Load() + b.tls.stats.refused.Load() }
	waitFor(t, "a refused handshake of the rogue to be counted", func() bool { return refused() > 0 })
	t.Logf("the members refused %d handshakes of the rogue", refused())
}

func TestTLSAndPlaintextDoNotMix(t *testing.T) {
	ca := newCA(t, "cell-ca")
	for _, tc := range []struct {
		name            string
		seedTLS, newTLS bool
	}{
		{"plaintext joins TLS", true, false},
		{"TLS joins plaintext", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mk := func(useTLS bool, id uint64, join ...string) Config {
				if useTLS {
					return tlsNodeConfig(t, newIdentity(t, ca, fmt.Sprintf("replica-%d", id)), "local", id, join...)
				}
				return nodeConfig(t, "local", id, join...)
			}
			seed := start(t, mk(tc.seedTLS, 1))
			joiner := start(t, mk(tc.newTLS, 2, seed.Local().Addr))
			time.Sleep(time.Second) // a few join attempts
			if _, err := seed.ml.Join([]string{joiner.Local().Addr}); err == nil {
				t.Error("the seed joined the other")
			}
			for _, d := range []*Discovery{seed, joiner} {
				if ms := d.Members(); len(ms) != 1 || d.ml.NumMembers() != 1 {
					t.Errorf("replica %d lists %+v (memberlist: %d); want itself alone", d.meta.ID, ms, d.ml.NumMembers())
				}
			}
			tlsSide := seed
			if !tc.seedTLS {
				tlsSide = joiner
			}
			// Each plaintext connection is counted refused, or abandoned
			// when its caller gave up first (a busy machine: the Join's
			// timeout ran out), once the TLS member's accept goroutine has
			// read it; that may come after Join returned.
			stats := &tlsSide.tls.stats
			waitFor(t, "the TLS member to count the plaintext connections", func() bool {
				return stats.refused.Load()+stats.abandoned.Load() > 0
			})
			t.Logf("the TLS member refused %d connections (%d abandoned by their caller)", stats.refused.Load(), stats.abandoned.Load())
		})
	}
}

func frame(n uint32, payload ...byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, n), payload...)
}

// Connections of a caller with a good certificate that then sends what
// the transport does not expect are closed, and the members do not
// notice.
func TestTLSBadConnectionsClosed(t *testing.T) {
	ca := newCA(t, "cell-ca")
	short := func(l *transportLimits) { l.handshakeTimeout = 300 * time.Millisecond }
	a := startWith(t, tlsNodeConfig(t, newIdentity(t, ca, "replica-1"), "local", 1), short)
	b := startWith(t, tlsNodeConfig(t, newIdentity(t, ca, "replica-2"), "local", 2, a.Local().Addr), short)
	waitFor(t, "the cell to form", func() bool { return sees(a, Alive, a, b) && sees(b, Alive, a, b) })
	ha, hb := watch(t, a, b), watch(t, b, a)
	caller := clientFor(t, newIdentity(t, ca, "caller"))
	garbage := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")

	for _, tc := range []struct {
		name      string
		tls       bool   // handshake first
		send      []byte // then send this
		refused   bool   // counted as refused
		badFrames bool   // counted as a bad frame
	}{
		{"not TLS", false, garbage, true, false},
		{"silent, no handshake", false, nil, true, false},
		{"no kind byte", true, nil, true, false},
		{"bad kind byte", true, []byte{0x7f}, true, false},
		{"garbage instead of a kind", true, garbage, true, false},
		{"packet, huge length", true, append([]byte{kindPacket}, frame(0xffffffff)...), false, true},
		{"packet, length one over", true, append([]byte{kindPacket}, frame(64<<10+1)...), false, true},
		{"packet, zero length", true, append([]byte{kindPacket}, frame(0)...), false, true},
		{"packet, garbage", true, append([]byte{kindPacket}, garbage...), false, true},
		{"good packet then huge length", true, append(append([]byte{kindPacket}, frame(3, 'a', 'b', 'c')...), frame(1<<31)...), false, true},
		{"stream, garbage", true, append([]byte{kindStream}, garbage...), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refused, bad := a.tls.stats.refused.Load(), a.tls.stats.badFrames.Load()
			var c net.Conn
			var err error
			if tc.tls {
				c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", a.Local().Addr, caller)
			} else {
				c, err = net.DialTimeout("tcp", a.Local().Addr, time.Second)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if len(tc.send) > 0 {
				if _, err := c.Write(tc.send); err != nil {
					t.Fatal(err)
				}
			}
			if err := closedWithin(c, 3*time.Second); err != nil {
				t.Fatalf("connection not closed: %v", err)
			}
			waitFor(t, "the counters", func() bool {
				return (a.tls.stats.refused.Load() > refused) == tc.refused && (a.tls.stats.badFrames.Load() > bad) == tc.badFrames
			})
		})
	}
	time.Sleep(500 * time.Millisecond) // longer than a suspicion
	stayedAlive(t, ha, hb)
}

// stayedAlive checks that the members watched were never seen dead or
// left, and are alive now. A suspicion refuted is logged: on a loaded
// machine a probe may time out, so a member suspected at the moment of
// the check gets 10 s to be alive again (beside a CPU hog one was
// suspect just then).
func stayedAlive(t *testing.T, hs ...*history) {
	t.Helper()
	for _, h := range hs {
		s := h.get()
		for deadline := time.Now().Add(10 * time.Second); s[len(s)-1] == Suspect && time.Now().Before(deadline); s = h.get() {
			time.Sleep(20 * time.Millisecond)
		}
		if slices.Contains(s, Dead) || slices.Contains(s, Left) || s[len(s)-1] != Alive {
			t.Errorf("a member was seen %v; want alive throughout", s)
		} else if len(s) > 1 {
			t.Logf("a member was seen %v", s)
		}
	}
}

// certOf returns the DER of the first certificate in a PEM block.
func certOf(t *testing.T, pemBytes []byte) []byte {
	t.Helper()
	b, _ := pem.Decode(pemBytes)
	if b == nil {
		t.Fatal("no PEM")
	}
	return b.Bytes
}

// presented returns the certificate d presents to a caller configured by
// client. The caller opens an empty stream, which memberlist ignores.
func presented(d *Discovery, client *tls.Config) (*x509.Certificate, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", d.Local().Addr, client)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.Write([]byte{kindStream}); err != nil {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

// Certificates renewed on disk are taken up by the members without a
// restart; the members stay alive throughout and new members still join.
func TestTLSCertificateRotation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		newCA  bool // the new certificates are of a new CA, which the members trust first
		rotate func(t *testing.T, old, next *tlstest.CA, ids []identity) [][]byte
	}{
		{"new certificates, same CA", false, func(t *testing.T, old, _ *tlstest.CA, ids []identity) [][]byte {
			var certs [][]byte
			for _, id := range ids {
				f, err := old.Write(id.dir, id.cn, tlstest.Both) // as the cell's renewal would
				if err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(f.Cert)
				if err != nil {
					t.Fatal(err)
				}
				certs = append(certs, b)
			}
			return certs
		}},
		{"certificates of a new CA", true, func(t *testing.T, old, next *tlstest.CA, ids []identity) [][]byte {
			for _, id := range ids {
				id.trust(t, old, next)
			}
			time.Sleep(3 * checkInterval) // every member trusts both
			var certs [][]byte
			for _, id := range ids {
				certs = append(certs, id.reissue(t, next))
			}
			return certs
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oldCA, nextCA := newCA(t, "cell-ca"), newCA(t, "next-ca")
			var ids []identity
			ds := clusterOf(t, 2, func(n uint64, join ...string) Config {
				id := newIdentity(t, oldCA, fmt.Sprintf("replica-%d", n))
				ids = append(ids, id)
				return tlsNodeConfig(t, id, "local", n, join...)
			})
			hs := []*history{watch(t, ds[0], ds[1]), watch(t, ds[1], ds[0])}
			certs := tc.rotate(t, oldCA, nextCA, ids)
			// A reloader looks at its files at most once a checkInterval,
			// on a handshake; any look after the files changed takes them
			// up. So from one interval after the last write on, every
			// handshake sees the new certificates, however loaded the
			// machine. Before that, a probe that trusts only the new CA
			// can meet an old certificate, which the member counts as a
			// refused connection (this failed beside a CPU hog).
			time.Sleep(2 * checkInterval)
			probeCA := oldCA
			if tc.newCA {
				probeCA = nextCA
			}
			probe := clientFor(t, newIdentity(t, probeCA, "probe"))
			for i, d := range ds {
				waitFor(t, "the new certificate to be presented", func() bool {
					time.Sleep(checkInterval / 2) // a handshake is not free
					c, err := presented(d, probe)
					return err == nil && bytes.Equal(c.Raw, certOf(t, certs[i]))
				})
			}
			// A new member that knows only the current CA.
			newcomer := newIdentity(t, probeCA, "replica-3")
			all := append(ds, start(t, tlsNodeConfig(t, newcomer, "local", 3, ds[0].Local().Addr)))
			for _, d := range all {
				waitFor(t, "the newcomer and the others to meet", func() bool { return sees(d, Alive, all...) })
			}
			time.Sleep(500 * time.Millisecond)
			stayedAlive(t, hs...)
			for _, d := range all {
				if n := d.tls.stats.refused.Load(); n != 0 {
					t.Errorf("replica %d refused %d connections", d.meta.ID, n)
				}
			}
		})
	}
}

// transportGoroutines returns the stacks of goroutines running the TLS
// transport's code.
func transportGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, f := range []string{"discovery.(*tlsTransport)", "discovery.(*tlsSender)", "discovery.(*gossipConn)"} {
			if strings.Contains(g, f) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

func TestTLSShutdownLeavesNoGoroutines(t *testing.T) {
	ca := newCA(t, "cell-ca")
	waitFor(t, "earlier tests' transports to end", func() bool { return len(transportGoroutines()) == 0 })
	before := runtime.NumGoroutine()
	ds := tlsCluster(t, ca, 3)
	a := ds[0]
	// Connections in every state: one that never starts its handshake, one
	// that stops after it, a stream memberlist waits on, a packet
	// connection.
	caller := clientFor(t, newIdentity(t, ca, "caller"))
	raw, err := net.Dial("tcp", a.Local().Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var held []net.Conn
	for _, send := range [][]byte{nil, {kindStream}, {kindPacket}} {
		c, err := tls.Dial("tcp", a.Local().Addr, caller)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if len(send) > 0 {
			if _, err := c.Write(send); err != nil {
				t.Fatal(err)
			}
		}
		held = append(held, c)
	}
	waitFor(t, "the connections to be served", func() bool {
		a.tls.mu.Lock()
		defer a.tls.mu.Unlock()
		return len(a.tls.conns) >= 4+2 // ours, and the other members' packet connections
	})
	during := runtime.NumGoroutine()
	for _, d := range ds {
		if err := d.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}
	// Shutdown has waited for them to be done; give them a moment to
	// leave their last frame.
	gs := transportGoroutines()
	for deadline := time.Now().Add(time.Second); len(gs) != 0 && time.Now().Before(deadline); gs = transportGoroutines() {
		time.Sleep(time.Millisecond)
	}
	if len(gs) != 0 {
		t.Fatalf("after Shutdown, %d goroutines of the transport:\n%s", len(gs), strings.Join(gs, "\n\n"))
	}
	for _, c := range append(held, raw) {
		if err := closedWithin(c, time.Second); err != nil {
			t.Errorf("a connection to a member is open after Shutdown: %v", err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	after := runtime.NumGoroutine()
	t.Logf("goroutines: %d before, %d with three members, %d after Shutdown", before, during, after)
	if after > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Shutdown, %d before:\n%s", after, before, buf[:runtime.Stack(buf, true)])
	}
}

// The TLS transport binds and advertises as memberlist's own does.
func TestTLSAddressing(t *testing.T) {
	ca := newCA(t, "cell-ca")
	fixed := freeAddr(t)
	_, fixedPort, _ := net.SplitHostPort(fixed)
	for _, tc := range []struct {
		name            string
		bind, advertise string
		wantHost        string // "": a private address of this host
		wantPort        string // "bound": the port picked
		wildcardMayFail bool
	}{
		{"port 0", "127.0.0.1:0", "", "127.0.0.1", "bound", false},
		{"fixed port", fixed, "", "127.0.0.1", fixedPort, false},
		{"advertised", fixed, "127.0.0.2:7777", "127.0.0.2", "7777", false},
		// memberlist advertises the port picked, whatever AdvertiseAddr says.
		{"advertised, port 0", "127.0.0.1:0", "127.0.0.2:7777", "127.0.0.2", "bound", false},
		{"wildcard", "0.0.0.0:0", "", "", "bound", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, useTLS := range []bool{false, true} {
				cfg := nodeConfig(t, "local", 1)
				if useTLS {
					cfg = tlsNodeConfig(t, newIdentity(t, ca, "replica-1"), "local", 1)
				}
				cfg.BindAddr, cfg.AdvertiseAddr = tc.bind, tc.advertise
				d, err := Start(context.Background(), cfg)
				if err != nil {
					if tc.wildcardMayFail { // no private address here
						got = append(got, "error: "+err.Error())
						continue
					}
					t.Fatalf("TLS %v: %v", useTLS, err)
				}
				addr := d.Local().Addr
				host, port, _ := net.SplitHostPort(addr)
				bound := strconv.Itoa(int(d.ml.LocalNode().Port))
				if useTLS {
					bound = strconv.Itoa(d.tls.GetAutoBindPort())
				}
				wantPort := tc.wantPort
				if wantPort == "bound" {
					wantPort = bound
				}
				if (tc.wantHost != "" && host != tc.wantHost) || port != wantPort || port == "0" {
					t.Errorf("TLS %v: Local().Addr = %s; want %s:%s", useTLS, addr, tc.wantHost, wantPort)
				}
				if err := d.Shutdown(); err != nil {
					t.Fatal(err)
				}
				got = append(got, host)
			}
			t.Logf("plaintext %s, TLS %s", got[0], got[1])
			if strings.HasPrefix(got[0], "error") != strings.HasPrefix(got[1], "error") || (tc.wantHost == "" && got[0] != got[1]) {
				t.Errorf("plaintext gave %q, TLS %q", got[0], got[1])
			}
		})
	}
}

func TestTLSStartErrors(t *testing.T) {
	ca := newCA(t, "cell-ca")
	tlsBusy := start(t, tlsNodeConfig(t, newIdentity(t, ca, "replica-8"), "local", 8))
	plainBusy := start(t, nodeConfig(t, "local", 9))
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"no Server", func(c *Config) { c.TLS.Server = nil }},
		{"no Client", func(c *Config) { c.TLS.Client = nil }},
		{"port of a TLS member", func(c *Config) { c.BindAddr = tlsBusy.Local().Addr }},
		{"port of a plaintext member", func(c *Config) { c.BindAddr = plainBusy.Local().Addr }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tlsNodeConfig(t, newIdentity(t, ca, "replica-1"), "local", 1)
			tc.edit(&cfg)
			if d, err := Start(context.Background(), cfg); err == nil {
				d.Shutdown()
				t.Fatal("Start succeeded")
			} else {
				t.Log(err)
			}
		})
	}
}
