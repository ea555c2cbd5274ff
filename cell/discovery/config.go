package discovery

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// Config configures a Discovery. Zero fields take the defaults of
// DefaultConfig; Meta has none and must be valid.
type Config struct {
	// BindAddr is the host:port of the gossip listener, UDP and TCP on one
	// port (with TLS, TCP alone); the host is an IP address. Port 0 picks
	// a free port, which Local().Addr then tells. Default
	// "127.0.0.1:7946".
	BindAddr string
	// AdvertiseAddr is the IP:port other members are told to use. Default:
	// the bound address (a private address of this host when BindAddr's
	// host is 0.0.0.0).
	AdvertiseAddr string
	// Join holds the gossip addresses (host:port) of any members. Discovery
	// joins them in the background until it knows another member, so
	// replicas may start in any order; see JoinRetryInterval.
	Join []string
	// Meta is what this replica gossips about itself.
	Meta Meta
	// Logger receives Discovery's and memberlist's logs. Default
	// slog.Default().
	Logger *slog.Logger
	// TLS, if set, carries all of the gossip, packets and streams, over
	// mutually authenticated TLS on BindAddr's TCP port, so that only
	// holders of a certificate of the cell's CA can join, be heard or
	// listen (see the package doc). nil: memberlist's own transport, UDP
	// packets and TCP streams in the clear. A TLS member and a plaintext
	// one never understand each other.
	TLS *TLSConfig

	// ProbeInterval is how often this node probes one other member, in
	// turn. Default 200 ms (memberlist's LAN default is 1 s).
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct probe waits for its answer before
	// memberlist asks other members to probe. Default 100 ms (LAN: 500 ms).
	ProbeTimeout time.Duration
	// SuspicionMult scales how long a member stays suspect before it is
	// declared dead: SuspicionMult × max(1, log10(members)) ×
	// ProbeInterval, 400 ms by default (above 2, memberlist starts from 6
	// times that and shortens it as other members confirm the suspicion).
	// Default 2 (LAN: 4).
	SuspicionMult int
	// GossipInterval is how often news is gossiped to a few members.
	// Default 200 ms, as memberlist's LAN default: the gossip timer fires
	// whether or not there is news, and at 50 ms it alone woke an idle
	// replica 20 times a second. Death is found by the probes; gossip
	// only spreads it.
	GossipInterval time.Duration

	// JoinRetryInterval is the wait after the first failed join; it
	// doubles after each further failure up to JoinRetryMax. Default
	// 250 ms.
	JoinRetryInterval time.Duration
	// JoinRetryMax bounds the wait between join attempts. Default 5 s.
	JoinRetryMax time.Duration
	// RejoinInterval: once joined, Discovery joins Join again this often,
	// so that members that lost each other (memberlist forgets a dead
	// member 30 s after its death, and never probes it again) find each
	// other when they come back, even with new names. Negative: never
	// after the first success. Default 30 s.
	RejoinInterval time.Duration

	// ReconnectInterval: this often, one member this node has dead (not
	// left), in turn, is joined again if its gossip address accepts a
	// connection. memberlist never probes a dead member, so two sides of
	// a partition that each declared the other dead would meet again only
	// at the next rejoin. Negative: never. Default 1 s.
	ReconnectInterval time.Duration

	// DeadRetention is how long Members keeps listing a member after it
	// died or left. Default 10 minutes.
	DeadRetention time.Duration
}

// TLSConfig is the TLS of the gossip: both configurations are required,
// and used for every handshake (so ones whose callbacks load renewed
// certificates, as rpc/tlsconf's do, rotate them without a restart). For
// a replica with a tlsconf.Reloader r:
//
//	&TLSConfig{Server: r.ServerConfig(tlsconf.RequireCert, false), Client: r.ClientConfig()}
type TLSConfig struct {
	// Server configures the handshakes of accepted connections. It should
	// require the caller's certificate and verify it against the cell's
	// CA; a caller without a verified certificate is refused whatever it
	// says.
	Server *tls.Config
	// Client configures the handshakes of dialed connections: the
	// certificate to present, and the verification of the server's
	// against the cell's CA.
	Client *tls.Config
}

// DefaultConfig returns the defaults: BindAddr 127.0.0.1:7946, probes
// every 200 ms with a 100 ms timeout, SuspicionMult 2, gossip every 200 ms,
// joins retried after 250 ms doubling to 5 s, rejoins every 30 s, a dead
// member tried again every second, dead members kept 10 minutes. With these, a crashed member is seen dead in
// under a second on a LAN; memberlist's LAN defaults take 5 to 6 s.
func DefaultConfig() Config {
	return Config{
		BindAddr:          "127.0.0.1:7946",
		ProbeInterval:     200 * time.Millisecond,
		ProbeTimeout:      100 * time.Millisecond,
		SuspicionMult:     2,
		GossipInterval:    200 * time.Millisecond,
		JoinRetryInterval: 250 * time.Millisecond,
		JoinRetryMax:      5 * time.Second,
		RejoinInterval:    30 * time.Second,
		ReconnectInterval: time.Second,
		DeadRetention:     10 * time.Minute,
	}
}

