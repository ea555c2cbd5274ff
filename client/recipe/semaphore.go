package recipe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// MaxPermits bounds a Semaphore's number of permits: every scan for a free
// slot reads a listing of that many entries, and setting up creates that
// many files.
const MaxPermits = 1024

// lkSemPoll is how often a waiting Semaphore looks at its slots even when
// no marker went (a safety net: a marker that could not be created, events
// dropped). The session's cache answers a look that finds nothing changed.
const lkSemPoll = time.Second

// Semaphore lets at most N holders, in any processes, hold one of its N
// permits at a time (Curator's InterProcessSemaphore). Its state is a
// directory:
//
//	dir/size        N, written by the first user; every user must agree
//	dir/slots/0000  .. dir/slots/<N-1>: one file per permit, whose
//	                EXCLUSIVE lock is the permit
//	dir/gate        a lock that orders the waiters (FIFO)
//	dir/held/0000   .. ephemeral markers of the slots held, whose removal
//	                wakes the waiter
//
// # The design, and why
//
// A permit is the cell's exclusive lock on one of N slot files, so the
// cell itself guarantees that never more than N hold: N locks, one holder
// each, whatever the clients believe. A holder that dies keeps its slot
// until its session expires and then for its lock-delay, like any lock
// holder (see Mutex), and its sequencer (Permit.Sequencer) lets servers
// check that a permit is still held. The alternative, ephemeral sequential
// nodes with the first N admitted (ZooKeeper's recipe), needs every holder
// to compute its admission from a listing, frees a dead holder's place the
// moment its session ends, with no lock-delay, and gives nothing a server
// could check with CheckSequencer.
//
// Waiting is the harder part: the cell says nothing when a lock frees,
// and parking an Acquire on every slot costs N queued requests per waiter.
// So the waiters queue on one lock, the gate (FIFO, the cell's queue), and
// only the one at its head looks for a slot: it reads the slots' listing
// (each entry's Stat carries the lock's state), tries the free ones
// (TryAcquire), and when none is free waits for a marker to go. Each
// holder creates an ephemeral marker dir/held/<slot> after taking its
// slot and deletes it after releasing; a dead holder's marker goes when its
// session ends. The head waiter, once it found no slot free, watches
// dir/held (CHILD_REMOVED) until it has one, so it hears of every release,
// and of every death, at once; a slot it finds in lock-delay is tried
// again when the delay ends. Nobody else watches, so nobody else is woken:
// no herd, neither of calls nor of events. The markers only wake; a lost
// marker costs at most a second (the head looks at least that often),
// never a permit.
//
// The gate has no lock-delay: it guards nothing but the order of the
// waiters (a dead head's calls fail with its session, so it cannot take a
// slot after it). Every Acquire passes the gate, so a newcomer does not
// overtake a waiter; TryAcquire does not wait at the gate (it fails while
// another acquirer holds it, even when a slot is free).
//
// # When a holder dies, and when the master fails over
//
// A holder's slot stays held until its session expires (the lease), then
// for its lock-delay (the LockOptions given to NewSemaphore; zero: the
// cell's chubby.DEFAULT_LOCK_DELAY_MS; client.NoLockDelay: none); then
// the head waiter takes it. A dead head waiter frees the gate when its session expires (no
// lock-delay). A failover keeps every slot's holder, the markers, the head
// waiter's gate and its watch (events are replicated); the waiters queued
// at the gate re-queue in the order their resent Acquires reach the new
// master (see Mutex).
//
// A Semaphore value may hold several permits; it is safe for concurrent
// use (its Acquires pass its one handle on the gate one at a time).
type Semaphore struct {
	s     *client.Session
	dir   string
	n     int
	opts  client.LockOptions
	stats lkStats

	// token is held by the goroutine using the gate (Acquire, TryAcquire,
	// Close); it owns gateH, slotsH and heldH, and sets ready.
	token  chan struct{}
	ready  bool
	gateH  *client.Handle
	slotsH *client.Handle // dir/slots, for ReadDir
	heldH  *client.Handle // dir/held, with CHILD_REMOVED events, while at the gate with no slot free

	mu      sync.Mutex
	idle    map[int]*client.Handle // open slot handles holding nothing
	permits map[*Permit]struct{}   // held
}

