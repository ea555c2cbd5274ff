package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/client/txn"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
	"github.com/chubbygo/chubby/rpc"
)

// Our cell: N chubbyd processes started from a peer list, talked to with
// the Go client library (client/) and, for sessions held in batches, with
// the generated Kitex client directly.

// Directories of the cell the benchmark uses.
const (
	chubbyLockDir = "/bench/locks"
	chubbyFileDir = "/bench/files"
	// chubbyTxnDir is the table (client/txn) of the transfer workloads:
	// a row per account, "<workload>/acct-<i>", its balance in column
	// chubbyTxnCol.
	chubbyTxnDir = "/bench/txn"
	chubbyTxnCol = "bal"
)

// directMaxConnections is chubbyd's --max-connections for the
// sessions-held/direct run: as many connections as 20,000 open files per
// process leave room for beside the cell's own files.
const directMaxConnections = 19_500

// replica is one chubbyd of a cell.
type replica struct {
	ID       int
	Addr     string // client address, host:port
	PeerAddr string // replica-to-replica address; "" in a one-replica cell
	HTTP     string // /status and /metrics address; "" for none
	Data     string // data directory
}

// replicas lays out a cell of len(addrs) replicas with ids 1..n, data
// under dir/r<id>. peerAddrs, when not nil, gives each its replica-traffic
// address.
func replicas(dir string, addrs, peerAddrs []string) []replica {
	out := make([]replica, len(addrs))
	for i, a := range addrs {
		out[i] = replica{ID: i + 1, Addr: a, Data: filepath.Join(dir, "r"+strconv.Itoa(i+1))}
		if i < len(peerAddrs) {
			out[i].PeerAddr = peerAddrs[i]
		}
	}
	return out
}

// peerList formats the --peers value, id=CLIENT_ADDR[/PEER_ADDR] by id:
// "1=127.0.0.1:7000/127.0.0.1:7100,2=127.0.0.1:7001/127.0.0.1:7101".
// The peer address is always given when known: chubbyd's default (the
// client port + 100) could collide with another port picked here.
func peerList(all []replica) string {
	sorted := slices.Clone(all)
	slices.SortFunc(sorted, func(a, b replica) int { return a.ID - b.ID })
	parts := make([]string, len(sorted))
	for i, r := range sorted {
		parts[i] = fmt.Sprintf("%d=%s", r.ID, r.Addr)
		if r.PeerAddr != "" {
			parts[i] += "/" + r.PeerAddr
		}
	}
	return strings.Join(parts, ",")
}

// chubbydArgs is the command line of replica r of the cell all (argv[0] is
// bin): `chubbyd serve` with its id, address, data directory, its HTTP
// address (/status, /metrics; off when r.HTTP is empty) and, for more
// than one replica, the peer list; extra flags go last (they override).
func chubbydArgs(bin string, r replica, all []replica, extra ...string) []string {
	args := []string{bin, "serve",
		"--id", strconv.Itoa(r.ID),
		"--listen", r.Addr,
		"--data", r.Data,
		"--http", r.HTTP,
		"--log-level", "warn",
	}
	if len(all) > 1 {
		args = append(args, "--peers", peerList(all))
	}
	return append(args, extra...)
}

// peersFlag matches a --peers line in the flag list of `chubbyd serve
// --help` (not a mention of it in the prose above).
var peersFlag = regexp.MustCompile(`(?m)^\s+(?:-\w,\s+)?--peers[\s=]`)

// hasPeersFlag reports whether the help text offers --peers.
func hasPeersFlag(help string) bool { return peersFlag.MatchString(help) }

// detectPeers runs `bin serve --help` and reports whether chubbyd can run
// as one replica of several (--peers).
func detectPeers(ctx context.Context, bin string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "serve", "--help").CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("%s serve --help: %w", bin, err)
	}
	return hasPeersFlag(string(out)), nil
}

