package recipe

import (
	"context"
	"path"
	"sync"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// DoubleBarrier is ZooKeeper's double barrier: N participants Enter a
// directory, and Enter returns once N have entered (so they start
// together); each Leaves, and Leave returns once every participant of the
// round has left (so they finish together).
//
// Each participant is an ephemeral file dir/ID of its session. The
// participant that counts N creates the permanent file dir/ready; the
// participants of a round are exactly those whose files were created
// before it (the cell's instance numbers grow with every creation, so
// the order is known). A participant that arrives while a round is on
// waits for the next one. The last to leave deletes ready; a participant
// of the next round that finds a ready with nobody of its round left
// deletes it too, so a round whose leavers all died does not hold the
// next one. Waits learn of every change from child events, not polling.
//
// What a dead participant (kill -9, cut off) does, exactly:
//
//   - It keeps counting until its session expires (about one lease after a
//     kill), when its file goes: if the N-th participant arrives before
//     then, the round starts with the dead one counted in it; after, the
//     others wait for a live N-th.
//   - In a round that started, it never Leaves, but its file goes when
//     its session expires, so the others' Leave returns then: a dead
//     participant delays Leave by up to about one lease, never forever.
//   - A master failover changes nothing: the files, instance numbers,
//     handles and child events survive; waits go on.
//
// A round may have more than N participants, when more entered before
// ready was made; all of them are in it. One participant's Enter and
// Leave calls are serialized.
type DoubleBarrier struct {
	s   *client.Session
	dir string
	n   int
	id  string

	mu      sync.Mutex
	entered bool
	me      int64 // the instance of this participant's file, while entered
	round   int64 // the instance of this round's ready file, while entered
}

// doubleBarrierReady is the name of the file that starts a round; no
// participant may take it.
const doubleBarrierReady = "ready"

// maxDoubleBarrier bounds N: a directory holds at most so many entries
// in any cell built with the default limits.
const maxDoubleBarrier = 100_000

// NewDoubleBarrier returns participant id (a name: 1..255 bytes of
// [A-Za-z0-9._-], not "ready", unique among the round's participants) of
// the double barrier of n (1..100000) participants in directory dir, on
// session s. Enter creates dir (and its parents) if missing.
func NewDoubleBarrier(s *client.Session, dir string, n int, id string) (*DoubleBarrier, error) {
	if s == nil {
		return nil, coordInvalid("double barrier", dir, "no session")
	}
	if err := coordFilePath("double barrier", dir); err != nil {
		return nil, err
	}
	if n < 1 || n > maxDoubleBarrier {
		return nil, coordInvalid("double barrier", dir, "%d participants, want 1..%d", n, maxDoubleBarrier)
	}
	if err := coordName("double barrier", dir, id); err != nil {
		return nil, err
	}
	if id == doubleBarrierReady {
		return nil, coordInvalid("double barrier", dir, "participant name %q is reserved", id)
	}
	return &DoubleBarrier{s: s, dir: dir, n: n, id: id}, nil
}

// Enter joins the barrier and returns once the round has started: N
// participants (counting this one) have entered. On failure, or if ctx
// ends first, this participant's file is deleted: it has not entered.
func (b *DoubleBarrier) Enter(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.entered {
		return coordInvalid("double barrier enter", b.dir, "%s has entered already", b.id)
	}
	if _, err := b.s.Mkdir(ctx, b.dir, client.MkdirOptions{Parents: true}); err != nil {
		return err
	}
	h, err := b.watch(ctx)
	if err != nil {
		return err
	}
	defer coordClose(ctx, h)
	st, err := b.s.CreateFile(ctx, b.file(), nil, client.CreateOptions{Ephemeral: true})
	if err != nil {
		return err
	}
	round, err := b.awaitRound(ctx, h, st.GetInstance())
	if err != nil {
		b.dropOwn(ctx, st.GetInstance())
		return err
	}
	b.entered, b.me, b.round = true, st.GetInstance(), round
	return nil
}

// Leave leaves the barrier (deletes this participant's file) and returns
// once every participant of the round has left or died (its session
// expired). If ctx ends first, this participant has still left.
func (b *DoubleBarrier) Leave(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.entered {
		return coordInvalid("double barrier leave", b.dir, "%s has not entered", b.id)
	}
	h, err := b.watch(ctx)
	if err != nil {
		return err
	}
	defer coordClose(ctx, h)
	if err := b.dropOwn(ctx, b.me); err != nil {
		return err
	}
	b.entered = false
	for {
		entries, err := h.ReadDir(ctx)
		if err != nil {
			return err
		}
		ready, members := splitDoubleBarrier(entries)
		if countBefore(members, b.round) == 0 {
			if ready != nil && ready.GetInstance() == b.round {
				return b.dropReady(ctx, b.round)
			}
			return nil
		}
		if err := coordAwaitEvent(ctx, h); err != nil {
			return err
		}
	}
}

// awaitRound waits until the round of the participant whose file is
// instance me starts, and returns the instance of its ready file.
func (b *DoubleBarrier) awaitRound(ctx context.Context, h *client.Handle, me int64) (int64, error) {
	for {
		entries, err := h.ReadDir(ctx)
		if err != nil {
			return 0, err
		}
		ready, members := splitDoubleBarrier(entries)
		switch {
		case ready != nil && me < ready.GetInstance():
			return ready.GetInstance(), nil
		case ready != nil && countBefore(members, ready.GetInstance()) == 0:
			// A round nobody is left in: its leavers died before they
			// deleted ready.
			if err := b.dropReady(ctx, ready.GetInstance()); err != nil {
				return 0, err
			}
			continue
		case ready == nil && len(members) >= b.n:
			_, err := b.s.CreateFile(ctx, path.Join(b.dir, doubleBarrierReady), nil, client.CreateOptions{})
			if err != nil && !client.IsCode(err, chubby.ErrorCode_EXISTS) {
				return 0, err
			}
			continue
		}
		if err := coordAwaitEvent(ctx, h); err != nil {
			return 0, err
		}
	}
}

// watch opens the directory for its child events.
func (b *DoubleBarrier) watch(ctx context.Context) (*client.Handle, error) {
	return b.s.Open(ctx, b.dir, client.OpenOptions{EventMask: chubby.EVENT_MASK_CHILD_ADDED | chubby.EVENT_MASK_CHILD_REMOVED})
}

// file is this participant's file.
func (b *DoubleBarrier) file() string { return path.Join(b.dir, b.id) }

// dropOwn deletes this participant's file if it is still instance me
// (also when ctx has ended: a participant that gave up must not count).
func (b *DoubleBarrier) dropOwn(ctx context.Context, me int64) error {
	dctx, cancel := coordDetached(ctx)
	defer cancel()
	_, err := b.s.Multi(dctx, []client.Cmp{client.CmpInstance(b.file(), me)}, []client.Op{client.OpDelete(b.file(), false)})
	return err
}

// dropReady deletes the ready file if it is still instance round.
func (b *DoubleBarrier) dropReady(ctx context.Context, round int64) error {
	p := path.Join(b.dir, doubleBarrierReady)
	_, err := b.s.Multi(ctx, []client.Cmp{client.CmpInstance(p, round)}, []client.Op{client.OpDelete(p, false)})
	return err
}

// splitDoubleBarrier splits a listing into the ready file (nil if none)
// and the participants.
func splitDoubleBarrier(entries []*chubby.DirEntry) (ready *chubby.Stat, members []*chubby.Stat) {
	for _, e := range entries {
		if e.GetName() == doubleBarrierReady {
			ready = e.GetStat()
		} else {
			members = append(members, e.GetStat())
		}
	}
	return ready, members
}

// countBefore counts the participants created before instance round.
func countBefore(members []*chubby.Stat, round int64) int {
	n := 0
	for _, m := range members {
		if m.GetInstance() < round {
			n++
		}
	}
	return n
}

// coordAwaitEvent waits for an event on h (any kind: each means "look
// again") and takes the ones queued behind it.
func coordAwaitEvent(ctx context.Context, h *client.Handle) error {
	select {
	case _, ok := <-h.Events():
		if !ok {
			return coordEventsEnded(h)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	for range client.HandleEventBuffer {
		select {
		case _, ok := <-h.Events():
			if !ok {
				return nil // the next wait says why
			}
		default:
			return nil
		}
	}
	return nil
}

// coordName checks a name: one path component.
func coordName(op, where, name string) error {
	if err := client.ValidatePath("/" + name); err != nil || name == "" || path.Base("/"+name) != name {
		return coordInvalid(op, where, "%q is not a name (1..255 bytes of A-Z a-z 0-9 . _ -)", name)
	}
	return nil
}
