package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/gopkg/bufiox"
	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/trans/detection"
	"github.com/cloudwego/kitex/pkg/remote/trans/gonet"
	"github.com/cloudwego/kitex/pkg/remote/trans/nphttp2"
	"github.com/cloudwego/kitex/server"

	"github.com/chubbygo/chubby/rpc/tlsconf"
)

// TLS on Kitex.
//
// Kitex's netpoll transport cannot carry TLS, so a server or client with a
// TLS configuration runs on Kitex's gonet transport (Go's net package, one
// goroutine per connection; about as fast here). What is lost with it: a
// handler's context is not cancelled when its caller hangs up (netpoll's
// disconnect callback has no gonet counterpart), so a parked call ends at
// its own bound — which every parked call has anyway.
//
// The server wraps its listener so that every accepted connection is a
// *tls.Conn, remembered by its remote address until Kitex opens it
// (connWatcher.OnActive); there the handshake runs, on the connection's own
// goroutine and bounded by HandshakeTimeout, and the caller's principal
// goes into the connection's context, where handlers find it with
// [Caller].

// HandshakeTimeout bounds a server's TLS handshake.
const HandshakeTimeout = 5 * time.Second

// CallerInfo is who made the call a handler serves.
type CallerInfo struct {
	// TLS: the call came over a TLS connection.
	TLS bool
	// Principal is the common name of the caller's verified certificate,
	// "" when it presented none (or without TLS).
	Principal string
}

// Caller returns who made the call of handler context ctx, as the server's
// connection knows it. Outside a server built with ServerOptions it is the
// zero CallerInfo.
func Caller(ctx context.Context) CallerInfo {
	if ci, _ := ctx.Value(connInfoKey{}).(*connInfo); ci != nil {
		return ci.caller
	}
	return CallerInfo{}
}

// tlsServerOptions are the options of a server on TLS.
func tlsServerOptions(cfg ServerConfig, tc *tls.Config) ([]server.Option, *tlsListener, error) {
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, nil, fmt.Errorf("rpc: listen: %w", err)
		}
	}
	tl := &tlsListener{Listener: ln, cfg: tc, max: cfg.MaxConnections, pending: make(map[string]*tls.Conn)}
	return []server.Option{
		server.WithListener(tl),
		server.WithTransServerFactory(gonet.NewTransServerFactory()),
		server.WithTransHandlerFactory(detection.NewSvrTransHandlerFactory(
			gonet.NewSvrTransHandlerFactory(), nphttp2.NewSvrTransHandlerFactory())),
	}, tl, nil
}

// tlsListener makes every accepted connection a TLS server connection and
// keeps it, by remote address, until connWatcher.OnActive claims it.
//
// It also enforces ServerConfig.MaxConnections itself: Kitex's gonet
// transport (v0.16.1) never runs its handlers' OnInactive, so Kitex's
// connection limiter, which counts down there, would count every
// connection the server ever accepted and refuse all after the first
// MaxConnections.
type tlsListener struct {
	net.Listener
	cfg      *tls.Config
	max      int    // open connections at most
	onRefuse func() // a connection over max was closed

	mu      sync.Mutex
	open    int // accepted and not yet closed
	pending map[string]*tls.Conn
}

func (l *tlsListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc := tls.Server(c, l.cfg)
		l.mu.Lock()
		if l.open >= l.max {
			l.mu.Unlock()
			c.Close()
			if l.onRefuse != nil {
				l.onRefuse()
			}
			continue
		}
		l.open++
		l.pending[c.RemoteAddr().String()] = tc
		l.mu.Unlock()
		return &tlsAccepted{Conn: tc, l: l}, nil
	}
}

// tlsAccepted is an accepted connection that leaves the listener's
// pending table when it closes, claimed or not (Kitex refuses some
// connections, over its connection limit, before OnActive).
type tlsAccepted struct {
	*tls.Conn
	l      *tlsListener
	closed atomic.Bool
}

func (c *tlsAccepted) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.mu.Lock()
		if k := c.RemoteAddr().String(); c.l.pending[k] == c.Conn {
			delete(c.l.pending, k)
		}
		c.l.open--
		c.l.mu.Unlock()
	}
	return c.Conn.Close()
}

// claim returns and forgets the TLS connection from remote.
func (l *tlsListener) claim(remote string) *tls.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	tc := l.pending[remote]
	delete(l.pending, remote)
	return tc
}

// handshake completes the TLS handshake of the connection conn wraps and
// says who the caller is.
func (l *tlsListener) handshake(ctx context.Context, conn net.Conn) (CallerInfo, error) {
	tc := l.claim(conn.RemoteAddr().String())
	if tc == nil {
		return CallerInfo{}, fmt.Errorf("rpc: connection from %s is not one this listener accepted", conn.RemoteAddr())
	}
	hctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		// The address goes last: the log limiter tells repeats apart by
		// their first bytes, so a flood of one refusal is one message.
		return CallerInfo{}, fmt.Errorf("rpc: TLS handshake refused: %w (from %s)", err, conn.RemoteAddr())
	}
	return CallerInfo{TLS: true, Principal: tlsconf.Principal(tc.ConnectionState())}, nil
}

// tlsClientOptions are the options of a client on TLS.
func tlsClientOptions(tc *tls.Config) []client.Option {
	return []client.Option{
		client.WithTransHandlerFactory(gonet.NewCliTransHandlerFactory()),
		client.WithDialer(&tlsDialer{cfg: tc}),
	}
}

// tlsDialer dials TLS connections for Kitex's gonet client.
type tlsDialer struct{ cfg *tls.Config }

var _ remote.Dialer = (*tlsDialer)(nil)

func (d *tlsDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	td := &tls.Dialer{NetDialer: &net.Dialer{}, Config: d.cfg}
	c, err := td.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return newBufConn(c), nil
}

// bufConn is a client connection as Kitex's gonet transport reads and
// writes it: through bufiox buffers.
type bufConn struct {
	net.Conn
	r      *bufiox.DefaultReader
	w      *bufiox.DefaultWriter
	closed atomic.Bool
}

func newBufConn(c net.Conn) *bufConn {
	return &bufConn{Conn: c, r: bufiox.NewDefaultReader(c), w: bufiox.NewDefaultWriter(c)}
}

func (c *bufConn) Reader() *bufiox.DefaultReader { return c.r }
func (c *bufConn) Writer() *bufiox.DefaultWriter { return c.w }
func (c *bufConn) Read(b []byte) (int, error)    { return c.r.Read(b) }

var errClosed = errors.New("rpc: connection closed")

func (c *bufConn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return errClosed
	}
	c.r.Release(nil)
	return c.Conn.Close()
}
