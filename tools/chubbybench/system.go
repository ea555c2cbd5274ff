package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// A System is one lock service at one size (our cell, etcd, ZooKeeper or
// Redis with 1, 3 or 5 nodes): how to start and stop it on loopback, and how
// its standard client does each workload.
type System interface {
	Kind() string // sysChubby, sysEtcd, ...
	Nodes() int
	// Unavailable says why the system cannot run here at all, "" if it can
	// (a binary is missing, chubbyd has no --peers yet).
	Unavailable() string
	// NA says why workload w does not apply to this system, "" if it does.
	NA(w Workload) string
	// Bound says what bounds the system's figure for w (shown beside it).
	Bound(w Workload) string

	// Start starts a fresh cluster (new data) and waits until it serves.
	Start(ctx context.Context) error
	// Stop stops every process of the cluster and removes its data
	// (unless --keep). Safe to call more than once.
	Stop()
	// NewClient opens one client: its own connection(s) and session.
	NewClient(ctx context.Context, id int) (Client, error)

	// ServerPIDs are the server processes, nil when they are not ours.
	ServerPIDs() []int
	// Leader returns the index of the leader (primary, master) node.
	Leader(ctx context.Context) (int, error)
	// Kill kills node i with SIGKILL.
	Kill(i int) error
	// Restart starts node i again on its data and waits until the whole
	// cluster serves.
	Restart(ctx context.Context, i int) error
	// Pause stops node i with SIGSTOP: a process that is alive (its
	// sockets stay open, its port accepts) but silent, as a paused VM or
	// a partitioned host is to its peers.
	Pause(i int) error
	// Resume continues node i with SIGCONT and waits until the whole
	// cluster serves, node i included.
	Resume(ctx context.Context, i int) error

	// HoldSessions opens n sessions kept alive the way w.Variant says and
	// keeps them alive until release is called. It returns how many it
	// established (fewer than n when the system or this machine refused
	// more: err then says why).
	HoldSessions(ctx context.Context, w Workload, n int) (held int, release func(), err error)
}

// Client is one benchmark client of a System: a connection and a session of
// the system's standard client library.
type Client interface {
	// Lock prepares the lock name (created on first use).
	Lock(ctx context.Context, name string) (Locker, error)
	// File prepares a small file (key, znode) name holding 64 bytes.
	File(ctx context.Context, name string) (File, error)
	// NewSession creates one more session (lease, connection) and returns
	// how to end it.
	NewSession(ctx context.Context) (end func(context.Context) error, err error)
	// Accounts prepares the accounts 0..n-1 of set name (rows, keys,
	// znodes) for transfer transactions; Accounts.Create makes them.
	Accounts(ctx context.Context, name string, n int) (Accounts, error)
	Close() error
}

// Accounts is one client's handle on a set of accounts, each holding a
// decimal balance, moved between by transactions in the system's own
// optimistic idiom.
type Accounts interface {
	// Create creates accounts from..to-1 with balance each (set-up,
	// untimed).
	Create(ctx context.Context, from, to int, balance int64) error
	// Transfer moves 1 from account a to account b in one transaction
	// that reads both and writes both, atomically. An attempt that loses
	// to a concurrent writer is aborted and retried with a new one until
	// one commits (or ctx ends); aborts is how many were.
	Transfer(ctx context.Context, a, b int) (aborts int, err error)
	// Sum is the sum of the balances of accounts from..to-1, read after a
	// run (nothing writes then; in one transaction or snapshot where the
	// system has one) for its check, untimed.
	Sum(ctx context.Context, from, to int) (int64, error)
	Close() error
}

// Locker is one client's handle on one lock.
type Locker interface {
	// Cycle acquires the lock exclusively, waiting for it, and releases it.
	Cycle(ctx context.Context) error
	Close() error
}

// File is one client's handle on one small file.
type File interface {
	Write(ctx context.Context, data []byte) error
	Read(ctx context.Context) error
	// ReadCached reads through the client's cache (or the system's
	// comparable local read); only called when NA says it applies.
	ReadCached(ctx context.Context) error
	Close() error
}

