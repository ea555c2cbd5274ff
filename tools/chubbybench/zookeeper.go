package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZooKeeper: Debian's zookeeper 3.8, QuorumPeerMain started with java
// directly, with its default durability (forceSync: the transaction log is
// fsynced before a write is acknowledged). Run fairly:
// maxClientCnxns=0 (the default of 60 per IP refuses 64 loopback clients),
// the admin server off, slf4j-simple on the classpath for logs. Driven by
// go-zookeeper and its lock recipe (ephemeral sequential nodes).

type zkSystem struct {
	env         *env
	n           int
	cl          *cluster
	clientPorts []int
}

func newZKSystem(e *env, n int) *zkSystem { return &zkSystem{env: e, n: n} }

func (s *zkSystem) Kind() string { return sysZooKeeper }
func (s *zkSystem) Nodes() int   { return s.n }

func (s *zkSystem) Unavailable() string {
	if _, err := exec.LookPath(s.env.cfg.Java); err != nil {
		return fmt.Sprintf("not installed (%s not found)", s.env.cfg.Java)
	}
	for _, jar := range filepath.SplitList(s.env.cfg.ZKClasspath) {
		if _, err := os.Stat(jar); err != nil {
			return fmt.Sprintf("not installed (%s missing; ./build.sh bench installs Debian's zookeeper)", jar)
		}
	}
	return ""
}

func (s *zkSystem) NA(w Workload) string {
	switch {
	case w.Kind == kindFailover && s.n == 1:
		return "n/a (one node)"
	case w.Kind == kindReadCached:
		return "n/a: every ZooKeeper read is served from the connected server's memory (the read row is that figure)"
	case w.Kind == kindSessionsHeld && w.Variant == variantBatched:
		return "n/a: a ZooKeeper session is its connection (see sessions-held/direct)"
	}
	return ""
}

func (s *zkSystem) Bound(w Workload) string {
	switch w.Kind {
	case kindLockDistinct:
		return "lock recipe: create ephemeral-sequential + getChildren + delete (2 writes, txn log fsynced with group commit)"
	case kindLockContended:
		return "hand-off by watch on the predecessor: delete → event → getChildren"
	case kindWrite:
		return "setData: a quorum write, txn log fsync"
	case kindRead:
		return "getData from the connected server's memory (not linearizable without sync)"
	case kindSessionCreate:
		return "TCP connect + session creation (a quorum write); the untimed close is another"
	case kindSessionsHeld:
		return fmt.Sprintf("one TCP connection per session; %d s session timeout, client pings every 4 s", peerTTLSeconds)
	case kindFailover:
		return "go-zookeeper's fixed 1 s reconnect back-off (the election itself takes ~0.5 s)"
	case kindTransferSpread, kindTransferHot:
		stale := ""
		if s.n > 1 {
			stale = ", also after a stale follower read"
		}
		return "getData of both znodes from the connected server's memory (with their versions), then multi of 2 setData at those versions: " +
			"one quorum write, txn log fsync; a changed version (ZBADVERSION" + stale + ") is an abort, retried at once"
	}
	return ""
}

// zkConfig is the zoo.cfg of one node. quorum lists server.N lines for a
// multi-node ensemble (empty for one node).
func zkConfig(dataDir string, clientPort int, quorum []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tickTime=2000\ninitLimit=10\nsyncLimit=5\n")
	fmt.Fprintf(&b, "dataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n", dataDir, clientPort)
	fmt.Fprintf(&b, "maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=srvr,ruok\n")
	for _, q := range quorum {
		b.WriteString(q + "\n")
	}
	return b.String()
}

