package rpc

import (
	"errors"
	"net"
	"sync"

	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/server"
)

// Why this file exists: Kitex's server.Stop (v0.16.1) stops only what Run
// has built so far. Run builds its transport and stores it in the server
// before it starts listening; a Stop that comes earlier (Run runs in a
// goroutine, and on a loaded machine it may not have got that far when a
// test, or a program shut down during startup, stops the server) finds
// nothing to stop and marks the server stopped, and Run then goes on to
// listen and serve for ever. The listener's port stays taken by a server
// nobody can stop; a replica restarted on it cannot listen.
//
// A [Server] closes that window: its Stop waits until Run has handed the
// listener to the transport (or returned), and a Stop before Run makes Run
// return at once.

// ErrServerStopped is what [Server.Run] returns when Stop came before it, or
// when Run is called a second time.
var ErrServerStopped = errors.New("rpc: server stopped")

// lifecycle links a Server to the transport its options build: the
// transport reports when Run has reached it.
type lifecycle struct {
	once   sync.Once
	booted chan struct{} // closed once the transport is serving, or Run returned
}

func newLifecycle() *lifecycle { return &lifecycle{booted: make(chan struct{})} }

func (l *lifecycle) boot() { l.once.Do(func() { close(l.booted) }) }

// Server is a Kitex server built by [NewServer] whose Stop holds whenever it
// is called: before Run, while Run starts, or while it serves. The embedded
// server.Server's other methods are Kitex's.
type Server struct {
	server.Server
	lc *lifecycle
	ln net.Listener // the caller's listener (ServerConfig.Listener), or nil

	mu               sync.Mutex
	running, stopped bool
}

// NewServer builds a server with [ServerOptions](cfg): build is a generated
// service's NewServer with its handler bound, for example
//
//	rpc.NewServer(cfg, func(opts ...server.Option) server.Server {
//		return echo.NewServer(h, opts...)
//	})
//
// The server owns cfg.Listener from here on: Stop closes it even if Run was
// never called.
func NewServer(cfg ServerConfig, build func(opts ...server.Option) server.Server) (*Server, error) {
	opts, lc, err := serverOptions(cfg)
	if err != nil {
		return nil, err
	}
	return &Server{Server: build(opts...), lc: lc, ln: cfg.Listener}, nil
}

// Run serves until Stop. It returns ErrServerStopped at once if Stop came
// first or Run was called before.
func (s *Server) Run() (err error) {
	s.mu.Lock()
	if s.stopped || s.running {
		s.mu.Unlock()
		return ErrServerStopped
	}
	s.running = true
	s.mu.Unlock()
	defer s.lc.boot() // Run failed before serving: Stop has nothing to wait for
	defer func() {
		// Kitex's Run reads the transport's first result without waiting
		// and calls Error on it: a Stop that ends the serving before Run
		// gets there hands it a nil error, and Run dereferences it. The
		// server is stopped then; anything else is not ours to swallow.
		if p := recover(); p != nil {
			s.mu.Lock()
			stopped := s.stopped
			s.mu.Unlock()
			if !stopped {
				panic(p)
			}
			err = nil
		}
	}()
	return s.Server.Run()
}

// Stop stops the server and closes its listener. It waits until a Run in
// progress has reached the transport, so that what Run builds is what Stop
// stops; a second Stop does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	first, running := !s.stopped, s.running
	s.stopped = true
	s.mu.Unlock()
	if !first {
		return nil
	}
	var err error
	if running {
		<-s.lc.booted
		err = s.Server.Stop()
	}
	if s.ln != nil {
		// Served, the transport closed it already (closing a Go listener
		// twice is harmless); not served, nobody else will.
		s.ln.Close()
	}
	return err
}

// bootingTransServer reports to its lifecycle when Kitex hands it the
// listener, and makes a Shutdown that comes first stop the serving: Kitex's
// gonet transport, shut down before it stored the listener, would accept on
// it for ever.
type bootingTransServer struct {
	remote.TransServer
	lc *lifecycle

	mu       sync.Mutex
	ln       net.Listener
	shutdown bool
}

func (s *bootingTransServer) BootstrapServer(ln net.Listener) error {
	s.lc.boot()
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		ln.Close()
		return ErrServerStopped
	}
	s.ln = ln
	s.mu.Unlock()
	return s.TransServer.BootstrapServer(ln)
}

func (s *bootingTransServer) Shutdown() error {
	s.mu.Lock()
	s.shutdown = true
	ln := s.ln
	s.mu.Unlock()
	err := s.TransServer.Shutdown()
	if ln != nil {
		ln.Close() // gonet closes it only if its handler shuts down gracefully
	}
	return err
}

// bootingFactory makes bootingTransServers over another factory's.
type bootingFactory struct {
	remote.TransServerFactory
	lc *lifecycle
}

func (f bootingFactory) NewTransServer(opt *remote.ServerOption, h remote.ServerTransHandler) remote.TransServer {
	return &bootingTransServer{TransServer: f.TransServerFactory.NewTransServer(opt, h), lc: f.lc}
}
