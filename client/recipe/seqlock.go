package recipe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// seqLockPrefix starts the names of a SeqLock's queue nodes:
// dir/lock-<token>-0000000000, ...
const seqLockPrefix = "lock-"

// SeqLock is ZooKeeper's lock recipe on the cell's nodes, with no use of
// the cell's locks: to lock, create dir/lock- EPHEMERAL|SEQUENTIAL (the
// cell appends a 10-digit counter that only grows), list dir, and if the
// node is the lowest, hold the lock; else watch only the node just before
// it (HANDLE_INVALID on a handle to it) and list again when it goes. To
// unlock, delete the node. Each waiter watches one node, so a release
// wakes one waiter (no herd), and the queue is FIFO by creation order.
// The name carries a random token of the Lock call before the counter
// (dir/lock-<token>-0000000042, Curator's "protected" nodes), so that a
// create whose reply was lost is found in the listing and used, not left
// behind to block the queue; the queue is ordered by the counter.
//
// It exists to be measured against the cell's own queue (Mutex): see
// handoff_bench_test.go. A hand-off costs the releaser's Delete, then an
// event delivered to the successor on its KeepAlive, a listing and the
// close of its watch handle, where the cell's queue grants the lock to the
// next waiter in the very command that releases it. Prefer Mutex.
//
// # When a holder dies
//
// Its node is ephemeral: it is deleted when the holder's session expires
// (the lease), and its successor holds the lock as soon as it hears. There
// is no lock-delay — nodes have none — so requests the dead holder sent
// late may reach servers after the next holder's, and there is no
// sequencer for servers to check with client.CheckSequencer (the node's
// path and instance, Node and the Stat of a GetStat, identify the hold;
// a server could check that the node still exists with that instance). A
// waiter that dies leaves the queue the same way; its successor then
// watches the node before it.
//
// # When the master fails over
//
// Nodes, handles and queued events are replicated state: the queue keeps
// its order, the holder keeps the lock, and a watch set before the
// failover still fires (the new master delivers the events the old one
// had not). Unlike the cell's lock queue, whose waiting requests a new
// master withdraws, nothing has to be sent again.
//
// A SeqLock value holds the lock once (not re-entrant: Lock while held is
// ErrHeld). It is safe for concurrent use.
type SeqLock struct {
	s     *client.Session
	dir   string
	stats lkStats

	st   lkState
	dirH *client.Handle // dir, for ReadDir; owned by whoever set the phase
	node string         // the queue node (lkAcquiring, lkHeld)
	inst int64          // its instance
}

// NewSeqLock returns a SeqLock whose queue is the directory dir, created
// (with missing parents) at the first Lock. It makes no call.
func NewSeqLock(s *client.Session, dir string) *SeqLock {
	return &SeqLock{s: s, dir: dir}
}

// Dir returns the queue's directory.
func (l *SeqLock) Dir() string { return l.dir }

// Node returns the path of this value's queue node while it holds the
// lock, else "".
func (l *SeqLock) Node() string {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	if l.st.phase != lkHeld {
		return ""
	}
	return l.node
}

// Held reports whether this value holds the lock.
func (l *SeqLock) Held() bool {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	return l.st.phase == lkHeld
}

// Lock queues and waits until the value's node is the lowest in the
// directory, ctx ends (the node is then deleted: the value leaves the
// queue) or the session ends.
func (l *SeqLock) Lock(ctx context.Context) error {
	l.st.mu.Lock()
	for l.st.phase != lkIdle {
		if l.st.phase == lkHeld || l.st.phase == lkAcquiring {
			l.st.mu.Unlock()
			return fmt.Errorf("recipe: lock %s: %w", l.dir, ErrHeld)
		}
		if err := l.st.waitLocked(ctx); err != nil {
			l.st.mu.Unlock()
			return fmt.Errorf("recipe: lock %s: %w", l.dir, err)
		}
	}
	l.st.setLocked(lkAcquiring)
	l.st.mu.Unlock()

	err := l.lock(ctx)

	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	if err != nil {
		l.st.setLocked(lkIdle)
		return err
	}
	l.st.setLocked(lkHeld)
	return nil
}