func (s *zkSystem) Start(ctx context.Context) error {
	dir, err := s.env.newDataDir(fmt.Sprintf("zk%d", s.n))
	if err != nil {
		return err
	}
	ports, err := freePorts(3 * s.n)
	if err != nil {
		return err
	}
	s.cl = &cluster{env: s.env, dir: dir}
	s.clientPorts = make([]int, s.n)
	var quorum []string
	if s.n > 1 {
		for i := range s.n {
			quorum = append(quorum, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, ports[3*i+1], ports[3*i+2]))
		}
	}
	for i := range s.n {
		s.clientPorts[i] = ports[3*i]
		nodeDir := filepath.Join(dir, fmt.Sprintf("z%d", i+1))
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			return fmt.Errorf("zookeeper data: %w", err)
		}
		if err := os.WriteFile(filepath.Join(nodeDir, "myid"), fmt.Appendf(nil, "%d\n", i+1), 0o644); err != nil {
			return fmt.Errorf("zookeeper myid: %w", err)
		}
		cfgPath := filepath.Join(nodeDir, "zoo.cfg")
		if err := os.WriteFile(cfgPath, []byte(zkConfig(nodeDir, ports[3*i], quorum)), 0o644); err != nil {
			return fmt.Errorf("zookeeper config: %w", err)
		}
		name := fmt.Sprintf("zookeeper×%d-z%d", s.n, i+1)
		level := "warn"
		if s.env.cfg.LogLevel == "debug" {
			level = "info"
		}
		s.cl.specs = append(s.cl.specs, nodeSpec{
			name: name,
			argv: []string{s.env.cfg.Java,
				"-cp", s.env.cfg.ZKClasspath,
				"-Dorg.slf4j.simpleLogger.defaultLogLevel=" + level,
				// It warns of every go-zookeeper connection ("old client").
				"-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.ZooKeeperServer=error",
				"-Dorg.slf4j.simpleLogger.showDateTime=true",
				"-Dzookeeper.admin.enableServer=false",
				"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath,
			},
			dir: nodeDir,
			log: filepath.Join(s.env.logs, name+".log"),
		})
	}
	if err := s.cl.startAll(); err != nil {
		return err
	}
	if err := s.waitReady(ctx); err != nil {
		return err
	}
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, p := range []string{"/bench", "/bench/locks", "/bench/files", "/bench/txn"} {
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("zookeeper create %s: %w", p, err)
		}
	}
	return nil
}

// srvrMode asks the node on port for its mode (standalone, leader,
// follower) with the srvr four-letter word.
func srvrMode(ctx context.Context, port int) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, "srvr"); err != nil {
		return "", err
	}
	sc := bufio.NewScanner(io.LimitReader(c, 64<<10))
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("port %d: not serving", port)
}

// waitReady waits until every node serves, one leads, and a client gets a
// session.
func (s *zkSystem) waitReady(ctx context.Context) error {
	return waitFor(ctx, 60*time.Second, 100*time.Millisecond, fmt.Sprintf("zookeeper×%d", s.n), func(ctx context.Context) error {
		if err := s.cl.checkAlive(); err != nil {
			return err
		}
		leaders := 0
		for _, p := range s.clientPorts {
			m, err := srvrMode(ctx, p)
			if err != nil {
				return err
			}
			if m == "leader" || m == "standalone" {
				leaders++
			}
		}
		if leaders != 1 {
			return fmt.Errorf("%d leaders", leaders)
		}
		return nil
	})
}

