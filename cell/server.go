package cell

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/kitex/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/chubbygo/chubby/cell/discovery"
	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/cell/version"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/replica"
	"github.com/chubbygo/chubby/replica/vr"
	"github.com/chubbygo/chubby/rpc"
	"github.com/chubbygo/chubby/rpc/tlsconf"
)

// Version is reported by GetStatus: the release number of package version,
// which chubbyd --version and chubbyfs --version print too.
const Version = version.Number

// commitTimeout bounds how long a handler waits for its command to be
// durable and applied; past it the caller hears UNAVAILABLE (the command
// may still apply).
const commitTimeout = 10 * time.Second

// Server is one replica of a cell serving the client IDL. The replicated
// log (replica.Replicated: the view-change protocol on Badger) decides
// which replica is the master; only the master answers clients, the others
// say NOT_MASTER and where the master is.
type Server struct {
	cfg     Config
	st      *replica.Storage
	log     *replica.Replicated
	tr      *replica.PeerTransport
	peerSrv server.Server
	m       *machine
	leases  *leases
	changes *changes // the change pipeline, with the cache and write tables
	oracle  *oracle
	metrics *metrics
	reg     *prometheus.Registry

	svr     server.Server
	ln      net.Listener
	http    *http.Server
	httpLn  net.Listener
	started time.Time

	// Mastership: serving is true only once this replica is the normal
	// primary and has done the failover duties of its epoch
	// (master.Epoch: it grows with every view and survives restarts).
	roleMu   sync.Mutex
	roleGen  uint64
	stopping bool // set (under roleMu) before shutdown waits for background work
	serving  atomic.Bool
	epoch    atomic.Int64

	// members is the configuration in force (onConfig); decisions the
	// recent membership decisions, newest last.
	members atomic.Pointer[vr.Members]
	// removed says why this replica is out of the cell (nil: it is not
	// known to be; see checkRemoved).
	removed atomic.Pointer[string]
	// staleWithdrawn is closed once this master has withdrawn the Acquires
	// left waiting by earlier masters (cancelStaleWaits).
	staleWithdrawn atomic.Pointer[chan struct{}]
	disc           *discovery.Discovery // nil without gossip
	dataID         string               // this data directory's identity
	// peerAdvertise is where other replicas reach this one (gossip only).
	peerAdvertise string
	decMu         sync.Mutex
	decisions     []string
	decisionCount atomic.Uint64

	// logReady is closed once s.log is set: the log may report a role
	// change from its own goroutine before StartReplicated has returned.
	logReady chan struct{}

	tickMu      sync.Mutex
	tickAt      int64 // ms of the scheduled Tick; 0: none
	tickTimer   *time.Timer
	stopOnce    sync.Once
	closed      chan struct{}
	serveErr    chan error
	backgroundW sync.WaitGroup
}

// New opens the replica's storage, rebuilds the state from it, and prepares
// the RPC servers. Call Serve to start answering.
func New(cfg Config) (*Server, error) {
	autoID := cfg.ID == 0 && cfg.gossip()
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("cell config: %w", err)
	}
	s := &Server{cfg: cfg, closed: make(chan struct{}), serveErr: make(chan error, 1), started: cfg.Now(),
		logReady: make(chan struct{})}
	s.reg = prometheus.NewRegistry()
	var reg prometheus.Registerer = s.reg
	if cfg.Registerer != nil {
		reg = cfg.Registerer
	}
	s.metrics = newMetrics(reg, s)
	ok := false
	defer func() {
		if !ok {
			s.closeAll()
		}
	}()

	if err := s.listenClients(); err != nil {
		return nil, err
	}
	if err := s.openState(); err != nil {
		return nil, err
	}
	if err := s.loadIdentity(autoID); err != nil {
		return nil, err
	}
	s.cfg.Logger = s.cfg.Logger.With("replica", s.cfg.ID)
	members, peerAddrs := s.initialMembers()
	if cfg.gossip() {
		var err error
		if members, peerAddrs, err = s.startGossip(); err != nil {
			return nil, err
		}
	}
	if err := s.startLog(members, peerAddrs); err != nil {
		return nil, err
	}
	if err := s.startPeerServer(peerAddrs); err != nil {
		return nil, err
	}
	if err := s.prepareServers(reg); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// startGossip starts discovery and returns how the log starts: the
