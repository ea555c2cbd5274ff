package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// ErrStopped is returned by UpdateMeta after Leave or Shutdown, and by
// Leave after Shutdown.
var ErrStopped = errors.New("discovery: left or shut down")

// Discovery is this replica's membership in its cell's gossip. Its
// methods are safe for concurrent use.
type Discovery struct {
	cfg   Config
	name  string // memberlist name of this node
	log   *slog.Logger
	del   *delegate
	table *table
	ml    *memberlist.Memberlist
	tls   *tlsTransport // nil without Config.TLS
	lim   transportLimits

	stopOnce      sync.Once
	stop          chan struct{} // closed to stop joining
	joinDone      chan struct{} // closed when the join loop has returned
	reconnectDone chan struct{} // closed when the reconnect loop has returned

	mu     sync.Mutex // serializes UpdateMeta, Leave and Shutdown
	meta   Meta
	left   bool
	closed bool
}

// Start starts gossiping on cfg.BindAddr and, in the background, joins
// cfg.Join until it knows another member (then again every
// RejoinInterval). ctx bounds only that joining: when ctx is done,
// Discovery stops joining but stays a member; Shutdown ends it.
func Start(ctx context.Context, cfg Config) (*Discovery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d := newDiscovery(cfg)
	if err := d.create(); err != nil {
		return nil, err
	}
	d.startLoops(ctx)
	return d, nil
}

// startLoops starts joining (bounded by ctx) and reconnecting; Shutdown
// and Leave wait for both to return.
func (d *Discovery) startLoops(ctx context.Context) {
	go d.joinLoop(ctx)
	go d.reconnectLoop()
}

// reconnectDial bounds the check that a dead member's address answers
// before it is joined (memberlist's join would wait its TCP timeout, 10 s,
// on a network that drops packets, and Shutdown waits for it).
const reconnectDial = 500 * time.Millisecond

// reconnectLoop joins, every ReconnectInterval, one member this node has
// dead (not left) again, in turn, if its gossip address accepts a TCP
// connection: the push-pull of the join tells it that it is dead here,
// it refutes, and each side sees the other alive (memberlist itself never
// probes a dead member: after a partition that outlasted the suspicion,
// each side has the other dead until a rejoin).
func (d *Discovery) reconnectLoop() {
	defer close(d.reconnectDone)
	if d.cfg.ReconnectInterval < 0 {
		return
	}
	t := time.NewTicker(d.cfg.ReconnectInterval)
	defer t.Stop()
	var turn int
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		addrs := d.table.deadAddrs()
		if len(addrs) == 0 {
			continue
		}
		addr := addrs[turn%len(addrs)]
		turn++
		c, err := net.DialTimeout("tcp", addr, reconnectDial)
		if err != nil {
			continue
		}
		c.Close()
		if n, err := d.ml.Join([]string{addr}); n > 0 {
			d.log.Info("discovery: reached a member this node had dead again", "addr", addr)
		} else {
			d.log.Debug("discovery: a dead member's address answers, but the join failed", "addr", addr, "err", err)
		}
	}
}

func newDiscovery(cfg Config) *Discovery {
	log := cfg.Logger.With("cell", cfg.Meta.Cell, "replica", cfg.Meta.ID)
	d := &Discovery{
		cfg: cfg, name: nodeName(cfg.Meta), log: log, meta: cfg.Meta,
		stop: make(chan struct{}), joinDone: make(chan struct{}), reconnectDone: make(chan struct{}),
	}
	d.del = &delegate{cell: cfg.Meta.Cell, log: log}
	d.lim = defaultLimits()
	return d
}

// create starts memberlist, whose first event (this node joining) the
// table receives before memberlist.Create returns.
func (d *Discovery) create() error {
	b, err := encodeMeta(d.meta, false)
	if err != nil {
		return err
	}
	d.del.meta.Store(&b)
	w := &logWriter{l: d.log.With("component", "memberlist")}
	mc := d.cfg.memberlist(d.name, d.del, w)
	d.table = newTable(d.name, d.meta.Cell, d.cfg.DeadRetention, suspicionBound(mc), d.log)
	d.del.table, w.onSuspect = d.table, d.table.suspect
	if d.cfg.TLS != nil {
		if err := d.listenTLS(mc); err != nil {
			return fmt.Errorf("discovery: start gossip on %s: %w", d.cfg.BindAddr, err)
		}
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		if d.tls != nil {
			_ = d.tls.Shutdown() // memberlist does not on every failure
		}
		return fmt.Errorf("discovery: start gossip on %s: %w", d.cfg.BindAddr, err)
	}
	d.ml = ml
	return nil
}

// listenTLS starts the TLS transport and makes it mc's. As memberlist
// does for its own transport, a bind port of 0 becomes the port picked,
// which is also advertised.
func (d *Discovery) listenTLS(mc *memberlist.Config) error {
	t, err := newTLSTransport(d.cfg.TLS, mc.BindAddr, mc.BindPort, d.lim, d.log.With("component", "gossip-tls"))
	if err != nil {
		return err
	}
	if mc.BindPort == 0 {
		mc.BindPort = t.GetAutoBindPort()
		mc.AdvertisePort = mc.BindPort
	}
	mc.Transport, d.tls = t, t
	return nil
}

