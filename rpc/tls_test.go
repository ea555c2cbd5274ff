package rpc_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chubbygo/chubby/gen/rpctest/echo"
	"github.com/chubbygo/chubby/rpc"
	"github.com/chubbygo/chubby/rpc/tlsconf"
	"github.com/chubbygo/chubby/rpc/tlsconf/tlstest"
)

// whoHandler answers Echo with who the caller is.
type whoHandler struct{ echoHandler }

func (h *whoHandler) Echo(ctx context.Context, msg string) (string, error) {
	c := rpc.Caller(ctx)
	return fmt.Sprintf("%s tls=%v principal=%q", msg, c.TLS, c.Principal), nil
}

// pki is the test CA with a replica's certificate and the server
// material made of it.
type pki struct {
	*tlstest.PKI
	server  *tlsconf.Reloader
	replica tlstest.Files
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{PKI: tlstest.NewPKI(t, "cell")}
	p.replica = p.Files(t, "replica-1", tlstest.Both)
	p.server = p.reloader(t, p.replica, 0)
	return p
}

// reloader is the material of f's holder, trusting p's CA, checking its
// files every interval (0: the default).
func (p *pki) reloader(t *testing.T, f tlstest.Files, every time.Duration) *tlsconf.Reloader {
	t.Helper()
	r, err := tlsconf.New(tlsconf.Config{Files: tlsconf.Files{Cert: f.Cert, Key: f.Key, CA: p.CAFile()}, CheckInterval: every})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func startTLSServer(t *testing.T, p *pki, auth tlsconf.Auth) string {
	t.Helper()
	return startServer(t, &whoHandler{*newEchoHandler(false)}, rpc.ServerConfig{TLS: p.server.ServerConfig(auth, true)})
}

// Handlers see the principal of the caller's certificate, or none.
func TestTLSCaller(t *testing.T) {
	p := newPKI(t)
	addr := startTLSServer(t, p, tlsconf.AllowAnonymous)
	for _, tt := range []struct {
		name string
		cli  *tls.Config
		want string
	}{
		{"alice", p.ClientTLS(t, "alice"), `hi tls=true principal="alice"`},
		{"anonymous", p.ClientTLS(t, ""), `hi tls=true principal=""`},
	} {
		for _, tr := range transports {
			t.Run(tt.name+"/"+tr.String(), func(t *testing.T) {
				c := newClient(t, rpc.ClientConfig{Addrs: []string{addr}, Transport: tr, TLS: tt.cli, RPCTimeout: 5 * time.Second})
				got, err := c.Echo(context.Background(), "hi")
				if err != nil || got != tt.want {
					t.Fatalf("Echo = %q, %v; want %q", got, err, tt.want)
				}
			})
		}
	}
	// Plaintext: no TLS, no principal.
	plain := startServer(t, &whoHandler{*newEchoHandler(false)}, rpc.ServerConfig{})
	c := newClient(t, rpc.ClientConfig{Addrs: []string{plain}, RPCTimeout: 5 * time.Second})
	if got, err := c.Echo(context.Background(), "hi"); err != nil || got != `hi tls=false principal=""` {
		t.Fatalf("plaintext Echo = %q, %v", got, err)
	}
}

// Whoever cannot complete the handshake gets no call through.
func TestTLSRefusals(t *testing.T) {
	p := newPKI(t)
	required := startTLSServer(t, p, tlsconf.RequireCert)
	// mallory trusts our CA, so the refusal is of its certificate.
	intruder := tlstest.NewPKI(t, "intruder").Reloader(t, "mallory", tlstest.Both, p.PKI)
	for _, tt := range []struct {
		name string
		cfg  rpc.ClientConfig
	}{
		{"plaintext client", rpc.ClientConfig{}},
		{"certificate of another CA", rpc.ClientConfig{TLS: intruder.ClientConfig()}},
		{"no certificate where one is required", rpc.ClientConfig{TLS: p.ClientTLS(t, "")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Addrs, tt.cfg.RPCTimeout = []string{required}, 2*time.Second
			c := newClient(t, tt.cfg)
			if got, err := c.Echo(context.Background(), "hi"); err == nil {
				t.Fatalf("Echo = %q, want a refusal", got)
			}
		})
	}
	// A TLS client does not talk to a plaintext server either.
	plain := startServer(t, &whoHandler{*newEchoHandler(false)}, rpc.ServerConfig{})
	c := newClient(t, rpc.ClientConfig{Addrs: []string{plain}, TLS: p.reloader(t, p.replica, 0).ClientConfig(), RPCTimeout: 2 * time.Second})
	if got, err := c.Echo(context.Background(), "hi"); err == nil {
		t.Fatalf("TLS client to a plaintext server: %q", got)
	}
	// Bytes that are not a TLS handshake close the connection.
	conn, err := net.DialTimeout("tcp", required, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte(strings.Repeat("GET / HTTP/1.0\r\n", 100)))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1024)); err == nil {
		// An alert may come first; the connection must then close.
		if _, err := conn.Read(make([]byte, 1024)); err == nil {
			t.Fatal("garbage got an answer")
		}
	}
}

