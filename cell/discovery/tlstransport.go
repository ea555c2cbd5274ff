package discovery

// The gossip's TLS transport: a memberlist.NodeAwareTransport that carries
// both memberlist's packets and its streams over mutually authenticated
// TLS connections on one TCP port.
//
// # Why TLS, and not memberlist's keyring
//
// memberlist can encrypt its messages with a keyring of shared AES keys.
// A shared symmetric key says that the sender knows the key, not who the
// sender is: every holder can pass for every other, a leaked key admits
// anyone until all replicas are rekeyed, and nothing ties a gossiping
// node to the replica it claims to be. What admits a replica to the cell
// is already a certificate the cell's CA signed, on the peer port; the
// gossip now asks for the same proof. Every connection, both ways, is TLS
// (the configurations of rpc/tlsconf: TLS 1.3, the caller's certificate
// required and verified against the cell's CA, the server's verified by
// the caller), so a node without such a certificate cannot join, cannot
// send anything that is acted on (nothing read from a connection reaches
// memberlist before its handshake has verified the caller) and cannot
// read the gossip. Certificates renewed on disk are used from the next
// handshake on: the transport uses the *tls.Config it is given for every
// handshake, and tlsconf's callbacks pick the current files.
//
// # Framing
//
// TLS needs a connection, so packets ride TCP too, on the same port as
// the streams (UDP is not used). After the handshake the dialer sends one
// byte, the connection's kind:
//
//   - kindStream: a stream, handed as it is to memberlist (StreamCh, or
//     returned by DialTimeout), which speaks its own protocol on it;
//   - kindPacket: a packet connection, on which the dialer sends packets,
//     each as a 4-byte big-endian length (1 to maxPacket, 64 KiB, as
//     memberlist's UDP buffer) and that many bytes. The acceptor sends
//     nothing back; a length out of bounds closes the connection.
//
// A kind byte that is neither closes the connection. Each member dials
// one packet connection to each address it sends packets to, and keeps it
// (the pool, at most maxDests addresses) until it has sent nothing on it
// for idleTimeout; the acceptor closes one on which nothing came for
// twice that. Accepted connections are at most maxConns at once (more are
// closed at once) and their handshake and kind byte must come within
// handshakeTimeout.
//
// # Packets over TCP
//
// memberlist treats packets as unreliable, and they stay so: WriteTo
// queues the packet for its destination's sender goroutine and returns
// at once, so memberlist's probe, gossip and packet-handling loops never
// wait on the network (a ping's ack is sent from the loop that reads
// packets). The sender dials on demand (within dialTimeout), writes what
// is queued with a write deadline, and on a write error drops the
// connection and redials once; a packet it cannot send is dropped, as
// UDP would, and so is one that finds its destination's queue full or the
// pool full. After a failed dial, packets to that address are dropped
// without dialing for dialBackoff, so a dead member costs a dial per
// backoff, not per packet. On Linux a packet connection whose sent data
// stays unacknowledged for userTimeout (5 s) fails (TCP_USER_TIMEOUT), so
// one to a host that vanished without closing it does not swallow
// packets until TCP gives up, minutes later. A probe whose ping or ack is lost fails, as
// with UDP, and memberlist goes on as it always does: indirect probes
// through other members (which reach the target over their own packet
// connections) and a TCP fallback ping, which here is a TLS stream.
//
// A received packet's From is the remote address of its connection: the
// dialer's address with an ephemeral port, not its gossip port. That is
// what memberlist needs: it answers a ping at the ping's SourceAddr and
// SourcePort, the prober's advertised address (every ping of memberlist
// v0.7.0 carries them, and indirect pings likewise), and uses From only
// in logs, as the reply address of a ping without a source (never sent
// by this version), and for IP allow-lists (CIDRsAllowed, not set here).
// A packet's Timestamp is when its last byte was read.

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
)

// The kinds of connection, the first byte the dialer sends after the
// handshake.
const (
	kindStream byte = 1
	kindPacket byte = 2
)

// errTransportShutdown is returned by the transport after Shutdown.
var errTransportShutdown = errors.New("discovery: gossip transport shut down")

