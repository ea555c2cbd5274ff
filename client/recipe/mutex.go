package recipe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Errors of the lock recipes (Mutex, RWMutex, Semaphore, SeqLock).
var (
	// ErrNotHeld: an Unlock, RUnlock or Release of a lock the recipe value
	// does not hold (never took, or already released). Such errors are a
	// *NotHeldError; test with errors.Is(err, ErrNotHeld).
	ErrNotHeld = errors.New("recipe: lock not held")

	// ErrHeld: a Lock of an RWMutex or a SeqLock value that already holds
	// its lock, or is taking it on another goroutine. Those recipes are not
	// re-entrant (only Mutex is).
	ErrHeld = errors.New("recipe: lock already held by this value")
)

// NotHeldError is the error of releasing a lock the recipe value does not
// hold. It matches ErrNotHeld (errors.Is).
type NotHeldError struct {
	Op   string // "unlock", "runlock", "release"
	Path string // the lock's node (a Semaphore's directory)
	// Reason says more when there is more to say ("" otherwise).
	Reason string
}

func (e *NotHeldError) Error() string {
	s := "recipe: " + e.Op + " " + e.Path + ": not held"
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrNotHeld) hold.
func (e *NotHeldError) Is(target error) bool { return target == ErrNotHeld }

// Mutex is a re-entrant exclusive lock shared by processes, like Curator's
// InterProcessMutex: the cell's EXCLUSIVE lock on the file at its path
// (created, with missing parent directories, on first use). Lock waits in
// the cell's FIFO queue of that lock — the cell grants it to the oldest
// waiter, and wakes only that one — so it needs no watch, no listing and
// no herd. TryLock takes it only if it is free now.
//
// # Re-entrancy
//
// The owner of a hold is the *Mutex value, not a goroutine: Go has no
// goroutine identity (deliberately: no goroutine-local state), so there is
// nothing else to count holds against. Lock on a value that holds adds one
// to its count and returns at once; each Unlock takes one away, and the
// last releases the cell's lock. So every goroutine that uses one value
// shares its hold. Goroutines (or callers) that must exclude each other
// need a Mutex each — on the same path and even in the same session: the
// cell's lock belongs to a handle, and each Mutex has its own.
//
// # Sequencer
//
// Sequencer returns the lock's sequencer while the value holds it. Hand it
// (client.FormatSequencer) to the servers the holder talks to: they check
// it with client.CheckSequencer and so refuse a holder that has lost the
// lock, whatever it still believes.
//
// # When a holder dies
//
// A holder that exits cleanly (Unlock, Close, Session.Close) frees the lock
// at once. One that dies — kill -9, a crash, a network cut — stops sending
// KeepAlives: the master ends its session when its lease runs out (the
// cell's session lease), and the lock then stays unavailable for
// the holder's lock-delay, so that requests the dead holder sent late
// cannot reach servers after the next holder's. The lock-delay is the
// LockOptions.LockDelay given to NewMutex: zero (the default) takes the
// cell's, chubby.DEFAULT_LOCK_DELAY_MS; client.NoLockDelay asks for
// none; at most chubby.MAX_LOCK_DELAY_MS. After it the oldest
// waiter gets the lock. A holder whose session is in jeopardy (no KeepAlive
// reply within the lease) may already have lost it and should stop acting
// on it until the session is safe; if the session expires, Unlock reports
// the lock lost.
//
// # When the master fails over
//
// The lock, its holder's session and handle are replicated state: the
// holder keeps the lock through a failover, with the same sequencer (its
// calls wait while the session is in jeopardy, and the session comes back
// safe with everything it had). The waiting requests are not kept: a new
// master withdraws the Acquires left waiting at the old one (nobody is
// parked on them there), so each waiting Lock sees its Acquire fail and
// sends it again on the same handle. Lock hides that — it returns only
// with the lock, or when ctx ends or the session does — but the waiters
// queue again in the order their resends reach the new master, not in the
// order they queued before; FIFO holds again among the requests queued
// after the failover. (SeqLock's queue, made of nodes, keeps its order.)
//
// A Mutex is safe for concurrent use.
type Mutex struct {
	s     *client.Session
	path  string
	opts  client.LockOptions
	stats lkStats

	st    lkState
	count int               // holds of this value (lkHeld)
	h     *client.Handle    // the handle on path, once opened; owned by whoever set the phase
	seq   *chubby.Sequencer // the hold's sequencer (lkHeld)
}

