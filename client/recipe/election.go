package recipe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Election elects one leader among candidates with an election file: a
// file whose exclusive lock the leader holds and whose content is the
// leader's address (any bytes the leader gives), the layout of chubbyfs
// election and tools/examples/election. Candidates wait for the lock in
// the cell's FIFO queue ([Election.Campaign]); the winner writes its
// address; observers read it and learn of each change from events
// ([Election.Observe]).
//
// The address in the file is current only while the lock is held: a
// leader that resigns empties the file before it releases the lock, but
// one that dies leaves its address behind until the next leader writes.
//
// Failure semantics:
//
//   - The leader dies (crash, kill -9, cut off): its session ends at the
//     master when its lease runs out (a killed process's connection closes,
//     so within about one lease); the lock is released with the leader's
//     lock-delay ([CampaignOptions.LockDelay]), during which nobody leads;
//     then the first waiting candidate is granted the lock and writes its
//     address. Observers see "no leader" once the lock is free, then the
//     new leader. Takeover takes about lease + lock-delay.
//   - A leader's session goes into jeopardy (its lease ran out without a
//     renewal): the lock may be someone else's soon, so the leader must
//     stop acting as leader at once. The recipe does not read
//     Session.Events, which belongs to the application; [Leadership.Held]
//     says false in jeopardy, and the [Leadership.Sequencer] fences the
//     leader's writes at the servers it talks to.
//   - The master fails over: sessions, the lock (same lock generation)
//     and the file survive, so a leader whose session came through
//     without expiring still leads; observers' events are delivered by the
//     new master. The new master withdraws the Acquires that were waiting
//     at the old one; Campaign asks again, so a waiting candidate keeps
//     waiting, though the queue's order is rebuilt in the order the
//     candidates come back.
//   - The election file is deleted: the lock goes with it; observers end
//     with [ErrElectionGone].
type Election struct {
	s    *client.Session
	path string
}

// ErrElectionGone is returned by [LeaderObserver.Next] when the election
// file was deleted: nobody leads it any more, and the observer's handle
// is invalid (observe the new file, if one is made, with a new observer).
var ErrElectionGone = errors.New("recipe: the election file was deleted")

// ErrObserverClosed is returned by [LeaderObserver.Next] after Close.
var ErrObserverClosed = errors.New("recipe: observer closed")

// NewElection returns the election whose file is path, run on session s.
// The file's parent directory must exist when a candidate campaigns.
func NewElection(s *client.Session, path string) (*Election, error) {
	if s == nil {
		return nil, coordInvalid("election", path, "no session")
	}
	if err := coordFilePath("election", path); err != nil {
		return nil, err
	}
	return &Election{s: s, path: path}, nil
}

// Path returns the election file's path.
func (e *Election) Path() string { return e.path }

// CampaignOptions modify Campaign.
type CampaignOptions struct {
	// Wait bounds the wait for leadership: Campaign fails with TIMED_OUT
	// (client.IsCode) when it passes. 0: wait as long as it takes (until
	// ctx ends).
	Wait time.Duration
	// LockDelay is how long the lock stays unavailable after this
	// candidate's session dies while leading (client.LockOptions.LockDelay:
	// 0 the cell's default, chubby.DEFAULT_LOCK_DELAY_MS; client.NoLockDelay
	// none; at most chubby.MAX_LOCK_DELAY_MS).
	LockDelay time.Duration
}

// validate checks o for op on path.
func (o CampaignOptions) validate(op, path string) error {
	if o.Wait < 0 {
		return coordInvalid(op, path, "negative wait %v", o.Wait)
	}
	return coordLockDelay(op, path, o.LockDelay)
}

// Campaign waits until this candidate leads the election and announces
// address (1..chubby.MAX_CONTENT_BYTES bytes) in the election file,
// creating the file if it is missing. It opens a handle of its own, which
// the returned Leadership holds until Resign. If it fails or ctx ends
// first, nothing is left held: the handle is closed, which also drops a
// grant that raced with the failure.
func (e *Election) Campaign(ctx context.Context, address []byte, opts CampaignOptions) (*Leadership, error) {
	if err := coordAddress("election campaign", e.path, address); err != nil {
		return nil, err
	}
	if err := opts.validate("election campaign", e.path); err != nil {
		return nil, err
	}
	h, err := e.openCandidate(ctx)
	if err != nil {
		return nil, err
	}
	return e.campaignOn(ctx, h, address, opts)
}

