package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis: Debian's redis-server 7 with its default durability (RDB
// snapshots now and then, no AOF: nothing is fsynced per write). Three
// nodes are a primary and two asynchronous replicas; locks, reads and
// writes go to the primary. The lock is the single-instance recipe: SET key
// token NX PX, retried while held, and a compare-and-delete Lua release.

// redisLockTTL is the lock's expiry (PX): a holder that dies frees the lock
// after it.
const redisLockTTL = 30 * time.Second

// redisRelease deletes the lock only if it still holds our token.
var redisRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

type redisSystem struct {
	env   *env
	n     int
	cl    *cluster
	ports []int // ports[0] is the primary
}

func newRedisSystem(e *env, n int) *redisSystem { return &redisSystem{env: e, n: n} }

func (s *redisSystem) Kind() string { return sysRedis }
func (s *redisSystem) Nodes() int   { return s.n }

func (s *redisSystem) Unavailable() string {
	if _, err := exec.LookPath(s.env.cfg.RedisServer); err != nil {
		return fmt.Sprintf("not installed (%s not found; ./build.sh bench installs Debian's redis-server)", s.env.cfg.RedisServer)
	}
	return ""
}

func (s *redisSystem) NA(w Workload) string {
	switch w.Kind {
	case kindReadCached:
		return "n/a: no client cache in go-redis"
	case kindSessionCreate, kindSessionsHeld:
		return "n/a: Redis has no sessions (a lock is a key with a TTL)"
	case kindFailover:
		if s.n == 1 {
			return "n/a (one node)"
		}
		return "n/a: no automatic failover without Sentinel, and a lock on an asynchronously replicated primary is lost with it"
	}
	return ""
}

func (s *redisSystem) Bound(w Workload) string {
	common := "in memory, no fsync (default: RDB snapshots only), one thread"
	if s.n > 1 {
		common += "; replicas asynchronous, not waited for"
	}
	switch w.Kind {
	case kindLockDistinct:
		return "SET NX PX + Lua compare-and-delete: 2 round trips; " + common
	case kindLockContended:
		return fmt.Sprintf("waiters poll SET NX every %v (no queue, no fencing token); %s", s.env.cfg.RedisRetry, common)
	case kindWrite, kindRead:
		return common
	case kindTransferSpread, kindTransferHot:
		return "WATCH a b, GET a, GET b, then MULTI SET a SET b EXEC in one round trip (4 round trips); EXEC fails when a watched key changed " +
			"(redis.TxFailedErr): an abort, retried at once; one node (the primary) runs every transaction, no quorum; " + common
	}
	return ""
}