// transportLimits are the bounds and timeouts of a tlsTransport; tests
// shorten them.
type transportLimits struct {
	maxPacket        int           // bytes of one packet
	maxConns         int           // accepted connections open at once
	maxDests         int           // destinations in the packet pool
	queueLen         int           // packets queued for one destination
	maxBatch         int           // bytes written to a packet connection at once
	handshakeTimeout time.Duration // accepted: handshake and kind byte
	dialTimeout      time.Duration // of a packet connection, handshake included
	writeTimeout     time.Duration // of one write to a packet connection
	userTimeout      time.Duration // sent data unacknowledged this long fails a packet connection (Linux)
	dialBackoff      time.Duration // packets dropped without dialing after a failed dial
	idleTimeout      time.Duration // a pooled connection unused this long is closed
	logEvery         time.Duration // refusals are logged at most this often
}

func defaultLimits() transportLimits {
	return transportLimits{
		maxPacket:        64 << 10,
		maxConns:         1024,
		maxDests:         256,
		queueLen:         128,
		maxBatch:         256 << 10,
		handshakeTimeout: 5 * time.Second,
		dialTimeout:      time.Second,
		writeTimeout:     time.Second,
		userTimeout:      5 * time.Second,
		dialBackoff:      100 * time.Millisecond,
		idleTimeout:      30 * time.Second,
		logEvery:         time.Second,
	}
}

// transportStats counts what the transport refused or dropped.
type transportStats struct {
	// refused counts accepted connections closed before anything read on
	// them was used: a failed handshake (no certificate, one the CA did
	// not sign, not TLS at all, none within handshakeTimeout), a bad kind
	// byte, too many connections.
	refused atomic.Int64
	// abandoned counts accepted connections whose caller closed them
	// before its kind byte (a member shutting down mid-dial, a port
	// check): not refused, and logged only at debug level.
	abandoned atomic.Int64
	// badFrames counts packet connections closed for a length out of
	// bounds.
	badFrames atomic.Int64
	// dropped counts outgoing packets not sent.
	dropped atomic.Int64
}

// tlsTransport is the gossip's TLS transport; see the top of this file.
type tlsTransport struct {
	server, client *tls.Config
	lim            transportLimits
	log            *slog.Logger
	ln             *net.TCPListener
	packetCh       chan *memberlist.Packet
	streamCh       chan net.Conn
	slots          chan struct{} // one per accepted connection open
	stats          transportStats
	refusals       logLimiter

	ctx    context.Context // done at Shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine of the transport
	once   sync.Once      // of Shutdown

	mu     sync.Mutex
	closed bool
	conns  map[*gossipConn]struct{} // open, accepted and dialed
	pool   map[string]*tlsSender    // by destination address
}

var _ memberlist.NodeAwareTransport = (*tlsTransport)(nil)

// newTLSTransport listens on ip:port (port 0: a free one) and serves.
func newTLSTransport(cfg *TLSConfig, ip string, port int, lim transportLimits, log *slog.Logger) (*tlsTransport, error) {
	addr := &net.TCPAddr{IP: net.ParseIP(ip), Port: port}
	ln, err := net.ListenTCP("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for TLS gossip: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &tlsTransport{
		server: cfg.Server, client: cfg.Client, lim: lim, log: log, ln: ln,
		packetCh: make(chan *memberlist.Packet), streamCh: make(chan net.Conn),
		slots: make(chan struct{}, lim.maxConns), refusals: logLimiter{every: lim.logEvery},
		ctx: ctx, cancel: cancel,
		conns: make(map[*gossipConn]struct{}), pool: make(map[string]*tlsSender),
	}
	t.wg.Add(1)
	go t.accept()
	return t, nil
}

// GetAutoBindPort returns the port listened on: the one picked, when the
// bind port was 0.
func (t *tlsTransport) GetAutoBindPort() int { return t.ln.Addr().(*net.TCPAddr).Port }

// FinalAdvertiseAddr returns ip and port if ip is set; otherwise the bound
// address and port, or a private address of this host when bound to the
// unspecified address, as memberlist's NetTransport does.
func (t *tlsTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		a := net.ParseIP(ip)
		if a == nil {
			return nil, 0, fmt.Errorf("failed to parse advertise address %q", ip)
		}
		if a4 := a.To4(); a4 != nil {
			a = a4
		}
		return a, port, nil
	}
	bound := t.ln.Addr().(*net.TCPAddr).IP
	if !bound.IsUnspecified() {
		return bound, t.GetAutoBindPort(), nil
	}
	private, err := sockaddr.GetPrivateIP()
	if err != nil {
		return nil, 0, fmt.Errorf("failed to get interface addresses: %w", err)
	}
	a := net.ParseIP(private)
	if a == nil {
		return nil, 0, errors.New("no private IP address found, and explicit IP not provided")
	}
	return a, t.GetAutoBindPort(), nil
}

