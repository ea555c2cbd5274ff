package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// etcd: Debian's etcd-server (3.4) with its default durability (the WAL is
// fsynced before a write is acknowledged), driven by the etcd v3.6 Go client
// and its concurrency.Mutex, which talks to 3.4 servers.

// peerTTLSeconds is the lease/session timeout given to every peer's
// sessions: our cell's default lease, so that each system renews at its
// own natural rate for the same timeout.
const peerTTLSeconds = 12

type etcdSystem struct {
	env       *env
	n         int
	cl        *cluster
	endpoints []string // client URLs
}

func newEtcdSystem(e *env, n int) *etcdSystem { return &etcdSystem{env: e, n: n} }

func (s *etcdSystem) Kind() string { return sysEtcd }
func (s *etcdSystem) Nodes() int   { return s.n }

func (s *etcdSystem) Unavailable() string {
	if _, err := exec.LookPath(s.env.cfg.Etcd); err != nil {
		return fmt.Sprintf("not installed (%s not found; ./build.sh bench installs Debian's etcd-server)", s.env.cfg.Etcd)
	}
	return ""
}

func (s *etcdSystem) NA(w Workload) string {
	switch {
	case w.Kind == kindFailover && s.n == 1:
		return "n/a (one node)"
	case w.Kind == kindSessionsHeld && w.Variant == variantDirect:
		return "n/a: the etcd client carries every lease's keep-alive on one connection (see sessions-held/batched)"
	}
	return ""
}

func (s *etcdSystem) Bound(w Workload) string {
	switch w.Kind {
	case kindLockDistinct:
		return "concurrency.Mutex: Txn (put key + get owner) and Delete, each a Raft entry fsynced to the WAL"
	case kindLockContended:
		return "hand-off by watch on the predecessor's delete; a waiter's watch is resynced by a 100 ms timer (about 10 hand-offs/s per client)"
	case kindWrite:
		return "Put: one Raft entry, WAL fsync"
	case kindRead:
		return "linearizable Get: ReadIndex through the leader"
	case kindReadCached:
		return "serializable Get: the member's local state, no quorum round"
	case kindSessionCreate:
		return "Grant: a Raft entry (the untimed close is a Revoke)"
	case kindSessionsHeld:
		return fmt.Sprintf("%d s leases kept alive over one client connection (one gRPC stream)", peerTTLSeconds)
	case kindFailover:
		return "election timeout 1 s (heartbeat 100 ms; etcd defaults) + the client's retry"
	case kindTransferSpread, kindTransferHot:
		b := "concurrency.NewSTM (SerializableSnapshot): 2 Gets at one revision (a linearizable Txn, then a serializable one), " +
			"1 Txn comparing both keys' mod revisions and putting both: one Raft entry, WAL fsync; a failed compare is an abort, " +
			"and NewSTM retries at once with the keys the failed Txn returned (1 round trip per retry)"
		if s.n > 1 {
			b += "; the client spreads requests over the members, and a serializable Get at a revision its member has not applied yet " +
				"fails the NewSTM (ErrFutureRev): an abort too, and a new NewSTM"
		}
		return b
	}
	return ""
}

func (s *etcdSystem) Start(ctx context.Context) error {
	dir, err := s.env.newDataDir(fmt.Sprintf("etcd%d", s.n))
	if err != nil {
		return err
	}
	ports, err := freePorts(2 * s.n)
	if err != nil {
		return err
	}
	s.cl = &cluster{env: s.env, dir: dir}
	s.endpoints = make([]string, s.n)
	var initial []string
	for i := range s.n {
		initial = append(initial, fmt.Sprintf("e%d=http://127.0.0.1:%d", i+1, ports[2*i+1]))
	}
	for i := range s.n {
		client := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		s.endpoints[i] = client
		name := fmt.Sprintf("etcd×%d-e%d", s.n, i+1)
		s.cl.specs = append(s.cl.specs, nodeSpec{
			name: name,
			argv: []string{s.env.cfg.Etcd,
				"--name", fmt.Sprintf("e%d", i+1),
				"--data-dir", filepath.Join(dir, fmt.Sprintf("e%d", i+1)),
				"--listen-client-urls", client, "--advertise-client-urls", client,
				"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
				"--initial-cluster", strings.Join(initial, ","),
				"--initial-cluster-state", "new",
				"--initial-cluster-token", "chubbybench",
				"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
			},
			dir: dir,
			log: filepath.Join(s.env.logs, name+".log"),
		})
	}
	if err := s.cl.startAll(); err != nil {
		return err
	}
	return s.waitReady(ctx)
}