// findChubbyd picks the chubbyd binary: the flag, else one next to this
// program, else bin/chubbyd, else chubbyd on PATH; "" if none. The path is
// made absolute: replicas run in their own data directories.
func findChubbyd(flag string) string {
	if flag != "" {
		return absPath(flag)
	}
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), "chubbyd"))
	}
	candidates = append(candidates, filepath.Join("bin", "chubbyd"))
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return absPath(c)
		}
	}
	if p, err := exec.LookPath("chubbyd"); err == nil {
		return p
	}
	return ""
}

// absPath makes a path with a directory part absolute (a bare name is
// left to the PATH lookup).
func absPath(p string) string {
	if !strings.ContainsRune(p, filepath.Separator) {
		return p
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// chubbySystem is our cell with n replicas.
type chubbySystem struct {
	env      *env
	n        int
	bin      string   // chubbyd
	peers    bool     // chubbyd has --peers
	external []string // a running cell to use instead of starting one
	extra    []string // extra chubbyd flags (set per run)
	pprofEnv []string // environment of a profiled run
	label    string

	cl   *cluster
	reps []replica
}

func newChubbySystem(e *env, n int, bin string, peers bool, external []string) *chubbySystem {
	s := &chubbySystem{env: e, n: n, bin: bin, peers: peers, external: external}
	if len(external) > 0 {
		s.n = len(external)
	}
	return s
}

// prepare sets the chubbyd flags of the next Start: the direct
// sessions-held run raises --max-connections to what the machine's 20,000
// open files per process allow; the batched one holds up to 200,000
// sessions as one principal, past the 20,000 a principal may hold by
// default, so it lifts that bound (--max-sessions-per-principal 0).
func (s *chubbySystem) prepare(w Workload) {
	s.extra = nil
	switch {
	case w.Kind == kindSessionsHeld && w.Variant == variantDirect:
		s.extra = []string{"--max-connections", strconv.Itoa(directMaxConnections)}
	case w.Kind == kindSessionsHeld:
		s.extra = []string{"--max-sessions-per-principal", "0"}
	}
}

func (s *chubbySystem) Kind() string { return sysChubby }
func (s *chubbySystem) Nodes() int   { return s.n }

func (s *chubbySystem) Unavailable() string {
	switch {
	case len(s.external) > 0:
		return ""
	case s.bin == "":
		return "no chubbyd binary (build it: ./build.sh)"
	case s.n > 1 && !s.peers:
		return "not available yet: `chubbyd serve` has no --peers (replication is being built)"
	}
	return ""
}

func (s *chubbySystem) NA(w Workload) string {
	switch w.Kind {
	case kindFailover:
		if s.n == 1 {
			return "n/a until replication (one replica: nothing to fail over to)"
		}
		if len(s.external) > 0 {
			return "n/a for an external cell (its processes are not ours to kill)"
		}
	case kindSessionsHeld:
		if len(s.external) > 0 {
			return "n/a for an external cell (its process is not ours to measure)"
		}
	}
	return ""
}

func (s *chubbySystem) Bound(w Workload) string {
	disk := "on disk (fsync)"
	if s.n > 1 {
		disk = fmt.Sprintf("on disk (fsync) on %d of %d replicas", s.n/2+1, s.n)
	}
	switch w.Kind {
	case kindLockDistinct:
		return "2 commands per cycle (Acquire, Release), each " + disk + " before its reply; one fsync serves every command waiting"
	case kindLockContended:
		return "FIFO waiters parked in the master; a Release grants the next waiter in the same command, so each hand-off is that command " + disk + " plus the new holder's round trip, in turn"
	case kindWrite:
		return "1 command, " + disk + " (batched)"
	case kindRead:
		return "served by the master from memory: 1 round trip"
	case kindReadCached:
		return "client cache: no round trip"
	case kindSessionCreate:
		return "CreateSession: 1 fsynced command (the untimed close is another)"
	case kindSessionsHeld:
		if w.Variant == variantBatched {
			return "up to 10,000 sessions per parked KeepAlive (generated Kitex client); 12 s lease, answered ~3 s (a quarter lease, the master's KeepAlive margin) before it ends"
		}
		return fmt.Sprintf("Go client: one parked KeepAlive, so one connection, per session; 20,000 open files per process (a fresh cell for this run gets --max-connections %d)", directMaxConnections)
	case kindFailover:
		return "view change after the primary's silence + the client's master search"
	case kindTransferSpread, kindTransferHot:
		return "client/txn (Percolator, snapshot isolation): a start timestamp, 2 row reads, both rows prewritten at once " +
			"(a compare-and-swap each, one Multi " + disk + "), a commit timestamp, the primary's commit (the commit point, one Multi); the secondary is committed in the background; " +
			"first committer wins (ErrConflict: abort; txn.DB.Run begins again after a jittered pause doubling from 1 ms to 100 ms); a read that meets a live transaction's lock " +
			"waits for it (backoff 1-20 ms), one whose primary committed is rolled forward; rows keep every version (no GC during the run)"
	}
	return ""
}

// addrs are the cell's client addresses.
func (s *chubbySystem) addrs() []string {
	if len(s.external) > 0 {
		return s.external
	}
	out := make([]string, len(s.reps))
	for i, r := range s.reps {
		out[i] = r.Addr
	}
	return out
}

func (s *chubbySystem) Start(ctx context.Context) error {
	if len(s.external) == 0 {
		dir, err := s.env.newDataDir(fmt.Sprintf("chubby%d", s.n))
		if err != nil {
			return err
		}
		// A client port and an HTTP port (/status, /metrics) per replica,
		// and a peer port when replicated.
		perReplica := 2
		if s.n > 1 {
			perReplica = 3
		}
		ports, err := freePorts(perReplica * s.n)
		if err != nil {
			return err
		}
		var addrs, peerAddrs []string
		for i := range s.n {
			addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", ports[perReplica*i]))
			if perReplica == 3 {
				peerAddrs = append(peerAddrs, fmt.Sprintf("127.0.0.1:%d", ports[perReplica*i+2]))
			}
		}
		s.reps = replicas(dir, addrs, peerAddrs)
		for i := range s.reps {
			s.reps[i].HTTP = fmt.Sprintf("127.0.0.1:%d", ports[perReplica*i+1])
		}
		s.cl = &cluster{env: s.env, dir: dir}
		for _, r := range s.reps {
			name := fmt.Sprintf("chubby×%d-r%d", s.n, r.ID)
			s.cl.specs = append(s.cl.specs, nodeSpec{
				name: name,
				argv: chubbydArgs(s.bin, r, s.reps, s.extra...),
				env:  s.pprofEnv,
				dir:  dir,
				log:  filepath.Join(s.env.logs, name+".log"),
			})
		}
		if err := s.cl.startAll(); err != nil {
			return err
		}
	}
	if err := s.waitReady(ctx); err != nil {
		return err
	}
	// The directories every client works in.
	return s.withSession(ctx, func(ctx context.Context, ss *client.Session) error {
		for _, d := range []string{chubbyLockDir, chubbyFileDir} {
			if _, err := ss.Mkdir(ctx, d, client.MkdirOptions{Parents: true}); err != nil {
				return fmt.Errorf("mkdir %s: %w", d, err)
			}
		}
		return nil
	})
}

// waitReady waits until the cell names a master and answers Status.
func (s *chubbySystem) waitReady(ctx context.Context) error {
	c, err := s.connect(ctx, "ready")
	if err != nil {
		return err
	}
	defer c.Close()
	return waitFor(ctx, 60*time.Second, 50*time.Millisecond, fmt.Sprintf("chubby×%d", s.n), func(ctx context.Context) error {
		if s.cl != nil {
			if err := s.cl.checkAlive(); err != nil {
				return err
			}
		}
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		if st.GetMasterAddress() == "" {
			return errors.New("no master yet")
		}
		return nil
	})
}

func (s *chubbySystem) connect(ctx context.Context, name string) (*client.Client, error) {
	return s.connectCache(ctx, name, false)
}

// connectCache connects a client with its cache on or off. The workloads'
// clients run with it off: reads and writes measure the cell (with the
// cache on, repeated reads would be served locally and writes would wait
// for invalidation acks). read-cached opens a caching client of its own.
func (s *chubbySystem) connectCache(ctx context.Context, name string, cache bool) (*client.Client, error) {
	return client.Connect(ctx, client.Config{
		Addrs:        s.addrs(),
		ClientName:   "chubbybench-" + name,
		CallTimeout:  s.env.cfg.OpTimeout,
		DisableCache: !cache,
	})
}

// withSession runs f with a fresh session, closed afterwards.
func (s *chubbySystem) withSession(ctx context.Context, f func(context.Context, *client.Session) error) error {
	c, err := s.connect(ctx, "setup")
	if err != nil {
		return err
	}
	defer c.Close()
	ss, err := c.NewSession(ctx)
	if err != nil {
		return fmt.Errorf("setup session: %w", err)
	}
	defer ss.Close(context.WithoutCancel(ctx))
	return f(ctx, ss)
}

func (s *chubbySystem) Stop() {
	s.cl.stop()
	s.cl = nil
}

func (s *chubbySystem) ServerPIDs() []int { return s.cl.pids() }

func (s *chubbySystem) Leader(ctx context.Context) (int, error) {
	c, err := s.connect(ctx, "leader")
	if err != nil {
		return -1, err
	}
	defer c.Close()
	m, err := c.GetMaster(ctx)
	if err != nil {
		return -1, fmt.Errorf("get master: %w", err)
	}
	for i, a := range s.addrs() {
		if a == m.GetMasterAddress() {
			return i, nil
		}
	}
	return -1, fmt.Errorf("master %q is none of %v", m.GetMasterAddress(), s.addrs())
}

func (s *chubbySystem) Kill(i int) error {
	if s.cl == nil {
		return errors.New("not started by chubbybench")
	}
	return s.cl.kill(i)
}

// Restart starts replica i again on its data and waits until the cell
// names a master and replica i follows it (waitRejoined).
func (s *chubbySystem) Restart(ctx context.Context, i int) error {
	if s.cl == nil {
		return errors.New("not started by chubbybench")
	}
	if err := s.cl.startNode(i); err != nil {
		return err
	}
	return s.waitRejoined(ctx, i)
}

func (s *chubbySystem) Pause(i int) error {
	if s.cl == nil {
		return errors.New("not started by chubbybench")
	}
	return s.cl.pause(i)
}

// Resume continues replica i and waits until it follows the cell's
// master again (waitRejoined): a paused master comes back believing it
// still leads an old view.
func (s *chubbySystem) Resume(ctx context.Context, i int) error {
	if s.cl == nil {
		return errors.New("not started by chubbybench")
	}
	if err := s.cl.resume(i); err != nil {
		return err
	}
	return s.waitRejoined(ctx, i)
}

// waitRejoined waits until the cell names a master (Status through the
// client) and replica i's own /status names the same master at the same
// epoch or a later one, not recovering: it is back in the cell, so the
// next fault can take another replica out without losing the quorum.
func (s *chubbySystem) waitRejoined(ctx context.Context, i int) error {
	if err := s.waitReady(ctx); err != nil {
		return err
	}
	if i < 0 || i >= len(s.reps) || s.reps[i].HTTP == "" {
		return nil // no /status to ask: the cell serving is all we can tell
	}
	c, err := s.connect(ctx, "rejoin")
	if err != nil {
		return err
	}
	defer c.Close()
	id := strconv.Itoa(s.reps[i].ID)
	return waitFor(ctx, 60*time.Second, 50*time.Millisecond, fmt.Sprintf("chubby×%d replica %s rejoining", s.n, id), func(ctx context.Context) error {
		if err := s.cl.checkAlive(); err != nil {
			return err
		}
		cell, err := c.Status(ctx)
		if err != nil {
			return err
		}
		own, err := fetchReplicaStatus(ctx, s.reps[i].HTTP)
		if err != nil {
			return err
		}
		switch {
		case own.MasterAddress != cell.GetMasterAddress():
			return fmt.Errorf("replica %s names master %q, the cell %q", id, own.MasterAddress, cell.GetMasterAddress())
		case own.Epoch < cell.GetEpoch():
			return fmt.Errorf("replica %s at epoch %d, the cell at %d", id, own.Epoch, cell.GetEpoch())
		case own.role(id) == "RECOVERING":
			return fmt.Errorf("replica %s is recovering", id)
		}
		return nil
	})
}

func (s *chubbySystem) NewClient(ctx context.Context, id int) (Client, error) {
	c, err := s.connect(ctx, strconv.Itoa(id))
	if err != nil {
		return nil, err
	}
	ss, err := c.NewSession(ctx)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("new session: %w", err)
	}
	return &chubbyClient{sys: s, name: strconv.Itoa(id), c: c, s: ss, opTimeout: s.env.cfg.OpTimeout}, nil
}

// chubbyClient is one client of our cell: a client.Client and its session.
type chubbyClient struct {
	sys       *chubbySystem
	name      string
	c         *client.Client
	s         *client.Session
	opTimeout time.Duration
	db        *txn.DB // the client's worker of the transfer table, opened by the first Accounts
}

func (c *chubbyClient) open(ctx context.Context, path string, content []byte) (*client.Handle, error) {
	h, err := c.s.Open(ctx, path, client.OpenOptions{
		Mode:           chubby.OpenMode_READ_WRITE,
		Create:         chubby.CreateMode_OPEN_OR_CREATE,
		InitialContent: content,
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return h, nil
}

func (c *chubbyClient) Lock(ctx context.Context, name string) (Locker, error) {
	h, err := c.open(ctx, chubbyLockDir+"/"+name, nil)
	if err != nil {
		return nil, err
	}
	return &chubbyLocker{h: h, wait: c.opTimeout}, nil
}

func (c *chubbyClient) File(ctx context.Context, name string) (File, error) {
	h, err := c.open(ctx, chubbyFileDir+"/"+name, payload)
	if err != nil {
		return nil, err
	}
	return &chubbyFile{h: h, c: c}, nil
}

func (c *chubbyClient) NewSession(ctx context.Context) (func(context.Context) error, error) {
	ss, err := c.c.NewSession(ctx)
	if err != nil {
		return nil, err
	}
	return ss.Close, nil
}

func (c *chubbyClient) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.opTimeout)
	defer cancel()
	var err error
	if c.db != nil {
		err = c.db.Close(ctx)
	}
	err = errors.Join(err, c.s.Close(ctx))
	return errors.Join(err, c.c.Close())
}

// Accounts opens the client's DB on the transfer table once (one worker
// per client, in the lead-in): the accounts are its rows "<name>/acct-<i>".
func (c *chubbyClient) Accounts(ctx context.Context, name string, n int) (Accounts, error) {
	if c.db == nil {
		db, err := txn.Open(ctx, c.s, chubbyTxnDir, txn.Config{Logger: c.sys.env.log})
		if err != nil {
			return nil, fmt.Errorf("txn open %s: %w", chubbyTxnDir, err)
		}
		c.db = db
	}
	return &chubbyAccounts{db: c.db, set: name, n: n}, nil
}

// chubbyAccounts is one client's handle on a set of accounts in the
// transfer table.
type chubbyAccounts struct {
	db  *txn.DB
	set string
	n   int
}

func (a *chubbyAccounts) row(i int) string { return a.set + "/acct-" + strconv.Itoa(i) }

// Create writes the accounts in transactions of at most txn.MaxWrites.
func (a *chubbyAccounts) Create(ctx context.Context, from, to int, balance int64) error {
	v := strconv.AppendInt(nil, balance, 10)
	for lo := from; lo < to; lo += txn.MaxWrites {
		hi := min(lo+txn.MaxWrites, to)
		if _, err := a.retry(ctx, func(tx *txn.Txn) error {
			for i := lo; i < hi; i++ {
				if err := tx.Set(a.row(i), chubbyTxnCol, v); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("create %s..%s: %w", a.row(lo), a.row(hi-1), err)
		}
	}
	return nil
}

// Transfer reads both balances in a transaction, writes both and
// commits; an attempt that txn.Retryable says did not commit (a conflict)
// is an abort, and txn.DB.Run begins a new one after its back-off.
func (a *chubbyAccounts) Transfer(ctx context.Context, x, y int) (int, error) {
	return a.retry(ctx, func(tx *txn.Txn) error {
		bx, err := a.balance(ctx, tx, x)
		if err != nil {
			return err
		}
		by, err := a.balance(ctx, tx, y)
		if err != nil {
			return err
		}
		if err := tx.Set(a.row(x), chubbyTxnCol, strconv.AppendInt(nil, bx-1, 10)); err != nil {
			return err
		}
		return tx.Set(a.row(y), chubbyTxnCol, strconv.AppendInt(nil, by+1, 10))
	})
}

// retry runs f with txn.DB.Run (a new transaction after each abort, with
// its back-off) and returns how many attempts were aborted.
func (a *chubbyAccounts) retry(ctx context.Context, f func(*txn.Txn) error) (aborts int, err error) {
	_, aborts, err = a.db.Run(ctx, func(_ context.Context, tx *txn.Txn) error { return f(tx) })
	return aborts, err
}

func (a *chubbyAccounts) balance(ctx context.Context, tx *txn.Txn, i int) (int64, error) {
	v, ok, err := tx.Get(ctx, a.row(i), chubbyTxnCol)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("account %s missing", a.row(i))
	}
	return strconv.ParseInt(string(v), 10, 64)
}

// Sum reads the balances in one transaction's snapshot, one after the
// other: the session's calls one at a time (see transfers.check).
func (a *chubbyAccounts) Sum(ctx context.Context, from, to int) (int64, error) {
	tx, err := a.db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	var sum int64
	for i := from; i < to; i++ {
		b, err := a.balance(ctx, tx, i)
		if err != nil {
			return 0, err
		}
		sum += b
	}
	return sum, nil
}

func (a *chubbyAccounts) Close() error { return nil }

type chubbyLocker struct {
	h    *client.Handle
	wait time.Duration
}

func (l *chubbyLocker) Cycle(ctx context.Context) error {
	if _, err := l.h.Acquire(ctx, chubby.LockMode_EXCLUSIVE, lockWait(ctx, l.wait), client.LockOptions{}); err != nil {
		if ctx.Err() != nil {
			// The cell may still grant it (client.Handle.Acquire): release
			// so that the next cycle does not find it held.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = l.h.Release(rctx)
			cancel()
		}
		return fmt.Errorf("acquire: %w", err)
	}
	if err := l.h.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

func (l *chubbyLocker) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), l.wait)
	defer cancel()
	return l.h.Close(ctx)
}

