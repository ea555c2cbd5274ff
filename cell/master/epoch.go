package master

import "github.com/chubbygo/chubby/replica/vr"

// Epoch returns the master epoch of the primary of view: view + 1.
//
// Epochs follow views because a view has at most one primary and views
// only grow and are kept on disk, so every new master's epoch is higher
// than any earlier master's, across failovers and restarts alike. The + 1
// is because view 0 has a master too, while epoch 0 means "no epoch": a
// client that has heard of none sends 0 (or nothing), which is never
// STALE_EPOCH, and a replica that is not serving reports 0 (cell's
// Server.Epoch).
func Epoch(view uint64) int64 { return int64(view) + 1 }

// EpochParts splits a master epoch into the two numbers it packs: the
// epoch of the cell's configuration (which voter changes raise) and the
// view within it (which view changes raise), as vr numbers views. ok is
// false for an epoch that names no master (≤ 0).
func EpochParts(epoch int64) (configEpoch, view uint64, ok bool) {
	if epoch <= 0 {
		return 0, 0, false
	}
	v := uint64(epoch - 1)
	return vr.EpochOf(v), vr.ViewCounter(v), true
}
