package cell

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/prometheus/client_golang/prometheus"
)

// Config is one replica's configuration. Zero fields take the documented
// defaults (see Defaults).
type Config struct {
	// ID names this replica in status output. Default "r1".
	ID string
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
	// HTTPListen serves /metrics, /status and /healthz. Empty: off.
	HTTPListen string
	// DataDir holds the Badger database. Required unless InMemory.
	DataDir string
	// InMemory keeps the log in memory: nothing survives a restart. Tests only.
	InMemory bool

	// Lease is the session lease. Default 12 s (Chubby's).
	Lease time.Duration
	// KeepAliveMargin: a parked KeepAlive is answered this long before the
	// earliest lease in it would run out. Default Lease/6 (2 s for 12 s):
	// long enough for the reply and the client's next KeepAlive to cross
	// a loaded machine, short enough that a session costs one KeepAlive
	// per ~10 s.
	KeepAliveMargin time.Duration

	// Limits bounds the replicated state. Default fs.DefaultLimits().
	Limits *fs.Limits
	// MaxConnections bounds client connections (this machine allows 20,000
	// open files per process). Default 15,000.
	MaxConnections int
	// MaxParkedAcquires bounds Acquire calls parked at once; past it
	// Acquire fails with UNAVAILABLE. Default 50,000.
	MaxParkedAcquires int
	// MaxParkedKeepAlives bounds KeepAlive calls parked at once. Default 20,000.
	MaxParkedKeepAlives int
	// SnapshotEvery takes a snapshot after this many log entries. Default 50,000.
	SnapshotEvery uint64

	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil: a private registry, served on HTTPListen
	// Now is the clock. Default time.Now. Tests only.
	Now func() time.Time
}

func (c *Config) setDefaults() error {
	if c.ID == "" {
		c.ID = "r1"
	}
	if c.Cell == "" {
		c.Cell = "local"
	}
	if c.Listen == "" && c.Listener == nil {
		c.Listen = "127.0.0.1:7000"
	}
	if c.Lease == 0 {
		c.Lease = 12 * time.Second
	}
	if c.Lease < 200*time.Millisecond || c.Lease > 10*time.Minute {
		return fmt.Errorf("lease %v outside [200ms, 10m]", c.Lease)
	}
	if c.KeepAliveMargin == 0 {
		c.KeepAliveMargin = c.Lease / 6
	}
	if c.KeepAliveMargin <= 0 || c.KeepAliveMargin >= c.Lease {
		return fmt.Errorf("keep-alive margin %v must be in (0, lease %v)", c.KeepAliveMargin, c.Lease)
	}
	if c.Limits == nil {
		l := fs.DefaultLimits()
		c.Limits = &l
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = 15000
	}
	if c.MaxParkedAcquires == 0 {
		c.MaxParkedAcquires = 50000
	}
	if c.MaxParkedKeepAlives == 0 {
		c.MaxParkedKeepAlives = 20000
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = 50000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.DataDir == "" && !c.InMemory {
		return errors.New("a data directory is required")
	}
	return nil
}
