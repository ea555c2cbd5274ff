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
func tlsServerOptions(cfg ServerConfig, tc *tls.Config, guard *connGuard, lc *lifecycle) ([]server.Option, *tlsListener, error) {
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, nil, fmt.Errorf("rpc: listen: %w", err)
		}
	}
	tl := &tlsListener{Listener: ln, cfg: tc, max: cfg.MaxConnections, guard: guard, pending: make(map[string]*tlsAccepted)}
	return []server.Option{
		server.WithListener(tl),
		server.WithTransServerFactory(bootingFactory{TransServerFactory: gonet.NewTransServerFactory(), lc: lc}),
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
// MaxConnections. For the same reason it, not connWatcher, takes each
// connection's per-address slot and starts its idle timer, and
// tlsAccepted.Close frees both.
type tlsListener struct {
	net.Listener
	cfg      *tls.Config
	max      int    // open connections at most
	onRefuse func() // a connection over max was closed
	guard    *connGuard

	mu      sync.Mutex
	open    int // accepted and not yet closed
	pending map[string]*tlsAccepted
}

func (l *tlsListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.open >= l.max {
			l.mu.Unlock()
			refuse(c)
			if l.onRefuse != nil {
				l.onRefuse()
			}
			continue
		}
		l.open++
		l.mu.Unlock()
		if !l.guard.admit(c.RemoteAddr()) {
			l.mu.Lock()
			l.open--
			l.mu.Unlock()
			refuse(c)
			continue
		}
		ta := &tlsAccepted{Conn: c, l: l}
		if l.cfg != nil {
			ta.tls = tls.Server(c, l.cfg)
			ta.Conn = ta.tls
		}
		ta.track = l.guard.newTracked(ta.Close)
		ta.track.start()
		l.mu.Lock()
		l.pending[c.RemoteAddr().String()] = ta
		l.mu.Unlock()
		return ta, nil
	}
}

// refuse closes a connection over a limit with a reset: the caller learns
// at once, and the server keeps no TIME_WAIT state for it.
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// tlsAccepted is an accepted connection that leaves the listener's
// pending table when it closes, claimed or not (Kitex refuses some
// connections, over its connection limit, before OnActive), and frees its
// slots. Its idle timer closes it from another goroutine; gonet closes it
// too when it is done with it.
type tlsAccepted struct {
	net.Conn           // tls, or the accepted connection itself on plain gonet
	tls      *tls.Conn // nil on plain gonet (ServerConfig.GoNet)
	l        *tlsListener
	track    *trackedConn
	closed   atomic.Bool
}

func (c *tlsAccepted) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.track.stop()
		c.l.mu.Lock()
		if k := c.RemoteAddr().String(); c.l.pending[k] == c {
			delete(c.l.pending, k)
		}
		c.l.open--
		c.l.mu.Unlock()
		c.l.guard.release(c.RemoteAddr())
	}
	return c.Conn.Close()
}

// claim returns and forgets the accepted connection from remote.
func (l *tlsListener) claim(remote string) *tlsAccepted {
	l.mu.Lock()
	defer l.mu.Unlock()
	ta := l.pending[remote]
	delete(l.pending, remote)
	return ta
}

// handshake completes the TLS handshake of the connection conn wraps and
// says who the caller is; it also returns the connection's idle timer.
func (l *tlsListener) handshake(ctx context.Context, conn net.Conn) (CallerInfo, *trackedConn, error) {
	ta := l.claim(conn.RemoteAddr().String())
	if ta == nil {
		return CallerInfo{}, nil, fmt.Errorf("rpc: connection from %s is not one this listener accepted", conn.RemoteAddr())
	}
	if ta.tls == nil {
		return CallerInfo{}, ta.track, nil // plain gonet: no handshake
	}
	hctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
	defer cancel()
	if err := ta.tls.HandshakeContext(hctx); err != nil {
		// The address goes last: the log limiter tells repeats apart by
		// their first bytes, so a flood of one refusal is one message.
		return CallerInfo{}, ta.track, fmt.Errorf("rpc: TLS handshake refused: %w (from %s)", err, conn.RemoteAddr())
	}
	return CallerInfo{TLS: true, Principal: tlsconf.Principal(ta.tls.ConnectionState())}, ta.track, nil
}

// tlsClientOptions are the options of a client on TLS, or on plain gonet
// when tc is nil (ClientConfig.GoNet).
func tlsClientOptions(tc *tls.Config) []client.Option {
	return []client.Option{
		client.WithTransHandlerFactory(gonet.NewCliTransHandlerFactory()),
		client.WithDialer(&tlsDialer{cfg: tc}),
	}
}

// tlsDialer dials TLS connections for Kitex's gonet client (plain TCP
// when cfg is nil).
type tlsDialer struct{ cfg *tls.Config }

var _ remote.Dialer = (*tlsDialer)(nil)

func (d *tlsDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var c net.Conn
	var err error
	if d.cfg == nil {
		c, err = (&net.Dialer{}).DialContext(ctx, network, address)
	} else {
		c, err = (&tls.Dialer{NetDialer: &net.Dialer{}, Config: d.cfg}).DialContext(ctx, network, address)
	}
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
