package rpc_test

import (
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/chubbygo/chubby/gen/rpctest/echo"
	"github.com/chubbygo/chubby/rpc"
	"github.com/chubbygo/chubby/rpc/tlsconf"
	"github.com/cloudwego/kitex/server"
)

// TestStopAtAnyMomentFreesThePort stops servers at every moment of their
// start: before Run, at once after starting Run in a goroutine (Kitex's own
// Stop does nothing then and Run goes on to serve for ever), a moment
// later, and once serving. Each time Run must return and the port must be
// free for a new listener at once.
func TestStopAtAnyMomentFreesThePort(t *testing.T) {
	p := newPKI(t)
	for _, tt := range []struct {
		name string
		tls  bool
	}{{"netpoll", false}, {"tls", true}} {
		t.Run(tt.name, func(t *testing.T) {
			for i := range 200 {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr := ln.Addr().String()
				cfg := rpc.ServerConfig{Listener: ln, ExitWaitTime: 10 * time.Millisecond,
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
				if tt.tls {
					cfg.TLS = p.server.ServerConfig(tlsconf.AllowAnonymous, true)
				}
				svr, err := rpc.NewServer(cfg, func(opts ...server.Option) server.Server {
					return echo.NewServer(newEchoHandler(false), opts...)
				})
				if err != nil {
					t.Fatal(err)
				}
				ran := make(chan error, 1)
				switch when := i % 4; when {
				case 0: // Stop before Run
					if err := svr.Stop(); err != nil {
						t.Fatalf("Stop before Run: %v", err)
					}
					go func() { ran <- svr.Run() }()
				case 1: // Stop racing Run's start
					go func() { ran <- svr.Run() }()
					svr.Stop()
				case 2: // a moment into Run
					go func() { ran <- svr.Run() }()
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
					svr.Stop()
				case 3: // serving
					go func() { ran <- svr.Run() }()
					if !tt.tls {
						if err := framedEcho(addr, "ready"); err != nil {
							t.Fatalf("server never answered: %v", err)
						}
					}
					svr.Stop()
				}
				select {
				case err := <-ran:
					if i%4 == 0 && !errors.Is(err, rpc.ErrServerStopped) {
						t.Fatalf("Run after Stop = %v; want ErrServerStopped", err)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("stop %d (case %d): Run still running 30 s after Stop returned", i, i%4)
				}
				again, err := net.Listen("tcp", addr)
				if err != nil {
					t.Fatalf("stop %d (case %d): port still taken after Stop and Run returned: %v", i, i%4, err)
				}
				again.Close()
			}
		})
	}
}