// joinLoop joins cfg.Join until this node knows another member, waiting
// JoinRetryInterval after the first failure and twice as long after each
// further one, up to JoinRetryMax; after a success it waits
// RejoinInterval.
func (d *Discovery) joinLoop(ctx context.Context) {
	defer close(d.joinDone)
	if len(d.cfg.Join) == 0 {
		return
	}
	var wait time.Duration
	backoff := d.cfg.JoinRetryInterval
	for d.sleep(ctx, wait) {
		if d.join() {
			if d.cfg.RejoinInterval < 0 {
				return
			}
			wait, backoff = d.cfg.RejoinInterval, d.cfg.JoinRetryInterval
			continue
		}
		wait = min(backoff, d.cfg.JoinRetryMax)
		backoff = min(2*backoff, d.cfg.JoinRetryMax)
	}
}

// sleep waits for the given time and reports whether joining should go on.
func (d *Discovery) sleep(ctx context.Context, wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-d.stop:
	}
	return false
}

// join joins cfg.Join once and reports whether this node now knows another
// live member: joining only itself, when its own address is in the list,
// does not count.
func (d *Discovery) join() bool {
	n, err := d.ml.Join(d.cfg.Join)
	if d.ml.NumMembers() > 1 {
		if err != nil {
			d.log.Debug("discovery: some join addresses failed", "join", d.cfg.Join, "joined", n, "err", err)
		}
		return true
	}
	d.log.Info("discovery: no other member reached yet", "join", d.cfg.Join, "err", err)
	return false
}

// stopJoining stops the join loop and waits until it has returned (an
// attempt under way finishes first: memberlist's TCP timeout bounds it).
func (d *Discovery) stopJoining() {
	d.stopOnce.Do(func() { close(d.stop) })
	<-d.joinDone
	<-d.reconnectDone
}

// Members returns every member this node knows of, itself included,
// sorted by ID then DataID: the live and suspect ones, and the dead and
// left ones until DeadRetention after they died or left. Members of
// another cell, and nodes whose meta does not decode, are never among
// them.
func (d *Discovery) Members() []Peer { return d.table.peers() }

// Local returns this node as the others see it: Left after Leave.
func (d *Discovery) Local() Peer {
	p, _ := d.table.peer(d.name) // the table never drops it
	return p
}

// Changed returns a channel that is closed at the next change to Members
// (a member joining, changing state or meta); the dropping of members
// after DeadRetention is no change. Take the channel before calling
// Members, so that no change goes unseen:
//
//	for {
//		ch := d.Changed()
//		react(d.Members())
//		<-ch
//	}
func (d *Discovery) Changed() <-chan struct{} { return d.table.changedCh() }

// UpdateMeta replaces this node's meta and gossips it; Cell, ID and
// DataID may not change. It waits until the update has been sent to other
// members (memberlist's UpdateNode), at most timeout if timeout > 0. The
// update is made locally whatever the wait's outcome: after an error from
// the wait it is still being gossiped.
func (d *Discovery) UpdateMeta(m Meta, timeout time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.left || d.closed {
		return ErrStopped
	}
	if err := sameIdentity(d.meta, m); err != nil {
		return err
	}
	return d.publish(m, false, timeout)
}

func sameIdentity(old, m Meta) error {
	switch {
	case m.Cell != old.Cell:
		return metaErr("Cell", "cannot change from %q to %q", old.Cell, m.Cell)
	case m.ID != old.ID:
		return metaErr("ID", "cannot change from %d to %d", old.ID, m.ID)
	case m.DataID != old.DataID:
		return metaErr("DataID", "cannot change from %q to %q", old.DataID, m.DataID)
	}
	return nil
}

// publish makes m this node's meta and gossips it; d.mu is held.
func (d *Discovery) publish(m Meta, leaving bool, timeout time.Duration) error {
	b, err := encodeMeta(m, leaving)
	if err != nil {
		return err
	}
	d.meta = m
	d.del.meta.Store(&b)
	if err := d.ml.UpdateNode(timeout); err != nil {
		return fmt.Errorf("discovery: gossip meta update: %w", err)
	}
	return nil
}

// Leave leaves the cell gracefully: it first gossips that it is about to
// leave, so that the others see it Left rather than Dead, then tells them
// it left, waiting at most timeout in all if timeout > 0. It stops
// joining; gossip goes on until Shutdown, which must still be called.
// Leave after Leave does nothing.
func (d *Discovery) Leave(timeout time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrStopped
	}
	if d.left {
		return nil
	}
	d.left = true
	d.stopJoining()
	deadline := time.Now().Add(timeout)
	errIntent := d.publish(d.meta, true, timeout)
	if timeout > 0 {
		timeout = max(time.Until(deadline), time.Millisecond)
	}
	var errLeave error
	if err := d.ml.Leave(timeout); err != nil {
		errLeave = fmt.Errorf("discovery: leave: %w", err)
	}
	return errors.Join(errIntent, errLeave)
}

// Shutdown stops gossip at once, without telling the others: they see
// this node Dead. Call Leave first to be seen Left. A join attempt under
// way is waited for (on a network that drops packets rather than refusing
// connections, up to memberlist's TCP timeout, 10 s). Shutdown after
// Shutdown does nothing.
func (d *Discovery) Shutdown() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.stopJoining()
	err := d.ml.Shutdown()
	d.table.stop()
	if err != nil {
		return fmt.Errorf("discovery: shutdown: %w", err)
	}
	return nil
}