// configuration of a new cell, or none (Config.join: wait to be added),
// and this replica's peer address.
func (s *Server) startGossip() (vr.Members, map[uint64]string, error) {
	cfg := &s.cfg
	var err error
	if cfg.PeerListener != nil {
		cfg.PeerListen = cfg.PeerListener.Addr().String()
	}
	if cfg.PeerListen == "" {
		if cfg.PeerListen, err = ShiftPort(s.ln.Addr().String(), 100); err != nil {
			return nil, nil, err
		}
	}
	if s.peerAdvertise, err = advertised(cfg.PeerListen, cfg.Advertise); err != nil {
		return nil, nil, err
	}
	if cfg.GossipListen == "" {
		if cfg.GossipListen, err = ShiftPort(s.ln.Addr().String(), 200); err != nil {
			return nil, nil, err
		}
	}
	empty, err := s.st.Empty()
	if err != nil {
		return nil, nil, err
	}
	if err := s.startDiscovery(empty); err != nil {
		return nil, nil, err
	}
	members, join, err := s.plan(empty)
	if err != nil {
		return nil, nil, err
	}
	cfg.join = join
	return members, map[uint64]string{cfg.ID: s.peerAdvertise}, nil
}

// advertised is listen as others reach it: an unspecified host (":7100",
// "0.0.0.0:7100") takes the host of the client address advertised.
func advertised(listen, advertise string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if host, _, err = net.SplitHostPort(advertise); err != nil {
			return "", err
		}
	}
	return net.JoinHostPort(host, port), nil
}

// listenClients opens the client RPC listener (or takes Config.Listener)
// and settles the address clients are told to use.
func (s *Server) listenClients() error {
	ln := s.cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.cfg.Listen); err != nil {
			return fmt.Errorf("listen %s: %w", s.cfg.Listen, err)
		}
	}
	s.ln = ln
	if s.cfg.Advertise == "" {
		s.cfg.Advertise = ln.Addr().String()
	}
	return nil
}

// initialMembers returns the configuration of a new cell, the peers given
// or this replica alone, sorted by id, and every replica's peer address.
func (s *Server) initialMembers() (vr.Members, map[uint64]string) {
	peers := s.cfg.Peers
	if len(peers) == 0 {
		peers = []Peer{{ID: s.cfg.ID, Addr: s.cfg.Advertise}} // alone: no peer port
	}
	var members vr.Members
	peerAddrs := map[uint64]string{}
	for _, p := range peers {
		members = append(members, vr.Member{ID: p.ID, ClientAddr: p.Addr, PeerAddr: p.PeerAddr})
		peerAddrs[p.ID] = p.PeerAddr
	}
	slices.SortFunc(members, func(a, b vr.Member) int { return cmp.Compare(a.ID, b.ID) })
	return members, peerAddrs
}