func (s *zkSystem) servers() []string {
	out := make([]string, len(s.clientPorts))
	for i, p := range s.clientPorts {
		out[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	return out
}

// zkClientBuffer is the send and receive buffer of one ZooKeeper client
// connection: far above any packet the workloads exchange (a 64-byte file,
// a lock directory of at most 64 children).
const zkClientBuffer = 64 << 10

// zkQuiet discards go-zookeeper's logging (it logs every connection).
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// connect opens a session and waits until the server has granted it.
func (s *zkSystem) connect(ctx context.Context) (*zk.Conn, error) {
	has := make(chan struct{})
	var once sync.Once
	conn, _, err := zk.Connect(s.servers(), peerTTLSeconds*time.Second,
		zk.WithLogger(zkQuiet{}), zk.WithLogInfo(false),
		// go-zookeeper gives every connection a 1.5 MiB send and a 1.5 MiB
		// receive buffer: 10,000 held sessions took 18 GB of this
		// machine's 24 (and made it swap). The benchmark's packets are
		// tiny; this bounds the client's memory, not the server's work.
		zk.WithMaxBufferSize(zkClientBuffer), zk.WithMaxConnBufferSize(zkClientBuffer),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
				once.Do(func() { close(has) })
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("zookeeper connect: %w", err)
	}
	select {
	case <-has:
		return conn, nil
	case <-ctx.Done():
		conn.Close()
		return nil, fmt.Errorf("zookeeper session: %w", ctx.Err())
	}
}

func (s *zkSystem) Stop() {
	s.cl.stop()
	s.cl = nil
}

func (s *zkSystem) ServerPIDs() []int { return s.cl.pids() }

func (s *zkSystem) Leader(ctx context.Context) (int, error) {
	for i, p := range s.clientPorts {
		if s.cl.procs[i] == nil {
			continue
		}
		m, err := srvrMode(ctx, p)
		if err == nil && (m == "leader" || m == "standalone") {
			return i, nil
		}
	}
	return -1, errors.New("zookeeper: no node says it leads")
}

func (s *zkSystem) Kill(i int) error { return s.cl.kill(i) }

func (s *zkSystem) Pause(i int) error { return s.cl.pause(i) }

func (s *zkSystem) Resume(ctx context.Context, i int) error {
	if err := s.cl.resume(i); err != nil {
		return err
	}
	return s.waitReady(ctx)
}

func (s *zkSystem) Restart(ctx context.Context, i int) error {
	if err := s.cl.startNode(i); err != nil {
		return err
	}
	return s.waitReady(ctx)
}

func (s *zkSystem) NewClient(ctx context.Context, id int) (Client, error) {
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	return &zkClient{sys: s, conn: conn}, nil
}

type zkClient struct {
	sys    *zkSystem
	conn   *zk.Conn
	closed atomic.Bool // the connection was closed to unblock a Lock
}

// broken reports that the client's connection was closed (see zkLocker).
func (c *zkClient) broken() bool { return c.closed.Load() }

func (c *zkClient) Lock(ctx context.Context, name string) (Locker, error) {
	return &zkLocker{c: c, conn: c.conn, path: "/bench/locks/" + name}, nil
}

func (c *zkClient) File(ctx context.Context, name string) (File, error) {
	path := "/bench/files/" + name
	if _, err := c.conn.Create(path, payload, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return &zkFile{conn: c.conn, path: path}, nil
}

func (c *zkClient) NewSession(ctx context.Context) (func(context.Context) error, error) {
	conn, err := c.sys.connect(ctx)
	if err != nil {
		return nil, err
	}
	return func(context.Context) error { conn.Close(); return nil }, nil
}

func (c *zkClient) Accounts(ctx context.Context, name string, n int) (Accounts, error) {
	return &zkAccounts{conn: c.conn, dir: "/bench/txn/" + name, n: n}, nil
}

// zkAccounts are the znodes dir/acct-<i>.
type zkAccounts struct {
	conn *zk.Conn
	dir  string
	n    int
}

func (a *zkAccounts) path(i int) string { return a.dir + "/acct-" + strconv.Itoa(i) }

// zkMultiOps is how many creates one set-up multi carries.
const zkMultiOps = 100

func (a *zkAccounts) Create(ctx context.Context, from, to int, balance int64) error {
	if _, err := a.conn.Create(a.dir, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("create %s: %w", a.dir, err)
	}
	v := strconv.AppendInt(nil, balance, 10)
	for lo := from; lo < to; lo += zkMultiOps {
		var ops []any
		for i := lo; i < min(lo+zkMultiOps, to); i++ {
			ops = append(ops, &zk.CreateRequest{Path: a.path(i), Data: v, Acl: zk.WorldACL(zk.PermAll)})
		}
		if err := multiErr(a.conn.Multi(ops...)); err != nil {
			return fmt.Errorf("create %s...: %w", a.path(lo), err)
		}
	}
	return nil
}

// multiErr is the error of a multi: the call's, else the first op's.
func multiErr(res []zk.MultiResponse, err error) error {
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Error != nil {
			return r.Error
		}
	}
	return nil
}

// Transfer reads both znodes and writes both in one multi conditional on
// the versions read; ZBADVERSION (another client wrote one since) is an
// aborted attempt, and the next reads again at once.
func (a *zkAccounts) Transfer(ctx context.Context, x, y int) (int, error) {
	px, py := a.path(x), a.path(y)
	for aborts := 0; ; aborts++ {
		if err := ctx.Err(); err != nil {
			return aborts, err
		}
		bx, vx, err := a.get(px)
		if err != nil {
			return aborts, err
		}
		by, vy, err := a.get(py)
		if err != nil {
			return aborts, err
		}
		err = multiErr(a.conn.Multi(
			&zk.SetDataRequest{Path: px, Data: strconv.AppendInt(nil, bx-1, 10), Version: vx},
			&zk.SetDataRequest{Path: py, Data: strconv.AppendInt(nil, by+1, 10), Version: vy},
		))
		if !errors.Is(err, zk.ErrBadVersion) {
			return aborts, err
		}
	}
}

// get reads a balance and the znode's version.
func (a *zkAccounts) get(p string) (int64, int32, error) {
	v, st, err := a.conn.Get(p)
	if err != nil {
		return 0, 0, fmt.Errorf("get %s: %w", p, err)
	}
	b, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", p, err)
	}
	return b, st.Version, nil
}

// Sum syncs the connected server with the leader, then reads the
// accounts: after the run nothing writes, so the reads see one state.
func (a *zkAccounts) Sum(ctx context.Context, from, to int) (int64, error) {
	if _, err := a.conn.Sync(a.dir); err != nil {
		return 0, fmt.Errorf("sync %s: %w", a.dir, err)
	}
	var sum int64
	for i := from; i < to; i++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		b, _, err := a.get(a.path(i))
		if err != nil {
			return 0, err
		}
		sum += b
	}
	return sum, nil
}

