package discovery

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/chubbygo/chubby/rpc/tlsconf"
	"github.com/chubbygo/chubby/rpc/tlsconf/tlstest"
)

func newCA(t *testing.T, name string) *tlstest.CA {
	t.Helper()
	ca, err := tlstest.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// identity is one party's certificate files, in a directory of its own.
type identity struct {
	dir, cn string
	files   tlstest.Files
}

// newIdentity writes a certificate of ca for cn (both usages), its key
// and ca.crt; trust, if given, replaces ca.crt's content.
func newIdentity(t *testing.T, ca *tlstest.CA, cn string, trust ...*tlstest.CA) identity {
	t.Helper()
	dir := filepath.Join(t.TempDir(), cn)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := ca.Write(dir, cn, tlstest.Both)
	if err != nil {
		t.Fatal(err)
	}
	id := identity{dir: dir, cn: cn, files: f}
	if len(trust) > 0 {
		id.trust(t, trust...)
	}
	return id
}

// trust makes the identity's CA file hold the certificates of cas.
func (id identity) trust(t *testing.T, cas ...*tlstest.CA) {
	t.Helper()
	var b []byte
	for _, ca := range cas {
		b = append(b, ca.PEM...)
	}
	if err := tlstest.WriteAtomic(id.files.CA, b); err != nil {
		t.Fatal(err)
	}
}

// reissue writes a new certificate of ca for the identity, and its key,
// leaving its CA file alone.
func (id identity) reissue(t *testing.T, ca *tlstest.CA) []byte {
	t.Helper()
	l, err := ca.Issue(id.cn, tlstest.Both)
	if err != nil {
		t.Fatal(err)
	}
	if err := tlstest.WriteAtomic(id.files.Key, l.KeyPEM); err != nil {
		t.Fatal(err)
	}
	if err := tlstest.WriteAtomic(id.files.Cert, l.CertPEM); err != nil {
		t.Fatal(err)
	}
	return l.CertPEM
}

// checkInterval is how often the tests' reloaders look at their files.
const checkInterval = 50 * time.Millisecond

func (id identity) reloader(t *testing.T) *tlsconf.Reloader {
	t.Helper()
	r, err := tlsconf.New(tlsconf.Config{
		Files:         tlsconf.Files{Cert: id.files.Cert, Key: id.files.Key, CA: id.files.CA},
		CheckInterval: checkInterval, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tlsConfig is the gossip TLS of the identity, as the cell makes it.
func (id identity) tlsConfig(t *testing.T) *TLSConfig {
	r := id.reloader(t)
	return &TLSConfig{Server: r.ServerConfig(tlsconf.RequireCert, false), Client: r.ClientConfig()}
}

// clientFor returns the TLS configuration of a caller that is id.
func clientFor(t *testing.T, id identity) *tls.Config { return id.reloader(t).ClientConfig() }

// closedWithin returns nil if c's peer closes it within d: a read ends in
// anything but a timeout (memberlist may first answer a bad stream).
func closedWithin(c net.Conn, d time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(d))
	var b [512]byte
	for {
		_, err := c.Read(b[:])
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			return fmt.Errorf("still open after %v", d)
		case err != nil:
			return nil
		}
	}
}

// newTestTransport starts a bare transport as id on a free loopback port.
func newTestTransport(t *testing.T, id identity, edit func(*transportLimits)) *tlsTransport {
	t.Helper()
	lim := defaultLimits()
	if edit != nil {
		edit(&lim)
	}
	tr, err := newTLSTransport(id.tlsConfig(t), "127.0.0.1", 0, lim, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown() })
	return tr
}

func addrOfTransport(tr *tlsTransport) string { return tr.ln.Addr().String() }

func numConns(tr *tlsTransport) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.conns)
}

func poolSize(tr *tlsTransport) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.pool)
}

// recvPacket waits up to 5 s for a packet of tr.
func recvPacket(t *testing.T, tr *tlsTransport) *memberlist.Packet {
	t.Helper()
	select {
	case p := <-tr.PacketCh():
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no packet")
		return nil
	}
}

