package tlsconf_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

func write(t *testing.T, ca *tlstest.CA, dir, cn string, u tlstest.Usage) tlstest.Files {
	t.Helper()
	f, err := ca.Write(dir, cn, u)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func reloader(t *testing.T, f tlstest.Files, clientCA string) *tlsconf.Reloader {
	t.Helper()
	r, err := tlsconf.New(tlsconf.Config{Files: tlsconf.Files{Cert: f.Cert, Key: f.Key, CA: f.CA, ClientCA: clientCA}, CheckInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// serve accepts one connection with cfg, handshakes and reports the
// caller's principal (or the handshake's error) on the channel.
func serve(t *testing.T, cfg *tls.Config) (string, <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	out := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			out <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		tc := tls.Server(c, cfg)
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			out <- "error: " + err.Error()
			return
		}
		out <- "principal: " + tlsconf.Principal(tc.ConnectionState())
		io.Copy(io.Discard, tc)
	}()
	return ln.Addr().String(), out
}

func dial(addr string, cfg *tls.Config) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	// In TLS 1.3 the client finishes first; a server refusing its
	// certificate says so on the next read.
	c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	return err
}

func TestHandshakes(t *testing.T) {
	dir := t.TempDir()
	ca, other := newCA(t, "cell"), newCA(t, "intruder")
	replica := write(t, ca, dir, "replica-1", tlstest.Both)
	alice := write(t, ca, dir, "alice", tlstest.Client)
	odir := t.TempDir()
	stranger := write(t, other, odir, "mallory", tlstest.Both)
	clientOnly := write(t, ca, dir, "not-a-server", tlstest.Client)
	anon, err := tlsconf.New(tlsconf.Config{Files: tlsconf.Files{CA: replica.CA}})
	if err != nil {
		t.Fatal(err)
	}
	// The stranger trusts our CA, so it gets as far as showing its own
	// certificate.
	strangerTrusting := reloader(t, tlstest.Files{Cert: stranger.Cert, Key: stranger.Key, CA: replica.CA}, "")

	tests := []struct {
		name   string
		server *tlsconf.Reloader
		auth   tlsconf.Auth
		client *tls.Config
		want   string // prefix of what the server reports
		dialOK bool
	}{
		{"replica to replica", reloader(t, replica, ""), tlsconf.RequireCert, reloader(t, replica, "").ClientConfig(), "principal: replica-1", true},
		{"client with a certificate", reloader(t, replica, ""), tlsconf.AllowAnonymous, reloader(t, alice, "").ClientConfig(), "principal: alice", true},
		{"anonymous client where allowed", reloader(t, replica, ""), tlsconf.AllowAnonymous, anon.ClientConfig(), "principal: ", true},
		{"anonymous client where a certificate is required", reloader(t, replica, ""), tlsconf.RequireCert, anon.ClientConfig(), "error: ", false},
		{"certificate of another CA", reloader(t, replica, ""), tlsconf.AllowAnonymous, strangerTrusting.ClientConfig(), "error: ", false},
		{"server of another CA", reloader(t, stranger, ""), tlsconf.AllowAnonymous, reloader(t, alice, "").ClientConfig(), "error: ", false},
		{"server certificate without serverAuth", reloader(t, clientOnly, ""), tlsconf.AllowAnonymous, reloader(t, alice, "").ClientConfig(), "error: ", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, out := serve(t, tt.server.ServerConfig(tt.auth, false))
			err := dial(addr, tt.client)
			if (err == nil) != tt.dialOK {
				t.Errorf("dial: %v, want ok=%v", err, tt.dialOK)
			}
			got := <-out
			if !strings.HasPrefix(got, tt.want) || (tt.want == "principal: " && got != tt.want) {
				t.Errorf("server: %q, want %q", got, tt.want)
			}
		})
	}
}

// With a separate client CA, a client certificate opens the client port
// but not the peer port.
func TestSeparateClientCA(t *testing.T) {
	dir, cdir := t.TempDir(), t.TempDir()
	cellCA, clientCA := newCA(t, "cell"), newCA(t, "clients")
	replica := write(t, cellCA, dir, "replica-1", tlstest.Both)
	alice := write(t, clientCA, cdir, "alice", tlstest.Client)
	srv := reloader(t, replica, alice.CA)
	cli := reloader(t, tlstest.Files{Cert: alice.Cert, Key: alice.Key, CA: replica.CA}, "")

	addr, out := serve(t, srv.ServerConfig(tlsconf.AllowAnonymous, true))
	if err := dial(addr, cli.ClientConfig()); err != nil {
		t.Fatalf("client port: %v", err)
	}
	if got := <-out; got != "principal: alice" {
		t.Fatalf("client port: %q", got)
	}
	addr, out = serve(t, srv.ServerConfig(tlsconf.RequireCert, false))
	if err := dial(addr, cli.ClientConfig()); err == nil {
		t.Error("peer port let a client certificate in")
	}
	if got := <-out; !strings.HasPrefix(got, "error: ") {
		t.Errorf("peer port: %q", got)
	}
}

// A certificate renewed on disk is served from the next handshake after
// the check interval; a broken file keeps the old one.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "cell")
	f := write(t, ca, dir, "replica-1", tlstest.Both)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	var reloads, failures atomic.Int32
	r, err := tlsconf.New(tlsconf.Config{
		Files: tlsconf.Files{Cert: f.Cert, Key: f.Key, CA: f.CA},
		Now:   func() time.Time { return time.Unix(0, now.Load()) },
		OnReload: func(err error) {
			if err != nil {
				failures.Add(1)
			} else {
				reloads.Add(1)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	first := r.Leaf().SerialNumber
	g := write(t, ca, dir, "replica-1", tlstest.Both) // same paths, new certificate
	if r.Leaf().SerialNumber.Cmp(first) != 0 {
		t.Fatal("reloaded before the check interval")
	}
	now.Add(int64(2 * time.Second))
	second := r.Leaf().SerialNumber
	if second.Cmp(first) == 0 || reloads.Load() != 1 {
		t.Fatalf("not reloaded after the interval (reloads %d)", reloads.Load())
	}
	if err := tlstest.WriteAtomic(g.Key, []byte("not a key")); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(2 * time.Second))
	if r.Leaf().SerialNumber.Cmp(second) != 0 || failures.Load() != 1 {
		t.Fatalf("a broken key replaced the certificate (failures %d)", failures.Load())
	}
	// The handshake still works with the old material.
	addr, out := serve(t, r.ServerConfig(tlsconf.RequireCert, false))
	if err := dial(addr, r.ClientConfig()); err != nil {
		t.Fatalf("dial after a failed reload: %v", err)
	}
	<-out
}

func TestNewRefusesIncompleteFiles(t *testing.T) {
	dir := t.TempDir()
	f := write(t, newCA(t, "cell"), dir, "r", tlstest.Both)
	for _, files := range []tlsconf.Files{
		{Cert: f.Cert, Key: f.Key},            // no CA
		{Cert: f.Cert, CA: f.CA},              // no key
		{Cert: f.Cert, Key: f.CA, CA: f.CA},   // a key that is not one
		{Cert: f.Cert, Key: f.Key, CA: f.Key}, // a CA file without a certificate
	} {
		if _, err := tlsconf.New(tlsconf.Config{Files: files}); err == nil {
			t.Errorf("New(%+v) accepted", files)
		}
	}
}
