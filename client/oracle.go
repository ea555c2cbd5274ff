package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/gen/chubby"
)

// Timestamps returns n (1..chubby.MAX_TIMESTAMPS_PER_CALL) strictly
// increasing timestamps from the cell's oracle, first..first+n-1: each is
// larger than every timestamp the cell handed out before this call began,
// to anyone, across failovers. Concurrent calls are batched into one
// GetTimestamps at a time, as Percolator's oracle clients do: while one is
// in flight the others gather, and the next one asks for all of them.
// Retried like a read (a lost reply only skips timestamps, so a retry is
// always safe).
func (c *Client) Timestamps(ctx context.Context, n int) (first int64, err error) {
	if n < 1 || n > int(chubby.MAX_TIMESTAMPS_PER_CALL) {
		return 0, fmt.Errorf("chubby: timestamps: count %d outside [1, %d]", n, chubby.MAX_TIMESTAMPS_PER_CALL)
	}
	return c.ts.take(ctx, c, n)
}

// Timestamp returns one timestamp (Timestamps with n = 1).
func (c *Client) Timestamp(ctx context.Context) (int64, error) { return c.Timestamps(ctx, 1) }

// tsBatcher gathers concurrent Timestamps calls into batches: a call
// goes at once while fewer than maxTSInFlight are in flight; otherwise it
// joins the batch that is gathering, which goes as soon as one in flight
// comes back. Each batch is one GetTimestamps, so each caller's
// timestamps are the cell's answer to a request sent after the caller
// asked: the oracle's order holds for them as for single calls.
type tsBatcher struct {
	mu        sync.Mutex
	gathering *tsBatch // waiting for a slot
	inFlight  int

	calls atomic.Int64 // GetTimestamps calls answered (for measurements)
}

// maxTSInFlight bounds the batches in flight per client: enough to keep
// the round trip from being the limit, few enough that batches grow.
const maxTSInFlight = 2

// tsBatch is one GetTimestamps call shared by its waiters.
type tsBatch struct {
	count int // total asked, at most MAX_TIMESTAMPS_PER_CALL
	done  chan struct{}
	first int64
	err   error
}

func (b *tsBatcher) take(ctx context.Context, c *Client, n int) (int64, error) {
	b.mu.Lock()
	if g := b.gathering; g != nil && g.count+n > int(chubby.MAX_TIMESTAMPS_PER_CALL) {
		b.mu.Unlock()
		return c.getTimestamps(ctx, n) // rare: a batch of a million; this one goes alone
	}
	if b.gathering == nil {
		b.gathering = &tsBatch{done: make(chan struct{})}
	}
	batch, offset := b.gathering, int64(b.gathering.count)
	batch.count += n
	if b.inFlight < maxTSInFlight {
		b.gathering = nil
		b.inFlight++
		b.mu.Unlock()
		b.send(c, batch)
	} else {
		b.mu.Unlock()
	}
	select {
	case <-batch.done:
		if batch.err != nil {
			return 0, batch.err
		}
		return batch.first + offset, nil
	case <-ctx.Done():
		// The batch still takes our share; those timestamps are skipped.
		return 0, &OpError{Op: "timestamps", Err: ctx.Err()}
	}
}

// send makes batch's call, then sends the batch that gathered meanwhile,
// if any, on a goroutine of its own.
func (b *tsBatcher) send(c *Client, batch *tsBatch) {
	// The batch belongs to all its waiters, not to one caller's context:
	// bounded by the call timeout instead.
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CallTimeout)
	batch.first, batch.err = c.getTimestamps(ctx, batch.count)
	cancel()
	close(batch.done)
	b.mu.Lock()
	b.inFlight--
	next := b.gathering
	if next != nil {
		b.gathering = nil
		b.inFlight++
	}
	b.mu.Unlock()
	if next != nil {
		go b.send(c, next)
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
	c.ts.calls.Add(1)
	if r.GetCount() != int32(n) || r.GetFirst() < 1 {
		return 0, &OpError{Op: "timestamps", Err: fmt.Errorf("the cell answered %d timestamps from %d, not %d", r.GetCount(), r.GetFirst(), n)}
	}
	return r.GetFirst(), nil
}