// NewMutex returns a Mutex on the file at path, which is created (with
// missing parent directories) when first needed. opts, if given, sets the
// lock-delay of the holds (the last one given counts); see the type's
// documentation. It makes no call.
func NewMutex(s *client.Session, path string, opts ...client.LockOptions) *Mutex {
	return &Mutex{s: s, path: path, opts: lkLockOptions(opts)}
}

// Path returns the path of the lock's file.
func (m *Mutex) Path() string { return m.path }

// Lock takes the mutex: at once if this value holds it already (one more
// hold), else in the cell's FIFO queue, waiting until the lock is granted
// or ctx ends (then it returns ctx's error and the mutex is not held: the
// request is withdrawn by closing its handle) or the session ends. Lock
// sends the cell's Acquire again after a failover or any failure that may
// pass, and again when its wait (at most chubby.MAX_ACQUIRE_WAIT_MS, 10
// minutes, per Acquire) runs out, which puts it at the back of the queue.
func (m *Mutex) Lock(ctx context.Context) error {
	m.st.mu.Lock()
	for m.st.phase != lkIdle {
		if m.st.phase == lkHeld {
			m.count++
			m.st.mu.Unlock()
			return nil
		}
		if err := m.st.waitLocked(ctx); err != nil {
			m.st.mu.Unlock()
			return fmt.Errorf("recipe: lock %s: %w", m.path, err)
		}
	}
	m.st.setLocked(lkAcquiring)
	m.st.mu.Unlock()

	seq, err := lkAcquire(ctx, m.s, m.path, &m.h, chubby.LockMode_EXCLUSIVE, m.opts, &m.stats)

	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	if err != nil {
		m.st.setLocked(lkIdle)
		return err
	}
	m.count, m.seq = 1, seq
	m.st.setLocked(lkHeld)
	return nil
}

// TryLock takes the mutex if this value holds it (one more hold) or the
// cell's lock is free now: nobody holds it, nobody waits for it and it is
// not in lock-delay. It reports false, with no error, when it is not;
// also when another goroutine is taking it through this value.
func (m *Mutex) TryLock(ctx context.Context) (bool, error) {
	m.st.mu.Lock()
	for m.st.phase != lkIdle {
		switch m.st.phase {
		case lkHeld:
			m.count++
			m.st.mu.Unlock()
			return true, nil
		case lkAcquiring:
			m.st.mu.Unlock()
			return false, nil
		}
		if err := m.st.waitLocked(ctx); err != nil {
			m.st.mu.Unlock()
			return false, fmt.Errorf("recipe: trylock %s: %w", m.path, err)
		}
	}
	m.st.setLocked(lkAcquiring)
	m.st.mu.Unlock()

	seq, err := lkTry(ctx, m.s, m.path, &m.h, chubby.LockMode_EXCLUSIVE, m.opts, &m.stats)

	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	if err != nil || seq == nil {
		m.st.setLocked(lkIdle)
		return false, err
	}
	m.count, m.seq = 1, seq
	m.st.setLocked(lkHeld)
	return true, nil
}

// Unlock gives up one hold; the last releases the cell's lock (cleanly: no
// lock-delay), whatever becomes of ctx — if the Release cannot be made
// under ctx, the handle is closed, which releases it too. Unlock of a
// mutex this value does not hold is a *NotHeldError. An error after the
// last hold means the lock had been lost already (the session expired, the
// node was deleted) or could not be released (it then goes with the
// session); the mutex is not held by this value afterwards either way.
func (m *Mutex) Unlock(ctx context.Context) error {
	m.st.mu.Lock()
	if m.st.phase != lkHeld {
		m.st.mu.Unlock()
		return &NotHeldError{Op: "unlock", Path: m.path}
	}
	m.count--
	if m.count > 0 {
		m.st.mu.Unlock()
		return nil
	}
	m.seq = nil
	m.st.setLocked(lkReleasing)
	m.st.mu.Unlock()

	err := lkRelease(ctx, "unlock", m.path, &m.h, &m.stats)

	m.st.mu.Lock()
	m.st.setLocked(lkIdle)
	m.st.mu.Unlock()
	return err
}

