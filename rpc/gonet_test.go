package rpc_test

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/chubbygo/chubby/gen/rpctest/echo"
	"github.com/chubbygo/chubby/rpc"
	"github.com/cloudwego/kitex/client"
)

// A GoNet server (plaintext on Kitex's gonet transport) serves GoNet and
// netpoll clients alike, on every framing, as plaintext: no TLS, no
// principal.
func TestGoNetPlain(t *testing.T) {
	addr := startServer(t, &whoHandler{*newEchoHandler(false)}, rpc.ServerConfig{GoNet: true})
	for _, gonet := range []bool{true, false} {
		for _, tr := range transports {
			c := newClient(t, rpc.ClientConfig{Addrs: []string{addr}, Transport: tr, GoNet: gonet, RPCTimeout: 5 * time.Second})
			for range 3 { // the pooled connection is reused
				got, err := c.Echo(context.Background(), "hi")
				if err != nil || got != `hi tls=false principal=""` {
					t.Fatalf("gonet client %v, %v: Echo = %q, %v", gonet, tr, got, err)
				}
			}
		}
	}
	// A GoNet client also talks to a netpoll server.
	plain := startServer(t, &whoHandler{*newEchoHandler(false)}, rpc.ServerConfig{})
	c := newClient(t, rpc.ClientConfig{Addrs: []string{plain}, GoNet: true, RPCTimeout: 5 * time.Second})
	if got, err := c.Echo(context.Background(), "hi"); err != nil || got != `hi tls=false principal=""` {
		t.Fatalf("GoNet client to a netpoll server: Echo = %q, %v", got, err)
	}
}

// A GoNet server caps its open connections in its listener, as a TLS one
// does (Kitex's gonet transport never counts a connection down).
func TestGoNetConnectionLimit(t *testing.T) {
	addr := startServer(t, &whoHandler{*newEchoHandler(false)}, rpc.ServerConfig{GoNet: true, MaxConnections: 4})
	for i := range 20 {
		opts, closeConns, err := rpc.ClientOptionsCloser(rpc.ClientConfig{Addrs: []string{addr}, GoNet: true, RPCTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		c := newClientFrom(t, opts)
		if _, err := c.Echo(context.Background(), "hi"); err != nil {
			t.Fatalf("client %d of 20, one at a time: %v", i+1, err)
		}
		closeConns()
		time.Sleep(5 * time.Millisecond) // the server notices the close at its next read
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i+1, err)
		}
		conns = append(conns, c)
	}
	c, err := net.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		// Refused so fast that the reset reached the dial (a loaded
		// machine scheduled the dialer late): closed by the server too.
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a fifth connection at once was not closed by the server (read: %v)", err)
	}
}

func newClientFrom(t testing.TB, opts []client.Option) echo.Client {
	t.Helper()
	c, err := echo.NewClient("Echo", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
