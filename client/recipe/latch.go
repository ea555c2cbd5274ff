package recipe

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// LeaderLatch is Curator's LeaderLatch on an [Election]: Start joins the
// election in the background, Await blocks until this latch leads,
// HasLeadership says whether it leads now, and Close leaves (handing
// leadership to the next candidate at once if this one led). The latch's
// id is what it announces in the election file while it leads, so
// observers and chubbyfs election show name it.
//
// Candidates are served in the order they started (the lock's FIFO
// queue), one leader at a time. Failure semantics are the Election's: a
// leader that dies is replaced when its session has expired (about one
// lease after a kill) and its lock-delay has passed; one whose session is
// in jeopardy has no leadership (HasLeadership is false) until the
// session is safe again, and keeps it if the session survives; a master
// failover keeps a leading latch's lock and term, and a waiting latch
// waiting (its place in the queue is taken again at the new master). If the
// session ends, the latch is over: Await fails with the session's error
// and HasLeadership is false; start a new latch on a new session.
type LeaderLatch struct {
	e    *Election
	id   []byte
	opts CampaignOptions

	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc // stops the background campaign
	won     chan struct{}      // closed when the lock is granted
	ended   chan struct{}      // closed when the background campaign returns
	lead    *Leadership        // set before won closes
	err     error              // why the campaign ended without leadership
}

// LatchOptions modify a LeaderLatch.
type LatchOptions struct {
	// LockDelay is how long leadership stays vacant after this latch's
	// session dies while leading (as CampaignOptions.LockDelay).
	LockDelay time.Duration
}

// ErrLatchClosed is returned by Await and Start after Close.
var ErrLatchClosed = errors.New("recipe: leader latch closed")

// NewLeaderLatch returns a latch for the election file path on session s,
// announcing id (1..chubby.MAX_CONTENT_BYTES bytes) while it leads.
func NewLeaderLatch(s *client.Session, path string, id []byte, opts LatchOptions) (*LeaderLatch, error) {
	e, err := NewElection(s, path)
	if err != nil {
		return nil, err
	}
	if err := coordAddress("leader latch", path, id); err != nil {
		return nil, err
	}
	if err := coordLockDelay("leader latch", path, opts.LockDelay); err != nil {
		return nil, err
	}
	return &LeaderLatch{e: e, id: append([]byte(nil), id...), opts: CampaignOptions{LockDelay: opts.LockDelay},
		won: make(chan struct{}), ended: make(chan struct{})}, nil
}

// Start joins the election: it opens the election file (creating it; its
// parent directory must exist) under ctx, then waits for leadership in the
// background until the lock is granted, Close, or the session ends. A
// latch starts once.
func (l *LeaderLatch) Start(ctx context.Context) error {
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		return ErrLatchClosed
	case l.started:
		l.mu.Unlock()
		return coordInvalid("leader latch", l.e.path, "already started")
	}
	l.started = true
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel = cancel
	l.mu.Unlock()
	// The open runs without l.mu, so that HasLeadership and Close do not
	// wait for the cell; Close cancels run, which the campaign then sees.
	h, err := l.e.openCandidate(ctx)
	if err != nil {
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		close(l.ended)
		return err
	}
	go l.campaign(run, h)
	return nil
}

// campaign waits for the lock through h and records the outcome. A grant
// that comes after Close is given up at once.
func (l *LeaderLatch) campaign(ctx context.Context, h *client.Handle) {
	defer close(l.ended)
	lead, err := l.e.campaignOn(ctx, h, l.id, l.opts)
	l.mu.Lock()
	if err != nil {
		l.err = err
		l.mu.Unlock()
		return
	}
	l.lead = lead
	closed := l.closed
	close(l.won)
	l.mu.Unlock()
	if closed {
		rctx, cancel := coordDetached(ctx)
		defer cancel()
		_ = lead.Resign(rctx)
	}
}

// Await blocks until this latch leads (nil), the latch ends without
// leading (closed: ErrLatchClosed; the session ended: its error), or ctx
// ends. It returns nil at once when the latch has led and still may:
// check HasLeadership before each act of leadership.
func (l *LeaderLatch) Await(ctx context.Context) error {
	l.mu.Lock()
	started, closed := l.started, l.closed
	l.mu.Unlock()
	if closed {
		return ErrLatchClosed
	}
	if !started {
		return coordInvalid("leader latch", l.e.path, "not started")
	}
	select {
	case <-l.won:
		if err := l.e.s.Err(); err != nil {
			return err
		}
		return nil
	case <-l.ended:
		return l.endErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// endErr says why the campaign ended (it has).
func (l *LeaderLatch) endErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lead != nil {
		return nil
	}
	if l.closed {
		return ErrLatchClosed
	}
	if err := l.e.s.Err(); err != nil {
		return err
	}
	return l.err
}

// HasLeadership reports whether this latch leads now: its lock was
// granted, it is not closed, and its session is safe. It makes no call.
func (l *LeaderLatch) HasLeadership() bool {
	l.mu.Lock()
	lead, closed := l.lead, l.closed
	l.mu.Unlock()
	return !closed && lead != nil && lead.Held()
}

// Sequencer returns the sequencer of this latch's lock while it has led,
// for fencing its writes; nil before.
func (l *LeaderLatch) Sequencer() *chubby.Sequencer {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lead == nil {
		return nil
	}
	return l.lead.Sequencer()
}

// Close leaves the election: a waiting latch stops waiting and closes its
// handle; a leading one resigns (empties the file and releases the lock,
// so the next candidate leads at once). Close of a closed latch does
// nothing.
func (l *LeaderLatch) Close(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	started, cancel := l.started, l.cancel
	l.mu.Unlock()
	if !started {
		return nil
	}
	cancel()
	select {
	case <-l.ended:
	case <-ctx.Done():
		return ctx.Err()
	}
	l.mu.Lock()
	lead := l.lead
	l.mu.Unlock()
	if lead == nil {
		return nil // the campaign closed its handle
	}
	return lead.Resign(ctx)
}