// openState opens the storage and builds the state machine with the
// master's session lease and cache tables around it.
func (s *Server) openState() error {
	cfg := &s.cfg
	st, err := replica.OpenStorage(cfg.DataDir, replica.StorageOptions{InMemory: cfg.InMemory, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	s.st = st
	s.m = newMachine(*cfg.Limits, cfg.MaxParkedAcquires)
	// The lease table's clock is the log's, on which the master lease is
	// measured; until the log runs, its time is 0 and nothing is served.
	onLog := func(f func(*replica.Replicated) int64) func() master.Time {
		return func() master.Time {
			select {
			case <-s.logReady:
				return f(s.log)
			default:
				return 0
			}
		}
	}
	logNow, logUntil := onLog((*replica.Replicated).Now), onLog((*replica.Replicated).ReadsAllowedUntil)
	s.leases = newLeases(master.LeaseConfig{Lease: cfg.Lease, Margin: cfg.KeepAliveMargin, MaxDrift: vr.MaxClockDrift,
		MaxParked: cfg.MaxParkedKeepAlives}, logNow, logUntil, s.expireSession)
	s.oracle = newOracle()
	// A command in flight waits at most a lease and 1 s for invalidations,
	// then commitTimeout, then (its outcome unknown) UncertainHold, twice
	// commitTimeout: an EndSession waits for its session's commands that
	// long.
	pipe := master.PipelineFor(cfg.Lease, commitTimeout)
	clock := func() master.Clock {
		return master.Clock{Now: logNow(), WallMs: s.cfg.Now().UnixMilli(), Mono: s.m.mono()}
	}
	s.changes = newChanges(s.m, pipe, cfg.MaxCachedPerSession, cfg.MaxCachedPerCell, clock, s.leases.leaseEnd, s.leases.wake)
	s.m.onEnded = func(ids []chubby.SessionID) {
		for _, id := range ids {
			s.changes.forget(id)
		}
		s.leases.ended(ids)
	}
	s.m.onNotify = s.leases.wake
	s.m.onTimer = s.scheduleTick
	return nil
}

// startLog makes the peer transport of a replicated cell and starts the
// replicated log on the storage, restoring the state machine from it.
func (s *Server) startLog(members vr.Members, peerAddrs map[uint64]string) error {
	cfg := &s.cfg
	var err error
	if len(cfg.Peers) > 1 || cfg.gossip() {
		if s.tr, err = replica.NewPeerTransport(cfg.Cell, cfg.ID, peerAddrs, cfg.Logger, s.peerClientTLS()); err != nil {
			return err
		}
	}
	var tr replica.Transport = noTransport{}
	if s.tr != nil {
		tr = s.tr
	}
	s.log, err = replica.StartReplicated(s.st, s.m, tr, replica.ReplicatedConfig{
		ID:            cfg.ID,
		Members:       members,
		Core:          cfg.Replication,
		SnapshotEvery: cfg.SnapshotEvery,
		Logger:        cfg.Logger,
		OnBatch:       s.metrics.observeBatch,
		OnPause:       s.metrics.observePause,
		OnRole:        s.roleChanged,
		OnConfig:      s.onConfig,
		Join:          cfg.join,
		// A log entry of a newer format than this release applies is
		// refused before anything is applied.
		CheckEntry: func(_ uint64, b []byte) error { return fs.CheckCommand(b) },
	})
	if err != nil {
		return fmt.Errorf("start log: %w", err)
	}
	close(s.logReady)
	if v := s.log.Info().View; vr.LastOfEpoch(v) {
		s.cfg.Logger.Error("replica cannot take part in electing a master", "reason", lastOfEpochReason(v))
	}
	return nil
}

// startPeerServer, in a replicated cell, listens for the other replicas
// (Config.PeerListener, or PeerListen, or this replica's peer address) and
// prepares the server that hands their messages to the log.
func (s *Server) startPeerServer(peerAddrs map[uint64]string) error {
	if s.tr == nil {
		return nil
	}
	cfg := &s.cfg
	s.tr.SetReceiver(s.log.Receive)
	var err error
	pl := cfg.PeerListener
	if pl == nil {
		addr := cfg.PeerListen
		if addr == "" {
			addr = peerAddrs[cfg.ID]
		}
		if pl, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("listen for peers on %s: %w", addr, err)
		}
	}
	s.peerSrv, err = replica.NewPeerServer(replica.PeerServerConfig{
		Cell: cfg.Cell, Listener: pl, Logger: cfg.Logger, Deliver: s.log.Receive, Transport: s.tr,
		Known: s.knownPeer, TLS: s.serverTLS(tlsconf.RequireCert, false),
	})
	if err != nil {
		pl.Close()
		return err
	}
	return nil
}

// prepareServers builds the client RPC server on the listener and, if
// asked for, opens the HTTP listener of /status, /metrics and /healthz.
func (s *Server) prepareServers(reg prometheus.Registerer) error {
	cfg := &s.cfg
	var err error
	s.svr, err = rpc.NewServer(rpc.ServerConfig{
		Listener:            s.ln,
		MaxConnections:      cfg.MaxConnections,
		MaxConnectionsPerIP: cfg.MaxConnectionsPerIP,
		ConnLimits:          cfg.ConnectionLimits,
		FirstCallTimeout:    cfg.FirstCallTimeout,
		MaxConnIdleTime:     cfg.ConnIdleTimeout,
		Logger:              cfg.Logger,
		Registerer:          reg,
		TLS:                 s.serverTLS(tlsconf.AllowAnonymous, true),
	}, func(opts ...server.Option) server.Server { return combineservice.NewServer(&handler{s}, opts...) })
	if err != nil {
		return err
	}

	if cfg.HTTPListen != "" {
		if s.httpLn, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
			return fmt.Errorf("listen http %s: %w", cfg.HTTPListen, err)
		}
		s.http = &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 5 * time.Second}
	}
	return nil
}

