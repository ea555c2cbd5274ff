package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// The transport's words for a dial that was refused say little: netpoll
// reports a port with nothing listening as "connection has been closed by
// peer" (the ECONNREFUSED is lost on the way). When a call gives up on an
// unreachable cell, the client dials the last address once itself, and if
// the connection is refused it says so instead.

// refusedProbeTimeout bounds that one dial: a refusal comes back at once;
// a host that does not answer at all is not worth waiting for here.
const refusedProbeTimeout = 200 * time.Millisecond

// explainUnreachable returns cause, the reason a call gave up at addr, or,
// if cause is an ErrUnreachable and addr refuses connections, an error
// (still wrapping ErrUnreachable) that says nothing listens there.
func explainUnreachable(cause error, addr string) error {
	if !errors.Is(cause, ErrUnreachable) || addr == "" {
		return cause
	}
	ctx, cancel := context.WithTimeout(context.Background(), refusedProbeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		conn.Close() // it listens now: the transport's reason stands
		return cause
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return cause
	}
	return fmt.Errorf("%w at %s: nothing listens there (connection refused)", ErrUnreachable, addr)
}
