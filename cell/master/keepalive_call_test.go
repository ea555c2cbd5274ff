package master

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Each case is a KeepAlive's life at the master after ParseKeepAlive: the
// inputs a KeepAliveCall takes and the step each returns (kaStep), with a
// hold of 100 for a lapsed master lease.

type kaIn struct {
	in   func(k *KeepAliveCall) KeepAliveStep
	want string
}

func registered(wait time.Duration, news bool, err error) func(*KeepAliveCall) KeepAliveStep {
	return func(k *KeepAliveCall) KeepAliveStep { return k.Registered(wait, news, err) }
}
func answered(err error, now Time) func(*KeepAliveCall) KeepAliveStep {
	return func(k *KeepAliveCall) KeepAliveStep { return k.Answered(err, now) }
}
func gone(err error) func(*KeepAliveCall) KeepAliveStep {
	return func(k *KeepAliveCall) KeepAliveStep { return k.Gone(err) }
}
func parkOver(k *KeepAliveCall) KeepAliveStep  { return k.ParkOver() }
func leaseBack(k *KeepAliveCall) KeepAliveStep { return k.LeaseBack() }

func kaStep(s KeepAliveStep) string {
	return words(s.Do, on(s.Do == KAPark, s.Wait.String()), on(s.Do == KAAwaitLease, fmt.Sprintf("until=%d", s.Until)),
		on(s.Abandon, "abandon"), on(s.NotMaster, "not-master"), on(s.Lapsed, "lapsed"), code(s.Err))
}

func TestKeepAliveCall(t *testing.T) {
	cases := []struct {
		name  string
		steps []kaIn
	}{
		{"parked, then answered under the lease", []kaIn{
			{registered(time.Second, false, nil), "park 1s"},
			{parkOver, "answer"},
			{answered(nil, 10), "reply"},
			{parkOver, "nothing"}, // a late wake changes nothing
		}},
		{"news is answered at once", []kaIn{
			{registered(time.Second, true, nil), "answer"},
			{answered(nil, 10), "reply"},
		}},
		{"a session over is answered at once", []kaIn{
			{registered(0, false, nil), "answer"},
		}},
		{"the table is closed: not the master", []kaIn{
			{registered(0, false, ErrNotServing), "fail not-master"},
		}},
		{"too many parked", []kaIn{
			{registered(0, false, ErrTooManyParked), "fail UNAVAILABLE"},
		}},
		{"the caller went away while parked", []kaIn{
			{registered(time.Second, false, nil), "park 1s"},
			{gone(context.Canceled), "fail abandon UNAVAILABLE"},
			{parkOver, "nothing"},
		}},
		{"mastership lost while parked", []kaIn{
			{registered(time.Second, false, nil), "park 1s"},
			{gone(fs.Errorf(chubby.ErrorCode_NOT_MASTER, "moved")), "fail abandon NOT_MASTER"},
		}},
		{"a lapsed lease that comes back within the hold", []kaIn{
			{registered(time.Second, false, nil), "park 1s"},
			{parkOver, "answer"},
			{answered(ErrLeaseLapsed, 1000), "await-lease until=1100"},
			{parkOver, "nothing"}, // a wake meanwhile: the lease wait answers
			{leaseBack, "answer"},
			{answered(ErrLeaseLapsed, 1050), "await-lease until=1100"}, // the hold counts from the first lapse
			{leaseBack, "answer"},
			{answered(nil, 1060), "reply"},
		}},
		{"a lapsed lease that does not come back: nothing extended", []kaIn{
			{registered(0, true, nil), "answer"},
			{answered(ErrLeaseLapsed, 1000), "await-lease until=1100"},
			{leaseBack, "answer"},
			{answered(ErrLeaseLapsed, 1100), "fail abandon lapsed UNAVAILABLE"},
			{leaseBack, "nothing"},
		}},
		{"mastership lost while the lease is awaited", []kaIn{
			{registered(0, true, nil), "answer"},
			{answered(ErrLeaseLapsed, 1000), "await-lease until=1100"},
			{leaseBack, "answer"},
			{answered(ErrNotServing, 1010), "fail abandon not-master"},
		}},
		{"an answer error of another kind", []kaIn{
			{registered(0, true, nil), "answer"},
			{answered(errors.New("disk"), 1000), "fail abandon UNAVAILABLE"},
		}},
		{"inputs out of turn change nothing", []kaIn{
			{registered(time.Second, false, nil), "park 1s"},
			{leaseBack, "nothing"}, // no lease awaited
			{parkOver, "answer"},
			{answered(nil, 5), "reply"},
			{gone(context.Canceled), "nothing"},
			{answered(nil, 6), "nothing"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := NewKeepAliveCall(100)
			for i, s := range tc.steps {
				if got := kaStep(s.in(k)); got != s.want {
					t.Fatalf("input %d: %q, want %q", i+1, got, s.want)
				}
			}
		})
	}
}