// Held reports whether this value holds the mutex.
func (m *Mutex) Held() bool {
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	return m.st.phase == lkHeld
}

// Sequencer returns the sequencer of the hold (the lock's path, mode,
// lock generation and the node's instance) while this value holds the
// mutex, else nil. It makes no call.
func (m *Mutex) Sequencer() *chubby.Sequencer {
	m.st.mu.Lock()
	defer m.st.mu.Unlock()
	if m.st.phase != lkHeld {
		return nil
	}
	return m.seq
}

// Close closes the mutex's handle, which releases the lock cleanly if this
// value holds it (every hold is dropped). It first waits (bounded by ctx)
// for a Lock in progress on another goroutine. The mutex may be used again
// afterwards: the next Lock opens a new handle.
func (m *Mutex) Close(ctx context.Context) error {
	m.st.mu.Lock()
	for m.st.phase == lkAcquiring || m.st.phase == lkReleasing {
		if err := m.st.waitLocked(ctx); err != nil {
			m.st.mu.Unlock()
			return fmt.Errorf("recipe: close %s: %w", m.path, err)
		}
	}
	m.count, m.seq = 0, nil
	m.st.setLocked(lkReleasing)
	m.st.mu.Unlock()

	err := lkCloseHandle(ctx, &m.h, &m.stats)

	m.st.mu.Lock()
	m.st.setLocked(lkIdle)
	m.st.mu.Unlock()
	return err
}

// ---------------------------------------------------------------------------
// What the lock recipes share.

// lkMaxWait is the longest one Acquire may wait in the cell.
const lkMaxWait = time.Duration(chubby.MAX_ACQUIRE_WAIT_MS) * time.Millisecond

// lkCleanupTimeout bounds a clean-up call a recipe makes after its
// caller's context ended (closing a handle whose lock state is unknown,
// deleting a queue node).
const lkCleanupTimeout = 10 * time.Second

// Backoff between resends of an Acquire that failed in a way that passes
// (a failover, an overloaded master).
const (
	lkBackoffMin = 50 * time.Millisecond
	lkBackoffMax = time.Second
)

// lkPhase is where a recipe value's lock is.
type lkPhase int

const (
	lkIdle      lkPhase = iota // not held, nothing in progress
	lkAcquiring                // a goroutine is taking it
	lkHeld                     // held
	lkReleasing                // a goroutine is releasing it (or closing)
)

// lkState is a recipe value's phase with a way to wait for it to change.
// A goroutine that moves the phase out of lkIdle or lkHeld owns the
// value's handles until it moves it back.
type lkState struct {
	mu      sync.Mutex
	phase   lkPhase
	changed chan struct{} // closed at the next change; nil until waited for
}

// setLocked moves to p and wakes the waiters; mu is held.
func (st *lkState) setLocked(p lkPhase) {
	st.phase = p
	if st.changed != nil {
		close(st.changed)
		st.changed = nil
	}
}

// waitLocked waits for the next change of phase or the end of ctx; mu is
// held on entry and on return.
func (st *lkState) waitLocked(ctx context.Context) error {
	if st.changed == nil {
		st.changed = make(chan struct{})
	}
	ch := st.changed
	st.mu.Unlock()
	defer st.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// lkStats counts what a recipe value asked of the cell and heard from it,
// for the hand-off measurement (handoff_bench_test.go).
type lkStats struct {
	calls    atomic.Int64 // calls made, ReadDir included (the session's cache may answer it)
	readDirs atomic.Int64 // ReadDir calls among them
	events   atomic.Int64 // handle events received and acted on
}

func (st *lkStats) call() { st.calls.Add(1) }

// lkLockOptions returns the last of opts, or the zero LockOptions.
func lkLockOptions(opts []client.LockOptions) client.LockOptions {
	if len(opts) == 0 {
		return client.LockOptions{}
	}
	return opts[len(opts)-1]
}

func lkCleanupCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), lkCleanupTimeout)
}

