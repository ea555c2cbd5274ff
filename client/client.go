package client

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
	"github.com/chubbygo/chubby/rpc"
)

// Client is a connection to one cell. It is safe for concurrent use. Calls
// that need no session (Status, GetMaster, CheckSequencer, WhoAmI,
// Timestamps, RemoveMember, SnapshotRead) are methods of Client;
// everything else goes through a Session made by NewSession.
type Client struct {
	cfg Config
	log *slog.Logger
	kc  combineservice.Client
	// closeConns closes kc's connections (Close).
	closeConns func() error
	ts         tsBatcher // batches Timestamps calls
	locator    *locator

	mu       sync.Mutex
	closed   bool
	sessions map[*Session]struct{} // live sessions, ended by Close
}

// Connect prepares a client for the cell cfg names (see Config for the
// defaults). It validates the configuration and builds the Kitex client; it
// does no network I/O — the first call reaches the cell, and connection
// failures are reported by that call (wrapping ErrUnreachable).
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("chubby: connect: %w", err)
	}
	cfg, err := cfg.withDefaults(os.Getenv)
	if err != nil {
		return nil, err
	}
	opts, closeConns, err := rpc.ClientOptionsCloser(rpc.ClientConfig{
		Addrs:          cfg.Addrs,
		ConnectTimeout: cfg.ConnectTimeout,
		// Kitex honours a per-call callopt.WithRPCTimeout only when the
		// client has a default RPC timeout, so this must not be zero.
		RPCTimeout: cfg.CallTimeout,
		TLS:        cfg.TLS,
	})
	if err != nil {
		return nil, fmt.Errorf("chubby: connect: %w", err)
	}
	kc, err := combineservice.NewClient("chubby", opts...)
	if err != nil {
		return nil, fmt.Errorf("chubby: connect: %w", err)
	}
	c := &Client{
		cfg:        cfg,
		log:        cfg.Logger,
		kc:         kc,
		closeConns: closeConns,
		sessions:   make(map[*Session]struct{}),
	}
	// A locate round waits for a connection and an answer given at once.
	c.locator = newLocator(cfg.Addrs, c.askMaster, min(cfg.CallTimeout, cfg.ConnectTimeout+locateReplyTimeout))
	c.locator.log = c.log
	c.locator.watch = c.watchMaster
	return c, nil
}

// Addrs returns the replica addresses the client was configured with (its
// seeds: see Replicas for the addresses it asks now).
func (c *Client) Addrs() []string { return append([]string(nil), c.cfg.Addrs...) }

// Replicas returns the addresses of the cell's replicas as the client
// knows them now: the members of the cell's configuration as the cell last
// named them (GetMaster; refreshed every 30 s while the client is used,
// and by every locate round), with the replica that named them and its
// master; until an answer names them, the configured addresses (Addrs).
// At most MaxReplicas. See the package doc, "Finding the master".
func (c *Client) Replicas() []string { return c.locator.replicas() }

// Close ends every session of the client locally (their Err becomes
// ErrClientClosed and their KeepAlive loops stop) and makes every later call
// fail with ErrClientClosed. It sends nothing: the cell ends the sessions
// when their leases run out, so close sessions first (Session.Close) for a
// prompt, clean release of their locks. Its connections are closed: the
// idle ones at once, the others as their calls end. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.locator.close()
	sessions := make([]*Session, 0, len(c.sessions))
	for s := range c.sessions {
		sessions = append(sessions, s)
	}
	c.sessions = nil
	c.mu.Unlock()
	for _, s := range sessions {
		s.end(ErrClientClosed)
		<-s.loopDone
	}
	c.closeConns()
	return nil
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// addSession registers s so that Close can end it; false if the client is closed.
func (c *Client) addSession(s *Session) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.sessions[s] = struct{}{}
	return true
}

func (c *Client) removeSession(s *Session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.sessions, s)
}

// CacheStats sums the cache counters of the client's live sessions.
func (c *Client) CacheStats() CacheStats {
	c.mu.Lock()
	ss := make([]*Session, 0, len(c.sessions))
	for s := range c.sessions {
		ss = append(ss, s)
	}
	c.mu.Unlock()
	var out CacheStats
	for _, s := range ss {
		st := s.CacheStats()
		out.Hits += st.Hits
		out.Misses += st.Misses
		out.Entries += st.Entries
		out.Invalidations += st.Invalidations
	}
	return out
}

// Status returns the cell's status: its replicas, which is master, the epoch
// and counts of sessions, nodes, handles and held locks. Retried (a read).
func (c *Client) Status(ctx context.Context) (*chubby.CellStatus, error) {
	return c.StatusAsync(ctx).Wait(ctx)
}

// StatusAsync is the asynchronous form of Status.
func (c *Client) StatusAsync(ctx context.Context) *rpc.Future[*chubby.CellStatus] {
	return rpc.Go(ctx, func(ctx context.Context) (*chubby.CellStatus, error) {
		return call(ctx, c, callSpec{op: "status", class: retrySafe, timeout: c.cfg.CallTimeout},
			func(ctx context.Context, o ...callopt.Option) (*chubby.CellStatus, error) {
				return c.kc.GetStatus(ctx, o...)
			})
	})
}

// GetMaster asks the cell where its master is; the answer also becomes the
// client's guess of where to send calls. Retried (a read).
func (c *Client) GetMaster(ctx context.Context) (*chubby.GetMasterResponse, error) {
	return c.GetMasterAsync(ctx).Wait(ctx)
}