func (t *tlsTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }
func (t *tlsTransport) StreamCh() <-chan net.Conn           { return t.streamCh }

// WriteTo queues b for addr and returns at once; see the top of the file.
// It fails only for a packet that is empty or too big, or after Shutdown:
// a packet that cannot be sent is dropped, as the network drops a
// datagram.
func (t *tlsTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	now := time.Now()
	if len(b) == 0 || len(b) > t.lim.maxPacket {
		return now, fmt.Errorf("discovery: gossip packet of %d bytes; 1 to %d may be sent", len(b), t.lim.maxPacket)
	}
	frame := make([]byte, 4+len(b)) // b is memberlist's: copy it
	binary.BigEndian.PutUint32(frame, uint32(len(b)))
	copy(frame[4:], b)

	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return now, errTransportShutdown
	}
	s := t.pool[addr]
	if s == nil {
		if len(t.pool) >= t.lim.maxDests {
			t.drop(addr, "too many destinations")
			return now, nil
		}
		s = &tlsSender{t: t, addr: addr, queue: make(chan []byte, t.lim.queueLen)}
		t.pool[addr] = s
		t.wg.Add(1)
		go s.run()
	}
	select {
	case s.queue <- frame:
	default:
		t.drop(addr, "queue full")
	}
	return now, nil
}

