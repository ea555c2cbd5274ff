//go:build !linux

package discovery

import (
	"syscall"
	"time"
)

// userTimeout sets nothing: TCP_USER_TIMEOUT (tcpopt_linux.go) is Linux's.
// Elsewhere a pooled packet connection to a host that vanished without a
// FIN or RST fails only when TCP's retransmissions give up or its send
// buffer fills (then the write deadline drops it).
func userTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
