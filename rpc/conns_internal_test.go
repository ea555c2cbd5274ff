package rpc

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// The longest prefix decides an address's cap; loopback has none unless a
// rule for its prefix says otherwise; addresses are counted unmapped.
func TestConnGuardCaps(t *testing.T) {
	p := netip.MustParsePrefix
	rules, err := connRules([]ConnLimit{
		{Prefix: p("10.0.0.0/8"), Max: 4},
		{Prefix: p("10.1.0.0/16"), Max: 2},
		{Prefix: p("127.0.0.1/32"), Max: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	g := &connGuard{perIP: 3, rules: rules, reporter: &limitReporter{log: slog.New(slog.NewTextHandler(io.Discard, nil)), limiter: newLogLimiter(time.Now)}, open: map[netip.Addr]int{}}
	for _, tt := range []struct {
		ip   string
		want int
	}{
		{"192.0.2.1", 3}, {"10.9.9.9", 4}, {"10.1.2.3", 2}, {"127.0.0.1", 1}, {"127.0.0.2", 0}, {"::1", 0}, {"2001:db8::1", 3},
	} {
		if got := g.capOf(netip.MustParseAddr(tt.ip)); got != tt.want {
			t.Errorf("cap of %s = %d; want %d", tt.ip, got, tt.want)
		}
	}
	a := &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 1} // 16-byte form
	b := &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3).To4(), Port: 2}
	if !g.admit(a) || !g.admit(b) {
		t.Fatal("two connections under a cap of 2 refused")
	}
	if g.admit(a) {
		t.Fatal("a third connection under a cap of 2 admitted")
	}
	g.release(b)
	if !g.admit(a) {
		t.Fatal("a connection after a release refused")
	}
	g.release(a)
	g.release(a)
	if n := g.openFrom(netip.MustParseAddr("10.1.2.3")); n != 0 {
		t.Fatalf("%d open after every release", n)
	}
	if !g.admit(&net.UnixAddr{Name: "@x", Net: "unix"}) {
		t.Fatal("a Unix socket connection refused")
	}
}

// A connection with bytes received but not yet read is not idle: the
// timer waits for the transport to dispatch them; once nothing is
// pending it closes the connection, once.
func TestTrackedConnPendingInput(t *testing.T) {
	const firstCall = 20 * time.Millisecond
	g := &connGuard{firstCall: firstCall, idle: firstCall, base: time.Now()}
	var closes atomic.Int32
	var pending atomic.Bool
	pending.Store(true)
	c := g.newTracked(func() error { closes.Add(1); return nil })
	c.pending = pending.Load
	c.start()
	time.Sleep(10 * firstCall)
	if n := closes.Load(); n != 0 {
		t.Fatalf("closed %d times with input pending", n)
	}
	pending.Store(false)
	for deadline := time.Now().Add(500 * firstCall); closes.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(firstCall)
	}
	time.Sleep(5 * firstCall)
	if n := closes.Load(); n != 1 {
		t.Fatalf("closed %d times once nothing was pending; want 1", n)
	}
	c.stop() // the transport's close callback: harmless after the timer closed
}
