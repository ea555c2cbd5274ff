package discovery

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Pooled packet connections fail when what they sent stays unacknowledged
// for userTimeout.
func TestTLSPacketConnUserTimeout(t *testing.T) {
	ca := newCA(t, "cell-ca")
	a := newTestTransport(t, newIdentity(t, ca, "a"), func(l *transportLimits) { l.userTimeout = 1234 * time.Millisecond })
	b := newTestTransport(t, newIdentity(t, ca, "b"), nil)
	if _, err := a.WriteTo([]byte("x"), addrOfTransport(b)); err != nil {
		t.Fatal(err)
	}
	recvPacket(t, b)
	a.mu.Lock()
	var conns []*gossipConn
	for c := range a.conns {
		conns = append(conns, c)
	}
	a.mu.Unlock()
	if len(conns) != 1 {
		t.Fatalf("%d connections; want the pooled one", len(conns))
	}
	c := conns[0]
	raw, err := c.Conn.NetConn().(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		got, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if got != 1234 {
		t.Errorf("TCP_USER_TIMEOUT = %d ms; want 1234", got)
	}
}