func (t *tlsTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

// DialTimeout dials a stream to addr, the handshake and kind byte within
// timeout.
func (t *tlsTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := t.dial(addr, kindStream, timeout)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (t *tlsTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

// Shutdown closes the listener and every connection, and returns when
// every goroutine of the transport has returned. Streams memberlist holds
// are closed too: their reads and writes fail.
func (t *tlsTransport) Shutdown() error {
	t.once.Do(func() {
		t.mu.Lock()
		t.closed = true
		conns := make([]*gossipConn, 0, len(t.conns))
		for c := range t.conns {
			conns = append(conns, c)
		}
		t.mu.Unlock()
		t.cancel()
		_ = t.ln.Close()
		for _, c := range conns {
			c.abort()
		}
		t.wg.Wait()
	})
	return nil
}

// dial dials addr, does the handshake and sends kind, all within timeout.
func (t *tlsTransport) dial(addr string, kind byte, timeout time.Duration) (*gossipConn, error) {
	ctx, cancel := context.WithTimeout(t.ctx, timeout)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: t.client}
	if kind == kindPacket { // memberlist puts deadlines on its streams
		d.NetDialer.Control = userTimeout(t.lim.userTimeout)
	}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if t.ctx.Err() != nil {
			return nil, errTransportShutdown
		}
		return nil, err
	}
	c := &gossipConn{Conn: nc.(*tls.Conn), t: t}
	if !t.register(c) {
		c.abort()
		return nil, errTransportShutdown
	}
	deadline, _ := ctx.Deadline()
	_ = c.SetWriteDeadline(deadline)
	if _, err := c.Write([]byte{kind}); err != nil {
		c.abort()
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}

// register records c as open, unless the transport is shut down.
func (t *tlsTransport) register(c *gossipConn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

// accept accepts connections until Shutdown, each served by its own
// goroutine while it holds one of the slots.
func (t *tlsTransport) accept() {
	defer t.wg.Done()
	var delay time.Duration
	for {
		raw, err := t.ln.Accept()
		if err != nil {
			if t.ctx.Err() != nil {
				return
			}
			// Out of file descriptors, say: wait, longer each time.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.log.Error("discovery: accepting a gossip connection", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-t.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		select {
		case t.slots <- struct{}{}:
		default:
			_ = raw.Close()
			t.refuse(raw.RemoteAddr(), "too many connections", nil)
			continue
		}
		c := &gossipConn{Conn: tls.Server(raw, t.server), t: t, accepted: true}
		t.mu.Lock()
		ok := !t.closed
		if ok {
			t.conns[c] = struct{}{}
			t.wg.Add(1)
			go t.serve(c)
		}
		t.mu.Unlock()
		if !ok {
			c.abort()
			return
		}
	}
}

// serve does an accepted connection's handshake, reads its kind and then
// hands the stream to memberlist or reads the packets.
func (t *tlsTransport) serve(c *gossipConn) {
	defer t.wg.Done()
	remote := c.RemoteAddr()
	_ = c.SetDeadline(time.Now().Add(t.lim.handshakeTimeout))
	if err := c.HandshakeContext(t.ctx); err != nil {
		c.abort()
		t.failed(remote, "handshake", err)
		return
	}
	// The Server configuration should require and verify the caller's
	// certificate; hold to it whatever the configuration says.
	if len(c.ConnectionState().VerifiedChains) == 0 {
		c.abort()
		t.refuse(remote, "no verified client certificate", nil)
		return
	}
	var kind [1]byte
	if _, err := io.ReadFull(c, kind[:]); err != nil {
		c.abort()
		t.failed(remote, "no connection kind", err)
		return
	}
	switch kind[0] {
	case kindStream:
		_ = c.SetDeadline(time.Time{}) // memberlist sets its own
		select {
		case t.streamCh <- c:
		case <-t.ctx.Done():
			c.abort()
		}
	case kindPacket:
		t.readPackets(c)
	default:
		c.abort()
		t.refuse(remote, fmt.Sprintf("unknown connection kind %#x", kind[0]), nil)
	}
}

// readPackets reads the packets of an accepted packet connection into
// PacketCh until the connection fails, idles, sends a length out of
// bounds or the transport shuts down; then it closes the connection.
func (t *tlsTransport) readPackets(c *gossipConn) {
	defer c.abort()
	_ = c.SetDeadline(time.Time{}) // the handshake's
	from := c.RemoteAddr()
	var hdr [4]byte
	for {
		_ = c.SetReadDeadline(time.Now().Add(2 * t.lim.idleTimeout))
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			if t.ctx.Err() == nil && !errors.Is(err, io.EOF) {
				t.log.Debug("discovery: gossip packet connection ended", "remote", from, "err", err)
			}
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n == 0 || n > uint32(t.lim.maxPacket) {
			t.stats.badFrames.Add(1)
			t.warn("discovery: closed a gossip packet connection", from, fmt.Sprintf("packet length %d, not 1 to %d", n, t.lim.maxPacket), nil)
			return
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(c, buf); err != nil {
			if t.ctx.Err() == nil {
				t.log.Debug("discovery: gossip packet connection ended within a packet", "remote", from, "err", err)
			}
			return
		}
		p := &memberlist.Packet{Buf: buf, From: from, Timestamp: time.Now()}
		select {
		case t.packetCh <- p:
		case <-t.ctx.Done():
			return
		}
	}
}

// failed counts and logs an accepted connection whose handshake or kind
// byte failed with err: abandoned if the caller went away, else refused.
func (t *tlsTransport) failed(remote net.Addr, reason string, err error) {
	switch {
	case t.ctx.Err() != nil: // Shutdown closed it
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		t.stats.abandoned.Add(1)
		t.log.Debug("discovery: a gossip connection was closed by its caller", "remote", remote, "during", reason, "err", err)
	default:
		t.refuse(remote, reason, err)
	}
}

// refuse counts and logs an accepted connection closed before it was
// used.
func (t *tlsTransport) refuse(remote net.Addr, reason string, err error) {
	t.stats.refused.Add(1)
	t.warn("discovery: refused a gossip connection", remote, reason, err)
}

// warn logs a misbehaving connection, at most once per logEvery; the
// lines left out are counted in the next.
func (t *tlsTransport) warn(msg string, remote net.Addr, reason string, err error) {
	if ok, skipped := t.refusals.allow(time.Now()); ok {
		t.log.Warn(msg, "remote", remote, "reason", reason, "err", err, "unlogged_before", skipped)
	}
}

// drop counts an outgoing packet that is not sent. t.mu may be held.
func (t *tlsTransport) drop(addr, reason string) {
	if n := t.stats.dropped.Add(1); n&(n-1) == 0 { // the 1st, 2nd, 4th, 8th...
		t.log.Debug("discovery: gossip packet dropped", "to", addr, "reason", reason, "dropped", n)
	}
}

// gossipConn is one TLS connection of the transport, accepted or dialed;
// Shutdown closes those still open. It is what memberlist is given for a
// stream: the *tls.Conn, whose Close also forgets it.
type gossipConn struct {
	*tls.Conn
	t        *tlsTransport
	accepted bool // holds one of t.slots
	once     sync.Once
}

// Close closes the connection with a TLS close_notify.
func (c *gossipConn) Close() error {
	err := c.Conn.Close()
	c.forget()
	return err
}

// abort closes the connection at once, without close_notify (which can
// wait up to 5 s for a peer that does not read).
func (c *gossipConn) abort() {
	_ = c.NetConn().Close()
	c.forget()
}

func (c *gossipConn) forget() {
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
		if c.accepted {
			<-c.t.slots
		}
	})
}

// tlsSender sends the packets queued for one destination over one pooled
// packet connection.
type tlsSender struct {
	t     *tlsTransport
	addr  string
	queue chan []byte // frames: length and packet
}

// run sends until the transport shuts down or the sender has been idle
// for idleTimeout.
func (s *tlsSender) run() {
	t := s.t
	defer t.wg.Done()
	var (
		c       *gossipConn
		broken  <-chan struct{} // closed when c's peer closes it
		retryAt time.Time       // no dial before
	)
	defer func() {
		if c != nil {
			c.abort()
		}
	}()
	idle := time.NewTimer(t.lim.idleTimeout)
	defer idle.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-broken:
			c.abort()
			c, broken = nil, nil
		case f := <-s.queue:
			batch := s.batch(f)
			c, broken, retryAt = s.send(c, broken, retryAt, batch)
			idle.Reset(t.lim.idleTimeout)
		case <-idle.C:
			if s.retire() {
				return
			}
			idle.Reset(t.lim.idleTimeout)
		}
	}
}

