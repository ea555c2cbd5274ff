package master

import (
	"fmt"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
)

// KeepAlive is a KeepAlive request as the master takes it in: its
// sessions, in order, with what each client acknowledged.
type KeepAlive struct {
	IDs []chubby.SessionID
	// Acks are the events each client received (acked_event); InvAcks the
	// invalidations it applied (acked_invalidation, naming its epoch).
	Acks, InvAcks []int64
}

// ParseKeepAlive checks a KeepAlive against the master epoch now and
// takes in its sessions. A request that names an older epoch is refused
// STALE_EPOCH with this one: its client must learn that the master changed
// (and flush what it caches) before this master extends its leases. A
// request must carry 1..MAX_SESSIONS_PER_KEEPALIVE sessions, none absent,
// none twice, none with a negative acked_event (INVALID_ARGUMENT). The
// cell's handler and the simulator's master both take KeepAlives in here.
func ParseKeepAlive(req *chubby.KeepAliveRequest, epoch int64) (KeepAlive, *chubby.ChubbyError) {
	if req == nil {
		return KeepAlive{}, fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "request has no body")
	}
	if e := req.GetEpoch(); e > 0 && e < epoch {
		return KeepAlive{}, &chubby.ChubbyError{Code: chubby.ErrorCode_STALE_EPOCH, Epoch: &epoch,
			Message: fmt.Sprintf("the master changed: epoch %d is over, this is epoch %d", e, epoch)}
	}
	n := len(req.Sessions)
	if n == 0 || n > int(chubby.MAX_SESSIONS_PER_KEEPALIVE) {
		return KeepAlive{}, fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "a KeepAlive carries 1..%d sessions, not %d", chubby.MAX_SESSIONS_PER_KEEPALIVE, n)
	}
	ka := KeepAlive{IDs: make([]chubby.SessionID, 0, n), Acks: make([]int64, 0, n), InvAcks: make([]int64, 0, n)}
	seen := make(map[chubby.SessionID]struct{}, n)
	for _, it := range req.Sessions {
		if it == nil {
			return KeepAlive{}, fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "request has no session item")
		}
		if _, dup := seen[it.Session]; dup {
			return KeepAlive{}, fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "session %d appears twice in one KeepAlive", it.Session)
		}
		if it.GetAckedEvent() < 0 {
			return KeepAlive{}, fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "session %d: acked_event %d is negative", it.Session, it.GetAckedEvent())
		}
		seen[it.Session] = struct{}{}
		ka.IDs = append(ka.IDs, it.Session)
		ka.Acks = append(ka.Acks, it.GetAckedEvent())
		ka.InvAcks = append(ka.InvAcks, it.GetAckedInvalidation())
	}
	return ka, nil
}