// waitReady waits until every member answers Status, one is leader, and a
// Put commits.
func (s *etcdSystem) waitReady(ctx context.Context) error {
	cli, err := s.newClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	return waitFor(ctx, 60*time.Second, 50*time.Millisecond, fmt.Sprintf("etcd×%d", s.n), func(ctx context.Context) error {
		if err := s.cl.checkAlive(); err != nil {
			return err
		}
		for _, ep := range s.endpoints {
			st, err := cli.Status(ctx, ep)
			if err != nil {
				return err
			}
			if st.Leader == 0 {
				return fmt.Errorf("%s: no leader", ep)
			}
		}
		_, err := cli.Put(ctx, "/bench/ready", "1")
		return err
	})
}

func (s *etcdSystem) newClient() (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   s.endpoints,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}

func (s *etcdSystem) Stop() {
	s.cl.stop()
	s.cl = nil
}

func (s *etcdSystem) ServerPIDs() []int { return s.cl.pids() }

func (s *etcdSystem) Leader(ctx context.Context) (int, error) {
	cli, err := s.newClient()
	if err != nil {
		return -1, err
	}
	defer cli.Close()
	for i, ep := range s.endpoints {
		if s.cl.procs[i] == nil {
			continue
		}
		st, err := cli.Status(ctx, ep)
		if err != nil {
			continue
		}
		if st.Leader == st.Header.MemberId {
			return i, nil
		}
	}
	return -1, errors.New("etcd: no member says it leads")
}

func (s *etcdSystem) Kill(i int) error { return s.cl.kill(i) }

func (s *etcdSystem) Pause(i int) error { return s.cl.pause(i) }

func (s *etcdSystem) Resume(ctx context.Context, i int) error {
	if err := s.cl.resume(i); err != nil {
		return err
	}
	return s.waitReady(ctx)
}

func (s *etcdSystem) Restart(ctx context.Context, i int) error {
	// On its existing data directory a member ignores the --initial-* flags.
	if err := s.cl.startNode(i); err != nil {
		return err
	}
	return s.waitReady(ctx)
}

func (s *etcdSystem) NewClient(ctx context.Context, id int) (Client, error) {
	cli, err := s.newClient()
	if err != nil {
		return nil, err
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(peerTTLSeconds), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd session: %w", err)
	}
	return &etcdClient{cli: cli, sess: sess}, nil
}

type etcdClient struct {
	cli  *clientv3.Client
	sess *concurrency.Session
}

func (c *etcdClient) Lock(ctx context.Context, name string) (Locker, error) {
	return &etcdLocker{m: concurrency.NewMutex(c.sess, "/bench/locks/"+name)}, nil
}

func (c *etcdClient) File(ctx context.Context, name string) (File, error) {
	key := "/bench/files/" + name
	if _, err := c.cli.Put(ctx, key, string(payload)); err != nil {
		return nil, fmt.Errorf("put %s: %w", key, err)
	}
	return &etcdFile{cli: c.cli, key: key}, nil
}

func (c *etcdClient) NewSession(ctx context.Context) (func(context.Context) error, error) {
	g, err := c.cli.Grant(ctx, peerTTLSeconds)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := c.cli.Revoke(ctx, g.ID)
		return err
	}, nil
}

func (c *etcdClient) Accounts(ctx context.Context, name string, n int) (Accounts, error) {
	return &etcdAccounts{cli: c.cli, prefix: "/bench/txn/" + name + "/", n: n}, nil
}

// etcdAccounts are the keys prefix+"acct-<i>".
type etcdAccounts struct {
	cli    *clientv3.Client
	prefix string
	n      int
}

func (a *etcdAccounts) key(i int) string { return a.prefix + "acct-" + strconv.Itoa(i) }

// etcdTxnOps is how many puts one set-up Txn carries (etcd's default
// --max-txn-ops is 128).
const etcdTxnOps = 100

func (a *etcdAccounts) Create(ctx context.Context, from, to int, balance int64) error {
	v := strconv.FormatInt(balance, 10)
	for lo := from; lo < to; lo += etcdTxnOps {
		var ops []clientv3.Op
		for i := lo; i < min(lo+etcdTxnOps, to); i++ {
			ops = append(ops, clientv3.OpPut(a.key(i), v))
		}
		if _, err := a.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("put %s...: %w", a.key(lo), err)
		}
	}
	return nil
}

