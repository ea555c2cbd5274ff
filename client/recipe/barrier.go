package recipe

import (
	"context"
	"fmt"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Barrier is Curator's DistributedBarrier: a node whose existence holds
// every waiter back. Set creates it, Remove deletes it, Wait blocks while
// it exists and returns once it is gone, learning of the delete from an
// event (no polling).
//
// Failure semantics:
//
//   - A permanent barrier (the default) outlives the session that set it:
//     if the setter dies, waiters wait until somebody Removes it. That is
//     the point of a barrier that guards, say, a migration: it must not
//     lift because its setter crashed.
//   - An ephemeral barrier (BarrierOptions.Ephemeral) belongs to the
//     setter's session: if the setter dies, the barrier lifts when that
//     session expires (about one lease after a kill), and the waiters go
//     on. Choose it when a dead setter must not hold others forever.
//   - A waiter that dies simply stops waiting; nothing is left behind.
//   - A master failover changes nothing: the node, the waiters' handles
//     and their pending HANDLE_INVALID events survive.
//   - A waiter whose session ends stops waiting with the session's error.
type Barrier struct {
	s         *client.Session
	path      string
	ephemeral bool
}

// BarrierOptions modify a Barrier.
type BarrierOptions struct {
	// Ephemeral: Set creates the barrier owned by this session, so that it
	// lifts when the session ends (see Barrier).
	Ephemeral bool
}

// NewBarrier returns the barrier at path on session s. Its parent
// directory must exist when Set creates it.
func NewBarrier(s *client.Session, path string, opts BarrierOptions) (*Barrier, error) {
	if s == nil {
		return nil, coordInvalid("barrier", path, "no session")
	}
	if err := coordFilePath("barrier", path); err != nil {
		return nil, err
	}
	return &Barrier{s: s, path: path, ephemeral: opts.Ephemeral}, nil
}

// Set raises the barrier: it creates the node (an empty file). A barrier
// already set, by anyone, stays as it is (nil).
func (b *Barrier) Set(ctx context.Context) error {
	_, err := b.s.CreateFile(ctx, b.path, nil, client.CreateOptions{Ephemeral: b.ephemeral})
	if client.IsCode(err, chubby.ErrorCode_EXISTS) {
		return nil
	}
	return err
}

// Remove lifts the barrier: it deletes the node, in one call. A barrier
// not set is not an error.
func (b *Barrier) Remove(ctx context.Context) error {
	_, err := b.s.Multi(ctx, nil, []client.Op{client.OpDelete(b.path, false)})
	if client.IsCode(err, chubby.ErrorCode_NOT_FOUND) {
		return nil
	}
	return err
}

// Wait returns nil as soon as the barrier is not set: at once if there is
// no node, else when the node's HANDLE_INVALID event says it was deleted.
// It fails with ctx's error, or the session's when the session ends.
func (b *Barrier) Wait(ctx context.Context) error {
	h, err := b.s.Open(ctx, b.path, client.OpenOptions{EventMask: chubby.EVENT_MASK_HANDLE_INVALID})
	if client.IsCode(err, chubby.ErrorCode_NOT_FOUND) {
		return nil
	}
	if err != nil {
		return err
	}
	defer coordClose(ctx, h)
	for {
		select {
		case ev, ok := <-h.Events():
			if !ok {
				return coordEventsEnded(h)
			}
			if ev.Kind == chubby.EventKind_HANDLE_INVALID {
				return nil
			}
			// EVENTS_LOST: the delete may be among the lost; the node tells.
			if _, err := h.GetStat(ctx); client.IsCode(err, chubby.ErrorCode_HANDLE_INVALID) {
				return nil
			} else if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// coordEventsEnded says why h's event channel closed while a recipe was
// waiting on it: the session ended (its error), or the handle was closed.
func coordEventsEnded(h *client.Handle) error {
	if err := h.Session().Err(); err != nil {
		return fmt.Errorf("%s: %w", h.Path(), err)
	}
	return fmt.Errorf("recipe: %s: the handle was closed", h.Path())
}
