package discovery

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// userTimeout returns a net.Dialer Control function that sets
// TCP_USER_TIMEOUT to d: the kernel closes the connection when data it
// sent stays unacknowledged that long. A pooled packet connection to a
// host that vanished without a FIN or RST (a power loss, a cable pulled)
// would otherwise take packets into its send buffer, and lose them, until
// TCP's retransmissions give up, many minutes later; with it, the
// connection fails after d, and the next packet dials again.
func userTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
		}); cerr != nil {
			return cerr
		}
		return err
	}
}
