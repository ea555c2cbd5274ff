package master

import "github.com/chubbygo/chubby/replica/vr"

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
// proposes it (id retired: vr.Configuration.Retired). An operator is told
// "removed" only once it is ChangeCommitted, and "nothing changed" only
// once it is ChangeLost. Once the log's commit number has reached index,
// the entry there is final: if the configuration in force lacks id, the
// removal committed; if it still has id, another entry committed at that
// index and the removal is lost for good (a retired replica is never
// taken back under its id, so nothing else puts id back). Learner changes
// take effect on append, voter changes on commit, so before the commit
// reaches index neither can be told. The cell's RemoveMember and the
// simulator's operator answer by it.
func RemovalOutcome(info vr.Info, id, index uint64) ChangeOutcome {
	switch {
	case info.Commit < index:
		return ChangePending
	case info.Members.Contains(id):
		return ChangeLost
	}
	return ChangeCommitted
}
