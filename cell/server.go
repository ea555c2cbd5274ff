package cell

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/cloudwego/kitex/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/replica"
	"github.com/chubbygo/chubby/rpc"
)

// Version is reported by GetStatus.
const Version = "0.1.0"

// commitTimeout bounds how long a handler waits for its command to be
// durable and applied; past it the caller hears UNAVAILABLE (the command
// may still apply).
const commitTimeout = 10 * time.Second

// Log is what the master proposes commands to: the one-replica
// replica.Local now, the replicated log later.
type Log interface {
	Propose(ctx context.Context, entry []byte) (any, error)
	Applied() uint64
	Close() error
}

// Server is one replica of a cell serving the client IDL. With one replica
// it is always the master.
type Server struct {
	cfg     Config
	st      *replica.Storage
	log     Log
	m       *machine
	leases  *leases
	metrics *metrics
	reg     *prometheus.Registry

	svr     server.Server
	ln      net.Listener
	http    *http.Server
	httpLn  net.Listener
	epoch   int64
	started time.Time

	tickMu      sync.Mutex
	tickAt      int64 // ms of the scheduled Tick; 0: none
	tickTimer   *time.Timer
	stopOnce    sync.Once
	closed      chan struct{}
	serveErr    chan error
	backgroundW sync.WaitGroup
}

// New opens the replica's storage, rebuilds the state from it, and prepares
// the RPC server. Call Serve to start answering.
func New(cfg Config) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("cell config: %w", err)
	}
	s := &Server{cfg: cfg, closed: make(chan struct{}), serveErr: make(chan error, 1), started: cfg.Now()}
	s.reg = prometheus.NewRegistry()
	var reg prometheus.Registerer = s.reg
	if cfg.Registerer != nil {
		reg = cfg.Registerer
	}
	s.metrics = newMetrics(reg, s)

	st, err := replica.OpenStorage(cfg.DataDir, replica.StorageOptions{InMemory: cfg.InMemory, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	s.st = st
	s.m = newMachine(*cfg.Limits, cfg.MaxParkedAcquires)
	s.leases = newLeases(cfg.Lease, cfg.KeepAliveMargin, cfg.Now, cfg.MaxParkedKeepAlives, s.expireSession)
	s.m.onEnded = s.leases.ended
	s.m.onTimer = s.scheduleTick

	lg, err := replica.StartLocal(st, s.m, replica.LocalConfig{
		SnapshotEvery: cfg.SnapshotEvery,
		Logger:        cfg.Logger,
		OnBatch:       s.metrics.observeBatch,
	})
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("start log: %w", err)
	}
	s.log = lg

	// A new master epoch per start: clients learn it from every reply.
	if s.epoch, err = s.bumpEpoch(); err != nil {
		s.log.Close()
		st.Close()
		return nil, err
	}

	// Every session in the state gets the longest lease it could have been
	// granted before the restart: a full lease from now.
	var sessions []chubby.SessionID
	s.m.read(func(st *fs.State) { sessions = st.Sessions() })
	for _, id := range sessions {
		s.leases.add(id)
	}
	// A pending lock-delay may need a Tick.
	s.m.read(func(st *fs.State) {
		if at, ok := st.NextTimer(); ok {
			s.scheduleTick(at)
		}
	})
	if len(sessions) > 0 {
		cfg.Logger.Info("recovered sessions; each has a full lease to reconnect", "sessions", len(sessions), "lease", cfg.Lease)
	}
	s.cancelStaleWaits()

	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			s.closeStorage()
			return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
		}
	}
	s.ln = ln
	if s.cfg.Advertise == "" {
		s.cfg.Advertise = ln.Addr().String()
	}
	opts, err := rpc.ServerOptions(rpc.ServerConfig{
		Listener:       ln,
		MaxConnections: cfg.MaxConnections,
		Logger:         cfg.Logger,
		Registerer:     reg,
	})
	if err != nil {
		ln.Close()
		s.closeStorage()
		return nil, err
	}
	s.svr = combineservice.NewServer(&handler{s}, opts...)

	if cfg.HTTPListen != "" {
		if s.httpLn, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
			ln.Close()
			s.closeStorage()
			return nil, fmt.Errorf("listen http %s: %w", cfg.HTTPListen, err)
		}
		s.http = &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 5 * time.Second}
	}
	return s, nil
}