// openCandidate opens the election file for a candidate, creating it.
func (e *Election) openCandidate(ctx context.Context) (*client.Handle, error) {
	return e.s.Open(ctx, e.path, client.OpenOptions{Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE})
}

// campaignOn waits for the lock through h and announces address; on
// failure it closes h.
func (e *Election) campaignOn(ctx context.Context, h *client.Handle, address []byte, opts CampaignOptions) (*Leadership, error) {
	seq, err := coordAcquire(ctx, h, chubby.LockMode_EXCLUSIVE, opts.Wait, client.LockOptions{LockDelay: opts.LockDelay})
	if err == nil {
		_, err = h.SetContents(ctx, address)
	}
	if err != nil {
		coordClose(ctx, h)
		return nil, err
	}
	return &Leadership{h: h, seq: seq, address: bytes.Clone(address)}, nil
}

// Leadership is a won election: the handle that holds the election file's
// lock. Safe for concurrent use.
type Leadership struct {
	h       *client.Handle
	seq     *chubby.Sequencer
	address []byte

	mu       sync.Mutex
	resigned bool
}

// Sequencer returns the lock's sequencer: the leader passes it (or its
// printable form, client.FormatSequencer) with its writes, so that the
// servers it talks to can refuse a deposed leader's (client.CheckSequencer,
// or a lock-generation comparison).
func (l *Leadership) Sequencer() *chubby.Sequencer { return l.seq }

// LockGeneration returns the leader's term: the lock generation of its hold.
func (l *Leadership) LockGeneration() int64 { return l.seq.GetLockGeneration() }

// Address returns the address this leader announced.
func (l *Leadership) Address() []byte { return bytes.Clone(l.address) }

// Held reports whether this leader may still act as leader: it has not
// resigned and its session is safe (not in jeopardy, not ended). It makes
// no call, so it cannot see the election file deleted; the sequencer
// check can.
func (l *Leadership) Held() bool {
	l.mu.Lock()
	resigned := l.resigned
	l.mu.Unlock()
	return !resigned && l.h.Session().State() == client.StateSafe
}

// Resign steps down: it empties the election file, so that nobody takes
// this leader's address for current once the lock is free, releases the
// lock (no lock-delay: the next candidate leads at once) and closes the
// handle. Every step is tried; the error joins those that failed. After
// Resign, Held is false. A second Resign does nothing.
func (l *Leadership) Resign(ctx context.Context) error {
	l.mu.Lock()
	if l.resigned {
		l.mu.Unlock()
		return nil
	}
	l.resigned = true
	l.mu.Unlock()
	var errs []error
	if _, err := l.h.SetContents(ctx, nil); err != nil {
		errs = append(errs, fmt.Errorf("clear: %w", err))
	}
	if err := l.h.Release(ctx); err != nil {
		errs = append(errs, fmt.Errorf("release: %w", err))
	}
	if err := l.h.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("close: %w", err))
	}
	return errors.Join(errs...)
}

// LeaderInfo is who leads an election, as read from its file.
type LeaderInfo struct {
	// Address is the leader's address; nil when nobody leads (the lock is
	// free, or its holder has not announced itself yet, or stepped down).
	Address []byte
	// Last, when nobody leads, is the address left in the file (the last
	// leader's, if it died without resigning); nil if none.
	Last []byte
	// LockGeneration is the lock's generation: the leader's term, or, when
	// nobody leads, the last term.
	LockGeneration int64
	// Waiters is how many candidates wait for the lock.
	Waiters int32
	// DelayRemaining, when nobody leads, is how long the lock stays in the
	// lock-delay of a leader that died.
	DelayRemaining time.Duration
}

// Leads reports whether somebody leads.
func (l LeaderInfo) Leads() bool { return l.Address != nil }

// sameLeader reports whether l and m name the same leadership: the same
// leader in the same term, or nobody.
func (l LeaderInfo) sameLeader(m LeaderInfo) bool {
	if !l.Leads() || !m.Leads() {
		return l.Leads() == m.Leads()
	}
	return bytes.Equal(l.Address, m.Address) && l.LockGeneration == m.LockGeneration
}