func (s *redisSystem) Start(ctx context.Context) error {
	dir, err := s.env.newDataDir(fmt.Sprintf("redis%d", s.n))
	if err != nil {
		return err
	}
	s.ports, err = freePorts(s.n)
	if err != nil {
		return err
	}
	s.cl = &cluster{env: s.env, dir: dir}
	for i, p := range s.ports {
		name := fmt.Sprintf("redis×%d-n%d", s.n, i+1)
		argv := []string{s.env.cfg.RedisServer,
			"--port", strconv.Itoa(p),
			"--bind", "127.0.0.1",
			"--dir", dir,
			"--dbfilename", fmt.Sprintf("dump-%d.rdb", i+1),
			"--daemonize", "no",
			"--logfile", "",
		}
		if i > 0 {
			argv = append(argv, "--replicaof", "127.0.0.1", strconv.Itoa(s.ports[0]))
		} else if s.n > 1 {
			// The primary waits 5 s by default before a diskless full sync,
			// for more replicas to join it; both are here at once.
			argv = append(argv, "--repl-diskless-sync-delay", "0")
		}
		s.cl.specs = append(s.cl.specs, nodeSpec{name: name, argv: argv, dir: dir, log: filepath.Join(s.env.logs, name+".log")})
	}
	if err := s.cl.startAll(); err != nil {
		return err
	}
	return waitFor(ctx, 30*time.Second, 50*time.Millisecond, fmt.Sprintf("redis×%d", s.n), func(ctx context.Context) error {
		if err := s.cl.checkAlive(); err != nil {
			return err
		}
		for i, p := range s.ports {
			rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", p), MaxRetries: -1})
			err := rdb.Ping(ctx).Err()
			if err == nil && i > 0 {
				var info string
				info, err = rdb.Info(ctx, "replication").Result()
				if err == nil && !strings.Contains(info, "master_link_status:up") {
					err = fmt.Errorf("replica %d not in sync", i)
				}
			}
			rdb.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *redisSystem) Stop() {
	s.cl.stop()
	s.cl = nil
}

func (s *redisSystem) ServerPIDs() []int { return s.cl.pids() }

func (s *redisSystem) Leader(ctx context.Context) (int, error) { return 0, nil }

func (s *redisSystem) Kill(i int) error { return s.cl.kill(i) }

func (s *redisSystem) Restart(ctx context.Context, i int) error {
	return errors.New("redis: no failover")
}

func (s *redisSystem) Pause(i int) error { return errors.New("redis: no failover") }

func (s *redisSystem) Resume(ctx context.Context, i int) error {
	return errors.New("redis: no failover")
}

func (s *redisSystem) NewClient(ctx context.Context, id int) (Client, error) {
	rdb := redis.NewClient(&redis.Options{
		Addr:         fmt.Sprintf("127.0.0.1:%d", s.ports[0]),
		PoolSize:     4,
		DialTimeout:  time.Second,
		ReadTimeout:  5 * time.Second,
		WriteTimeout: 5 * time.Second,
	})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis: %w", err)
	}
	return &redisClient{rdb: rdb, id: id, retry: s.env.cfg.RedisRetry}, nil
}

func (s *redisSystem) HoldSessions(ctx context.Context, w Workload, n int) (int, func(), error) {
	return 0, func() {}, errNA
}

type redisClient struct {
	rdb   *redis.Client
	id    int
	retry time.Duration
	seq   atomic.Int64
}

func (c *redisClient) Lock(ctx context.Context, name string) (Locker, error) {
	return &redisLocker{c: c, key: "bench:lock:" + name}, nil
}

func (c *redisClient) File(ctx context.Context, name string) (File, error) {
	key := "bench:file:" + name
	if err := c.rdb.Set(ctx, key, payload, 0).Err(); err != nil {
		return nil, fmt.Errorf("set %s: %w", key, err)
	}
	return &redisFile{rdb: c.rdb, key: key}, nil
}

func (c *redisClient) NewSession(ctx context.Context) (func(context.Context) error, error) {
	return nil, errNA
}

func (c *redisClient) Close() error { return c.rdb.Close() }

func (c *redisClient) Accounts(ctx context.Context, name string, n int) (Accounts, error) {
	return &redisAccounts{rdb: c.rdb, prefix: "bench:txn:" + name + ":acct-", n: n}, nil
}

// redisAccounts are the keys prefix+"<i>".
type redisAccounts struct {
	rdb    *redis.Client
	prefix string
	n      int
}

func (a *redisAccounts) key(i int) string { return a.prefix + strconv.Itoa(i) }

func (a *redisAccounts) Create(ctx context.Context, from, to int, balance int64) error {
	var kv []any
	for i := from; i < to; i++ {
		kv = append(kv, a.key(i), balance)
	}
	return a.rdb.MSet(ctx, kv...).Err()
}

// Transfer is optimistic locking with WATCH: if either key changes
// between the WATCH and the EXEC, EXEC runs nothing (redis.TxFailedErr),
// an aborted attempt; the next watches and reads again at once.
func (a *redisAccounts) Transfer(ctx context.Context, x, y int) (int, error) {
	kx, ky := a.key(x), a.key(y)
	for aborts := 0; ; aborts++ {
		err := a.rdb.Watch(ctx, func(tx *redis.Tx) error {
			bx, err := tx.Get(ctx, kx).Int64()
			if err != nil {
				return fmt.Errorf("get %s: %w", kx, err)
			}
			by, err := tx.Get(ctx, ky).Int64()
			if err != nil {
				return fmt.Errorf("get %s: %w", ky, err)
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, kx, bx-1, 0)
				p.Set(ctx, ky, by+1, 0)
				return nil
			})
			return err
		}, kx, ky)
		if !errors.Is(err, redis.TxFailedErr) || ctx.Err() != nil {
			return aborts, err
		}
	}
}

// Sum reads the accounts with one MGET.
func (a *redisAccounts) Sum(ctx context.Context, from, to int) (int64, error) {
	keys := make([]string, to-from)
	for i := range keys {
		keys[i] = a.key(from + i)
	}
	vs, err := a.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return 0, err
	}
	var sum int64
	for i, v := range vs {
		s, ok := v.(string)
		if !ok {
			return 0, fmt.Errorf("%s missing", keys[i])
		}
		b, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", keys[i], err)
		}
		sum += b
	}
	return sum, nil
}

func (a *redisAccounts) Close() error { return nil }

type redisLocker struct {
	c   *redisClient
	key string
}

func (l *redisLocker) Cycle(ctx context.Context) error {
	token := fmt.Sprintf("%d-%d", l.c.id, l.c.seq.Add(1))
	for {
		ok, err := l.c.rdb.SetNX(ctx, l.key, token, redisLockTTL).Result()
		if err != nil {
			return fmt.Errorf("set nx: %w", err)
		}
		if ok {
			break
		}
		if l.c.retry > 0 {
			t := time.NewTimer(l.c.retry)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("acquire: %w", ctx.Err())
			case <-t.C:
			}
		} else if err := ctx.Err(); err != nil {
			return fmt.Errorf("acquire: %w", err)
		}
	}
	n, err := redisRelease.Run(ctx, l.c.rdb, []string{l.key}, token).Int()
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if n != 1 {
		return errors.New("release: the lock had expired")
	}
	return nil
}

func (l *redisLocker) Close() error { return nil }

type redisFile struct {
	rdb *redis.Client
	key string
}

func (f *redisFile) Write(ctx context.Context, data []byte) error {
	return f.rdb.Set(ctx, f.key, data, 0).Err()
}

func (f *redisFile) Read(ctx context.Context) error { return f.rdb.Get(ctx, f.key).Err() }

func (f *redisFile) ReadCached(ctx context.Context) error { return errNA }
func (f *redisFile) Close() error                         { return nil }
