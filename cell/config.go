package cell

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/replica"
	"github.com/chubbygo/chubby/replica/vr"
	"github.com/chubbygo/chubby/rpc"
	"github.com/chubbygo/chubby/rpc/tlsconf"
	"github.com/prometheus/client_golang/prometheus"
)

// Config is one replica's configuration. Zero fields take the defaults of
// DefaultConfig.
type Config struct {
	// ID is this replica's id in the cell's configuration (1, 2, ...).
	// Default 1.
	ID uint64
	// Peers is the configuration of a new cell: every replica (this one
	// included) with its client and peer addresses. Empty: a cell of this
	// replica alone. A replica with state on disk takes its configuration
	// from its log; Peers must then name the same replicas.
	Peers []Peer
	// PeerListen is the address of replica-to-replica traffic. Default:
	// this replica's PeerAddr in Peers. Unused by a one-replica cell.
	PeerListen string
	// PeerListener, if set, is used instead of listening on PeerListen.
	PeerListener net.Listener
	// Replication tunes the view-change protocol (timers, limits); zero
	// fields take vr.DefaultConfig's (its HeartbeatInterval,
	// LeaseDuration, ViewChangeTimeout, and SuspectAfter before a silent
	// master's port is dialled).
	Replication vr.Config
	// Cell is the cell's name. Default "local".
	Cell string
	// Listen is the client RPC address (host:port). Default 127.0.0.1:7000.
	Listen string
	// Listener, if set, is used instead of listening on Listen (tests use
	// port 0 this way).
	Listener net.Listener
	// Advertise is the address clients are told to use (GetMaster, NOT_MASTER
	// hints). Default: the listening address.
	Advertise string
	// HTTPListen serves /metrics, /status (and / redirects there) and
	// /healthz (503 with the reason when the replica is no working member:
	// Server.unhealthy). Empty: off.
	HTTPListen string
	// DataDir holds the Badger database. Required unless InMemory.
	DataDir string
	// InMemory keeps the log in memory: nothing survives a restart. Tests only.
	InMemory bool

	// Lease is the session lease. Default master.DefaultLeaseConfig's
	// (Chubby's).
	Lease time.Duration
	// KeepAliveMargin: a parked KeepAlive is answered this long before the
	// earliest lease in it would run out. Default Lease/4, at least
	// min(500 ms, Lease/2) (defaultKeepAliveMargin): the reply and the
	// client's next KeepAlive must cross a loaded machine within it, and
	// the client is told about 4% less than the master holds (clock drift;
	// see package cell/master), which comes out of it too; one KeepAlive
	// per session about every Lease − KeepAliveMargin.
	KeepAliveMargin time.Duration

	// Limits bounds the replicated state (among them the sessions of one
	// principal: chubbyd --max-sessions-per-principal); every replica of a
	// cell must use the same. Default fs.DefaultLimits().
	Limits *fs.Limits
	// MaxConnections bounds client connections (this machine allows 20,000
	// open files per process). Default 15,000.
	MaxConnections int
	// MaxConnectionsPerIP bounds the client connections of one remote
	// address, and ConnectionLimits are exceptions for named prefixes
	// (proxies), on top of rpc.DefaultConnLimits (loopback: no
	// per-address cap). Default rpc.DefaultMaxConnectionsPerIP.
	MaxConnectionsPerIP int
	ConnectionLimits    []rpc.ConnLimit
	// FirstCallTimeout closes a client connection that has carried no
	// call this long after it was accepted; ConnIdleTimeout one that
	// carries no call and has received nothing for that long (a parked
	// KeepAlive or Acquire is a call). Defaults rpc.DefaultFirstCallTimeout
	// and rpc.DefaultMaxConnIdleTime.
	FirstCallTimeout time.Duration
	ConnIdleTimeout  time.Duration
	// MaxParkedAcquires bounds Acquire calls parked at once; past it
	// Acquire fails with UNAVAILABLE. Default 50,000.
	MaxParkedAcquires int
	// MaxParkedKeepAlives bounds KeepAlive calls parked at once. Default
	// master.DefaultLeaseConfig's MaxParked.
	MaxParkedKeepAlives int
	// SnapshotEvery takes a snapshot after this many log entries. Default
	// replica.DefaultReplicatedConfig's.
	SnapshotEvery uint64
	// EventTrimInterval: the master forgets the events clients have
	// acknowledged (one TrimEvents command for every session whose ack
	// moved) at most this often. Acks are not logged one by one; until a
	// trim, a new master may send acknowledged events again, which clients
	// drop by their numbers. Default 1 s.
	EventTrimInterval time.Duration

	// MaxCachedPerSession and MaxCachedPerCell bound the master's table of
	// which sessions cache which nodes: past either, a read is
	// served uncachable rather than failing. Defaults
	// DefaultMaxCachedPerSession and DefaultMaxCachedPerCell.
	MaxCachedPerSession int
	MaxCachedPerCell    int

	// Discovery and self-assembly (membership.go, autopilot.go). Gossip is
	// on when Join, GossipListen or BootstrapExpect is set: replicas find
	// each other with memberlist, a new replica joins as a learner, and
	// the master grows the cell to TargetSize and replaces dead voters.
	//
	// Join names the gossip addresses of any members. GossipListen is this
	// replica's gossip address; default: the client listen host, port + 200.
	Join         []string
	GossipListen string
	// BootstrapExpect, for a replica with nothing on disk: 1, it starts a
	// new cell of itself and grows; N > 1, it waits until N replicas with
	// nothing on disk find each other and they form the cell; 0, it waits
	// to be added to an existing cell.
	BootstrapExpect int
	// TargetSize is how many voters the master grows the cell to: 1, 3 or
	// 5. Default 5.
	TargetSize int
	// DeadAfter: a voter memberlist reports dead, with no replica traffic
	// either, for this long is replaced by a healthy spare. Default 30 s.
	DeadAfter time.Duration
	// PromoteAfter: a learner caught up and in contact for this long is
	// promoted to voter. Default 3 s.
	PromoteAfter time.Duration

	// TLS, if set, secures all three of the replica's links with mutual
	// TLS from its files: the client port (callers may come without a
	// certificate, as "anonymous"; their certificate's common name is
	// their principal, verified against the client CA), the peer port and
	// the gossip channel (a certificate of the cell's CA is required both
	// ways). nil: everything in plaintext, every caller anonymous — a
	// development cell, as status and the status page say.
	TLS *tlsconf.Reloader
	// Admin, if set, is the cell's first administrator: the first master
	// to serve a cell whose root has no ACL names creates /acl/admin
	// listing it and gives "/" and /acl that ACL for all three rights
	// (fsm.InitACL). Once the cell has ACLs it changes nothing. Empty: no
	// ACLs until somebody sets them (every node open to every caller).
	Admin string

	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil: a private registry, served on HTTPListen
	// Now is the clock. Default time.Now. Tests only.
	Now func() time.Time

	join bool // start with an empty log, to be added (New decides)
}