// leaderFrom reads who leads from the file's content and Stat: the
// content, if the lock is held exclusive and the content is not empty.
func leaderFrom(data []byte, st *chubby.Stat) LeaderInfo {
	li := st.GetLock()
	l := LeaderInfo{LockGeneration: st.GetLockGeneration(), Waiters: li.GetWaiters(),
		DelayRemaining: time.Duration(li.GetDelayRemainingMs()) * time.Millisecond}
	held := li.IsSetMode() && li.GetMode() == chubby.LockMode_EXCLUSIVE
	switch {
	case held && len(data) > 0:
		l.Address = bytes.Clone(data)
	case !held && len(data) > 0:
		l.Last = bytes.Clone(data)
	}
	return l
}

// Leader reads who leads now, in one read of the file (which must exist).
// In the moment between a new leader's grant and its write, the file
// still names the previous leader under the new lock generation: a single
// read cannot tell, an observer can (see Observe).
func (e *Election) Leader(ctx context.Context) (LeaderInfo, error) {
	h, err := e.s.Open(ctx, e.path, client.OpenOptions{})
	if err != nil {
		return LeaderInfo{}, err
	}
	defer coordClose(ctx, h)
	data, st, err := h.GetContentsAndStat(ctx)
	if err != nil {
		return LeaderInfo{}, err
	}
	return leaderFrom(data, st), nil
}

// ObserveOptions modify Observe.
type ObserveOptions struct {
	// Recheck is how often the observer re-reads the file while it waits
	// for events (default 200 ms). A leader's death sends no event (its
	// lock is freed, no file changes), so the observer notices it by
	// re-reading; the read is answered from the session's cache, which
	// the cell invalidates when the lock changes, so a re-read costs a
	// call only after a change (or always, with client.Config.DisableCache).
	Recheck time.Duration
}

// defaultRecheck is ObserveOptions.Recheck's default.
const defaultRecheck = 200 * time.Millisecond

// Observe opens the election file (which must exist) to follow who leads
// it: see LeaderObserver. Close the observer when done.
func (e *Election) Observe(ctx context.Context, opts ObserveOptions) (*LeaderObserver, error) {
	if opts.Recheck < 0 {
		return nil, coordInvalid("election observe", e.path, "negative recheck %v", opts.Recheck)
	}
	if opts.Recheck == 0 {
		opts.Recheck = defaultRecheck
	}
	h, err := e.s.Open(ctx, e.path, client.OpenOptions{EventMask: chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED |
		chubby.EVENT_MASK_LOCK_ACQUIRED | chubby.EVENT_MASK_HANDLE_INVALID})
	if err != nil {
		return nil, err
	}
	return &LeaderObserver{h: h, recheck: opts.Recheck, resync: true}, nil
}

// LeaderObserver follows who leads an election. Its first Next returns who
// leads now; each later Next returns the next change of leadership: a new
// leader (or the same one in a new term), or "no leader". Changes come
// from the file's events (contents written, lock acquired, file deleted)
// and from re-reads (a dead leader's lock freed). A slow caller does not
// fall behind: each Next reports the state it reads then, so changes that
// came and went meanwhile are skipped.
//
// The observer tells a stale address from a current one by the order of
// events: after a LOCK_ACQUIRED, the file names the previous leader until
// the new holder's write, and the observer reports "no leader" meanwhile.
// (Its first read cannot tell: it takes the file as current.)
//
// Not safe for concurrent use; one goroutine calls Next.
type LeaderObserver struct {
	h       *client.Handle
	recheck time.Duration

	started bool
	closed  bool
	last    LeaderInfo // what Next returned last
	// From the events, in order: the latest lock generation granted, the
	// latest content generation written, and the lock generation during
	// which that write was made.
	grant, writeGen, writtenIn int64
	resync                     bool   // take the next read as current (start, lost events)
	dropped                    uint64 // h.DroppedEvents when last looked at
	gone                       bool   // the file was deleted
}

