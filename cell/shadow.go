package cell

import (
	"errors"
	"sync"

	"github.com/chubbygo/chubby/fs"
)

// shadow is a second copy of the fs state, kept on a goroutine of its own
// a few commands behind the one the master serves from, so that snapshots
// are encoded without stopping the replica. Encoding a million nodes takes
// seconds; done on the replica's loop (as before), every command, lease
// renewal and read waited for it. The state machine is deterministic, so
// the shadow, given the same entries in the same order, is at every index
// byte for byte the state the loop had there: a snapshot request queued
// right after entry i is encoded from the shadow when it reaches i, while
// the loop goes on. The cost is the state held twice and every command
// applied twice (on another core).
//
// The queue between the two is bounded (shadowMaxQueue entries,
// shadowMaxQueueBytes): should the shadow fall that far behind (an
// encoding taking longer than the cell takes to apply that much), it is
// dropped, the snapshots it owed fail (the driver tries again later), and
// the next snapshot is encoded on the loop once, from which the shadow is
// rebuilt.
type shadow struct {
	limits   fs.Limits
	maxQueue int // shadowMaxQueue; tests lower it
	maxBytes int // shadowMaxQueueBytes

	mu     sync.Mutex
	wake   *sync.Cond
	queue  []shadowItem
	bytes  int
	broken bool // dropped: rebuilt from the next snapshot
	closed bool
	done   chan struct{}
}

// shadowItem is one thing the shadow does, in log order: apply an entry,
// replace its state with a snapshot's, or encode a snapshot.
type shadowItem struct {
	entry   []byte
	restore []byte
	snap    chan snapResult
}

type snapResult struct {
	data []byte
	err  error
}

// Shadow queue bounds.
const (
	shadowMaxQueue      = 1 << 20
	shadowMaxQueueBytes = 512 << 20
)

var errShadowDropped = errors.New("cell: the snapshot copy of the state fell behind and was dropped")

func newShadow(l fs.Limits) *shadow {
	sh := &shadow{limits: l, maxQueue: shadowMaxQueue, maxBytes: shadowMaxQueueBytes, done: make(chan struct{})}
	sh.wake = sync.NewCond(&sh.mu)
	go sh.run(fs.New(l))
	return sh
}

// apply queues an entry the loop applied.
func (sh *shadow) apply(entry []byte) { sh.push(shadowItem{entry: entry}, len(entry)) }

// restore queues a state replacement (the loop restored b).
func (sh *shadow) restore(b []byte) { sh.push(shadowItem{restore: b}, 0) }

// snapshot queues an encoding of the state after the entries queued so
// far and returns a function that waits for it. ok is false when the
// shadow is dropped: the caller encodes on its own and restores the shadow
// from that.
func (sh *shadow) snapshot() (wait func() ([]byte, error), ok bool) {
	ch := make(chan snapResult, 1)
	if !sh.push(shadowItem{snap: ch}, 0) {
		return nil, false
	}
	return func() ([]byte, error) {
		select {
		case r := <-ch:
			return r.data, r.err
		case <-sh.done:
			return nil, errors.New("cell: stopped")
		}
	}, true
}

// push queues it and reports whether it did: not when the shadow is
// closed, dropped (a restore excepted: the shadow is rebuilt from it), or
// its queue is full (then it is dropped).
func (sh *shadow) push(it shadowItem, n int) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed || (sh.broken && it.restore == nil) {
		return false
	}
	if len(sh.queue) >= sh.maxQueue || sh.bytes+n > sh.maxBytes {
		sh.dropLocked()
		return false
	}
	if it.restore != nil {
		sh.broken = false
	}
	sh.queue = append(sh.queue, it)
	sh.bytes += n
	sh.wake.Signal()
	return true
}

// dropLocked gives the shadow up until the next restore.
func (sh *shadow) dropLocked() {
	for _, it := range sh.queue {
		if it.snap != nil {
			it.snap <- snapResult{err: errShadowDropped}
		}
	}
	sh.queue, sh.bytes, sh.broken = nil, 0, true
}

// close stops the goroutine; snapshots it owed fail.
func (sh *shadow) close() {
	sh.mu.Lock()
	if !sh.closed {
		sh.closed = true
		sh.wake.Signal()
	}
	sh.mu.Unlock()
	<-sh.done
}

func (sh *shadow) run(st *fs.State) {
	defer close(sh.done)
	for {
		sh.mu.Lock()
		for len(sh.queue) == 0 && !sh.closed {
			sh.wake.Wait()
		}
		if sh.closed {
			sh.dropLocked()
			sh.mu.Unlock()
			return
		}
		it := sh.queue[0]
		sh.queue[0] = shadowItem{}
		sh.queue = sh.queue[1:]
		sh.bytes -= len(it.entry)
		broken := sh.broken
		sh.mu.Unlock()
		switch {
		case it.snap != nil:
			it.snap <- snapResult{data: st.Snapshot()}
		case it.restore != nil:
			next, err := fs.Restore(it.restore, sh.limits)
			if err != nil {
				// The loop restored the same bytes, so this cannot
				// happen; stay dropped rather than diverge.
				sh.mu.Lock()
				sh.dropLocked()
				sh.mu.Unlock()
				continue
			}
			st = next
		case !broken:
			// Errors are results (the loop got the same one); an entry
			// that does not decode changes nothing in either copy.
			_, _, _ = st.ApplyBytes(it.entry)
		}
	}
}