// gossip reports whether discovery is on.
func (c *Config) gossip() bool {
	return len(c.Join) > 0 || c.GossipListen != "" || c.BootstrapExpect > 0
}

// DefaultConfig returns the defaults: ID 1, Cell "local", Listen
// 127.0.0.1:7000, Lease master.DefaultLeaseConfig's, KeepAliveMargin
// derived from the Lease (see Config.KeepAliveMargin), Limits
// fs.DefaultLimits(), MaxConnections 15,000, MaxConnectionsPerIP
// rpc.DefaultMaxConnectionsPerIP, FirstCallTimeout
// rpc.DefaultFirstCallTimeout, ConnIdleTimeout rpc.DefaultMaxConnIdleTime,
// MaxParkedAcquires 50,000, MaxParkedKeepAlives master.DefaultLeaseConfig's
// MaxParked, SnapshotEvery replica.DefaultReplicatedConfig's,
// EventTrimInterval 1 s, MaxCachedPerSession DefaultMaxCachedPerSession,
// MaxCachedPerCell DefaultMaxCachedPerCell, TargetSize 5, DeadAfter 30 s,
// PromoteAfter 3 s, Replication vr.DefaultConfig(), Logger slog.Default(),
// Now time.Now.
// Peers (a cell of this replica alone), PeerListen (this replica's
// PeerAddr) and Advertise (the listening address) are filled in by New;
// DataDir has no default.
//
// New gives each zero field its value here (MaxCachedPerSession,
// MaxCachedPerCell, DeadAfter and PromoteAfter also when negative; Listen only without a Listener; a
// zero KeepAliveMargin is derived from the Lease given).
func DefaultConfig() Config {
	lease := master.DefaultLeaseConfig().Lease
	l := fs.DefaultLimits()
	return Config{
		ID:                  1,
		TargetSize:          5,
		DeadAfter:           30 * time.Second,
		PromoteAfter:        3 * time.Second,
		Replication:         vr.DefaultConfig(),
		Cell:                "local",
		Listen:              "127.0.0.1:7000",
		Lease:               lease,
		KeepAliveMargin:     defaultKeepAliveMargin(lease),
		Limits:              &l,
		MaxConnections:      15000,
		MaxConnectionsPerIP: rpc.DefaultMaxConnectionsPerIP,
		FirstCallTimeout:    rpc.DefaultFirstCallTimeout,
		ConnIdleTimeout:     rpc.DefaultMaxConnIdleTime,
		MaxParkedAcquires:   50000,
		MaxParkedKeepAlives: master.DefaultLeaseConfig().MaxParked,
		SnapshotEvery:       replica.DefaultReplicatedConfig().SnapshotEvery,
		EventTrimInterval:   time.Second,
		MaxCachedPerSession: DefaultMaxCachedPerSession,
		MaxCachedPerCell:    DefaultMaxCachedPerCell,
		Logger:              slog.Default(),
		Now:                 time.Now,
	}
}

// defaultKeepAliveMargin is the KeepAliveMargin of a lease: a quarter of
// it, but at least half a second (or half a short lease): the reply and
// the client's next KeepAlive must cross a loaded machine within it.
func defaultKeepAliveMargin(lease time.Duration) time.Duration {
	return max(lease/4, min(500*time.Millisecond, lease/2))
}