// noTransport is the transport of a one-replica cell: there is nobody to
// send to.
type noTransport struct{}

func (noTransport) Send([]vr.Message) {}

// Addr is the address clients reach this replica at.
func (s *Server) Addr() string { return s.cfg.Advertise }

// ID is this replica's id (with discovery, the one its data directory or
// the cell gave it).
func (s *Server) ID() uint64 { return s.cfg.ID }

// GossipAddr is the address this replica gossips at, or "" without
// discovery.
func (s *Server) GossipAddr() string {
	if s.disc == nil {
		return ""
	}
	return s.disc.Local().Addr
}

// HTTPAddr is the status/metrics address, or "" when off.
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// Epoch is the master epoch: the view this replica is master of, plus one;
// 0 while it is not the master.
func (s *Server) Epoch() int64 {
	if !s.serving.Load() {
		return 0
	}
	return s.epoch.Load()
}

// IsMaster reports whether this replica is serving as the master.
func (s *Server) IsMaster() bool { return s.serving.Load() }

// Serve answers RPCs until ctx ends or Stop is called, then shuts down.
func (s *Server) Serve(ctx context.Context) error {
	go func() { s.serveErr <- s.svr.Run() }()
	if s.peerSrv != nil {
		go func() {
			if err := s.peerSrv.Run(); err != nil && !errors.Is(err, rpc.ErrServerStopped) {
				s.cfg.Logger.Error("peer server", "err", err)
			}
		}()
	}
	if s.http != nil {
		go func() {
			if err := s.http.Serve(s.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.cfg.Logger.Error("http server", "err", err)
			}
		}()
	}
	s.goBackground(s.trimLoop)
	if s.disc != nil {
		s.backgroundW.Add(1)
		go s.runAutopilot()
	}
	s.cfg.Logger.Info("cell replica serving", "cell", s.cfg.Cell, "addr", s.Addr(),
		"http", s.HTTPAddr(), "replicas", len(s.log.Info().Members), "lease", s.cfg.Lease)
	var err error
	select {
	case <-ctx.Done():
	case <-s.closed:
	case err = <-s.serveErr:
		if errors.Is(err, rpc.ErrServerStopped) { // Stop came before Serve
			err = nil
		}
		if err != nil {
			err = fmt.Errorf("rpc server: %w", err)
		}
	case <-s.log.Failed():
		// Fail-stop, as etcd does on a failed fsync: the log stopped and
		// is nobody's primary; answer every parked call and exit, so
		// that the cell fails over as after a crash. Restarting on the
		// same data directory recovers what is on disk.
		if errors.Is(s.log.Err(), replica.ErrHalted) {
			// A committed entry of a newer format (a newer release's
			// master): it stops rather than diverge, and refuses to
			// start again until upgraded.
			err = s.log.Err()
			s.cfg.Logger.Error("replica stops: its log holds an entry it cannot apply; upgrade it to the release that wrote it", "err", err)
			break
		}
		err = fmt.Errorf("%w: %w", ErrDiskFailed, s.log.Err())
		s.cfg.Logger.Error("replica stops: its disk failed; restart it once the disk is healthy", "err", s.log.Err())
	}
	s.shutdown()
	return err
}