// withDefaults returns c with its zero fields set, or an error for a field
// that is not valid.
func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	c.BindAddr = cmp.Or(c.BindAddr, d.BindAddr)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.ProbeInterval = cmp.Or(c.ProbeInterval, d.ProbeInterval)
	c.ProbeTimeout = cmp.Or(c.ProbeTimeout, d.ProbeTimeout)
	c.SuspicionMult = cmp.Or(c.SuspicionMult, d.SuspicionMult)
	c.GossipInterval = cmp.Or(c.GossipInterval, d.GossipInterval)
	c.JoinRetryInterval = cmp.Or(c.JoinRetryInterval, d.JoinRetryInterval)
	c.JoinRetryMax = cmp.Or(c.JoinRetryMax, d.JoinRetryMax)
	c.RejoinInterval = cmp.Or(c.RejoinInterval, d.RejoinInterval)
	c.ReconnectInterval = cmp.Or(c.ReconnectInterval, d.ReconnectInterval)
	c.DeadRetention = cmp.Or(c.DeadRetention, d.DeadRetention)
	return c, c.validate()
}

// cmpOr is cmp.Or for types that are comparable but not ordered.
func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func (c Config) validate() error {
	if err := c.Meta.validate(); err != nil {
		return err
	}
	if _, _, err := splitAddr(c.BindAddr, true); err != nil {
		return fmt.Errorf("discovery: BindAddr: %w", err)
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitAddr(c.AdvertiseAddr, false); err != nil {
			return fmt.Errorf("discovery: AdvertiseAddr: %w", err)
		}
	}
	if c.TLS != nil && (c.TLS.Server == nil || c.TLS.Client == nil) {
		return errors.New("discovery: TLS needs both its Server and its Client configuration")
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"ProbeInterval", c.ProbeInterval}, {"ProbeTimeout", c.ProbeTimeout},
		{"GossipInterval", c.GossipInterval}, {"JoinRetryInterval", c.JoinRetryInterval},
		{"JoinRetryMax", c.JoinRetryMax}, {"DeadRetention", c.DeadRetention},
	} {
		if f.d < 0 {
			return fmt.Errorf("discovery: %s is negative (%v)", f.name, f.d)
		}
	}
	if c.SuspicionMult < 0 {
		return fmt.Errorf("discovery: SuspicionMult is negative (%d)", c.SuspicionMult)
	}
	if c.ProbeTimeout > c.ProbeInterval {
		return fmt.Errorf("discovery: ProbeTimeout %v is longer than ProbeInterval %v", c.ProbeTimeout, c.ProbeInterval)
	}
	return nil
}

// splitAddr splits an IP:port address; port 0 only if zeroPort.
func splitAddr(addr string, zeroPort bool) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return "", 0, fmt.Errorf("%q: host is not an IP address", addr)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || (p == 0 && !zeroPort) {
		return "", 0, fmt.Errorf("%q: bad port", addr)
	}
	return host, int(p), nil
}

// memberlist returns the memberlist configuration of c, for a node called
// name whose delegates are d and whose log goes to w. c is valid.
func (c Config) memberlist(name string, d *delegate, w *logWriter) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = name
	mc.BindAddr, mc.BindPort, _ = splitAddr(c.BindAddr, true)
	mc.AdvertisePort = mc.BindPort
	if c.AdvertiseAddr != "" {
		mc.AdvertiseAddr, mc.AdvertisePort, _ = splitAddr(c.AdvertiseAddr, false)
	}
	mc.ProbeInterval, mc.ProbeTimeout = c.ProbeInterval, c.ProbeTimeout
	mc.SuspicionMult, mc.GossipInterval = c.SuspicionMult, c.GossipInterval
	mc.Delegate, mc.Events, mc.Alive, mc.Merge, mc.Conflict, mc.Ping = d, d, d, d, d, d
	mc.Logger = log.New(w, "", 0)
	return mc
}

// suspicionBound returns how long memberlist can keep a member of a cell
// of n members suspect before it declares it dead (its suspicionTimeout
// times SuspicionMaxTimeoutMult), plus a probe interval.
func suspicionBound(mc *memberlist.Config) func(n int) time.Duration {
	return func(n int) time.Duration {
		scale := math.Max(1, math.Log10(float64(max(n, 1))))
		mult := float64(mc.SuspicionMaxTimeoutMult * mc.SuspicionMult)
		return time.Duration(mult*scale*float64(mc.ProbeInterval)) + mc.ProbeInterval
	}
}