// Next returns who leads now (first call) or the next change of
// leadership. It fails with ErrElectionGone once the file is deleted, with
// an error wrapping the session's Err when the session ends, with
// ErrObserverClosed after Close, and with ctx's error when ctx ends.
func (o *LeaderObserver) Next(ctx context.Context) (LeaderInfo, error) {
	if o.closed {
		return LeaderInfo{}, ErrObserverClosed
	}
	for {
		if o.started {
			if err := o.wait(ctx); err != nil {
				return LeaderInfo{}, err
			}
		}
		if o.gone {
			return LeaderInfo{}, ErrElectionGone
		}
		info, current, err := o.read(ctx)
		if err != nil {
			return LeaderInfo{}, err
		}
		if !current {
			continue // events are on their way; they wake the next turn
		}
		if !o.started || !info.sameLeader(o.last) {
			o.started, o.last = true, info
			return info, nil
		}
	}
}

// wait blocks until an event arrives (applying it and any queued behind
// it) or the recheck interval passes.
func (o *LeaderObserver) wait(ctx context.Context) error {
	t := time.NewTimer(o.recheck)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case ev, ok := <-o.h.Events():
		if !ok {
			return o.ended()
		}
		o.apply(ev)
		o.drain()
	case <-t.C:
	}
	if d := o.h.DroppedEvents(); d != o.dropped {
		o.dropped, o.resync = d, true
	}
	return nil
}

// drain applies the events already queued, without waiting.
func (o *LeaderObserver) drain() {
	for range client.HandleEventBuffer {
		select {
		case ev, ok := <-o.h.Events():
			if !ok {
				return // wait's next turn reports why
			}
			o.apply(ev)
		default:
			return
		}
	}
}

// ended says why the event channel closed.
func (o *LeaderObserver) ended() error {
	if o.gone {
		return nil
	}
	if err := o.h.Session().Err(); err != nil {
		return fmt.Errorf("election observe %s: %w", o.h.Path(), err)
	}
	return ErrObserverClosed
}

// apply notes what one event says.
func (o *LeaderObserver) apply(ev client.Event) {
	switch ev.Kind {
	case chubby.EventKind_FILE_CONTENTS_MODIFIED:
		if ev.ContentGeneration > o.writeGen {
			o.writeGen, o.writtenIn = ev.ContentGeneration, o.grant
		}
	case chubby.EventKind_LOCK_ACQUIRED:
		o.grant = max(o.grant, ev.LockGeneration)
	case chubby.EventKind_HANDLE_INVALID:
		o.gone = true
	case chubby.EventKind_EVENTS_LOST:
		o.resync = true
	}
}

// read reads the file and says who leads, and whether the read agrees
// with the events received (current): a read ahead of its events (a
// write or grant whose event has not arrived) or behind them (a reply
// that left before the change) is not.
func (o *LeaderObserver) read(ctx context.Context) (LeaderInfo, bool, error) {
	data, st, err := o.h.GetContentsAndStat(ctx)
	if client.IsCode(err, chubby.ErrorCode_HANDLE_INVALID) {
		o.gone = true
		return LeaderInfo{}, false, ErrElectionGone
	}
	if err != nil {
		return LeaderInfo{}, false, err
	}
	if o.resync {
		o.grant, o.writeGen, o.writtenIn = st.GetLockGeneration(), st.GetContentGeneration(), st.GetLockGeneration()
		o.resync = false
	}
	if st.GetLockGeneration() != o.grant || st.GetContentGeneration() != o.writeGen {
		return LeaderInfo{}, false, nil
	}
	info := leaderFrom(data, st)
	if info.Leads() && o.writtenIn != o.grant {
		// Written in an earlier term: the holder has not announced itself.
		info.Last, info.Address = info.Address, nil
	}
	return info, true, nil
}

// Close closes the observer's handle; Next then fails with
// ErrObserverClosed.
func (o *LeaderObserver) Close(ctx context.Context) error {
	if o.closed {
		return nil
	}
	o.closed = true
	err := o.h.Close(ctx)
	if o.gone && client.IsCode(err, chubby.ErrorCode_HANDLE_INVALID) {
		return nil
	}
	return err
}