// Transfer runs concurrency.NewSTM: it calls apply again for every
// attempt whose commit failed its compare, so every call beyond the first
// is an aborted attempt. The second read of SerializableSnapshot is a
// serializable Get at the first read's revision, and the client spreads
// requests over the members: one that has not applied that revision yet
// fails the whole NewSTM with ErrFutureRev, so that attempt is aborted too
// and a new NewSTM begins.
func (a *etcdAccounts) Transfer(ctx context.Context, x, y int) (int, error) {
	aborts := 0
	for {
		calls, err := a.stm(ctx, x, y)
		if !errors.Is(err, rpctypes.ErrFutureRev) || ctx.Err() != nil {
			return aborts + max(0, calls-1), err
		}
		aborts += calls
	}
}

// stm is one NewSTM call of Transfer; calls counts apply's calls.
func (a *etcdAccounts) stm(ctx context.Context, x, y int) (calls int, err error) {
	kx, ky := a.key(x), a.key(y)
	_, err = concurrency.NewSTM(a.cli, func(stm concurrency.STM) error {
		calls++
		bx, err := strconv.ParseInt(stm.Get(kx), 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %w", kx, err)
		}
		by, err := strconv.ParseInt(stm.Get(ky), 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %w", ky, err)
		}
		stm.Put(kx, strconv.FormatInt(bx-1, 10))
		stm.Put(ky, strconv.FormatInt(by+1, 10))
		return nil
	}, concurrency.WithIsolation(concurrency.SerializableSnapshot), concurrency.WithAbortContext(ctx))
	return calls, err
}

// Sum reads the accounts with Txns of Gets (etcdTxnOps each).
func (a *etcdAccounts) Sum(ctx context.Context, from, to int) (int64, error) {
	var sum int64
	for lo := from; lo < to; lo += etcdTxnOps {
		var ops []clientv3.Op
		for i := lo; i < min(lo+etcdTxnOps, to); i++ {
			ops = append(ops, clientv3.OpGet(a.key(i)))
		}
		r, err := a.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return 0, err
		}
		for k, op := range r.Responses {
			kvs := op.GetResponseRange().GetKvs()
			if len(kvs) != 1 {
				return 0, fmt.Errorf("%s missing", a.key(lo+k))
			}
			b, err := strconv.ParseInt(string(kvs[0].Value), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", kvs[0].Key, err)
			}
			sum += b
		}
	}
	return sum, nil
}

func (a *etcdAccounts) Close() error { return nil }

func (c *etcdClient) Close() error {
	err := c.sess.Close()
	return errors.Join(err, c.cli.Close())
}

type etcdLocker struct{ m *concurrency.Mutex }

func (l *etcdLocker) Cycle(ctx context.Context) error {
	if err := l.m.Lock(ctx); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if err := l.m.Unlock(ctx); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	return nil
}

func (l *etcdLocker) Close() error { return nil }

type etcdFile struct {
	cli *clientv3.Client
	key string
}

func (f *etcdFile) Write(ctx context.Context, data []byte) error {
	_, err := f.cli.Put(ctx, f.key, string(data))
	return err
}

func (f *etcdFile) Read(ctx context.Context) error {
	_, err := f.cli.Get(ctx, f.key)
	return err
}

func (f *etcdFile) ReadCached(ctx context.Context) error {
	_, err := f.cli.Get(ctx, f.key, clientv3.WithSerializable())
	return err
}

func (f *etcdFile) Close() error { return nil }

// HoldSessions grants n leases through one client and keeps each alive
// with the client's KeepAlive (all on one connection).
func (s *etcdSystem) HoldSessions(ctx context.Context, w Workload, n int) (int, func(), error) {
	cli, err := s.newClient()
	if err != nil {
		return 0, func() {}, err
	}
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	release := func() {
		cancel()
		waitGroupTimeout(&wg, 10*time.Second)
		cli.Close()
	}
	var (
		held     atomic.Int64
		next     atomic.Int64
		failed   atomic.Bool
		errOnce  sync.Once
		firstErr error
		workers  sync.WaitGroup
	)
	for range min(64, n) {
		workers.Go(func() {
			for !failed.Load() && ctx.Err() == nil && next.Add(1) <= int64(n) {
				cctx, ccancel := context.WithTimeout(ctx, s.env.cfg.OpTimeout)
				g, err := cli.Grant(cctx, peerTTLSeconds)
				ccancel()
				if err == nil {
					var ch <-chan *clientv3.LeaseKeepAliveResponse
					ch, err = cli.KeepAlive(hctx, g.ID)
					if err == nil {
						wg.Go(func() {
							for range ch { // drain until hctx ends
							}
						})
					}
				}
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("lease %d: %w", held.Load()+1, err) })
					failed.Store(true)
					return
				}
				if h := held.Add(1); h%2000 == 0 || h == int64(n) {
					s.env.prog.printf("    etcd×%d sessions-held: %d of %d leases", s.n, h, n)
				}
			}
		})
	}
	workers.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return int(held.Load()), release, firstErr
}