// chubbyFile is one client's handle on one small file; cached is a handle
// on it through a caching client of its own, opened by the first
// ReadCached (in the unmeasured lead-in).
type chubbyFile struct {
	h      *client.Handle
	c      *chubbyClient
	cached *client.Handle
	cc     *client.Client
	cs     *client.Session
}

func (f *chubbyFile) Write(ctx context.Context, data []byte) error {
	_, err := f.h.SetContents(ctx, data)
	return err
}

func (f *chubbyFile) Read(ctx context.Context) error {
	_, _, err := f.h.GetContentsAndStat(ctx)
	return err
}

// ReadCached reads through the client cache: after the first read (a miss
// that fills the cache) every read is served from the client's memory,
// which the cell keeps valid by invalidating before any write commits.
func (f *chubbyFile) ReadCached(ctx context.Context) error {
	if f.cached == nil {
		if err := f.openCached(ctx); err != nil {
			return err
		}
	}
	_, _, err := f.cached.GetContentsAndStat(ctx)
	return err
}

func (f *chubbyFile) openCached(ctx context.Context) error {
	cc, err := f.c.sys.connectCache(ctx, f.c.name+"-cached", true)
	if err != nil {
		return err
	}
	cs, err := cc.NewSession(ctx)
	if err != nil {
		cc.Close()
		return fmt.Errorf("caching session: %w", err)
	}
	h, err := cs.Open(ctx, f.h.Path(), client.OpenOptions{Mode: chubby.OpenMode_READ})
	if err != nil {
		cs.Close(ctx)
		cc.Close()
		return fmt.Errorf("open %s through the cache: %w", f.h.Path(), err)
	}
	f.cc, f.cs, f.cached = cc, cs, h
	return nil
}