// ErrDiskFailed: the replica stopped because a write or fsync of its log
// failed. Serve returns it (wrapped with the disk's error).
var ErrDiskFailed = errors.New("cell: the replica's disk failed")

// Stop makes Serve return after a graceful shutdown.
func (s *Server) Stop() {
	s.stopOnce.Do(func() { close(s.closed) })
}

func (s *Server) shutdown() {
	s.Stop()
	// Parked calls do not end by themselves: answer them, so clients learn
	// at once that this replica is going and look elsewhere.
	gone := fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "replica %d is shutting down", s.cfg.ID)
	s.roleMu.Lock()
	s.roleGen++ // no role change acts after this
	s.stopping = true
	s.serving.Store(false)
	s.roleMu.Unlock()
	s.leases.shutdown()
	s.m.failParked(gone)
	if err := s.svr.Stop(); err != nil {
		s.cfg.Logger.Warn("rpc server stop", "err", err)
	}
	if s.peerSrv != nil {
		s.peerSrv.Stop()
	}
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.http.Shutdown(ctx)
		cancel()
	}
	s.tickMu.Lock()
	if s.tickTimer != nil {
		s.tickTimer.Stop()
	}
	s.tickMu.Unlock()
	s.backgroundW.Wait()
	if s.disc != nil {
		// Seen Left rather than Dead: nobody replaces a replica that
		// said it is going (it is expected back).
		if err := s.disc.Leave(time.Second); err != nil {
			s.cfg.Logger.Warn("discovery: leave", "err", err)
		}
	}
	s.closeAll()
	s.cfg.Logger.Info("cell replica stopped", "id", s.cfg.ID)
}

// closeAll releases what New acquired, in reverse order.
func (s *Server) closeAll() {
	if s.disc != nil {
		s.disc.Shutdown()
	}
	if s.tr != nil {
		s.tr.Close()
	}
	failed := false
	if s.log != nil {
		s.log.Close()
		// A halt (an entry it cannot apply) leaves the disk sound.
		failed = s.log.Err() != nil && !errors.Is(s.log.Err(), replica.ErrHalted)
	}
	if s.m != nil {
		s.m.close() // after the log: nothing applies any more
	}
	if s.st != nil && !failed {
		// After a disk failure Badger is not closed: it would retry its
		// flush for closeWait, and v4.9.6 panics on reads after a failed
		// memtable switch. Everything acknowledged was fsynced; the next
		// open recovers as after a crash.
		s.st.Close()
	}
	if s.ln != nil && s.svr == nil {
		s.ln.Close()
	}
}

// expireSession ends a session whose lease ran out (lock-delay applies),
// on a goroutine of its own. A failure (the cell overloaded, say) is
// retried through the lease table (master.Leases.Retry), so a session
// outlives its lease by no more than the failures take.
func (s *Server) expireSession(id chubby.SessionID) {
	s.goBackground(func() {
		s.cfg.Logger.Info("session lease expired", "session", id)
		op := &fsm.Op{EndSession: &fsm.EndSession{Session: id, Expired: true}}
		_, err := s.submit(context.Background(), proposal{op: op})
		ended, pause := s.leases.expired(id, err)
		if ended {
			return
		}
		// Still marked ending (its lease is over): the expiry timer
		// proposes it again after a pause that grows with each failure.
		level := slog.LevelDebug
		if pause >= master.ExpiryRetryMax {
			level = slog.LevelWarn // failing for a second or more
		}
		s.cfg.Logger.Log(context.Background(), level, "could not end an expired session; trying again", "session", id, "err", err, "in", pause)
	})
}