func (a *zkAccounts) Close() error { return nil }

func (c *zkClient) Close() error {
	c.conn.Close()
	return nil
}

// zkLocker runs go-zookeeper's lock recipe. Its Lock takes no context, so
// it runs in a goroutine; if ctx ends first the connection is closed (the
// session's ephemeral nodes go with it), which makes Lock return. After a
// failed Lock or Unlock the client deletes the lock nodes its own session
// left behind: the recipe would otherwise wait forever on one of them.
type zkLocker struct {
	c    *zkClient
	conn *zk.Conn
	path string
}

func (l *zkLocker) Cycle(ctx context.Context) error {
	lk := zk.NewLock(l.conn, l.path, zk.WorldACL(zk.PermAll))
	errc := make(chan error, 1)
	go func() { errc <- lk.Lock() }()
	select {
	case err := <-errc:
		if err != nil {
			l.deleteOrphans()
			return fmt.Errorf("lock: %w", err)
		}
	case <-ctx.Done():
		l.c.closed.Store(true)
		l.conn.Close()
		select {
		case <-errc:
		case <-time.After(5 * time.Second):
		}
		return fmt.Errorf("lock: %w (connection closed)", ctx.Err())
	}
	if err := lk.Unlock(); err != nil {
		l.deleteOrphans()
		return fmt.Errorf("unlock: %w", err)
	}
	return nil
}

// deleteOrphans deletes the lock nodes under l.path owned by this
// connection's session. Only called when no Lock of this client runs.
func (l *zkLocker) deleteOrphans() {
	children, _, err := l.conn.Children(l.path)
	if err != nil {
		return
	}
	me := l.conn.SessionID()
	for _, c := range children {
		p := l.path + "/" + c
		if _, st, err := l.conn.Get(p); err == nil && st.EphemeralOwner == me {
			_ = l.conn.Delete(p, -1)
		}
	}
}

func (l *zkLocker) Close() error { return nil }

type zkFile struct {
	conn *zk.Conn
	path string
}

func (f *zkFile) Write(ctx context.Context, data []byte) error {
	_, err := f.conn.Set(f.path, data, -1)
	return err
}

func (f *zkFile) Read(ctx context.Context) error {
	_, _, err := f.conn.Get(f.path)
	return err
}

func (f *zkFile) ReadCached(ctx context.Context) error { return errNA }
func (f *zkFile) Close() error                         { return nil }

// HoldSessions opens n sessions, each its own connection, 64 at a time.
func (s *zkSystem) HoldSessions(ctx context.Context, w Workload, n int) (int, func(), error) {
	var (
		mu       sync.Mutex
		conns    []*zk.Conn
		next     atomic.Int64
		failed   atomic.Bool
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	for range min(64, n) {
		wg.Go(func() {
			for !failed.Load() && ctx.Err() == nil && next.Add(1) <= int64(n) {
				cctx, cancel := context.WithTimeout(ctx, s.env.cfg.OpTimeout)
				c, err := s.connect(cctx)
				cancel()
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					failed.Store(true)
					return
				}
				mu.Lock()
				conns = append(conns, c)
				h := len(conns)
				mu.Unlock()
				if h%2000 == 0 || h == n {
					s.env.prog.printf("    zookeeper×%d sessions-held: %d of %d sessions (one connection each)", s.n, h, n)
				}
			}
		})
	}
	wg.Wait()
	release := func() {
		var cw sync.WaitGroup
		for _, c := range conns {
			cw.Go(c.Close)
		}
		waitGroupTimeout(&cw, 30*time.Second)
	}
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return len(conns), release, firstErr
}
