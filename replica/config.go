package replica

import (
	"log/slog"
	"time"

	"github.com/chubbygo/chubby/replica/vr"
)

// DefaultDriverConfig returns the defaults of DriverConfig: SnapshotEvery
// 50,000 entries, SnapshotRetry 1 s, Logger slog.Default(), SnapshotWindow
// 8 chunks, SnapshotResend 500 ms, SnapshotAbandon 30 s. ID and the
// callbacks have none. NewDriver gives each zero field its value here
// (the durations and the window also when negative).
func DefaultDriverConfig() DriverConfig {
	return DriverConfig{
		SnapshotEvery:   50000,
		SnapshotRetry:   int64(snapshotRetry),
		Logger:          slog.Default(),
		SnapshotWindow:  8,
		SnapshotResend:  int64(500 * time.Millisecond),
		SnapshotAbandon: int64(30 * time.Second),
	}
}

// DefaultReplicatedConfig returns the defaults of ReplicatedConfig: Core
// vr.DefaultConfig(), TickInterval 50 ms, SnapshotEvery DefaultDriverConfig's,
// MaxQueue 16,384, MaxProposalBatch 1024, Logger slog.Default().
// ID, Members and the callbacks have none. StartReplicated gives each zero
// field (TickInterval, MaxQueue and MaxProposalBatch also when negative)
// its value here; zero fields of Core take vr's defaults in the core.
func DefaultReplicatedConfig() ReplicatedConfig {
	return ReplicatedConfig{
		Core:             vr.DefaultConfig(),
		TickInterval:     50 * time.Millisecond,
		SnapshotEvery:    DefaultDriverConfig().SnapshotEvery,
		MaxQueue:         16384,
		MaxProposalBatch: 1024,
		Logger:           slog.Default(),
	}
}
