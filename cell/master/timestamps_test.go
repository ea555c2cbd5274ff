package master

import (
	"fmt"
	"testing"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Each case is a GetTimestamps call's life at the master: the inputs a
// TimestampsCall takes and the step each returns (tsStep), with a hold of
// 100 for a lapsed master lease.

type tsIn struct {
	in   func(t *TimestampsCall) TimestampsStep
	want string
}

func lease(serving, held bool, now Time) func(*TimestampsCall) TimestampsStep {
	return func(t *TimestampsCall) TimestampsStep { return t.Lease(serving, held, now) }
}
func took(first int64, ok bool) func(*TimestampsCall) TimestampsStep {
	return func(t *TimestampsCall) TimestampsStep { return t.Took(first, ok) }
}
func windowChanged(serving bool) func(*TimestampsCall) TimestampsStep {
	return func(t *TimestampsCall) TimestampsStep { return t.WindowChanged(serving) }
}
func tsGone(err error) func(*TimestampsCall) TimestampsStep {
	return func(t *TimestampsCall) TimestampsStep { return t.Gone(err) }
}
func tsLeaseBack(t *TimestampsCall) TimestampsStep { return t.LeaseBack() }

func tsStep(s TimestampsStep) string {
	return words(s.Do, on(s.Do == TSAwaitLease, fmt.Sprintf("until=%d", s.Until)), on(s.Do == TSReply, fmt.Sprintf("first=%d", s.First)),
		on(s.NotMaster, "not-master"), on(s.Lapsed, "lapsed"), code(s.Err))
}

func TestTimestampsCall(t *testing.T) {
	empty := func(rounds int) []tsIn {
		var in []tsIn
		for range rounds {
			in = append(in, tsIn{lease(true, true, 0), "take"}, tsIn{took(0, false), "await-window"}, tsIn{windowChanged(true), "lease"})
		}
		return in
	}
	cases := []struct {
		name  string
		steps []tsIn
	}{
		{"taken under the lease", []tsIn{
			{lease(true, true, 10), "take"},
			{took(500, true), "reply first=500"},
			{windowChanged(true), "nothing"},
		}},
		{"not the master", []tsIn{
			{lease(false, true, 10), "fail not-master"},
		}},
		{"the window empty: wait for the reservation", []tsIn{
			{lease(true, true, 10), "take"},
			{took(0, false), "await-window"},
			{windowChanged(true), "lease"},
			{lease(true, true, 20), "take"},
			{took(7, true), "reply first=7"},
		}},
		{"mastership lost while the window is awaited", []tsIn{
			{lease(true, true, 10), "take"},
			{took(0, false), "await-window"},
			{tsGone(fs.Errorf(chubby.ErrorCode_NOT_MASTER, "moved")), "fail NOT_MASTER"},
		}},
		{"a lapsed lease comes back within the hold", []tsIn{
			{lease(true, false, 1000), "await-lease until=1100"},
			{tsLeaseBack, "lease"},
			{lease(true, false, 1050), "await-lease until=1100"},
			{tsLeaseBack, "lease"},
			{lease(true, true, 1090), "take"},
			{took(0, false), "await-window"},
			{windowChanged(true), "lease"},
			// A later lapse has a hold of its own.
			{lease(true, false, 2000), "await-lease until=2100"},
			{tsLeaseBack, "lease"},
			{lease(true, true, 2010), "take"},
			{took(3, true), "reply first=3"},
		}},
		{"a lapsed lease that does not come back: nothing handed out", []tsIn{
			{lease(true, false, 1000), "await-lease until=1100"},
			{tsLeaseBack, "lease"},
			{lease(true, false, 1100), "fail lapsed UNAVAILABLE"},
			{tsLeaseBack, "nothing"},
		}},
		{"the oracle cannot reserve", append(empty(MaxOracleRounds-1), []tsIn{
			{lease(true, true, 0), "take"},
			{took(0, false), "await-window"},
			{windowChanged(true), "fail UNAVAILABLE"},
		}...)},
		{"the oracle cannot reserve, and the master moved", append(empty(MaxOracleRounds-1), []tsIn{
			{lease(true, true, 0), "take"},
			{took(0, false), "await-window"},
			{windowChanged(false), "fail not-master"},
		}...)},
		{"inputs out of turn change nothing", []tsIn{
			{took(1, true), "nothing"},
			{windowChanged(true), "nothing"},
			{tsLeaseBack, "nothing"},
			{lease(true, true, 0), "take"},
			{lease(true, true, 0), "nothing"},
			{took(1, true), "reply first=1"},
			{tsGone(fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "late")), "nothing"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := NewTimestampsCall(3, 100)
			if got := tsStep(c.Start()); got != "lease" {
				t.Fatalf("Start: %q", got)
			}
			for i, s := range tc.steps {
				if got := tsStep(s.in(c)); got != s.want {
					t.Fatalf("input %d: %q, want %q", i+1, got, s.want)
				}
			}
		})
	}
}
