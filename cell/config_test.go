package cell

import (
	"testing"
	"time"

	"github.com/chubbygo/chubby/fs"
)

// TestDefaultConfig: DefaultConfig holds the documented values, and they
// are what a zero Config is given.
func TestDefaultConfig(t *testing.T) {
	d := DefaultConfig()
	if d.ID != 1 || d.Cell != "local" || d.Listen != "127.0.0.1:7000" || d.Lease != 12*time.Second ||
		d.KeepAliveMargin != 3*time.Second || d.MaxConnections != 15000 || d.MaxParkedAcquires != 50000 ||
		d.MaxParkedKeepAlives != 20000 || d.SnapshotEvery != 50000 || d.EventTrimInterval != time.Second ||
		d.MaxCachedPerSession != 10000 || d.MaxCachedPerCell != 1000000 || *d.Limits != fs.DefaultLimits() ||
		d.Replication.HeartbeatInterval != 100*time.Millisecond || d.Replication.ViewChangeTimeout != 1200*time.Millisecond ||
		d.Replication.LeaseDuration != 240*time.Millisecond || d.Logger == nil || d.Now == nil {
		t.Fatalf("DefaultConfig() = %+v", d)
	}
	c := Config{InMemory: true}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.ID != d.ID || c.Cell != d.Cell || c.Listen != d.Listen || c.Lease != d.Lease ||
		c.KeepAliveMargin != d.KeepAliveMargin || c.MaxConnections != d.MaxConnections ||
		c.MaxParkedAcquires != d.MaxParkedAcquires || c.MaxParkedKeepAlives != d.MaxParkedKeepAlives ||
		c.SnapshotEvery != d.SnapshotEvery || c.EventTrimInterval != d.EventTrimInterval ||
		c.MaxCachedPerSession != d.MaxCachedPerSession || c.MaxCachedPerCell != d.MaxCachedPerCell ||
		*c.Limits != *d.Limits {
		t.Fatalf("a zero Config became %+v, DefaultConfig is %+v", c, d)
	}
	// The client connection limits are rpc's defaults, and negative ones
	// are refused.
	if c.MaxConnectionsPerIP != 1024 || c.FirstCallTimeout != 10*time.Second || c.ConnIdleTimeout != 2*time.Minute ||
		d.MaxConnectionsPerIP != c.MaxConnectionsPerIP || d.FirstCallTimeout != c.FirstCallTimeout || d.ConnIdleTimeout != c.ConnIdleTimeout {
		t.Fatalf("connection limits: zero Config %+v, DefaultConfig %+v", c, d)
	}
	for _, bad := range []Config{
		{InMemory: true, MaxConnectionsPerIP: -1},
		{InMemory: true, FirstCallTimeout: -time.Second},
		{InMemory: true, ConnIdleTimeout: -time.Second},
	} {
		if err := bad.setDefaults(); err == nil {
			t.Errorf("Config %+v accepted", bad)
		}
	}
	// A short lease's margin is half of it, at most 500 ms.
	c = Config{InMemory: true, Lease: 600 * time.Millisecond}
	if err := c.setDefaults(); err != nil || c.KeepAliveMargin != 300*time.Millisecond {
		t.Fatalf("lease 600ms: margin %v, %v", c.KeepAliveMargin, err)
	}
}
