package rpc

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Connection slots.
//
// A server built with ServerOptions guards its connection slots against
// one host taking them all:
//
//   - A cap on the open connections of each remote IP address
//     (ServerConfig.MaxConnectionsPerIP, with per-prefix exceptions in
//     ServerConfig.ConnLimits). A connection over it is closed as it is
//     accepted (with a reset: nothing is read from it, nothing of the
//     server's is spent on it), counted in
//     rpc_server_limit_rejections_total{limit="connections_per_ip"} and
//     logged, rate-limited. On the netpoll transport the check is in the
//     listener (listener_linux.go), before netpoll or Kitex see the
//     connection; on TLS in tlsListener.
//   - Idle timeouts enforced by the server itself
//     (ServerConfig.FirstCallTimeout, MaxConnIdleTime). Kitex's own
//     MaxConnIdleTime does not do this: on netpoll (v0.7.2) it only turns
//     on TCP keepalive with that idle time and probe interval
//     (netpoll's SetIdleTimeout → SetKeepAlive), so a peer whose kernel
//     answers the probes keeps its connection for ever; on gonet (Kitex
//     v0.16.1) it is a read deadline set before waiting for the next
//     request, never shorter than 2 minutes. Here every connection has a
//     timer: it is closed when it has carried no call for FirstCallTimeout
//     since it was accepted, or, once it has carried one, when no call has
//     been running on it and nothing has arrived on it for
//     MaxConnIdleTime (on netpoll, input received and not yet read counts
//     as something arriving). A call in progress, a parked one above all, keeps
//     its connection however long it lasts: the server middleware counts
//     the calls running on each connection.
//
// As with any server-side idle timeout, a request that arrives just as
// the timer closes the connection is lost with it (the caller sees the
// connection close); clients are expected to drop idle connections first
// (the Go client's pool does after DefaultMaxIdleTimeout) and to
// reconnect, as this project's clients do.

// Connection slot defaults.
const (
	// DefaultMaxConnectionsPerIP caps the open connections of one remote
	// address. A Go client holds one connection per call in flight (a
	// parked KeepAlive or Acquire included) plus up to
	// DefaultMaxIdlePerAddress idle ones, so one application holds a few
	// to a few hundred, and a host running several a few hundred more;
	// 1,024 leaves them room, yet one host holds at most 1/15 of the
	// DefaultMaxConnections slots. What needs more — a proxy or NAT gateway
	// through which many clients arrive, a load generator — is given more
	// with ConnLimits.
	DefaultMaxConnectionsPerIP = 1024
	// DefaultFirstCallTimeout closes a connection that has carried no call
	// this long after it was accepted: a client connects to make a call and
	// sends it at once (a TLS handshake first, at most HandshakeTimeout).
	DefaultFirstCallTimeout = 10 * time.Second
	// DefaultMaxConnIdleTime closes a connection that carries no call and
	// has received nothing for this long. It is four times the Go client's
	// pool idle timeout (DefaultMaxIdleTimeout), so a Go client
	// drops an idle connection before the server does.
	DefaultMaxConnIdleTime = 2 * time.Minute
)

// ConnLimit is the per-address connection cap of the addresses in Prefix:
// each address in it may hold up to Max open connections, 0 = no
// per-address cap (only ServerConfig.MaxConnections). For an address in
// several prefixes the longest prefix decides.
type ConnLimit struct {
	Prefix netip.Prefix
	Max    int
}

func (l ConnLimit) String() string { return fmt.Sprintf("%s=%d", l.Prefix, l.Max) }

// DefaultConnLimits are the exceptions every server has unless its
// ServerConfig.ConnLimits names the same prefix: loopback addresses have
// no per-address cap. They are processes of this host — the replicas of a
// dev cell (all five share 127.0.0.1), tests and benchmarks that open
// thousands of connections from one process, a local proxy or sidecar
// through which remote clients arrive — and a cap on them would stop
// those, not an attacker on the network.
func DefaultConnLimits() []ConnLimit {
	return []ConnLimit{
		{Prefix: netip.MustParsePrefix("127.0.0.0/8"), Max: 0},
		{Prefix: netip.MustParsePrefix("::1/128"), Max: 0},
	}
}

// ParseConnLimits parses a comma-separated list of PREFIX=N (a bare
// address is a prefix of that address alone), as chubbyd's
// --connection-limits takes it: "10.1.0.0/16=4096,192.0.2.7=0".
func ParseConnLimits(s string) ([]ConnLimit, error) {
	var out []ConnLimit
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		ps, ns, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("rpc: connection limit %q is not PREFIX=N", item)
		}
		n, err := strconv.Atoi(strings.TrimSpace(ns))
		if err != nil {
			return nil, fmt.Errorf("rpc: connection limit %q: %w", item, err)
		}
		ps = strings.TrimSpace(ps)
		var p netip.Prefix
		if strings.Contains(ps, "/") {
			p, err = netip.ParsePrefix(ps)
		} else {
			var a netip.Addr
			if a, err = netip.ParseAddr(ps); err == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil {
			return nil, fmt.Errorf("rpc: connection limit %q: %w", item, err)
		}
		out = append(out, ConnLimit{Prefix: p, Max: n})
	}
	return out, nil
}

