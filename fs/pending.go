package fs

import (
	"sort"

	"github.com/chubbygo/chubby/gen/chubby"
)

// PendingWaits returns the handles with an Acquire still waiting, sorted by
// handle id. A new master proposes CancelWait for each: nobody is parked on
// a request that survived a restart or a failover.
func (s *State) PendingWaits() []*chubby.Handle {
	var out []*chubby.Handle
	for _, h := range s.handles {
		if h.wait != 0 {
			out = append(out, h.wire())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}

// Waits reports whether the handle with this id has an Acquire waiting.
func (s *State) Waits(handle int64) bool {
	h, ok := s.handles[handle]
	return ok && h.wait != 0
}
