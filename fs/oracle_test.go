package fs

import (
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

func opReserve(upto int64) *fsm.Op {
	return &fsm.Op{ReserveTimestamps: &fsm.ReserveTimestamps{Upto: upto}}
}

// TestReserveTimestamps: the oracle's high-water mark only goes up, is
// refused out of range, belongs to no session, and survives a snapshot.
func TestReserveTimestamps(t *testing.T) {
	h := newHarness(t)
	if got := h.s.TimestampsReserved(); got != 0 {
		t.Fatalf("a new state has %d reserved", got)
	}
	empty := h.s.Snapshot()
	for _, tt := range []struct {
		upto, want int64
	}{{1000, 1000}, {500, 1000}, {1000, 1000}, {MaxTimestamp, MaxTimestamp}} {
		res, _ := h.ok(opReserve(tt.upto))
		if res.GetTimestampsReserved() != tt.want || h.s.TimestampsReserved() != tt.want {
			t.Errorf("reserve %d: result %d, state %d; want %d", tt.upto, res.GetTimestampsReserved(), h.s.TimestampsReserved(), tt.want)
		}
	}
	for _, bad := range []int64{0, -1, MaxTimestamp + 1} {
		h.fail(chubby.ErrorCode_INVALID_ARGUMENT, opReserve(bad))
	}
	sess := h.session()
	if res, _ := h.cmd(&fsm.Command{Session: &sess, Op: opReserve(5)}); res.Err == nil || res.Err.Code != chubby.ErrorCode_INVALID_ARGUMENT {
		t.Errorf("a session's ReserveTimestamps: %v", res.Err)
	}
	r, err := Restore(h.s.Snapshot(), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if r.TimestampsReserved() != MaxTimestamp {
		t.Errorf("restored %d reserved", r.TimestampsReserved())
	}
	if e, err := Restore(empty, DefaultLimits()); err != nil || e.TimestampsReserved() != 0 {
		t.Errorf("a snapshot without reservations: %v, %d", err, e.TimestampsReserved())
	}
}