func (l *SeqLock) lock(ctx context.Context) error {
	s := l.s
	backoff := lkBackoffMin
	// pause waits before trying again after a failure that passes (a
	// failover, an overloaded master); it says whether to go on.
	pause := func(err error) bool {
		if !lkTransient(err) || ctx.Err() != nil || lkSleep(ctx, backoff) != nil {
			return false
		}
		backoff = min(2*backoff, lkBackoffMax)
		return true
	}
	for l.dirH == nil {
		l.stats.call()
		_, err := s.Mkdir(ctx, l.dir, client.MkdirOptions{Parents: true})
		var h *client.Handle
		if err == nil {
			l.stats.call()
			h, err = s.Open(ctx, l.dir, client.OpenOptions{})
		}
		if err != nil {
			if pause(err) {
				continue
			}
			return l.ctxErr(ctx, err)
		}
		l.dirH = h
	}
	// The node's name carries a token of this Lock, so that a create
	// whose outcome is unknown (the reply lost for good) is found in the
	// listing rather than left in the queue.
	token := fmt.Sprintf("%016x", rand.Uint64())
	l.node, l.inst = "", 0
	leave := func(err error) error {
		if l.node != "" {
			l.deleteNode(ctx)
		}
		return l.ctxErr(ctx, err)
	}
	for {
		if l.node == "" {
			l.stats.call()
			st, err := s.CreateFile(ctx, l.dir+"/"+seqLockPrefix+token+"-", nil, client.CreateOptions{Ephemeral: true, Sequential: true})
			if err == nil {
				l.node, l.inst = st.GetPath(), st.GetInstance()
			} else if !pause(err) {
				return leave(err)
			}
		}
		l.stats.call()
		l.stats.readDirs.Add(1)
		es, err := l.dirH.ReadDir(ctx)
		if err != nil {
			if client.IsCode(err, chubby.ErrorCode_HANDLE_INVALID) {
				lkAbandon(&l.dirH, &l.stats) // the directory went (and our node with it)
			}
			if pause(err) && l.dirH != nil {
				continue
			}
			return leave(err)
		}
		queue := seqQueue(es)
		mine := -1
		for i := 0; i < len(queue); i++ {
			q := queue[i]
			if !strings.Contains(q.name, token) {
				continue
			}
			path := l.dir + "/" + q.name
			switch {
			case l.node == "":
				l.node, l.inst = path, q.inst // created after all: adopt it
			case path != l.node:
				// A second create of this Lock that applied late: it
				// must not stay in the queue.
				l.stats.call()
				if _, err := s.Multi(ctx, []client.Cmp{client.CmpInstance(path, q.inst)},
					[]client.Op{client.OpDelete(path, false)}); err != nil {
					return leave(err)
				}
				queue = append(queue[:i], queue[i+1:]...)
				i--
				continue
			}
			mine = i
		}
		if l.node == "" {
			continue // not created: create it now
		}
		if mine < 0 {
			return leave(fmt.Errorf("recipe: lock %s: queue node %s has gone (session expired?)", l.dir, l.node))
		}
		if mine == 0 {
			return nil // the lowest: held
		}
		pred := l.dir + "/" + queue[mine-1].name
		l.stats.call()
		ph, err := s.Open(ctx, pred, client.OpenOptions{EventMask: chubby.EVENT_MASK_HANDLE_INVALID})
		if client.IsCode(err, chubby.ErrorCode_NOT_FOUND) {
			continue // gone already: look again
		}
		if err != nil {
			if pause(err) {
				continue
			}
			return leave(err)
		}
		backoff = lkBackoffMin
		var werr error
		select {
		case _, ok := <-ph.Events():
			if ok {
				l.stats.events.Add(1)
			}
		case <-ctx.Done():
			werr = context.Cause(ctx)
		case <-s.Done():
			werr = s.Err()
		}
		// The watch is done (its node is gone, or we stop): close the
		// handle off the hand-off's path.
		l.stats.call()
		go func() { lkAbandon(&ph, &lkStats{}) }()
		if werr != nil {
			return leave(werr)
		}
	}
}

