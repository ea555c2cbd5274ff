package rpc_test

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chubbygo/chubby/gen/rpctest"
	"github.com/chubbygo/chubby/rpc"
	"github.com/chubbygo/chubby/rpc/tlsconf"
)

// TestConnectionSlots: one address that opens more idle connections than
// its cap cannot lock others out; connections that never carry a call are
// closed after the first-call timeout, used ones after the idle timeout,
// and a parked call keeps its connection far beyond both. On both
// transports: netpoll (plaintext) and gonet (TLS).
func TestConnectionSlots(t *testing.T) {
	const (
		perIP = 32
		idle  = 64 // idle connections opened from 127.0.0.1
		// The server's cap, below idle: without the per-address cap the
		// idle connections take every slot.
		maxConns  = 48
		firstCall = time.Second
		idleTime  = time.Second
	)
	// The longest either timeout is awaited: a busy machine fires timers
	// late, so every wait for a close is bounded by ten times it.
	bound := 10 * max(firstCall, idleTime)
	for _, tt := range []struct {
		name string
		tls  bool
	}{{"plaintext", false}, {"tls", true}} {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			h := newEchoHandler(false)
			cfg := rpc.ServerConfig{
				MaxConnections:   maxConns,
				ConnLimits:       []rpc.ConnLimit{{Prefix: netip.MustParsePrefix("127.0.0.1/32"), Max: perIP}},
				FirstCallTimeout: firstCall,
				MaxConnIdleTime:  idleTime,
				Registerer:       reg,
			}
			var cli *tls.Config
			if tt.tls {
				p := newPKI(t)
				cfg.TLS = p.server.ServerConfig(tlsconf.AllowAnonymous, true)
				cli = p.ClientTLS(t, "")
			}
			addr := startServer(t, h, cfg)

			// Idle connections from 127.0.0.1 that never send a byte. A
			// refused one may be reset before its connect returns.
			var idlers []net.Conn
			t.Cleanup(func() {
				for _, c := range idlers {
					c.Close()
				}
			})
			for range idle {
				c, err := dialFrom("127.0.0.1", addr, nil)
				switch {
				case errors.Is(err, syscall.ECONNRESET):
					continue
				case err != nil:
					t.Fatal(err)
				}
				idlers = append(idlers, c)
			}
			// Another address is served (it is accepted after the idle
			// connections, which came first).
			fresh, err := dialFrom("127.0.0.2", addr, cli)
			if err != nil {
				t.Fatal(err)
			}
			defer fresh.Close()
			if got, err := framedExchange(fresh, echoRequest("from-two"), bound); err != nil || !strings.Contains(got, "from-two") {
				t.Fatalf("Echo from 127.0.0.2 beside %d idle connections from 127.0.0.1 = %q, %v", idle, got, err)
			}

			rejections := func() float64 {
				return metricValue(t, reg, "rpc_server_limit_rejections_total", map[string]string{"limit": "connections_per_ip"})
			}
			waitForWithin(t, bound, func() bool { return rejections() >= idle-perIP })
			if got := rejections(); got != idle-perIP {
				t.Fatalf("per-address rejections = %v; want %d", got, idle-perIP)
			}

			// A call parked for longer than both timeouts.
			parker, err := dialFrom("127.0.0.2", addr, cli)
			if err != nil {
				t.Fatal(err)
			}
			defer parker.Close()
			if _, err := parker.Write(framedParkRequest("long", int64(10*bound/time.Millisecond))); err != nil {
				t.Fatal(err)
			}
			h.deferred(t, "long")

			// Every idle connection is closed: the refused ones at accept,
			// the admitted ones by the first-call timeout.
			start := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, len(idlers))
			for i, c := range idlers {
				wg.Go(func() {
					if err := awaitClose(c, bound); err != nil {
						errs <- fmt.Errorf("idle connection %d: %w", i, err)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			t.Logf("all %d idle connections closed within %v (%d reset in their connect)", idle, time.Since(start).Round(time.Millisecond), idle-len(idlers))
			waitForWithin(t, bound, func() bool {
				return metricValue(t, reg, "rpc_server_idle_closes_total", map[string]string{"reason": "first_call"}) >= perIP
			})

			// The closed connections gave their slots back: 127.0.0.1 is
			// served again.
			again, err := dialFrom("127.0.0.1", addr, cli)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			if got, err := framedExchange(again, echoRequest("from-one"), bound); err != nil || !strings.Contains(got, "from-one") {
				t.Fatalf("Echo from 127.0.0.1 after its idle connections closed = %q, %v", got, err)
			}

			// The used connection, idle since its call, is closed too.
			if err := awaitClose(fresh, bound); err != nil {
				t.Fatalf("used connection: %v", err)
			}
			if got := metricValue(t, reg, "rpc_server_idle_closes_total", map[string]string{"reason": "idle"}); got < 1 {
				t.Fatalf("idle closes = %v; want >= 1", got)
			}

			// The parked call outlived both timeouts on its connection.
			if time.Since(start) < 2*max(firstCall, idleTime) {
				time.Sleep(2*max(firstCall, idleTime) - time.Since(start))
			}
			if !h.resolve("long", "resolved-late") {
				t.Fatal("the parked call is gone")
			}
			if got, err := framedReply(parker, bound); err != nil || !strings.Contains(got, "resolved-late") {
				t.Fatalf("reply to the parked call = %q, %v", got, err)
			}
		})
	}
}

// dialFrom connects to addr from the local address local (any port), on
// TLS when cfg is set.
func dialFrom(local, addr string, cfg *tls.Config) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	if cfg == nil {
		return d.Dial("tcp", addr)
	}
	return tls.DialWithDialer(d, "tcp", addr, cfg)
}