// lkParent returns the parent directory of a path ("/" for "/x").
func lkParent(path string) string {
	for i := len(path) - 1; i > 0; i-- {
		if path[i] == '/' {
			return path[:i]
		}
	}
	return "/"
}

// lkOpen opens the file at path for locking, creating it, and its missing
// parent directories, if needed.
func lkOpen(ctx context.Context, s *client.Session, path string, st *lkStats) (*client.Handle, error) {
	opts := client.OpenOptions{Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_OR_CREATE}
	st.call()
	h, err := s.Open(ctx, path, opts)
	if client.IsCode(err, chubby.ErrorCode_NOT_FOUND) && lkParent(path) != "/" {
		st.call()
		if _, err := s.Mkdir(ctx, lkParent(path), client.MkdirOptions{Parents: true}); err != nil {
			return nil, err
		}
		st.call()
		h, err = s.Open(ctx, path, opts)
	}
	return h, err
}

// lkTransient reports whether a failed lock call may be sent again on the
// same handle: the failure passes (the master moved or is overloaded; the
// reply was lost: the request may still wait at the cell, which a resend
// then finds — LOCK_HELD while it waits, its sequencer once granted).
func lkTransient(err error) bool {
	if code, ok := client.Code(err); ok {
		switch code {
		case chubby.ErrorCode_UNAVAILABLE, chubby.ErrorCode_NOT_MASTER, chubby.ErrorCode_LOCK_HELD:
			return true
		}
		return false
	}
	switch {
	case errors.Is(err, client.ErrSessionClosed), errors.Is(err, client.ErrClientClosed),
		errors.Is(err, client.ErrPoisoned), errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded):
		return false
	}
	return true // a transport error, ErrUnreachable: the call's fate is unknown
}

// lkSleep waits d or until ctx ends.
func lkSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// lkAcquire takes the lock on the file at path in mode through *hp,
// opening the file (creating it) when *hp is nil, and waits in the cell's
// FIFO queue until the lock is granted, ctx ends or the session does. It
// resends the Acquire on the same handle after failures that pass (a
// failover withdraws waiting requests; see Mutex) and when one Acquire's
// wait runs out; it opens the node anew when it was deleted (the handle is
// invalid). When ctx ends it closes the handle (*hp = nil), which
// withdraws a waiting request and releases a lock granted too late to
// report, so that the caller certainly does not hold the lock.
func lkAcquire(ctx context.Context, s *client.Session, path string, hp **client.Handle,
	mode chubby.LockMode, opts client.LockOptions, st *lkStats) (*chubby.Sequencer, error) {
	backoff := lkBackoffMin
	pause := func() error {
		err := lkSleep(ctx, backoff)
		backoff = min(2*backoff, lkBackoffMax)
		return err
	}
	for {
		if ctx.Err() != nil {
			lkAbandon(hp, st)
			return nil, fmt.Errorf("recipe: lock %s: %w", path, context.Cause(ctx))
		}
		if *hp == nil {
			h, err := lkOpen(ctx, s, path, st)
			if err != nil {
				if ctx.Err() == nil && lkTransient(err) && !client.IsCode(err, chubby.ErrorCode_LOCK_HELD) {
					if pause() == nil {
						continue
					}
				}
				if ctx.Err() != nil {
					return nil, fmt.Errorf("recipe: lock %s: %w", path, context.Cause(ctx))
				}
				return nil, err
			}
			*hp = h
		}
		wait := lkMaxWait
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, max(time.Until(dl), time.Millisecond))
		}
		st.call()
		seq, err := (*hp).Acquire(ctx, mode, wait, opts)
		switch {
		case err == nil:
			return seq, nil
		case ctx.Err() != nil:
			lkAbandon(hp, st)
			return nil, err
		case client.IsCode(err, chubby.ErrorCode_TIMED_OUT):
			// The wait ran out (ctx has not): queue again.
		case client.IsCode(err, chubby.ErrorCode_HANDLE_INVALID):
			lkAbandon(hp, st) // the node went: open the one at path now
		case lkTransient(err):
			if pause() != nil {
				lkAbandon(hp, st)
				return nil, fmt.Errorf("recipe: lock %s: %w", path, context.Cause(ctx))
			}
		default:
			return nil, err
		}
	}
}