func (f *chubbyFile) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := f.h.Close(ctx)
	if f.cc != nil {
		err = errors.Join(err, f.cached.Close(ctx), f.cs.Close(ctx), f.cc.Close())
	}
	return err
}

// HoldSessions holds n sessions: batched through multi-session KeepAlives
// of the generated client, or direct through the Go client library.
func (s *chubbySystem) HoldSessions(ctx context.Context, w Workload, n int) (int, func(), error) {
	if w.Variant == variantBatched {
		return s.holdBatched(ctx, n)
	}
	return s.holdDirect(ctx, n)
}

// kaBatchMax is the most sessions one KeepAlive carries (the IDL's limit).
var kaBatchMax = int(chubby.MAX_SESSIONS_PER_KEEPALIVE)

// holdBatched creates n sessions with CreateSession and keeps them alive
// with one parked KeepAlive per 10,000 sessions, each on its own
// connection: ceil(n/10,000) connections for n sessions. Sessions are
// created batch by batch and each batch's KeepAlive starts as soon as the
// batch exists, so that no lease runs out while later batches are made.
func (s *chubbySystem) holdBatched(ctx context.Context, n int) (int, func(), error) {
	master := s.addrs()[0]
	if s.n > 1 {
		i, err := s.Leader(ctx)
		if err != nil {
			return 0, func() {}, err
		}
		master = s.addrs()[i]
	}
	opts, err := rpc.ClientOptions(rpc.ClientConfig{
		Addrs:       []string{master},
		RPCTimeout:  s.env.cfg.OpTimeout,
		MaxInFlight: 512,
	})
	if err != nil {
		return 0, func() {}, err
	}
	kc, err := combineservice.NewClient("chubby", opts...)
	if err != nil {
		return 0, func() {}, fmt.Errorf("kitex client: %w", err)
	}
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		wg      sync.WaitGroup
		expired atomic.Int64
	)
	release := func() {
		cancel()
		waitGroupTimeout(&wg, 10*time.Second)
		if e := expired.Load(); e > 0 {
			s.env.log.Warn("chubby: held sessions expired during the hold", "sessions", e)
		}
	}
	held := 0
	for held < n {
		size := min(kaBatchMax, n-held)
		ids, err := createSessions(ctx, kc, size, 64, s.env.cfg.OpTimeout)
		if len(ids) > 0 {
			wg.Go(func() { keepAliveBatch(hctx, kc, ids, &expired) })
			held += len(ids)
		}
		s.env.prog.printf("    chubby×%d sessions-held/batched: %d of %d sessions, %d KeepAlive calls parked", s.n, held, n, (held+kaBatchMax-1)/kaBatchMax)
		if err != nil {
			return held, release, err
		}
	}
	return held, release, nil
}