// NewSemaphore returns a Semaphore of n permits (1..MaxPermits) in the
// directory dir, set up (created, with missing parents) at the first
// Acquire; every user of dir must give the same n (Acquire fails
// otherwise). opts, if given, sets the lock-delay of the permits (the
// last one given counts). It makes no call.
func NewSemaphore(s *client.Session, dir string, n int, opts ...client.LockOptions) (*Semaphore, error) {
	if n < 1 || n > MaxPermits {
		return nil, fmt.Errorf("recipe: semaphore %s: %d permits, want 1..%d", dir, n, MaxPermits)
	}
	if err := client.ValidatePath(dir); err != nil || dir == "/" {
		return nil, fmt.Errorf("recipe: semaphore: bad directory %q", dir)
	}
	sem := &Semaphore{s: s, dir: dir, n: n, opts: lkLockOptions(opts),
		token: make(chan struct{}, 1), idle: map[int]*client.Handle{}, permits: map[*Permit]struct{}{}}
	return sem, nil
}

// Permits returns N.
func (sem *Semaphore) Permits() int { return sem.n }

// Permit is one permit of a Semaphore, held until Release.
type Permit struct {
	sem  *Semaphore
	slot int
	path string
	seq  *chubby.Sequencer

	mu         sync.Mutex
	h          *client.Handle
	marker     string
	markerInst int64 // 0 when the marker is not this permit's
	released   bool
}

// Slot returns the permit's slot, 0..N-1.
func (p *Permit) Slot() int { return p.slot }

// Sequencer returns the sequencer of the slot's lock: servers can check
// with client.CheckSequencer that the permit is still held.
func (p *Permit) Sequencer() *chubby.Sequencer { return p.seq }

// Acquire takes a permit, waiting (at the gate, in FIFO order) until one
// is free, ctx ends or the session ends.
func (sem *Semaphore) Acquire(ctx context.Context) (*Permit, error) {
	select {
	case sem.token <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("recipe: acquire %s: %w", sem.dir, context.Cause(ctx))
	}
	defer func() { <-sem.token }()
	if err := sem.setup(ctx); err != nil {
		return nil, err
	}
	if _, err := lkAcquire(ctx, sem.s, sem.dir+"/gate", &sem.gateH, chubby.LockMode_EXCLUSIVE,
		client.LockOptions{LockDelay: client.NoLockDelay}, &sem.stats); err != nil {
		return nil, err
	}
	defer sem.releaseGate()
	defer sem.unwatch()
	backoff := lkBackoffMin
	for {
		var events <-chan client.Event
		if sem.heldH != nil {
			events = sem.heldH.Events()
		}
	drain:
		for {
			select {
			case _, ok := <-events:
				if !ok {
					events = nil // the watch ended: poll
					break drain
				}
			default:
				break drain
			}
		}
		p, delay, err := sem.scan(ctx)
		if p != nil {
			return p, nil
		}
		if err != nil {
			// A failover, an overloaded master: look again. (A slot whose
			// TryAcquire's outcome was unknown has had its handle closed,
			// which releases it.)
			if !lkTransient(err) || ctx.Err() != nil {
				return nil, err
			}
			if err := lkSleep(ctx, backoff); err != nil {
				return nil, fmt.Errorf("recipe: acquire %s: %w", sem.dir, err)
			}
			backoff = min(2*backoff, lkBackoffMax)
			continue
		}
		backoff = lkBackoffMin
		if sem.heldH == nil {
			// Every slot is taken: watch the markers from now on, then
			// look once more (a release may have come in between).
			sem.stats.call()
			h, err := sem.s.Open(ctx, sem.dir+"/held", client.OpenOptions{EventMask: chubby.EVENT_MASK_CHILD_REMOVED})
			if err != nil {
				if !lkTransient(err) || ctx.Err() != nil {
					return nil, err
				}
				if err := lkSleep(ctx, backoff); err != nil {
					return nil, fmt.Errorf("recipe: acquire %s: %w", sem.dir, err)
				}
				backoff = min(2*backoff, lkBackoffMax)
			}
			sem.heldH = h
			continue
		}
		wait := lkSemPoll
		if delay > 0 {
			wait = min(wait, delay+20*time.Millisecond)
		}
		t := time.NewTimer(wait)
		select {
		case _, ok := <-events:
			if ok {
				sem.stats.events.Add(1)
			}
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("recipe: acquire %s: %w", sem.dir, context.Cause(ctx))
		case <-sem.s.Done():
			t.Stop()
			return nil, fmt.Errorf("recipe: acquire %s: %w", sem.dir, sem.s.Err())
		}
		t.Stop()
	}
}

