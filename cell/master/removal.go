package master

import (
	"slices"

	"github.com/chubbygo/chubby/replica/vr"
)

// ChangeOutcome is what a replica knows of a configuration change it
// proposed.
type ChangeOutcome int

const (
	ChangePending   ChangeOutcome = iota // not known committed (yet)
	ChangeCommitted                      // committed: in the configuration in force
	ChangeLost                           // another entry committed at its index
)

func (o ChangeOutcome) String() string {
	switch o {
	case ChangePending:
		return "pending"
	case ChangeCommitted:
		return "committed"
	case ChangeLost:
		return "lost"
	}
	return "ChangeOutcome(?)"
}

// RemovalOutcome says what info (the proposing replica's log) knows of
// the change at index that takes replica id out, as an operator's removal
// proposes it: id out of the members and retired
// (vr.Configuration.Retired). An operator is told "removed" only once it
// is ChangeCommitted, and that this change did not take only once it is
// ChangeLost. Once the log's commit number has reached index, the entry
// there is final: if the configuration in force lacks id and has it
// retired, the removal committed (a retired replica is never taken back
// under its id, so nothing else takes it out again); otherwise another
// entry committed at that index and the removal is lost for good — the
// new master's autopilot, say, took a dead id out without retiring it,
// and may take it back should it return. Learner changes take effect on
// append, voter changes on commit, so before the commit reaches index
// neither can be told. The cell's RemoveMember and the simulator's
// operator answer by it (the simulator found that autopilot's removal
// answered "removed" when only the members were compared).
func RemovalOutcome(info vr.Info, id, index uint64) ChangeOutcome {
	switch {
	case info.Commit < index:
		return ChangePending
	case !info.Members.Contains(id) && slices.Contains(info.Retired, id):
		return ChangeCommitted
	}
	return ChangeLost
}