// env is what every System shares: the run's configuration, where files
// go, and the processes started.
type env struct {
	cfg   *Config
	log   *slog.Logger
	procs *procSet
	work  string // parent of data directories
	logs  string // server logs
	prog  *progress

	mu  sync.Mutex
	seq int // numbers data directories
}

// newDataDir makes a fresh directory for one cluster's data.
func (e *env) newDataDir(label string) (string, error) {
	e.mu.Lock()
	e.seq++
	n := e.seq
	e.mu.Unlock()
	dir := filepath.Join(e.work, fmt.Sprintf("%02d-%s", n, label))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("data directory: %w", err)
	}
	return dir, nil
}

// cluster runs the processes of one System.
type cluster struct {
	env   *env
	dir   string // data of this cluster, removed by stop
	specs []nodeSpec
	procs []*proc
}

// startAll starts every node.
func (c *cluster) startAll() error {
	c.procs = make([]*proc, len(c.specs))
	for i := range c.specs {
		if err := c.startNode(i); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) startNode(i int) error {
	p, err := c.env.procs.start(c.specs[i])
	if err != nil {
		return err
	}
	c.procs[i] = p
	return nil
}

// stop stops every node and removes the data unless --keep.
func (c *cluster) stop() {
	if c == nil {
		return
	}
	var wg sync.WaitGroup
	for _, p := range c.procs {
		if p != nil {
			wg.Go(func() { c.env.procs.stop(p) })
		}
	}
	wg.Wait()
	c.procs = nil
	if c.dir != "" && !c.env.cfg.Keep {
		if err := os.RemoveAll(c.dir); err != nil {
			c.env.log.Warn("remove data directory", "dir", c.dir, "err", err)
		}
	}
}

// kill kills node i with SIGKILL.
func (c *cluster) kill(i int) error {
	if i < 0 || i >= len(c.procs) || c.procs[i] == nil {
		return fmt.Errorf("kill: no node %d", i)
	}
	c.env.procs.kill9(c.procs[i])
	return nil
}

// pause stops node i with SIGSTOP (its whole process group) and waits
// until /proc says it is stopped: the signal is delivered asynchronously,
// and a fault measured from before it took effect would be measured short.
func (c *cluster) pause(i int) error {
	if err := c.signal(i, syscall.SIGSTOP); err != nil {
		return err
	}
	pid := c.procs[i].pid()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := procState(pid)
		if err != nil {
			return fmt.Errorf("SIGSTOP of %s: %w", c.procs[i].spec.name, err)
		}
		if st == 'T' || st == 't' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("SIGSTOP of %s: still in state %c after 5 s", c.procs[i].spec.name, st)
		}
		time.Sleep(time.Millisecond)
	}
}

// resume continues node i with SIGCONT.
func (c *cluster) resume(i int) error { return c.signal(i, syscall.SIGCONT) }

func (c *cluster) signal(i int, sig syscall.Signal) error {
	if i < 0 || i >= len(c.procs) || c.procs[i] == nil {
		return fmt.Errorf("%v: no node %d", sig, i)
	}
	if done, err := c.procs[i].exited(); done {
		return fmt.Errorf("%v: %s exited (%v)", sig, c.procs[i].spec.name, err)
	}
	c.procs[i].signal(sig)
	return nil
}

// pids returns the running nodes' process ids.
func (c *cluster) pids() []int {
	if c == nil {
		return nil
	}
	var out []int
	for _, p := range c.procs {
		if p != nil {
			if done, _ := p.exited(); !done {
				out = append(out, p.pid())
			}
		}
	}
	return out
}

// checkAlive fails if a node has exited: a server that dies on start
// should be reported with its log, not waited for.
func (c *cluster) checkAlive() error {
	for _, p := range c.procs {
		if p == nil {
			continue
		}
		if done, err := p.exited(); done {
			return fmt.Errorf("%s exited (%v); see %s", p.spec.name, err, p.spec.log)
		}
	}
	return nil
}

// errNA marks a workload that does not apply.
var errNA = errors.New("not applicable")

// lockWait is how long one Acquire may wait: limit, or less when ctx's
// deadline comes first.
func lockWait(ctx context.Context, limit time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d < limit {
			return max(d, time.Millisecond)
		}
	}
	return limit
}