func (c *Config) setDefaults() error {
	d := DefaultConfig()
	if c.ID == 0 {
		c.ID = d.ID
	}
	if c.TargetSize == 0 {
		c.TargetSize = d.TargetSize
	}
	if c.TargetSize != 1 && c.TargetSize != 3 && c.TargetSize != 5 {
		return fmt.Errorf("target size %d: 1, 3 or 5", c.TargetSize)
	}
	if c.Admin != "" {
		if err := fs.ValidPrincipal(c.Admin); err != nil {
			return fmt.Errorf("admin: %w", err)
		}
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = d.DeadAfter
	}
	if c.PromoteAfter <= 0 {
		c.PromoteAfter = d.PromoteAfter
	}
	if c.BootstrapExpect < 0 || c.BootstrapExpect > vr.MaxMembers {
		return fmt.Errorf("bootstrap-expect %d outside 0..%d", c.BootstrapExpect, vr.MaxMembers)
	}
	if c.gossip() && len(c.Peers) > 0 {
		return errors.New("a cell is either discovered by gossip (join, bootstrap-expect) or given as a static peer list, not both")
	}
	if err := validatePeers(c.ID, c.Peers); err != nil {
		return err
	}
	if c.Cell == "" {
		c.Cell = d.Cell
	}
	if c.Listen == "" && c.Listener == nil {
		c.Listen = d.Listen
	}
	if c.MaxCachedPerSession <= 0 {
		c.MaxCachedPerSession = d.MaxCachedPerSession
	}
	if c.MaxCachedPerCell <= 0 {
		c.MaxCachedPerCell = d.MaxCachedPerCell
	}
	if c.Lease == 0 {
		c.Lease = d.Lease
	}
	if c.Lease < 200*time.Millisecond || c.Lease > 10*time.Minute {
		return fmt.Errorf("lease %v outside [200ms, 10m]", c.Lease)
	}
	if c.KeepAliveMargin == 0 {
		c.KeepAliveMargin = defaultKeepAliveMargin(c.Lease)
	}
	if c.KeepAliveMargin <= 0 || c.KeepAliveMargin >= c.Lease {
		return fmt.Errorf("keep-alive margin %v must be in (0, lease %v)", c.KeepAliveMargin, c.Lease)
	}
	if c.Limits == nil {
		c.Limits = d.Limits
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = d.MaxConnections
	}
	if c.MaxConnectionsPerIP == 0 {
		c.MaxConnectionsPerIP = d.MaxConnectionsPerIP
	}
	if c.FirstCallTimeout == 0 {
		c.FirstCallTimeout = d.FirstCallTimeout
	}
	if c.ConnIdleTimeout == 0 {
		c.ConnIdleTimeout = d.ConnIdleTimeout
	}
	if c.MaxConnections < 0 || c.MaxConnectionsPerIP < 0 || c.FirstCallTimeout < 0 || c.ConnIdleTimeout < 0 {
		return fmt.Errorf("negative connection limit (max %d, per address %d, first call %v, idle %v)",
			c.MaxConnections, c.MaxConnectionsPerIP, c.FirstCallTimeout, c.ConnIdleTimeout)
	}
	if c.MaxParkedAcquires == 0 {
		c.MaxParkedAcquires = d.MaxParkedAcquires
	}
	if c.MaxParkedKeepAlives == 0 {
		c.MaxParkedKeepAlives = d.MaxParkedKeepAlives
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = d.SnapshotEvery
	}
	if c.EventTrimInterval == 0 {
		c.EventTrimInterval = d.EventTrimInterval
	}
	if c.EventTrimInterval < time.Millisecond || c.EventTrimInterval > time.Minute {
		return fmt.Errorf("event trim interval %v outside [1ms, 1m]", c.EventTrimInterval)
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	if c.Now == nil {
		c.Now = d.Now
	}
	if c.DataDir == "" && !c.InMemory {
		return errors.New("a data directory is required")
	}
	return nil
}

// Peer is one replica of a cell's configuration.
type Peer struct {
	ID       uint64
	Addr     string // client RPC address: what NOT_MASTER hints name
	PeerAddr string // replica-to-replica address
}

// validatePeers checks a configuration: ids distinct and > 0, addresses
// host:port, and self among them.
func validatePeers(self uint64, ps []Peer) error {
	if len(ps) == 0 {
		return nil
	}
	if len(ps) > vr.MaxMembers {
		return fmt.Errorf("%d replicas, at most %d", len(ps), vr.MaxMembers)
	}
	seen := map[uint64]bool{}
	found := false
	for _, p := range ps {
		if p.ID == 0 || seen[p.ID] {
			return fmt.Errorf("replica ids must be distinct and > 0 (got %d twice or 0)", p.ID)
		}
		seen[p.ID] = true
		for _, a := range []string{p.Addr, p.PeerAddr} {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return fmt.Errorf("replica %d: address %q: %w", p.ID, a, err)
			}
		}
		found = found || p.ID == self
	}
	if !found {
		return fmt.Errorf("this replica's id %d is not in the configuration", self)
	}
	return nil
}
