package master

import (
	"testing"

	"github.com/chubbygo/chubby/replica/vr"
)

func TestRemovalOutcome(t *testing.T) {
	ms := vr.Members{{ID: 1}, {ID: 2}, {ID: 3, Learner: true}}
	without := func(id uint64) vr.Members { return ms.Without(id) }
	for _, tc := range []struct {
		name      string
		info      vr.Info
		id, index uint64
		want      ChangeOutcome
	}{
		{"not committed yet, voter change not in force", vr.Info{Commit: 9, Members: ms, PendingConfig: 10}, 2, 10, ChangePending},
		{"not committed yet, learner change in force", vr.Info{Commit: 9, Members: without(3), Retired: []uint64{3}}, 3, 10, ChangePending},
		{"committed", vr.Info{Commit: 10, Members: without(2), Retired: []uint64{2}}, 2, 10, ChangeCommitted},
		{"committed, later entries too", vr.Info{Commit: 42, Members: without(3), Retired: []uint64{7, 3}}, 3, 10, ChangeCommitted},
		{"another entry committed at its index", vr.Info{Commit: 10, Members: ms}, 2, 10, ChangeLost},
		{"learner change cut, later commits", vr.Info{Commit: 12, Members: ms}, 3, 10, ChangeLost},
		// Seed 4780: the next master's own removal of the same replica,
		// without retiring it, committed at the index.
		{"another removal of it committed, not retiring it", vr.Info{Commit: 10, Members: without(2)}, 2, 10, ChangeLost},
	} {
		if got := RemovalOutcome(tc.info, tc.id, tc.index); got != tc.want {
			t.Errorf("%s: RemovalOutcome = %v, want %v", tc.name, got, tc.want)
		}
	}
}