// TryAcquire takes a permit if one is free now and nobody waits at the
// gate; otherwise it returns nil with no error.
func (sem *Semaphore) TryAcquire(ctx context.Context) (*Permit, error) {
	select {
	case sem.token <- struct{}{}:
	default:
		return nil, nil // another Acquire of this value is at the gate
	}
	defer func() { <-sem.token }()
	if err := sem.setup(ctx); err != nil {
		return nil, err
	}
	seq, err := lkTry(ctx, sem.s, sem.dir+"/gate", &sem.gateH, chubby.LockMode_EXCLUSIVE,
		client.LockOptions{LockDelay: client.NoLockDelay}, &sem.stats)
	if err != nil || seq == nil {
		return nil, err
	}
	defer sem.releaseGate()
	p, _, err := sem.scan(ctx)
	return p, err
}

// Close closes the Semaphore's handles: the permits it holds are released
// (cleanly: no lock-delay; their Release then fails with ErrNotHeld). It
// waits (bounded by ctx) for an Acquire in progress. The Semaphore may be
// used again: the next Acquire sets it up anew.
func (sem *Semaphore) Close(ctx context.Context) error {
	select {
	case sem.token <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("recipe: close %s: %w", sem.dir, context.Cause(ctx))
	}
	defer func() { <-sem.token }()
	var errs []error
	for _, hp := range []**client.Handle{&sem.gateH, &sem.slotsH, &sem.heldH} {
		errs = append(errs, lkCloseHandle(ctx, hp, &sem.stats))
	}
	sem.ready = false
	sem.mu.Lock()
	idle, permits := sem.idle, sem.permits
	sem.idle, sem.permits = map[int]*client.Handle{}, map[*Permit]struct{}{}
	sem.mu.Unlock()
	for _, h := range idle {
		errs = append(errs, lkCloseHandle(ctx, &h, &sem.stats))
	}
	for p := range permits {
		p.mu.Lock()
		if !p.released {
			p.released = true
			errs = append(errs, lkCloseHandle(ctx, &p.h, &sem.stats))
			p.deleteMarker(ctx)
		}
		p.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Release gives the permit back: the slot's lock is released (cleanly,
// whatever becomes of ctx; see Mutex.Unlock) and its marker deleted, which
// wakes the waiter at the gate. A second Release is a *NotHeldError; an
// error otherwise means the permit had been lost (its session expired) or
// could not be released (it then goes with the session).
func (p *Permit) Release(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return &NotHeldError{Op: "release", Path: p.path}
	}
	p.released = true
	sem := p.sem
	sem.mu.Lock()
	delete(sem.permits, p)
	sem.mu.Unlock()
	err := lkRelease(ctx, "release", p.path, &p.h, &sem.stats)
	if p.h != nil {
		sem.putIdle(p.slot, p.h)
		p.h = nil
	}
	p.deleteMarker(ctx)
	return err
}

// deleteMarker deletes the permit's marker if it is still the one it
// made; under a fresh context if ctx has ended. p.mu is held.
func (p *Permit) deleteMarker(ctx context.Context) {
	if p.markerInst == 0 {
		return
	}
	inst := p.markerInst
	p.markerInst = 0
	for attempt := 0; attempt < 2; attempt++ {
		if ctx.Err() != nil {
			var cancel context.CancelFunc
			ctx, cancel = lkCleanupCtx()
			defer cancel()
		}
		p.sem.stats.call()
		_, err := p.sem.s.Multi(ctx, []client.Cmp{client.CmpInstance(p.marker, inst)},
			[]client.Op{client.OpDelete(p.marker, false)})
		if err == nil || ctx.Err() == nil {
			return // deleted, gone already (the compare failed), or the session ended
		}
	}
}

// setup creates the semaphore's directory, its size file and its slots if
// they are missing, checks N, and opens the handles the gate's user needs.
// The token is held.
func (sem *Semaphore) setup(ctx context.Context) error {
	if sem.ready {
		return nil
	}
	s := sem.s
	for _, d := range []string{sem.dir + "/slots", sem.dir + "/held"} {
		sem.stats.call()
		if _, err := s.Mkdir(ctx, d, client.MkdirOptions{Parents: true}); err != nil {
			return err
		}
	}
	if err := sem.checkSize(ctx); err != nil {
		return err
	}
	if sem.slotsH == nil {
		sem.stats.call()
		h, err := s.Open(ctx, sem.dir+"/slots", client.OpenOptions{})
		if err != nil {
			return err
		}
		sem.slotsH = h
	}
	sem.stats.call()
	sem.stats.readDirs.Add(1)
	es, err := sem.slotsH.ReadDir(ctx)
	if err != nil {
		lkAbandon(&sem.slotsH, &sem.stats)
		return err
	}
	have := make([]bool, sem.n)
	for _, e := range es {
		if i, ok := sem.slotOf(e.GetName()); ok {
			have[i] = true
		}
	}
	for i, ok := range have {
		if ok {
			continue
		}
		sem.stats.call()
		_, err := s.CreateFile(ctx, sem.slotPath(i), nil, client.CreateOptions{})
		if err != nil && !client.IsCode(err, chubby.ErrorCode_EXISTS) {
			return err
		}
	}
	sem.ready = true
	return nil
}

// unwatch stops watching the markers (off the caller's path: the handle
// is closed on a goroutine of its own). The token is held.
func (sem *Semaphore) unwatch() {
	h := sem.heldH
	if h == nil {
		return
	}
	sem.heldH = nil
	sem.stats.call()
	go func() { lkAbandon(&h, &lkStats{}) }()
}

// checkSize writes N to dir/size, or checks that the N there is ours.
func (sem *Semaphore) checkSize(ctx context.Context) error {
	path := sem.dir + "/size"
	want := strconv.Itoa(sem.n)
	sem.stats.call()
	_, err := sem.s.CreateFile(ctx, path, []byte(want), client.CreateOptions{})
	if err == nil {
		return nil
	}
	if !client.IsCode(err, chubby.ErrorCode_EXISTS) {
		return err
	}
	sem.stats.call()
	h, err := sem.s.Open(ctx, path, client.OpenOptions{})
	if err != nil {
		return err
	}
	defer lkCloseHandle(ctx, &h, &sem.stats)
	sem.stats.call()
	b, _, err := h.GetContentsAndStat(ctx)
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(string(b)); got != want {
		return fmt.Errorf("recipe: semaphore %s has %q permits (in %s), not %d", sem.dir, got, path, sem.n)
	}
	return nil
}

// scan reads the slots' listing and tries the free ones. It returns a
// permit, or none and how long the shortest lock-delay of a free slot
// still runs (0: none is in lock-delay). The token and the gate are held.
func (sem *Semaphore) scan(ctx context.Context) (*Permit, time.Duration, error) {
	sem.stats.call()
	sem.stats.readDirs.Add(1)
	es, err := sem.slotsH.ReadDir(ctx)
	if err != nil {
		if client.IsCode(err, chubby.ErrorCode_HANDLE_INVALID) {
			lkAbandon(&sem.slotsH, &sem.stats)
			sem.ready = false
		}
		return nil, 0, err
	}
	var free []int
	var delay time.Duration
	for _, e := range es {
		i, ok := sem.slotOf(e.GetName())
		if !ok {
			continue
		}
		l := e.GetStat().GetLock()
		switch {
		case l.GetDelayRemainingMs() > 0:
			if l.GetHolders() == 0 {
				d := time.Duration(l.GetDelayRemainingMs()) * time.Millisecond
				if delay == 0 || d < delay {
					delay = d
				}
			}
		case l.IsSetMode() || l.GetHolders() > 0:
		default:
			free = append(free, i)
		}
	}
	// Start anywhere, so that concurrent semaphores on one cell do not all
	// go for slot 0.
	if len(free) > 1 {
		k := rand.IntN(len(free))
		free = append(free[k:], free[:k]...)
	}
	for _, i := range free {
		h := sem.takeIdle(i)
		path := sem.slotPath(i)
		seq, err := lkTry(ctx, sem.s, path, &h, chubby.LockMode_EXCLUSIVE, sem.opts, &sem.stats)
		if err != nil {
			if h != nil {
				sem.putIdle(i, h)
			}
			return nil, 0, err
		}
		if seq == nil {
			sem.putIdle(i, h)
			continue
		}
		p := &Permit{sem: sem, slot: i, path: path, seq: seq, h: h, marker: sem.dir + "/held/" + sem.slotName(i)}
		sem.stats.call()
		st, err := sem.s.CreateFile(ctx, p.marker, nil, client.CreateOptions{Ephemeral: true})
		switch {
		case err == nil:
			p.markerInst = st.GetInstance()
		case client.IsCode(err, chubby.ErrorCode_EXISTS):
			// A marker its last holder has not deleted yet: it only wakes.
		default:
			rerr := lkRelease(ctx, "release", path, &p.h, &sem.stats)
			if p.h != nil {
				sem.putIdle(i, p.h)
			}
			return nil, 0, errors.Join(err, rerr)
		}
		sem.mu.Lock()
		sem.permits[p] = struct{}{}
		sem.mu.Unlock()
		return p, 0, nil
	}
	return nil, delay, nil
}

// releaseGate releases the gate (under a fresh context: the caller's may
// have ended).
func (sem *Semaphore) releaseGate() {
	ctx, cancel := lkCleanupCtx()
	defer cancel()
	_ = lkRelease(ctx, "release", sem.dir+"/gate", &sem.gateH, &sem.stats)
}

func (sem *Semaphore) slotName(i int) string { return fmt.Sprintf("%04d", i) }

func (sem *Semaphore) slotPath(i int) string { return sem.dir + "/slots/" + sem.slotName(i) }

// slotOf parses a slot's file name.
func (sem *Semaphore) slotOf(name string) (int, bool) {
	if len(name) != 4 {
		return 0, false
	}
	i, err := strconv.Atoi(name)
	if err != nil || i < 0 || i >= sem.n {
		return 0, false
	}
	return i, true
}

// takeIdle returns an open handle on slot i holding nothing, or nil (the
// caller opens one).
func (sem *Semaphore) takeIdle(i int) *client.Handle {
	sem.mu.Lock()
	defer sem.mu.Unlock()
	h := sem.idle[i]
	delete(sem.idle, i)
	return h
}

// putIdle keeps h, which holds nothing, for the next permit of slot i.
func (sem *Semaphore) putIdle(i int, h *client.Handle) {
	sem.mu.Lock()
	defer sem.mu.Unlock()
	if old := sem.idle[i]; old != nil && old != h {
		go func() { lkAbandon(&old, &sem.stats) }()
	}
	sem.idle[i] = h
}