// Certificates rotated on disk under load: every call succeeds, and new
// connections use the new certificate.
func TestTLSRotationUnderLoad(t *testing.T) {
	p := newPKI(t)
	p.server = p.reloader(t, p.replica, 10*time.Millisecond)
	addr := startTLSServer(t, p, tlsconf.RequireCert)
	cli := p.reloader(t, p.Files(t, "alice", tlstest.Client), 10*time.Millisecond)
	c := newClient(t, rpc.ClientConfig{Addrs: []string{addr}, TLS: cli.ClientConfig(), RPCTimeout: 5 * time.Second, MaxIdleTimeout: 20 * time.Millisecond})
	var calls, failures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Echo(context.Background(), "x"); err != nil {
					failures.Add(1)
					t.Errorf("call during rotation: %v", err)
				}
				calls.Add(1)
			}
		}()
	}
	serials := map[string]bool{}
	for i := range 5 {
		time.Sleep(50 * time.Millisecond)
		p.Files(t, "replica-1", tlstest.Both)
		p.Files(t, "alice", tlstest.Client)
		serials[p.server.Leaf().SerialNumber.String()] = true
		_ = i
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d calls, %d failed, %d server certificates seen", calls.Load(), failures.Load(), len(serials))
	if len(serials) < 2 {
		t.Errorf("the server certificate never changed")
	}
}

// BenchmarkEchoRoundTripTLS is BenchmarkEchoRoundTrip on mutual TLS (the
// gonet transport): with it, what TLS adds to one call, without disks.
func BenchmarkEchoRoundTripTLS(b *testing.B) {
	r := tlstest.NewPKI(b, "cell").Reloader(b, "replica-1", tlstest.Both, nil)
	addr := startServer(b, newEchoHandler(false), rpc.ServerConfig{TLS: r.ServerConfig(tlsconf.RequireCert, true)})
	benchEcho(b, newClient(b, rpc.ClientConfig{Addrs: []string{addr}, TLS: r.ClientConfig()}))
}

// The connection limit counts connections open now, not every connection
// the server ever accepted: with MaxConnections 4, forty clients one after
// another all get through, and five at once find the fifth refused.
// (Kitex's gonet transport never tells its connection limiter that a
// connection closed, so a TLS server with Kitex's limiter took its first
// MaxConnections connections and then refused every other, forever.)
func TestTLSConnectionLimitCountsOpenConnections(t *testing.T) {
	p := newPKI(t)
	addr := startServer(t, &whoHandler{*newEchoHandler(false)}, rpc.ServerConfig{TLS: p.server.ServerConfig(tlsconf.RequireCert, true), MaxConnections: 4})
	cli := p.ClientTLS(t, "alice")
	for i := range 40 {
		c, closeConns, err := rpc.ClientOptionsCloser(rpc.ClientConfig{Addrs: []string{addr}, TLS: cli, RPCTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ec, err := echo.NewClient("Echo", c...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ec.Echo(context.Background(), "hi"); err != nil {
			t.Fatalf("client %d of 40, one at a time: %v", i+1, err)
		}
		closeConns()
		// The server notices the close when its read fails; give it that.
		time.Sleep(5 * time.Millisecond)
	}
	var conns []*tls.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range 4 {
		c, err := tls.Dial("tcp", addr, cli)
		if err != nil {
			t.Fatalf("dial %d: %v", i+1, err)
		}
		conns = append(conns, c)
	}
	// The fifth is closed by the server at once: in its handshake or,
	// if that had completed, at its first read.
	c, err := tls.Dial("tcp", addr, cli)
	if err == nil {
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err = c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
			err = nil
		}
	}
	if err == nil {
		t.Fatal("a fifth connection at once was not refused")
	}
}