// trimLoop forgets acknowledged events: every EventTrimInterval, while this
// replica is the master, it proposes one TrimEvents for the sessions whose
// clients acknowledged more than the queues were trimmed to (in batches of
// at most fs.MaxTrimAcks). A failed trim is retried at the next turn.
func (s *Server) trimLoop() {
	t := time.NewTicker(s.cfg.EventTrimInterval)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
		}
		for s.serving.Load() {
			acks := s.leases.takeAcks(fs.MaxTrimAcks)
			if len(acks) == 0 {
				break
			}
			if _, err := s.submit(context.Background(), proposal{op: &fsm.Op{TrimEvents: &fsm.TrimEvents{Acks: acks}}}); err != nil {
				s.leases.untake(acks)
				s.cfg.Logger.Warn("trim events; retrying later", "sessions", len(acks), "err", err)
				break
			}
			s.leases.trimmedTo(acks)
			if len(acks) < fs.MaxTrimAcks {
				break
			}
		}
	}
}

// scheduleTick arranges for a Tick command at atMs (command time, Unix ms), when a
// lock-delay ends. Called from the apply loop, on every replica: only the
// master proposes (a new master schedules the next one when it starts
// serving).
func (s *Server) scheduleTick(atMs int64) {
	if !s.serving.Load() {
		return
	}
	s.tickMu.Lock()
	defer s.tickMu.Unlock()
	if s.tickAt != 0 && s.tickAt <= atMs {
		return
	}
	if s.tickTimer != nil {
		s.tickTimer.Stop()
	}
	s.tickAt = atMs
	// Counted on the commands' clock, which may lag the wall clock (it
	// runs no faster than the monotonic one; master.Writes.Begin): a
	// Tick stamped before atMs would end nothing.
	d := time.Duration(atMs-s.changes.stampNow())*time.Millisecond + time.Millisecond
	s.tickTimer = time.AfterFunc(max(d, 0), func() {
		s.tickMu.Lock()
		if s.tickAt != atMs {
			s.tickMu.Unlock()
			return
		}
		s.tickAt = 0
		s.tickMu.Unlock()
		select {
		case <-s.closed:
			return
		default:
		}
		// The command's time is at least atMs even if the clock lags the
		// timer, so the lock-delay that asked for it is over when it
		// applies. It grants waiters: their locks' cachers are invalidated
		// first, as for any command.
		ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		defer cancel()
		if _, err := s.submit(ctx, proposal{op: &fsm.Op{Tick: &fsm.Tick{}}, notBefore: atMs}); err != nil {
			if !s.serving.Load() {
				return // the next master schedules its own
			}
			s.cfg.Logger.Warn("tick not applied; retrying", "err", err)
			go func() {
				select {
				case <-s.closed:
				case <-time.After(100 * time.Millisecond):
					s.scheduleTick(atMs)
				}
			}()
		}
	})
}

func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		switch statusFormat(w, r) { // JSON for scripts, HTML for browsers: statuspage.go
		case "html":
			serveStatusPage(w, s.status(), s.cfg.ID)
			return
		case "":
			return // refused
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(statusJSON(s.status()))
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if why := s.unhealthy(); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	// "/" is where a person lands first: send them to the status page.
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/status", http.StatusFound)
	})
	return mux
}