// batch returns f and the frames queued after it, up to maxBatch bytes,
// as one buffer.
func (s *tlsSender) batch(f []byte) []byte {
	frames, n := [][]byte{f}, len(f)
more:
	for n < s.t.lim.maxBatch {
		select {
		case f := <-s.queue:
			frames, n = append(frames, f), n+len(f)
		default:
			break more
		}
	}
	return slices.Concat(frames...)
}

// send writes batch on c, dialing first if there is no connection; after
// a write error it drops the connection and tries once more on a new one.
// It returns the connection to keep (nil if none).
func (s *tlsSender) send(c *gossipConn, broken <-chan struct{}, retryAt time.Time, batch []byte) (*gossipConn, <-chan struct{}, time.Time) {
	t := s.t
	packets := s.count(batch)
	for attempt := 0; attempt < 2; attempt++ {
		if c == nil {
			if time.Now().Before(retryAt) {
				break
			}
			var err error
			if c, broken, err = s.dial(); err != nil {
				if t.ctx.Err() == nil {
					t.log.Debug("discovery: gossip packet connection failed", "to", s.addr, "err", err)
				}
				retryAt = time.Now().Add(t.lim.dialBackoff)
				break
			}
		}
		_ = c.SetWriteDeadline(time.Now().Add(t.lim.writeTimeout))
		if _, err := c.Write(batch); err == nil {
			return c, broken, retryAt
		} else if t.ctx.Err() == nil {
			t.log.Debug("discovery: gossip packet write failed", "to", s.addr, "err", err)
		}
		c.abort()
		c, broken = nil, nil
	}
	for range packets {
		t.drop(s.addr, "not sent")
	}
	return c, broken, retryAt
}

// count returns the number of frames in batch.
func (s *tlsSender) count(batch []byte) int {
	n := 0
	for len(batch) >= 4 {
		batch = batch[4+binary.BigEndian.Uint32(batch):]
		n++
	}
	return n
}

// dial dials a packet connection to s.addr and starts reading it: the
// acceptor sends nothing, so the read ends when the peer closes it, and
// then broken is closed.
func (s *tlsSender) dial() (*gossipConn, <-chan struct{}, error) {
	t := s.t
	c, err := t.dial(s.addr, kindPacket, t.lim.dialTimeout)
	if err != nil {
		return nil, nil, err
	}
	broken := make(chan struct{})
	t.mu.Lock()
	ok := !t.closed
	if ok {
		t.wg.Add(1)
	}
	t.mu.Unlock()
	if !ok {
		c.abort()
		return nil, nil, errTransportShutdown
	}
	go func() {
		defer t.wg.Done()
		defer close(broken)
		_, _ = io.Copy(io.Discard, c)
	}()
	return c, broken, nil
}

// retire removes an idle sender from the pool, unless a packet was queued
// meanwhile (WriteTo queues with t.mu held, so none is lost).
func (s *tlsSender) retire() bool {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if len(s.queue) > 0 {
		return false
	}
	delete(s.t.pool, s.addr)
	return true
}

// logLimiter lets a line through at most once per every.
type logLimiter struct {
	every time.Duration

	mu      sync.Mutex
	last    time.Time
	skipped int
}

// allow reports whether a line may be logged now and how many were not
// since the last one.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.skipped++
		return false, 0
	}
	skipped := l.skipped
	l.last, l.skipped = now, 0
	return true, skipped
}
