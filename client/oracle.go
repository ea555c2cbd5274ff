package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/gen/chubby"
)

// Timestamps returns n (1..chubby.MAX_TIMESTAMPS_PER_CALL) strictly
// increasing timestamps from the cell's oracle, first..first+n-1: each is
// larger than every timestamp the cell handed out before this call began,
// to anyone, across failovers. Concurrent calls are batched into one
// GetTimestamps at a time, as Percolator's oracle clients do: while one is
// in flight the others gather, and the next one asks for all of them.
// Retried when the cell certainly did nothing (a lost reply only skips
// timestamps, so a retry is always safe).
func (c *Client) Timestamps(ctx context.Context, n int) (first int64, err error) {
	if n < 1 || n > int(chubby.MAX_TIMESTAMPS_PER_CALL) {
		return 0, fmt.Errorf("chubby: timestamps: count %d outside [1, %d]", n, chubby.MAX_TIMESTAMPS_PER_CALL)
	}
	return c.ts.take(ctx, c, n)
}

// Timestamp returns one timestamp (Timestamps with n = 1).
func (c *Client) Timestamp(ctx context.Context) (int64, error) { return c.Timestamps(ctx, 1) }

// tsBatcher gathers concurrent Timestamps calls into batches.
type tsBatcher struct {
	mu      sync.Mutex
	pending *tsBatch // gathering while another batch is in flight
	busy    bool     // a batch is in flight
}

// tsBatch is one GetTimestamps call shared by its waiters.
type tsBatch struct {
	count int // total asked, at most MAX_TIMESTAMPS_PER_CALL
	done  chan struct{}
	first int64
	err   error
}

func (b *tsBatcher) take(ctx context.Context, c *Client, n int) (int64, error) {
	b.mu.Lock()
	if !b.busy {
		// Nothing in flight: this call goes at once, alone.
		b.busy = true
		b.mu.Unlock()
		first, err := c.getTimestamps(ctx, n)
		b.mu.Lock()
		if b.pending == nil {
			b.busy = false
			b.mu.Unlock()
		} else {
			b.mu.Unlock()
			go b.next(c) // the callers that gathered meanwhile
		}
		return first, err
	}
	if b.pending == nil || b.pending.count+n > int(chubby.MAX_TIMESTAMPS_PER_CALL) {
		if b.pending != nil {
			// Full: this caller waits for the in-flight batch and asks
			// alone after it (rare: a million timestamps in one batch).
			b.mu.Unlock()
			return c.getTimestamps(ctx, n)
		}
		b.pending = &tsBatch{done: make(chan struct{})}
	}
	batch, offset := b.pending, int64(b.pending.count)
	batch.count += n
	b.mu.Unlock()
	select {
	case <-batch.done:
		if batch.err != nil {
			return 0, batch.err
		}
		return batch.first + offset, nil
	case <-ctx.Done():
		// The batch still takes our share; the timestamps are skipped.
		return 0, &OpError{Op: "timestamps", Err: ctx.Err()}
	}
}

// next sends the batch that gathered while the last one was in flight, if
// any, and then the ones after it, until none gathers.
func (b *tsBatcher) next(c *Client) {
	for {
		b.mu.Lock()
		batch := b.pending
		b.pending = nil
		if batch == nil {
			b.busy = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		// The batch belongs to all its waiters, not to one caller's
		// context: bounded by the call timeout instead.
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CallTimeout)
		batch.first, batch.err = c.getTimestamps(ctx, batch.count)
		cancel()
		close(batch.done)
	}
}

// getTimestamps is one GetTimestamps call, retried like a read: a lost
// reply only skips timestamps.
func (c *Client) getTimestamps(ctx context.Context, n int) (int64, error) {
	r, err := call(ctx, c, callSpec{op: "timestamps", class: retrySafe, timeout: c.cfg.CallTimeout},
		func(ctx context.Context, o ...callopt.Option) (*chubby.GetTimestampsResponse, error) {
			return c.kc.GetTimestamps(ctx, &chubby.GetTimestampsRequest{Count: int32(n)}, o...)
		})
	if err != nil {
		return 0, err
	}
	if r.GetCount() != int32(n) || r.GetFirst() < 1 {
		return 0, &OpError{Op: "timestamps", Err: fmt.Errorf("the cell answered %d timestamps from %d, not %d", r.GetCount(), r.GetFirst(), n)}
	}
	return r.GetFirst(), nil
}