// unhealthy says why this replica is no working member of its cell ("" if
// it is one), for /healthz: its disk failed, its log has not started, no
// configuration names it yet (a spare waiting for a master to add it), or
// it was removed, or it stopped on an entry it cannot apply (a newer
// format). A view change in progress is not unhealthy: the replica
// is a member, and the cell elects a master in about a second.
func (s *Server) unhealthy() string {
	select {
	case <-s.logReady:
	default:
		return "starting: the replicated log is not open yet"
	}
	if err := s.log.Err(); err != nil {
		if errors.Is(err, replica.ErrHalted) {
			return "stopped: " + err.Error()
		}
		return "disk failed: " + err.Error()
	}
	if len(s.log.Info().Members) == 0 {
		return "waiting to join: no configuration of the cell names this replica yet (a master adds it)"
	}
	if why := s.removedReason(); why != "" {
		return why
	}
	if v := s.log.Info().View; vr.LastOfEpoch(v) {
		return lastOfEpochReason(v)
	}
	return ""
}

// lastOfEpochReason says why a replica at the last view of its epoch is
// unhealthy and what the operator does about it.
func lastOfEpochReason(v uint64) string {
	return fmt.Sprintf("stuck: view %d is the last view of epoch %d, so this cell cannot elect a new master "+
		"(a disk written by an older release); move its state to a new cell with chubbyd export and chubbyd restore", v, vr.EpochOf(v))
}

// caller names the principal of the call ctx belongs to: the common name
// of its verified certificate, or anonymous without one (and always
// without TLS). A certificate whose name is not a valid principal, or
// names "anonymous", lets its holder do nothing (PERMISSION_DENIED).
func (s *Server) caller(ctx context.Context) (string, error) {
	c := rpc.Caller(ctx)
	if c.Principal == "" {
		return fs.Anonymous, nil
	}
	if err := fs.ValidPrincipal(c.Principal); err != nil || c.Principal == fs.Anonymous {
		return "", fs.Errorf(chubby.ErrorCode_PERMISSION_DENIED, "the client certificate names %q, which is not a valid principal (1..%d bytes of [A-Za-z0-9._@:/+=-], not %q)",
			c.Principal, chubby.MAX_PRINCIPAL_BYTES, fs.Anonymous)
	}
	return c.Principal, nil
}

// checkOwner refuses a call from another principal than the one that
// created each of the sessions ids (PERMISSION_DENIED): a session acts
// with its creator's rights, so only its creator may use it. A session
// the state does not know is left to the caller's other checks.
func (s *Server) checkOwner(ctx context.Context, ids ...chubby.SessionID) error {
	who, err := s.caller(ctx)
	if err != nil {
		return err
	}
	s.m.read(func(st *fs.State) {
		for _, id := range ids {
			if owner, ok := st.SessionPrincipal(id); ok && owner != who {
				err = fs.Errorf(chubby.ErrorCode_PERMISSION_DENIED, "session %d belongs to principal %q; this call comes from %q", id, owner, who)
				return
			}
		}
	})
	return err
}

// security says how the replica's ports are protected, for status.
func (s *Server) security() string {
	acls := "ACLs: none set, every node is open to every caller (start the cell with --admin)"
	if s.aclsInitialised() {
		acls = "ACLs: on (see chubbyfs acl get /)"
	}
	if s.cfg.TLS == nil {
		return "PLAINTEXT: no TLS on any port; every caller is anonymous and anyone who can reach the ports can use the cell (a development cell); " + acls
	}
	sec := "mutual TLS on the client, peer and gossip ports"
	if c := s.cfg.TLS.Leaf(); c != nil {
		sec += fmt.Sprintf("; this replica is %q, its certificate expires %s", c.Subject.CommonName, c.NotAfter.UTC().Format(time.RFC3339))
	}
	return sec + "; " + acls
}

// serverTLS is the server configuration of one of the replica's ports,
// nil without TLS.
func (s *Server) serverTLS(auth tlsconf.Auth, clientPort bool) *tls.Config {
	if s.cfg.TLS == nil {
		return nil
	}
	return s.cfg.TLS.ServerConfig(auth, clientPort)
}

// peerClientTLS is the configuration of connections to other replicas,
// nil without TLS.
func (s *Server) peerClientTLS() *tls.Config {
	if s.cfg.TLS == nil {
		return nil
	}
	return s.cfg.TLS.ClientConfig()
}