// Addr is the address clients reach this replica at.
func (s *Server) Addr() string { return s.cfg.Advertise }

// HTTPAddr is the status/metrics address, or "" when off.
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// Epoch is the master epoch of this run.
func (s *Server) Epoch() int64 { return s.epoch }

// Serve answers RPCs until ctx ends or Stop is called, then shuts down.
func (s *Server) Serve(ctx context.Context) error {
	go func() { s.serveErr <- s.svr.Run() }()
	if s.http != nil {
		go func() {
			if err := s.http.Serve(s.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.cfg.Logger.Error("http server", "err", err)
			}
		}()
	}
	s.cfg.Logger.Info("cell replica serving", "id", s.cfg.ID, "cell", s.cfg.Cell, "addr", s.Addr(),
		"http", s.HTTPAddr(), "epoch", s.epoch, "lease", s.cfg.Lease)
	var err error
	select {
	case <-ctx.Done():
	case <-s.closed:
	case err = <-s.serveErr:
		if err != nil {
			err = fmt.Errorf("rpc server: %w", err)
		}
	}
	s.shutdown()
	return err
}

// Stop makes Serve return after a graceful shutdown.
func (s *Server) Stop() {
	s.stopOnce.Do(func() { close(s.closed) })
}

func (s *Server) shutdown() {
	s.Stop()
	// Parked calls do not end by themselves: answer them, so clients learn
	// at once that this replica is going and look elsewhere.
	gone := fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "replica %s is shutting down", s.cfg.ID)
	s.leases.shutdown()
	s.m.failParked(gone)
	if err := s.svr.Stop(); err != nil {
		s.cfg.Logger.Warn("rpc server stop", "err", err)
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
	s.closeStorage()
	s.cfg.Logger.Info("cell replica stopped", "id", s.cfg.ID)
}

func (s *Server) closeStorage() {
	if s.log != nil {
		s.log.Close()
	}
	if s.st != nil {
		s.st.Close()
	}
}

func (s *Server) bumpEpoch() (int64, error) {
	b, err := s.st.GetMeta("epoch")
	if err != nil {
		return 0, err
	}
	var e int64
	if len(b) == 8 {
		e = int64(binary.BigEndian.Uint64(b))
	}
	e++
	if err := s.st.PutMeta("epoch", binary.BigEndian.AppendUint64(nil, uint64(e))); err != nil {
		return 0, err
	}
	return e, nil
}

// propose encodes op as a command stamped with the master's clock, waits
// until it is durable and applied, and returns its result; a refused
// command's *chubby.ChubbyError is returned as the error.
func (s *Server) propose(ctx context.Context, op *fsm.Op) (*fsm.Result_, error) {
	cmd := &fsm.Command{TimeMs: s.cfg.Now().UnixMilli(), Op: op}
	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	v, err := s.log.Propose(ctx, fs.EncodeCommand(cmd))
	if err != nil {
		switch {
		case errors.Is(err, replica.ErrOverloaded):
			return nil, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the cell is overloaded; retry later")
		case errors.Is(err, replica.ErrStopped):
			return nil, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the replica is shutting down or its disk failed")
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			return nil, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "no commit within %v; the command may or may not have been applied", commitTimeout)
		default:
			return nil, fs.Errorf(chubby.ErrorCode_INTERNAL, "propose: %v", err)
		}
	}
	res, ok := v.(*fsm.Result_)
	if !ok || res == nil {
		return nil, fs.Errorf(chubby.ErrorCode_INTERNAL, "log returned %T", v)
	}
	s.metrics.command(op, res.Err)
	if res.Err != nil {
		return res, res.Err
	}
	return res, nil
}