func TestTLSTransportPackets(t *testing.T) {
	ca := newCA(t, "cell-ca")
	a := newTestTransport(t, newIdentity(t, ca, "a"), nil)
	b := newTestTransport(t, newIdentity(t, ca, "b"), nil)

	sent := time.Now()
	var want [][]byte
	for i := range 50 {
		p := bytes.Repeat([]byte{byte(i)}, 1+i*100)
		want = append(want, p)
		if _, err := a.WriteToAddress(p, memberlist.Address{Addr: addrOfTransport(b), Name: "b"}); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range want {
		p := recvPacket(t, b)
		if !bytes.Equal(p.Buf, w) {
			t.Fatalf("packet %d: %d bytes; want %d", i, len(p.Buf), len(w))
		}
		host, _, _ := net.SplitHostPort(p.From.String())
		if host != "127.0.0.1" || p.Timestamp.Before(sent) {
			t.Fatalf("packet %d from %v at %v", i, p.From, p.Timestamp)
		}
	}
	if n := numConns(b); n != 1 {
		t.Errorf("b has %d connections; want one packet connection, reused", n)
	}
	for _, tc := range []struct {
		name string
		size int
	}{{"empty", 0}, {"over 64 KiB", 64<<10 + 1}} {
		if _, err := a.WriteTo(make([]byte, tc.size), addrOfTransport(b)); err == nil {
			t.Errorf("WriteTo of a packet %s succeeded", tc.name)
		}
	}
	if _, err := a.WriteTo(make([]byte, 64<<10), addrOfTransport(b)); err != nil {
		t.Errorf("WriteTo of 64 KiB: %v", err)
	} else if p := recvPacket(t, b); len(p.Buf) != 64<<10 {
		t.Errorf("received %d bytes", len(p.Buf))
	}
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteTo([]byte("x"), addrOfTransport(b)); !errors.Is(err, errTransportShutdown) {
		t.Errorf("WriteTo after Shutdown: %v", err)
	}
	if _, err := a.DialTimeout(addrOfTransport(b), time.Second); !errors.Is(err, errTransportShutdown) {
		t.Errorf("DialTimeout after Shutdown: %v", err)
	}
}

func TestTLSTransportStreams(t *testing.T) {
	ca := newCA(t, "cell-ca")
	a := newTestTransport(t, newIdentity(t, ca, "a"), nil)
	b := newTestTransport(t, newIdentity(t, ca, "b"), nil)
	c, err := a.DialAddressTimeout(memberlist.Address{Addr: addrOfTransport(b), Name: "b"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var s net.Conn
	select {
	case s = <-b.StreamCh():
	case <-time.After(5 * time.Second):
		t.Fatal("no stream")
	}
	defer s.Close()
	tc, ok := s.(interface{ ConnectionState() tls.ConnectionState })
	if !ok || tlsconf.Principal(tc.ConnectionState()) != "a" {
		t.Fatalf("the accepted stream is %T; want a TLS connection from a", s)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if _, err := s.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("read %q, %v", buf, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the closed stream to be forgotten", func() bool { return numConns(b) == 0 })
}

func TestTLSTransportLimits(t *testing.T) {
	ca := newCA(t, "cell-ca")
	t.Run("idle connections close", func(t *testing.T) {
		idle := func(l *transportLimits) { l.idleTimeout = 100 * time.Millisecond }
		a := newTestTransport(t, newIdentity(t, ca, "a"), idle)
		b := newTestTransport(t, newIdentity(t, ca, "b"), idle)
		if _, err := a.WriteTo([]byte("x"), addrOfTransport(b)); err != nil {
			t.Fatal(err)
		}
		recvPacket(t, b)
		if poolSize(a) != 1 || numConns(a) != 1 {
			t.Fatalf("pool %d, connections %d; want 1 and 1", poolSize(a), numConns(a))
		}
		waitFor(t, "the idle connection to close", func() bool {
			return poolSize(a) == 0 && numConns(a) == 0 && numConns(b) == 0
		})
		if _, err := a.WriteTo([]byte("y"), addrOfTransport(b)); err != nil {
			t.Fatal(err)
		}
		if p := recvPacket(t, b); string(p.Buf) != "y" {
			t.Fatalf("got %q after the redial", p.Buf)
		}
	})
	t.Run("accepted connections bounded", func(t *testing.T) {
		b := newTestTransport(t, newIdentity(t, ca, "b"), func(l *transportLimits) { l.maxConns = 2 })
		var conns []net.Conn
		for range 2 {
			c, err := net.Dial("tcp", addrOfTransport(b))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conns = append(conns, c)
		}
		waitFor(t, "two connections served", func() bool { return numConns(b) == 2 })
		c, err := net.Dial("tcp", addrOfTransport(b))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := closedWithin(c, 2*time.Second); err != nil {
			t.Fatalf("a third connection: %v", err)
		}
		if n := b.stats.refused.Load(); n != 1 {
			t.Errorf("%d refused; want 1", n)
		}
		conns[0].Close()
		waitFor(t, "the slot to be freed", func() bool { return numConns(b) == 1 })
		c, err = net.Dial("tcp", addrOfTransport(b))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		waitFor(t, "a new connection served", func() bool { return numConns(b) == 2 })
	})
	t.Run("destinations bounded", func(t *testing.T) {
		a := newTestTransport(t, newIdentity(t, ca, "a"), func(l *transportLimits) { l.maxDests = 1 })
		b := newTestTransport(t, newIdentity(t, ca, "b"), nil)
		if _, err := a.WriteTo([]byte("x"), addrOfTransport(b)); err != nil {
			t.Fatal(err)
		}
		if _, err := a.WriteTo([]byte("x"), freeAddr(t)); err != nil {
			t.Fatal(err)
		}
		if poolSize(a) != 1 || a.stats.dropped.Load() != 1 {
			t.Errorf("pool %d, dropped %d; want 1 and 1", poolSize(a), a.stats.dropped.Load())
		}
		recvPacket(t, b)
	})
	t.Run("a restarted peer is redialed", func(t *testing.T) {
		a := newTestTransport(t, newIdentity(t, ca, "a"), nil)
		bID := newIdentity(t, ca, "b")
		b := newTestTransport(t, bID, nil)
		addr := addrOfTransport(b)
		if _, err := a.WriteTo([]byte("x"), addr); err != nil {
			t.Fatal(err)
		}
		recvPacket(t, b)
		if err := b.Shutdown(); err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(addr)
		p, err := strconv.Atoi(port)
		if err != nil {
			t.Fatal(err)
		}
		b2, err := newTLSTransport(bID.tlsConfig(t), "127.0.0.1", p, defaultLimits(), testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Shutdown()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, err := a.WriteTo([]byte("again"), addr); err != nil {
				t.Fatal(err)
			}
			select {
			case p := <-b2.PacketCh():
				if string(p.Buf) != "again" {
					t.Fatalf("got %q", p.Buf)
				}
				return
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatal("the restarted peer gets no packet")
			}
		}
	})
}