// connRules returns the effective per-prefix caps: DefaultConnLimits with
// the given ones over them, longest prefix first.
func connRules(given []ConnLimit) ([]ConnLimit, error) {
	seen := map[netip.Prefix]bool{}
	var rules []ConnLimit
	for _, l := range given {
		if !l.Prefix.IsValid() {
			return nil, fmt.Errorf("rpc: connection limit with an invalid prefix: %v", l)
		}
		if l.Prefix.Addr().Is4In6() {
			return nil, fmt.Errorf("rpc: connection limit %v: write an IPv4 prefix as one", l)
		}
		if l.Max < 0 {
			return nil, fmt.Errorf("rpc: connection limit %v: negative", l)
		}
		p := l.Prefix.Masked()
		if seen[p] {
			return nil, fmt.Errorf("rpc: connection limit for %v given twice", p)
		}
		seen[p] = true
		rules = append(rules, ConnLimit{Prefix: p, Max: l.Max})
	}
	for _, l := range DefaultConnLimits() {
		if !seen[l.Prefix] {
			rules = append(rules, l)
		}
	}
	slices.SortStableFunc(rules, func(a, b ConnLimit) int { return cmp.Compare(b.Prefix.Bits(), a.Prefix.Bits()) })
	return rules, nil
}

// connGuard keeps one server's connection slots: the per-address counts
// and the idle timers.
type connGuard struct {
	perIP     int         // default per-address cap
	rules     []ConnLimit // exceptions, longest prefix first
	firstCall time.Duration
	idle      time.Duration
	metrics   *serverMetrics // nil without a Registerer
	reporter  *limitReporter
	base      time.Time // of the monotonic times in trackedConn

	mu   sync.Mutex
	open map[netip.Addr]int // open connections by remote address
}

// connIP returns the IP address of a TCP remote address (IPv4 unmapped),
// false for others (Unix sockets), which have no per-address cap.
func connIP(a net.Addr) (netip.Addr, bool) {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}, false
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	return ip.Unmap(), ok
}

// capOf returns the per-address cap of ip, 0 for none.
func (g *connGuard) capOf(ip netip.Addr) int {
	for _, l := range g.rules {
		if l.Prefix.Contains(ip) {
			return l.Max
		}
	}
	return g.perIP
}

// admit takes a slot for a connection from remote, or reports (counted,
// logged rate-limited) and refuses it when its address is at its cap.
// Every admitted connection must be released once it closes.
func (g *connGuard) admit(remote net.Addr) bool {
	ip, ok := connIP(remote)
	if !ok {
		return true
	}
	limit := g.capOf(ip)
	g.mu.Lock()
	n := g.open[ip]
	if limit > 0 && n >= limit {
		g.mu.Unlock()
		g.reporter.reportAddr("connections_per_ip", remote, limit)
		return false
	}
	g.open[ip] = n + 1
	g.mu.Unlock()
	return true
}

// release frees the slot of a connection from remote that admit took.
func (g *connGuard) release(remote net.Addr) {
	ip, ok := connIP(remote)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch n := g.open[ip]; {
	case n > 1:
		g.open[ip] = n - 1
	case n == 1:
		delete(g.open, ip)
	}
}

// openFrom returns the open connections of ip (tests).
func (g *connGuard) openFrom(ip netip.Addr) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open[ip]
}

// now is the monotonic time since g.base.
func (g *connGuard) now() int64 { return int64(time.Since(g.base)) }

// newTracked returns the idle timer of a connection that close closes,
// not started yet.
func (g *connGuard) newTracked(close func() error) *trackedConn {
	return &trackedConn{g: g, close: close}
}

// start starts the timer: the first-call timeout runs from now.
func (c *trackedConn) start() {
	c.last.Store(c.g.now())
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		c.timer = time.AfterFunc(c.g.firstCall, c.check)
	}
}

// trackedConn is the activity of one connection, as its idle timer sees
// it. The transport marks reads (read), the server middleware the calls
// (begin, end); the timer fires when the connection may have been idle
// for its timeout, and closes it or sets itself for the time left.
type trackedConn struct {
	g     *connGuard
	close func() error
	// pending, if set, reports bytes received and not yet read: a request
	// the transport has not dispatched yet (netpoll, on a starved
	// machine) is activity.
	pending func() bool

	calls atomic.Int32 // running now
	used  atomic.Bool  // a call has run
	last  atomic.Int64 // g.now() of the last read, call start or call end

	mu    sync.Mutex
	timer *time.Timer
	done  bool // closed by the timer, or stopped
}

// read records that something arrived on the connection.
func (c *trackedConn) read() { c.last.Store(c.g.now()) }

// begin records that a call started.
func (c *trackedConn) begin() {
	c.calls.Add(1)
	c.used.Store(true)
	c.last.Store(c.g.now())
}

// end records that a call ended. last is stored before the count drops,
// so a timer that sees no call running sees the end.
func (c *trackedConn) end() {
	c.last.Store(c.g.now())
	c.calls.Add(-1)
}

// stop ends the timer of a connection that closed.
func (c *trackedConn) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	if c.timer != nil {
		c.timer.Stop()
	}
}

// check runs when the timer fires.
func (c *trackedConn) check() {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return
	}
	last := c.last.Load()
	if c.calls.Load() > 0 {
		// A call is running (parked, perhaps): look again one idle
		// timeout from now; its end refreshes last.
		c.timer.Reset(c.g.idle)
		c.mu.Unlock()
		return
	}
	limit, reason := c.g.firstCall, "first_call"
	if c.used.Load() {
		limit, reason = c.g.idle, "idle"
	}
	if c.pending != nil && c.pending() {
		c.last.Store(c.g.now())
		c.timer.Reset(limit)
		c.mu.Unlock()
		return
	}
	if left := limit - time.Duration(c.g.now()-last); left > 0 {
		c.timer.Reset(left)
		c.mu.Unlock()
		return
	}
	c.done = true
	c.mu.Unlock()
	if c.g.metrics != nil {
		c.g.metrics.idleClosed.WithLabelValues(reason).Inc()
	}
	// Outside the lock: closing runs the transport's close callbacks,
	// which stop this timer.
	c.close()
}