// echoRequest is a framed Thrift Echo call of msg.
func echoRequest(msg string) []byte {
	args := rpctest.NewEchoEchoArgs()
	args.Msg = msg
	body := make([]byte, args.BLength())
	args.FastWrite(body)
	return framedCall("Echo", body)
}

// framedExchange writes a framed request on c and returns the framed reply
// (its bytes as a string), waiting at most within.
func framedExchange(c net.Conn, req []byte, within time.Duration) (string, error) {
	if _, err := c.Write(req); err != nil {
		return "", err
	}
	return framedReply(c, within)
}

// framedReply reads one framed reply from c, waiting at most within.
func framedReply(c net.Conn, within time.Duration) (string, error) {
	c.SetReadDeadline(time.Now().Add(within))
	defer c.SetReadDeadline(time.Time{})
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return "", err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > 1<<16 {
		return "", fmt.Errorf("reply of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	return string(b), err
}

// awaitClose waits up to within for the server to close c: a read that
// ends in EOF or a reset, not in the deadline or in data.
func awaitClose(c net.Conn, within time.Duration) error {
	c.SetReadDeadline(time.Now().Add(within))
	n, err := c.Read(make([]byte, 1))
	switch {
	case n > 0:
		return errors.New("got data, not a close")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("still open after %v", within)
	case err == nil:
		return errors.New("read nothing, no error")
	}
	return nil
}

// waitForWithin polls cond until it holds, failing the test after within.
func waitForWithin(t *testing.T, within time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("condition not met within %v", within)
}

func TestParseConnLimits(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want string // the limits' String()s, comma-separated; "" with ok false: an error
		ok   bool
	}{
		{"", "", true},
		{"10.1.0.0/16=4096", "10.1.0.0/16=4096", true},
		{" 192.0.2.7=0 , 2001:db8::/32=50", "192.0.2.7/32=0,2001:db8::/32=50", true},
		{"::1=8", "::1/128=8", true},
		{"10.0.0.0/8", "", false},
		{"10.0.0.0/8=many", "", false},
		{"nowhere=3", "", false},
		{"10.0.0.0/33=3", "", false},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := rpc.ParseConnLimits(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("ParseConnLimits(%q) error = %v; want ok=%v", tt.in, err, tt.ok)
			}
			var s []string
			for _, l := range got {
				s = append(s, l.String())
			}
			if strings.Join(s, ",") != tt.want {
				t.Fatalf("ParseConnLimits(%q) = %v; want %s", tt.in, s, tt.want)
			}
		})
	}
}

func TestConnLimitValidation(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tt := range []struct {
		name   string
		limits []rpc.ConnLimit
		ok     bool
	}{
		{"none", nil, true},
		{"proxy", []rpc.ConnLimit{{Prefix: p("10.0.0.5/32"), Max: 10000}}, true},
		{"loopback capped", []rpc.ConnLimit{{Prefix: p("127.0.0.0/8"), Max: 64}}, true},
		{"negative", []rpc.ConnLimit{{Prefix: p("10.0.0.0/8"), Max: -1}}, false},
		{"twice", []rpc.ConnLimit{{Prefix: p("10.0.0.0/8"), Max: 1}, {Prefix: p("10.1.2.3/8"), Max: 2}}, false},
		{"invalid prefix", []rpc.ConnLimit{{Max: 1}}, false},
		{"mapped", []rpc.ConnLimit{{Prefix: p("::ffff:10.0.0.0/104"), Max: 1}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rpc.ServerOptions(rpc.ServerConfig{Listen: "127.0.0.1:7000", ConnLimits: tt.limits})
			if (err == nil) != tt.ok {
				t.Fatalf("ServerOptions with ConnLimits %v: error = %v; want ok=%v", tt.limits, err, tt.ok)
			}
		})
	}
	for _, cfg := range []rpc.ServerConfig{
		{Listen: "127.0.0.1:7000", MaxConnectionsPerIP: -1},
		{Listen: "127.0.0.1:7000", FirstCallTimeout: -time.Second},
	} {
		if _, err := rpc.ServerOptions(cfg); err == nil {
			t.Errorf("ServerOptions(%+v) accepted a negative limit", cfg)
		}
	}
}
