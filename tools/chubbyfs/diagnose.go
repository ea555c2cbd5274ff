package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cloudwego/kitex/pkg/kerrors"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// The transport's own words for three common mistakes say little: a port
// with nothing listening comes out of netpoll as "connection has been
// closed by peer" (the ECONNREFUSED is lost on the way), a plaintext
// client talking to a TLS cell as "default codec read failed: EOF peer
// close", and a TLS client talking to a plaintext cell as "get connection
// error: EOF". When a command fails in the transport, chubbyfs looks at
// the cell's addresses itself, once, and says what it found.

// probeTimeout bounds each look at an address.
const probeTimeout = time.Second

// addrState is what a look at one address found.
type addrState int

const (
	addrUnknown  addrState = iota // it could not be told
	addrNoListen                  // connection refused: nothing listens there
	addrTLS                       // it answered a TLS handshake in TLS
	addrPlain                     // it took the connection and dropped a TLS handshake
)

// probe looks at addr: is anything listening, and does it speak TLS? The
// TLS handshake only asks whether the peer speaks TLS: nothing is sent
// over it and nothing it says is trusted, so its certificate is not
// checked.
func probe(ctx context.Context, addr string) addrState {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return addrNoListen
	}
	if err != nil {
		return addrUnknown
	}
	defer conn.Close()
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) // see above: no trust placed in it
	err = tc.HandshakeContext(ctx)
	var alert tls.AlertError
	var ne net.Error
	switch {
	case err == nil || errors.As(err, &alert):
		// A handshake completed, or the peer answered in TLS (an alert:
		// it wanted a client certificate, say).
		return addrTLS
	case errors.As(err, &ne) && ne.Timeout():
		return addrUnknown // silent: stopped, or slow; no telling
	}
	// It closed the connection, or answered in something else.
	return addrPlain
}

// diagnose looks into err, a failure of a command sent to addrs over TLS
// or not (useTLS). It returns what it found, "" for nothing, and whether
// that replaces the transport's reason (every address refused the
// connection, or one speaks TLS to a plaintext client: the transport's
// words are then only misleading) or adds to it. Only transport failures
// are looked at: a cell's refusal says what it means, and an expired
// --timeout is reported as such.
func diagnose(ctx context.Context, err error, addrs []string, useTLS bool) (found string, replaces bool) {
	var ce *chubby.ChubbyError
	transport := errors.Is(err, client.ErrUnreachable) || errors.Is(err, kerrors.ErrRemoteOrNetwork)
	if !transport || len(addrs) == 0 || errors.As(err, &ce) || errors.Is(err, context.DeadlineExceeded) {
		return "", false
	}
	ctx = context.WithoutCancel(ctx) // the command's own bound may be spent
	states := make([]addrState, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() { states[i] = probe(ctx, addr) })
	}
	wg.Wait()
	var refused, mismatch []string // mismatch: TLS where plaintext was spoken, or the reverse
	for i, st := range states {
		switch {
		case st == addrNoListen:
			refused = append(refused, addrs[i])
		case st == addrTLS && !useTLS, st == addrPlain && useTLS:
			mismatch = append(mismatch, addrs[i])
		}
	}
	var parts []string
	switch {
	case len(mismatch) > 0 && !useTLS:
		parts = append(parts, "the cell speaks TLS (at "+strings.Join(mismatch, ", ")+"): give --tls-ca (or $"+client.EnvTLSCA+
			"), and --tls-cert and --tls-key for a principal other than anonymous")
	case len(mismatch) > 0:
		parts = append(parts, "the cell does not speak TLS (at "+strings.Join(mismatch, ", ")+"): leave out --tls-ca and $"+client.EnvTLSCA)
	}
	if len(refused) > 0 {
		parts = append(parts, "nothing listens at "+strings.Join(refused, ", "))
	}
	if len(parts) == 0 {
		return "", false
	}
	found = strings.Join(parts, "; ")
	if len(mismatch) == 0 {
		found = "cannot reach the cell: " + found
	}
	return found, len(mismatch) > 0 || len(refused) == len(addrs)
}