// GetMasterAsync is the asynchronous form of GetMaster.
func (c *Client) GetMasterAsync(ctx context.Context) *rpc.Future[*chubby.GetMasterResponse] {
	return rpc.Go(ctx, func(ctx context.Context) (*chubby.GetMasterResponse, error) {
		var from string
		r, err := call(ctx, c, callSpec{op: "get-master", class: retrySafe, timeout: c.cfg.CallTimeout, sentTo: &from},
			func(ctx context.Context, o ...callopt.Option) (*chubby.GetMasterResponse, error) {
				return c.kc.GetMaster(ctx, &chubby.GetMasterRequest{}, o...)
			})
		if err == nil {
			c.locator.learned(r.GetMasterAddress())
			c.locator.adopt(from, r.GetMasterAddress(), r.GetReplicas())
		}
		return r, err
	})
}

// RemoveMember asks the master to take the replica with the given id out
// of the cell's configuration (an operator's forced removal; the cell's
// RemoveMember) and returns the log index of the configuration change,
// once it has committed. The master refuses to remove the last voter
// (INVALID_ARGUMENT) and an id not in the configuration (NOT_FOUND); while
// another change is in progress it answers UNAVAILABLE. A change proposed
// but not known committed by the call's deadline (a master cut off from
// the others) is UNAVAILABLE with a message starting "outcome unknown: ":
// it may still take effect (Status shows whether it did), as may a call
// whose reply was lost. It is a change to the cell, so it is sent again only
// when the earlier attempt certainly did nothing (NOT_MASTER, no
// connection): a lost reply is reported, and sending it again may then
// find the replica already gone (NOT_FOUND). The client's own list of
// replicas (Replicas) is refreshed at its next call.
func (c *Client) RemoveMember(ctx context.Context, id string) (index int64, err error) {
	return c.RemoveMemberAsync(ctx, id).Wait(ctx)
}

// RemoveMemberAsync is the asynchronous form of RemoveMember.
func (c *Client) RemoveMemberAsync(ctx context.Context, id string) *rpc.Future[int64] {
	return rpc.Go(ctx, func(ctx context.Context) (int64, error) {
		r, err := call(ctx, c, callSpec{op: "remove-member", path: id, class: retryUnsent, timeout: c.cfg.CallTimeout},
			func(ctx context.Context, o ...callopt.Option) (*chubby.RemoveMemberResponse, error) {
				return c.kc.RemoveMember(ctx, &chubby.RemoveMemberRequest{Id: id}, o...)
			})
		if err != nil {
			return 0, err
		}
		c.locator.refreshSoon()
		return r.GetIndex(), nil
	})
}

// SnapshotRead reads one chunk of a backup from the master (the cell's
// SnapshotRead; package cell/backup's Save drives it): index 0 (with
// chunk 0) asks the master to store a snapshot of its state now and
// answers its first chunk, then chunks 1.. of that index follow. It
// needs change_acl on "/". A read, retried on the current master; the
// first call may wait for the snapshot to be stored, so it is given
// SnapshotStoreTimeout on top of CallTimeout.
func (c *Client) SnapshotRead(ctx context.Context, index int64, chunk int32) (*chubby.SnapshotReadResponse, error) {
	timeout := c.cfg.CallTimeout
	if index == 0 {
		timeout += SnapshotStoreTimeout
	}
	return call(ctx, c, callSpec{op: "snapshot-read", class: retrySafe, timeout: timeout},
		func(ctx context.Context, o ...callopt.Option) (*chubby.SnapshotReadResponse, error) {
			return c.kc.SnapshotRead(ctx, &chubby.SnapshotReadRequest{Index: index, Chunk: chunk}, o...)
		})
}

// SnapshotStoreTimeout is what SnapshotRead's first call may wait, beyond
// CallTimeout, for the master to encode and store its state (about a
// second per 100 MB here).
const SnapshotStoreTimeout = 5 * time.Minute

// SequencerCheck is the cell's verdict on a sequencer.
type SequencerCheck struct {
	Valid  bool
	Reason string // why not, when not valid
}

// CheckSequencer asks the cell whether seq still names a held lock: the
// lock is held in seq's mode with seq's lock generation on the same instance
// of the node. Servers that receive requests from lock holders call it; it
// needs no session. valid=false with a reason is an answer, not an error.
// Retried (a read).
func (c *Client) CheckSequencer(ctx context.Context, seq *chubby.Sequencer) (valid bool, reason string, err error) {
	r, err := c.CheckSequencerAsync(ctx, seq).Wait(ctx)
	return r.Valid, r.Reason, err
}

// CheckSequencerAsync is the asynchronous form of CheckSequencer.
func (c *Client) CheckSequencerAsync(ctx context.Context, seq *chubby.Sequencer) *rpc.Future[SequencerCheck] {
	return rpc.Go(ctx, func(ctx context.Context) (SequencerCheck, error) {
		if seq == nil {
			return SequencerCheck{}, &OpError{Op: "check-sequencer",
				Err: newError(chubby.ErrorCode_INVALID_ARGUMENT, "nil sequencer")}
		}
		r, err := call(ctx, c, callSpec{op: "check-sequencer", path: seq.Path, class: retrySafe, timeout: c.cfg.CallTimeout},
			func(ctx context.Context, o ...callopt.Option) (*chubby.CheckSequencerResponse, error) {
				return c.kc.CheckSequencer(ctx, &chubby.CheckSequencerRequest{Sequencer: seq}, o...)
			})
		if err != nil {
			return SequencerCheck{}, err
		}
		return SequencerCheck{Valid: r.GetValid(), Reason: r.GetReason()}, nil
	})
}
