package fs

import (
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// MaxTimestamp bounds the timestamp oracle's high-water mark: 2^62, so
// that a mark plus a window never overflows an int64.
const MaxTimestamp = 1 << 62

// reserveTimestamps raises the oracle's high-water mark (see
// fsm.ReserveTimestamps): never down, so replaying or reordering
// reservations cannot lower it.
func (s *State) reserveTimestamps(req *fsm.ReserveTimestamps) *fsm.Result_ {
	if req.Upto < 1 || req.Upto > MaxTimestamp {
		return errResult(Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "timestamps reserved up to %d: want 1..%d", req.Upto, int64(MaxTimestamp)))
	}
	s.tsReserved = max(s.tsReserved, req.Upto)
	r := s.tsReserved
	return &fsm.Result_{TimestampsReserved: &r}
}

// TimestampsReserved is the oracle's high-water mark: every timestamp any
// master handed out is at most this (0: none reserved yet).
func (s *State) TimestampsReserved() int64 { return s.tsReserved }

// nonZero is &v, or nil for 0 (an optional field left unset).
func nonZero(v int64) *int64 {
	if v == 0 {
		return nil
	}
	return &v
}