// ctxErr is err, or the context's error once ctx has ended, for the
// caller of Lock.
func (l *SeqLock) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, context.Cause(ctx)) {
		err = context.Cause(ctx)
	}
	if _, ok := err.(*client.OpError); ok {
		return err
	}
	return fmt.Errorf("recipe: lock %s: %w", l.dir, err)
}

// seqNode is a queue node: its name and instance.
type seqNode struct {
	name string
	inst int64
}

// seqQueue returns the queue nodes of a listing in queue order: by the
// 10-digit counter the cell appended (the names' tokens differ).
func seqQueue(es []*chubby.DirEntry) []seqNode {
	var q []seqNode
	for _, e := range es {
		n := e.GetName()
		if !strings.HasPrefix(n, seqLockPrefix) || len(n) < len(seqLockPrefix)+10 || !seqDigits(n[len(n)-10:]) {
			continue
		}
		q = append(q, seqNode{n, e.GetStat().GetInstance()})
	}
	sort.Slice(q, func(i, j int) bool { return q[i].name[len(q[i].name)-10:] < q[j].name[len(q[j].name)-10:] })
	return q
}

func seqDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Unlock deletes the value's queue node, which hands the lock to the next
// in the queue. Without a hold it is a *NotHeldError; if the node had
// gone already (the session expired, or someone deleted it) the lock had
// been lost, and the error says so (it matches ErrNotHeld too).
func (l *SeqLock) Unlock(ctx context.Context) error {
	l.st.mu.Lock()
	if l.st.phase != lkHeld {
		l.st.mu.Unlock()
		return &NotHeldError{Op: "unlock", Path: l.dir}
	}
	l.st.setLocked(lkReleasing)
	l.st.mu.Unlock()

	gone, err := l.deleteNode(ctx)

	l.st.mu.Lock()
	l.st.setLocked(lkIdle)
	l.st.mu.Unlock()
	if err != nil {
		return err
	}
	if gone {
		return &NotHeldError{Op: "unlock", Path: l.dir, Reason: "its queue node " + l.node + " had gone: the lock was lost"}
	}
	return nil
}

// Close closes the value's handle on the directory; a hold is released
// (its node deleted). It waits (bounded by ctx) for a Lock in progress.
func (l *SeqLock) Close(ctx context.Context) error {
	if l.Held() {
		if err := l.Unlock(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
			return err
		}
	}
	l.st.mu.Lock()
	for l.st.phase != lkIdle {
		if err := l.st.waitLocked(ctx); err != nil {
			l.st.mu.Unlock()
			return fmt.Errorf("recipe: close %s: %w", l.dir, err)
		}
	}
	l.st.setLocked(lkReleasing)
	l.st.mu.Unlock()
	err := lkCloseHandle(ctx, &l.dirH, &l.stats)
	l.st.mu.Lock()
	l.st.setLocked(lkIdle)
	l.st.mu.Unlock()
	return err
}

// deleteNode deletes the value's queue node if it is still the instance
// it created, trying again after failures that pass, under a fresh
// context once ctx has ended. gone reports that it was not there any more.
func (l *SeqLock) deleteNode(ctx context.Context) (gone bool, err error) {
	cctx, cancel := lkCleanupCtx()
	defer cancel()
	backoff := lkBackoffMin
	for attempt := 0; ; attempt++ {
		use := ctx
		if ctx.Err() != nil {
			use = cctx
		}
		l.stats.call()
		var r client.MultiResult
		r, err = l.s.Multi(use, []client.Cmp{client.CmpInstance(l.node, l.inst)},
			[]client.Op{client.OpDelete(l.node, false)})
		if err == nil {
			return !r.Succeeded, nil
		}
		if client.IsCode(err, chubby.ErrorCode_SESSION_EXPIRED) {
			return true, nil // gone with the session
		}
		if !lkTransient(err) && ctx.Err() == nil || attempt == 5 || cctx.Err() != nil {
			return false, fmt.Errorf("recipe: unlock %s: delete %s: %w", l.dir, l.node, err)
		}
		lkSleep(cctx, backoff)
		backoff = min(2*backoff, lkBackoffMax)
	}
}