// createSessions creates count sessions with workers concurrent callers.
// It stops at the first failure and returns the sessions made until then.
func createSessions(ctx context.Context, kc combineservice.Client, count, workers int, timeout time.Duration) ([]chubby.SessionID, error) {
	var (
		mu       sync.Mutex
		ids      = make([]chubby.SessionID, 0, count)
		next     atomic.Int64
		firstErr error
		failed   atomic.Bool
		wg       sync.WaitGroup
	)
	for range min(workers, count) {
		wg.Go(func() {
			for !failed.Load() && ctx.Err() == nil && next.Add(1) <= int64(count) {
				cctx, cancel := context.WithTimeout(ctx, timeout)
				r, err := kc.CreateSession(cctx, &chubby.CreateSessionRequest{ClientName: "chubbybench-held"})
				cancel()
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = fmt.Errorf("create session: %w", err)
					}
					failed.Store(true)
				} else {
					ids = append(ids, r.GetSession())
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return ids, firstErr
}

// keepAliveBatch keeps ids alive with one KeepAlive call at a time until
// ctx ends, counting sessions the cell reports expired.
func keepAliveBatch(ctx context.Context, kc combineservice.Client, ids []chubby.SessionID, expired *atomic.Int64) {
	live := make([]*chubby.KeepAliveItem, len(ids))
	for i, id := range ids {
		live[i] = &chubby.KeepAliveItem{Session: id}
	}
	const maxFailures = 20
	for failures := 0; ctx.Err() == nil && len(live) > 0 && failures < maxFailures; {
		// The master parks the call until KeepAliveMargin before the
		// leases end (about 9 s with the cell's defaults); two minutes
		// bound it.
		r, err := kc.KeepAlive(ctx, &chubby.KeepAliveRequest{Sessions: live}, callopt.WithRPCTimeout(2*time.Minute))
		if err != nil {
			failures++
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		failures = 0
		gone := map[chubby.SessionID]bool{}
		for _, g := range r.GetResults() {
			if g.GetError() != nil {
				gone[g.GetSession()] = true
			}
		}
		if len(gone) > 0 {
			expired.Add(int64(len(gone)))
			live = slices.DeleteFunc(live, func(it *chubby.KeepAliveItem) bool { return gone[it.GetSession()] })
		}
	}
}

// directPerClient is how many sessions share one client.Client in the
// direct run: each session parks a KeepAlive on its own connection, and a
// client caps its calls in flight at rpc.DefaultMaxInFlight (4,096).
const directPerClient = 1000

// holdDirect opens n sessions with the Go client library, each keeping
// itself alive on its own connection, 64 created at a time.
func (s *chubbySystem) holdDirect(ctx context.Context, n int) (int, func(), error) {
	var clients []*client.Client
	release := func() {
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Go(func() { c.Close() })
		}
		waitGroupTimeout(&wg, 30*time.Second)
	}
	held := 0
	for held < n {
		c, err := s.connect(ctx, fmt.Sprintf("direct-%d", len(clients)))
		if err != nil {
			return held, release, err
		}
		clients = append(clients, c)
		size := min(directPerClient, n-held)
		var (
			made     atomic.Int64
			next     atomic.Int64
			failed   atomic.Bool
			errOnce  sync.Once
			firstErr error
			wg       sync.WaitGroup
		)
		for range min(64, size) {
			wg.Go(func() {
				for !failed.Load() && ctx.Err() == nil && next.Add(1) <= int64(size) {
					cctx, cancel := context.WithTimeout(ctx, s.env.cfg.OpTimeout)
					_, err := c.NewSession(cctx)
					cancel()
					if err != nil {
						errOnce.Do(func() { firstErr = err })
						failed.Store(true)
						return
					}
					made.Add(1)
				}
			})
		}
		wg.Wait()
		held += int(made.Load())
		if held%5000 < directPerClient || held == n || firstErr != nil {
			s.env.prog.printf("    chubby×%d sessions-held/direct: %d of %d sessions (one connection each)", s.n, held, n)
		}
		if firstErr != nil {
			return held, release, fmt.Errorf("session %d: %w", held+1, firstErr)
		}
		if err := ctx.Err(); err != nil {
			return held, release, err
		}
	}
	return held, release, nil
}

// waitGroupTimeout waits for wg, at most d.
func waitGroupTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
