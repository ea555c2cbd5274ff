package recipe

import (
	"context"
	"fmt"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// RWMutex is a reader/writer lock shared by processes: the cell's lock on
// the file at its path (created, with missing parent directories, on first
// use), taken SHARED by RLock and EXCLUSIVE by Lock. Any number of readers
// hold it together, or one writer.
//
// # Who goes first
//
// The cell's queue of a lock is strictly FIFO, for both modes (package fs,
// "Locks"): a request is granted at once only if nobody waits, the lock is
// not in lock-delay and the request is compatible with the holders;
// otherwise it queues behind the others. When the lock frees, or the head
// of the queue changes, the head is granted as far as it can be: one
// writer, or every reader in a row at the head, together. So:
//
//   - a writer waiting behind readers blocks every reader that comes after
//     it — even while the lock is held shared, a new reader does not join
//     the holders but queues behind the writer. Readers cannot starve a
//     writer; a writer waits only for those ahead of it.
//   - when a writer releases, the readers queued right behind it are all
//     granted at once (up to the next writer in the queue).
//   - TryRLock fails (false) while a writer waits, although the lock is
//     held shared: it would otherwise overtake the writer.
//
// That is neither reader nor writer preference but arrival order, which
// is also what sync.RWMutex does for a blocked Lock.
//
// # Holders
//
// An RWMutex value holds the lock in one mode at a time, once: it is not
// re-entrant (the cell's lock belongs to the value's handle, which holds or
// waits once). Lock or RLock on a value that holds it, or while another
// goroutine is taking it through the value, fails with ErrHeld. Readers
// that should hold together — goroutines of one process too — use a value
// each.
//
// # When a holder dies, and when the master fails over
//
// As for Mutex: a dead holder's session ends when its lease runs out, and
// the lock stays unavailable for its lock-delay (the LockOptions given to
// NewRWMutex; zero: the cell's chubby.DEFAULT_LOCK_DELAY_MS;
// client.NoLockDelay: none) — for shared holders too; readers that still hold keep holding, but nobody new
// is granted until the delay ends. A clean release has no lock-delay. A
// failover keeps the holders (readers and writer) and their sequencers,
// while the waiting requests are withdrawn and sent again by the waiting
// calls, so they queue again in the order their resends arrive.
//
// Sequencer returns the hold's sequencer; a shared one names the holding
// period of all the readers granted together (client.CheckSequencer finds
// it valid while any of them holds). An RWMutex is safe for concurrent use.
type RWMutex struct {
	s     *client.Session
	path  string
	opts  client.LockOptions
	stats lkStats

	st   lkState
	mode chubby.LockMode // the mode held (lkHeld)
	h    *client.Handle
	seq  *chubby.Sequencer
}

// NewRWMutex returns an RWMutex on the file at path, created (with missing
// parent directories) when first needed. opts, if given, sets the
// lock-delay of the holds (the last one given counts). It makes no call.
func NewRWMutex(s *client.Session, path string, opts ...client.LockOptions) *RWMutex {
	return &RWMutex{s: s, path: path, opts: lkLockOptions(opts)}
}

// Path returns the path of the lock's file.
func (rw *RWMutex) Path() string { return rw.path }

// Lock takes the lock exclusively, waiting in the cell's FIFO queue until
// it is granted, ctx ends (the request is then withdrawn) or the session
// ends. See Mutex.Lock for how it rides out failovers.
func (rw *RWMutex) Lock(ctx context.Context) error {
	return rw.lock(ctx, chubby.LockMode_EXCLUSIVE)
}

// RLock takes the lock shared, waiting in the cell's FIFO queue (behind a
// writer that waits, see the type's documentation) until it is granted,
// ctx ends or the session ends.
func (rw *RWMutex) RLock(ctx context.Context) error {
	return rw.lock(ctx, chubby.LockMode_SHARED)
}

// TryLock takes the lock exclusively if nobody holds it, nobody waits
// and it is not in lock-delay; false (no error) otherwise.
func (rw *RWMutex) TryLock(ctx context.Context) (bool, error) {
	return rw.try(ctx, chubby.LockMode_EXCLUSIVE)
}

// TryRLock takes the lock shared if it is free or held shared with
// nobody waiting, and not in lock-delay; false (no error) otherwise.
func (rw *RWMutex) TryRLock(ctx context.Context) (bool, error) {
	return rw.try(ctx, chubby.LockMode_SHARED)
}

// Unlock releases an exclusive hold (cleanly, whatever becomes of ctx; see
// Mutex.Unlock). Without one it is a *NotHeldError.
func (rw *RWMutex) Unlock(ctx context.Context) error {
	return rw.unlock(ctx, chubby.LockMode_EXCLUSIVE, "unlock")
}

// RUnlock releases a shared hold. Without one it is a *NotHeldError.
func (rw *RWMutex) RUnlock(ctx context.Context) error {
	return rw.unlock(ctx, chubby.LockMode_SHARED, "runlock")
}

// Held reports whether this value holds the lock, and in which mode.
func (rw *RWMutex) Held() (chubby.LockMode, bool) {
	rw.st.mu.Lock()
	defer rw.st.mu.Unlock()
	if rw.st.phase != lkHeld {
		return 0, false
	}
	return rw.mode, true
}

// Sequencer returns the sequencer of this value's hold, or nil.
func (rw *RWMutex) Sequencer() *chubby.Sequencer {
	rw.st.mu.Lock()
	defer rw.st.mu.Unlock()
	if rw.st.phase != lkHeld {
		return nil
	}
	return rw.seq
}

// Close closes the value's handle, releasing a hold cleanly. It waits
// (bounded by ctx) for a Lock or RLock in progress.
func (rw *RWMutex) Close(ctx context.Context) error {
	rw.st.mu.Lock()
	for rw.st.phase == lkAcquiring || rw.st.phase == lkReleasing {
		if err := rw.st.waitLocked(ctx); err != nil {
			rw.st.mu.Unlock()
			return fmt.Errorf("recipe: close %s: %w", rw.path, err)
		}
	}
	rw.seq = nil
	rw.st.setLocked(lkReleasing)
	rw.st.mu.Unlock()

	err := lkCloseHandle(ctx, &rw.h, &rw.stats)

	rw.st.mu.Lock()
	rw.st.setLocked(lkIdle)
	rw.st.mu.Unlock()
	return err
}

// begin moves an idle value to lkAcquiring: ErrHeld if it holds or is
// being taken; it waits for a release in progress.
func (rw *RWMutex) begin(ctx context.Context, op string) error {
	rw.st.mu.Lock()
	defer rw.st.mu.Unlock()
	for rw.st.phase != lkIdle {
		if rw.st.phase == lkHeld || rw.st.phase == lkAcquiring {
			return fmt.Errorf("recipe: %s %s: %w", op, rw.path, ErrHeld)
		}
		if err := rw.st.waitLocked(ctx); err != nil {
			return fmt.Errorf("recipe: %s %s: %w", op, rw.path, err)
		}
	}
	rw.st.setLocked(lkAcquiring)
	return nil
}

// end finishes a take begun by begin: held in mode with seq, or idle.
func (rw *RWMutex) end(mode chubby.LockMode, seq *chubby.Sequencer) {
	rw.st.mu.Lock()
	defer rw.st.mu.Unlock()
	if seq == nil {
		rw.st.setLocked(lkIdle)
		return
	}
	rw.mode, rw.seq = mode, seq
	rw.st.setLocked(lkHeld)
}

func (rw *RWMutex) lock(ctx context.Context, mode chubby.LockMode) error {
	if err := rw.begin(ctx, "lock"); err != nil {
		return err
	}
	seq, err := lkAcquire(ctx, rw.s, rw.path, &rw.h, mode, rw.opts, &rw.stats)
	rw.end(mode, seq)
	return err
}

func (rw *RWMutex) try(ctx context.Context, mode chubby.LockMode) (bool, error) {
	if err := rw.begin(ctx, "trylock"); err != nil {
		return false, err
	}
	seq, err := lkTry(ctx, rw.s, rw.path, &rw.h, mode, rw.opts, &rw.stats)
	rw.end(mode, seq)
	return seq != nil, err
}

func (rw *RWMutex) unlock(ctx context.Context, mode chubby.LockMode, op string) error {
	rw.st.mu.Lock()
	if rw.st.phase != lkHeld || rw.mode != mode {
		reason := ""
		if rw.st.phase == lkHeld {
			reason = "held " + rw.mode.String() + ", not " + mode.String()
		}
		rw.st.mu.Unlock()
		return &NotHeldError{Op: op, Path: rw.path, Reason: reason}
	}
	rw.seq = nil
	rw.st.setLocked(lkReleasing)
	rw.st.mu.Unlock()

	err := lkRelease(ctx, op, rw.path, &rw.h, &rw.stats)

	rw.st.mu.Lock()
	rw.st.setLocked(lkIdle)
	rw.st.mu.Unlock()
	return err
}