// lkTry takes the lock on the file at path in mode through *hp if it is
// free now; a nil sequencer with no error says it is not.
func lkTry(ctx context.Context, s *client.Session, path string, hp **client.Handle,
	mode chubby.LockMode, opts client.LockOptions, st *lkStats) (*chubby.Sequencer, error) {
	for attempt := 0; ; attempt++ {
		if *hp == nil {
			h, err := lkOpen(ctx, s, path, st)
			if err != nil {
				return nil, err
			}
			*hp = h
		}
		st.call()
		seq, err := (*hp).TryAcquire(ctx, mode, opts)
		switch {
		case err == nil:
			return seq, nil
		case client.IsCode(err, chubby.ErrorCode_LOCK_HELD):
			return nil, nil
		case client.IsCode(err, chubby.ErrorCode_HANDLE_INVALID) && attempt == 0:
			lkAbandon(hp, st) // the node went: try the one at path now
			continue
		case client.IsCode(err, chubby.ErrorCode_SESSION_EXPIRED):
			return nil, err
		}
		// The outcome may be unknown (ctx ended, the reply was lost):
		// close the handle, so that the lock is certainly not held.
		lkAbandon(hp, st)
		return nil, err
	}
}

// lkRelease releases the lock *hp holds. If the Release fails in a way
// that leaves the lock's state unknown (ctx ended, the reply was lost), it
// closes the handle (*hp = nil), which releases the lock cleanly too, and
// reports success if that worked. A lock already lost (LOCK_NOT_HELD,
// HANDLE_INVALID, SESSION_EXPIRED) is reported as an error wrapping the
// cell's.
func lkRelease(ctx context.Context, op, path string, hp **client.Handle, st *lkStats) error {
	if *hp == nil {
		return &NotHeldError{Op: op, Path: path, Reason: "no handle"}
	}
	st.call()
	err := (*hp).Release(ctx)
	if err == nil {
		return nil
	}
	if code, ok := client.Code(err); ok {
		switch code {
		case chubby.ErrorCode_LOCK_NOT_HELD, chubby.ErrorCode_HANDLE_INVALID, chubby.ErrorCode_SESSION_EXPIRED:
			lkAbandon(hp, st)
			return fmt.Errorf("recipe: %s %s: the lock had been lost: %w", op, path, err)
		}
	}
	cctx, cancel := lkCleanupCtx()
	defer cancel()
	if cerr := lkCloseHandle(cctx, hp, st); cerr != nil {
		return fmt.Errorf("recipe: %s %s: release failed (%w), and so did closing its handle: %v", op, path, err, cerr)
	}
	return nil
}

// lkCloseHandle closes *hp (if any) and forgets it. A handle the cell no
// longer knows (HANDLE_INVALID), or a session that has ended, is no error:
// nothing of it is held either way.
func lkCloseHandle(ctx context.Context, hp **client.Handle, st *lkStats) error {
	h := *hp
	if h == nil {
		return nil
	}
	*hp = nil
	st.call()
	err := h.Close(ctx)
	if err == nil || client.IsCode(err, chubby.ErrorCode_HANDLE_INVALID) ||
		client.IsCode(err, chubby.ErrorCode_SESSION_EXPIRED) ||
		errors.Is(err, client.ErrSessionClosed) || errors.Is(err, client.ErrClientClosed) {
		return nil
	}
	return err
}

// lkAbandon closes *hp under a fresh bounded context, so that whatever
// the handle holds or waits for is given up, and forgets it.
func lkAbandon(hp **client.Handle, st *lkStats) {
	if *hp == nil {
		return
	}
	ctx, cancel := lkCleanupCtx()
	defer cancel()
	_ = lkCloseHandle(ctx, hp, st)
}