// coordAcquire waits for the lock of h in mode: at most wait, or, when
// wait is 0, as long as it takes (until ctx ends), in turns of the longest
// wait one Acquire may ask for. A master failover withdraws the Acquires
// waiting at the old master, whose callers hear UNAVAILABLE, NOT_MASTER
// or nothing at all; coordAcquire then asks the new master again (a
// bounded number of times), so the candidate keeps waiting, in the queue
// the new master rebuilds in the order the waiters come back.
func coordAcquire(ctx context.Context, h *client.Handle, mode chubby.LockMode, wait time.Duration, opts client.LockOptions) (*chubby.Sequencer, error) {
	maxTurn := time.Duration(chubby.MAX_ACQUIRE_WAIT_MS) * time.Millisecond
	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	for retries := 0; ; {
		turn := maxTurn
		if wait > 0 {
			turn = max(min(time.Until(deadline), maxTurn), time.Millisecond)
		}
		seq, err := h.Acquire(ctx, mode, turn, opts)
		switch {
		case err == nil:
			return seq, nil
		case client.IsCode(err, chubby.ErrorCode_TIMED_OUT):
			if wait > 0 && time.Until(deadline) <= 0 {
				return nil, err
			}
		case retries < coordAcquireRetries && coordAcquireLost(ctx, h, err):
			retries++
			if err := coordPause(ctx, coordAcquirePause); err != nil {
				return nil, err
			}
		default:
			return nil, err
		}
	}
}

// How often, and how far apart, coordAcquire asks again after a failover.
const (
	coordAcquireRetries = 100
	coordAcquirePause   = 100 * time.Millisecond
)

// coordAcquireLost reports whether an Acquire failed because its master
// went away (the request is withdrawn, so asking again is safe), while
// the session and ctx live on.
func coordAcquireLost(ctx context.Context, h *client.Handle, err error) bool {
	if ctx.Err() != nil || h.Session().Err() != nil {
		return false
	}
	if code, ok := client.Code(err); ok {
		return code == chubby.ErrorCode_UNAVAILABLE || code == chubby.ErrorCode_NOT_MASTER || code == chubby.ErrorCode_STALE_EPOCH
	}
	for _, final := range []error{context.Canceled, context.DeadlineExceeded, client.ErrPoisoned,
		client.ErrSessionClosed, client.ErrClientClosed} {
		if errors.Is(err, final) {
			return false
		}
	}
	return true // unreachable, or the connection broke mid-wait
}

// coordPause waits d, or until ctx ends (its error).
func coordPause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// coordClose closes h with a bound of its own, also when ctx has ended:
// closing releases what h holds, so it must be tried. Its error is
// dropped: the handle goes with its session at the latest.
func coordClose(ctx context.Context, h *client.Handle) {
	cctx, cancel := coordDetached(ctx)
	defer cancel()
	_ = h.Close(cctx)
}

// coordCleanupTimeout bounds clean-up calls made after the caller's
// context may have ended.
const coordCleanupTimeout = 5 * time.Second

// coordDetached is a context for clean-up: ctx's values without its end,
// bounded by coordCleanupTimeout.
func coordDetached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), coordCleanupTimeout)
}

// coordInvalid is the error of a bad argument: an *client.OpError with
// the cell's INVALID_ARGUMENT code, so that callers test it with
// client.IsCode as they do the cell's own refusals.
func coordInvalid(op, path, format string, args ...any) error {
	return &client.OpError{Op: op, Path: path,
		Err: &chubby.ChubbyError{Code: chubby.ErrorCode_INVALID_ARGUMENT, Message: fmt.Sprintf(format, args...)}}
}

// coordFilePath checks that path is a valid path other than "/".
func coordFilePath(op, path string) error {
	if err := client.ValidatePath(path); err != nil {
		return &client.OpError{Op: op, Path: path, Err: err}
	}
	if path == "/" {
		return coordInvalid(op, path, "/ is the root directory")
	}
	return nil
}

// coordAddress checks an address to announce: 1..MAX_CONTENT_BYTES bytes.
func coordAddress(op, path string, address []byte) error {
	if len(address) == 0 {
		return coordInvalid(op, path, "empty address (an empty file means nobody leads)")
	}
	if len(address) > chubby.MAX_CONTENT_BYTES {
		return coordInvalid(op, path, "address of %d bytes, at most %d allowed", len(address), chubby.MAX_CONTENT_BYTES)
	}
	return nil
}

// coordLockDelay checks a LockOptions.LockDelay value.
func coordLockDelay(op, path string, d time.Duration) error {
	if maxDelay := time.Duration(chubby.MAX_LOCK_DELAY_MS) * time.Millisecond; d != client.NoLockDelay && (d < 0 || d > maxDelay) {
		return coordInvalid(op, path, "lock-delay %v outside 0..%v (or client.NoLockDelay)", d, maxDelay)
	}
	return nil
}