// expireSession ends a session whose lease ran out (lock-delay applies). It
// runs on a timer goroutine and retries while the cell is overloaded: a
// session must not outlive its lease by more than the retries take.
func (s *Server) expireSession(id chubby.SessionID) {
	s.backgroundW.Add(1)
	go func() {
		defer s.backgroundW.Done()
		s.cfg.Logger.Info("session lease expired", "session", id)
		op := &fsm.Op{EndSession: &fsm.EndSession{Session: id, Expired: true}}
		backoff := 10 * time.Millisecond
		for attempt := 0; attempt < 50; attempt++ {
			_, err := s.propose(context.Background(), op)
			var ce *chubby.ChubbyError
			if err == nil || (errors.As(err, &ce) && ce.Code == chubby.ErrorCode_SESSION_EXPIRED) {
				s.leases.ended([]chubby.SessionID{id})
				return
			}
			select {
			case <-s.closed:
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, time.Second)
		}
		s.cfg.Logger.Error("could not end expired session; it stays marked ending", "session", id)
	}()
}

// scheduleTick arranges for a Tick command at atMs (Unix ms), when a
// lock-delay ends. Called from the apply loop.
func (s *Server) scheduleTick(atMs int64) {
	s.tickMu.Lock()
	defer s.tickMu.Unlock()
	if s.tickAt != 0 && s.tickAt <= atMs {
		return
	}
	if s.tickTimer != nil {
		s.tickTimer.Stop()
	}
	s.tickAt = atMs
	d := time.Duration(atMs-s.cfg.Now().UnixMilli())*time.Millisecond + time.Millisecond
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
		// timer, so the lock-delay that asked for it is over when it applies.
		cmd := &fsm.Command{TimeMs: max(s.cfg.Now().UnixMilli(), atMs), Op: &fsm.Op{Tick: &fsm.Tick{}}}
		ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		defer cancel()
		if _, err := s.log.Propose(ctx, fs.EncodeCommand(cmd)); err != nil {
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

// cancelStaleWaits fails Acquire requests that were waiting when the
// replica stopped: nobody is parked on them any more, and a client that
// retries needs the handle free of its old request.
func (s *Server) cancelStaleWaits() {
	var hs []*chubby.Handle
	s.m.read(func(st *fs.State) { hs = st.PendingWaits() })
	for _, h := range hs {
		if _, err := s.propose(context.Background(), &fsm.Op{CancelWait: &fsm.CancelWait{Handle: h}}); err != nil {
			s.cfg.Logger.Warn("cancel stale wait", "handle", h.Id, "err", err)
		}
	}
	if len(hs) > 0 {
		s.cfg.Logger.Info("cancelled Acquire requests left waiting by the previous run", "count", len(hs))
	}
}

// status builds the cell status (the Cell service and the HTTP page).
func (s *Server) status() *chubby.CellStatus {
	var c fs.Counts
	s.m.read(func(st *fs.State) { c = st.Counts() })
	applied := int64(s.log.Applied())
	return &chubby.CellStatus{
		Cell:          s.cfg.Cell,
		MasterId:      s.cfg.ID,
		MasterAddress: s.Addr(),
		Epoch:         s.epoch,
		Replicas: []*chubby.ReplicaStatus{{
			Id: s.cfg.ID, Address: s.Addr(), Role: chubby.ReplicaRole_MASTER, CommittedOp: applied,
		}},
		Sessions:    int64(c.Sessions),
		Nodes:       int64(c.Nodes),
		Handles:     int64(c.Handles),
		LocksHeld:   int64(c.LocksHeld),
		CommittedOp: applied,
		UptimeMs:    s.cfg.Now().Sub(s.started).Milliseconds(),
		Version:     Version,
	}
}

func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(s.status())
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	return mux
}
