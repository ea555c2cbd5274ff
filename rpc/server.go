package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"reflect"
	"runtime/debug"
	"sync"
	"time"

	"github.com/cloudwego/kitex/pkg/endpoint"
	"github.com/cloudwego/kitex/pkg/kerrors"
	"github.com/cloudwego/kitex/pkg/limiter"
	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/codec"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/pkg/transmeta"
	"github.com/cloudwego/kitex/server"
	"github.com/cloudwego/netpoll"
	"github.com/prometheus/client_golang/prometheus"
)

// Server defaults.
const (
	// DefaultMaxConnections leaves room below this machine's 20,000 open
	// files per process for the replica's own files and outgoing
	// connections. With the default client pool every call in flight, and
	// so every parked call, holds one connection.
	DefaultMaxConnections = 15000
	// DefaultExitWaitTime is how long Stop waits for calls in progress.
	DefaultExitWaitTime = time.Second
	// qpsInterval is the refill period of Kitex's QPS limiter.
	qpsInterval = 100 * time.Millisecond
)

// ServerConfig configures a Kitex server built with [ServerOptions].
type ServerConfig struct {
	// Listen is the host:port to listen on. It is ignored if Listener is
	// set.
	Listen string
	// Listener, if set, is served instead of listening on Listen: a test
	// listens on 127.0.0.1:0 and learns the port from it. It must be a
	// *net.TCPListener or *net.UnixListener: the server serves a duplicate
	// of its descriptor, and closes both when it stops.
	Listener net.Listener
	// MaxConnections caps open client connections; more are accepted and
	// closed at once. Default DefaultMaxConnections. The cap is what keeps
	// a flood of clients from exhausting the process's file descriptors.
	MaxConnections int
	// MaxConnectionsPerIP caps the open connections of one remote IP
	// address; more are closed as they are accepted (see conns.go). Default
	// DefaultMaxConnectionsPerIP. Not enforced on plaintext servers
	// outside Linux (netpoll's own listener serves there).
	MaxConnectionsPerIP int
	// ConnLimits are per-prefix exceptions to MaxConnectionsPerIP: more
	// for a proxy, less for a suspect network, 0 for no per-address cap.
	// They are added to DefaultConnLimits (loopback: no per-address cap);
	// one naming the same prefix replaces the default's.
	ConnLimits []ConnLimit
	// FirstCallTimeout closes a connection that has carried no call this
	// long after it was accepted. Default DefaultFirstCallTimeout.
	FirstCallTimeout time.Duration
	// MaxPayloadBytes bounds one framed request; larger ones are refused
	// before they are read. Default DefaultMaxPayloadBytes. Every framed
	// request is also checked to be well-formed Thrift before it is decoded
	// (see guardedCodec).
	MaxPayloadBytes int
	// MaxQPS caps calls per second over all connections, 0 = unlimited.
	MaxQPS int
	// ExitWaitTime is how long a graceful Stop waits, default
	// DefaultExitWaitTime. Parked calls do not end by themselves on Stop;
	// the logic that parked them should settle them first.
	ExitWaitTime time.Duration
	// MaxConnIdleTime closes a connection that has carried a call, carries
	// none now and has received nothing for this long. Default
	// DefaultMaxConnIdleTime. A connection whose call is parked is
	// not idle, however long the call lasts. It should exceed the clients'
	// own pool idle timeout, so that they drop idle connections first.
	// (It is also given to Kitex, whose netpoll transport turns it into
	// the connections' TCP keepalive time; see conns.go.)
	MaxConnIdleTime time.Duration
	// Logger receives panics and limit rejections (rate-limited). Default
	// slog.Default(). Kitex's own log lines go to klog: see
	// [NewKitexLogger].
	Logger *slog.Logger
	// Registerer, if set, receives the server's metrics:
	// rpc_server_requests_total{method,outcome},
	// rpc_server_request_duration_seconds{method},
	// rpc_server_parked_calls, rpc_server_limit_rejections_total{limit}
	// (connections, connections_per_ip, qps) and
	// rpc_server_idle_closes_total{reason} (first_call, idle).
	// Servers sharing a Registerer share the collectors.
	Registerer prometheus.Registerer
	// TLS, if set, makes the server speak only TLS with this configuration
	// (see tls.go: on Kitex's gonet transport); handlers learn the caller's
	// certificate with [Caller]. Build it with package tlsconf. Listener
	// may then be any net.Listener.
	TLS *tls.Config
	// GoNet, without TLS, serves plaintext on Kitex's gonet transport (as a
	// TLS server does, with the same listener-side limits; see tls.go)
	// instead of netpoll. netpoll's poller waits for its connections in a
	// blocking epoll_wait that holds a P in a syscall, and every such wait
	// keeps Go's sysmon thread polling every 20 µs–10 ms until it takes
	// the P back: a server woken a few times a second costs more in sysmon
	// wakeups than in serving (the replica peer port at idle). gonet waits
	// in the runtime's own netpoller. What is lost: handler contexts are
	// not cancelled when the caller hangs up (see tls.go).
	GoNet bool
}

// ServerOptions returns the Kitex server options for cfg, to pass to a
// generated NewServer (they may be followed by more options, except a
// second server.WithLimitReporter). The server they make:
//
//   - listens on cfg.Listen or serves cfg.Listener, on Kitex's netpoll
//     transport with a listener whose Stop closes only the server's own
//     descriptors (on TLS or GoNet: on Kitex's gonet transport, see
//     tls.go);
//   - caps connections (Kitex's limiter; on TLS the listener's, see
//     tlsListener) and the connections of each remote address (the
//     listener's), and, if asked, calls per second (Kitex's limiter),
//     counting and logging refusals;
//   - closes connections that carry no call: never-used ones after
//     FirstCallTimeout, others after MaxConnIdleTime (see conns.go);
//   - reads TTHeader metadata and turns the caller's RPC timeout into the
//     handler context's deadline, so the deadline of a TTHeader client
//     reaches handlers and [Deferred.Park];
//   - cancels a handler's context, with cause [ErrCallerGone], when the
//     caller's connection closes (netpoll transport, the default);
//   - records metrics and recovers panics in the middleware chain, turning
//     them into an error reply instead of a dead process;
//   - still serves plain Thrift clients (framed or buffered strict binary,
//     e.g. Apache Thrift Python) on the same port: Kitex detects the
//     protocol per connection. Those send no deadline, which is why every
//     parked call has a server-side bound.
//
// A server built from these options directly has Kitex's own Stop, which
// does nothing if it comes before Run has started listening (see
// lifecycle.go); build servers with [NewServer].
func ServerOptions(cfg ServerConfig) ([]server.Option, error) {
	opts, _, err := serverOptions(cfg)
	return opts, err
}

func serverOptions(cfg ServerConfig) ([]server.Option, *lifecycle, error) {
	if cfg.MaxConnections < 0 || cfg.MaxQPS < 0 || cfg.ExitWaitTime < 0 || cfg.MaxConnIdleTime < 0 ||
		cfg.MaxConnectionsPerIP < 0 || cfg.FirstCallTimeout < 0 {
		return nil, nil, fmt.Errorf("rpc: negative limit in server config %+v", cfg)
	}
	def := DefaultServerConfig()
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = def.MaxConnections
	}
	if cfg.MaxConnectionsPerIP == 0 {
		cfg.MaxConnectionsPerIP = def.MaxConnectionsPerIP
	}
	if cfg.FirstCallTimeout == 0 {
		cfg.FirstCallTimeout = def.FirstCallTimeout
	}
	rules, err := connRules(cfg.ConnLimits)
	if err != nil {
		return nil, nil, err
	}
	if cfg.ExitWaitTime == 0 {
		cfg.ExitWaitTime = def.ExitWaitTime
	}
	if cfg.MaxConnIdleTime == 0 {
		cfg.MaxConnIdleTime = def.MaxConnIdleTime
	}
	if cfg.MaxPayloadBytes < 0 {
		return nil, nil, fmt.Errorf("rpc: negative MaxPayloadBytes %d", cfg.MaxPayloadBytes)
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = def.MaxPayloadBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = def.Logger
	}
	log := cfg.Logger.With("component", "rpc")

	var metrics *serverMetrics
	if cfg.Registerer != nil {
		if metrics, err = newServerMetrics(cfg.Registerer); err != nil {
			return nil, nil, err
		}
	}
	reporter := &limitReporter{metrics: metrics, log: log, limiter: newLogLimiter(time.Now)}
	guard := &connGuard{
		perIP: cfg.MaxConnectionsPerIP, rules: rules,
		firstCall: cfg.FirstCallTimeout, idle: cfg.MaxConnIdleTime,
		metrics: metrics, reporter: reporter, base: time.Now(),
		open: make(map[netip.Addr]int),
	}

	lc := newLifecycle()
	var opts []server.Option
	var tl *tlsListener
	if cfg.TLS != nil || cfg.GoNet {
		if opts, tl, err = tlsServerOptions(cfg, cfg.TLS, guard, lc); err != nil {
			return nil, nil, err
		}
	} else if cfg.Listener != nil {
		if err := checkListener(cfg.Listener); err != nil {
			return nil, nil, err
		}
		opts = append(opts, server.WithListener(cfg.Listener))
	} else {
		if cfg.Listen == "" {
			return nil, nil, errors.New("rpc: server config needs Listen or Listener")
		}
		addr, err := net.ResolveTCPAddr("tcp", cfg.Listen)
		if err != nil {
			return nil, nil, fmt.Errorf("rpc: server listen address: %w", err)
		}
		opts = append(opts, server.WithServiceAddr(addr))
	}

	opts = append(opts,
		server.WithLimitReporter(reporter),
		server.WithMetaHandler(transmeta.ServerTTHeaderHandler),
		server.WithExitWaitTime(cfg.ExitWaitTime),
		// Kitex's idle time is TCP keepalive on netpoll (whole seconds)
		// and a read deadline of at least 2 min on gonet; the guard
		// enforces idleness itself.
		server.WithMaxConnIdleTime(max(cfg.MaxConnIdleTime, time.Second)),
		server.WithBoundHandler(&connWatcher{metrics: metrics, tls: tl, guard: guard}),
		server.WithMiddleware(serverMiddleware(metrics, log)),
		server.WithCodec(codec.NewDefaultCodecWithSizeLimit(cfg.MaxPayloadBytes)),
		server.WithPayloadCodec(newGuardedCodec()),
		// Kitex would stop the server on SIGINT/SIGTERM by itself; signals
		// are the program's business (a test process, or chubbyd's
		// graceful shutdown), so the server stops only when told to.
		server.WithExitSignal(func() <-chan error { return nil }),
	)
	if tl == nil {
		// Kitex's netpoll transport, serving a listener of ours: stopping
		// a server with netpoll's own listener closes its descriptor
		// number three times, the last about 100 ms later, when the
		// number belongs to another file or connection (see
		// listener_linux.go).
		opts = append(opts, server.WithTransServerFactory(transServerFactory{guard: guard, lc: lc}),
			server.WithConnectionLimiter(limiter.NewConnectionLimiter(cfg.MaxConnections)))
	} else {
		// On TLS the listener caps connections itself (see tlsListener).
		tl.onRefuse = reporter.ConnOverloadReport
	}
	if cfg.MaxQPS > 0 {
		opts = append(opts, server.WithQPSLimiter(limiter.NewQPSLimiter(qpsInterval, cfg.MaxQPS)))
	}
	return opts, lc, nil
}

// disconnectNotifier is the part of a netpoll connection that reports the
// peer closing while a handler still runs. Kitex's unary server does not
// use it (its close callbacks wait for the handler to return, so the socket
// sits in CLOSE-WAIT); its TTHeader streaming server does, and so do we.
type disconnectNotifier interface {
	SetOnDisconnect(netpoll.OnDisconnect) error
}

// connWatcher is a Kitex inbound handler that gives each connection a
// context, the parent of its handlers' contexts, holding a connInfo, and
// cancels that context with ErrCallerGone when the peer closes the
// connection. It also keeps the connection's idle timer informed of what
// arrives, and (netpoll) starts and stops the timer and frees the
// connection's per-address slot when it closes.
type connWatcher struct {
	metrics *serverMetrics
	tls     *tlsListener // nil: plaintext
	guard   *connGuard
}

var _ remote.InboundHandler = (*connWatcher)(nil)

func (w *connWatcher) OnActive(ctx context.Context, conn net.Conn) (context.Context, error) {
	ci := &connInfo{metrics: w.metrics}
	if w.tls != nil {
		var err error
		ci.caller, ci.track, err = w.tls.handshake(ctx, conn)
		if w.metrics != nil {
			outcome := "ok"
			if err != nil {
				outcome = "refused"
			}
			w.metrics.handshakes.WithLabelValues(outcome).Inc()
		}
		if err != nil {
			return ctx, err
		}
	} else {
		// netpoll closes a connection from any goroutine; its close
		// callbacks (OnInactive) stop the timer.
		ci.track = w.guard.newTracked(conn.Close)
		if r, ok := conn.(interface{ Reader() netpoll.Reader }); ok {
			// netpoll's input buffer length is read atomically.
			ci.track.pending = func() bool { return r.Reader().Len() > 0 }
		}
		ci.track.start()
	}
	if n, ok := conn.(disconnectNotifier); ok {
		cctx, cancel := context.WithCancelCause(ctx)
		// netpoll calls this on its poller goroutine when it sees the peer
		// hang up, even while a handler runs on the connection. Cancelling
		// a context is quick, as the callback must be.
		err := n.SetOnDisconnect(func(context.Context, netpoll.Connection) { cancel(ErrCallerGone) })
		if err == nil {
			ctx, ci.cancel = cctx, cancel
		} else {
			cancel(nil)
		}
	}
	return context.WithValue(ctx, connInfoKey{}, ci), nil
}

// OnInactive runs once for every connection the netpoll transport
// accepted, whether or not the OnActive of every handler ran (Kitex calls
// every handler's; gonet calls none: on TLS, tlsAccepted.Close does this
// work).
func (w *connWatcher) OnInactive(ctx context.Context, conn net.Conn) context.Context {
	// The connection is closed and its handlers have returned: release the
	// context. (netpoll runs close callbacks only after the handler.)
	if ci, _ := ctx.Value(connInfoKey{}).(*connInfo); ci != nil {
		if ci.cancel != nil {
			ci.cancel(ErrCallerGone)
		}
		if ci.track != nil {
			ci.track.stop()
		}
	}
	if w.tls == nil && acceptGuarded {
		// Our listener admitted it (listener_linux.go).
		w.guard.release(conn.RemoteAddr())
	}
	return ctx
}

// OnRead runs when a request starts to arrive, before it is decoded.
func (w *connWatcher) OnRead(ctx context.Context, conn net.Conn) (context.Context, error) {
	if ci, _ := ctx.Value(connInfoKey{}).(*connInfo); ci != nil && ci.track != nil {
		ci.track.read()
	}
	return ctx, nil
}

func (w *connWatcher) OnMessage(ctx context.Context, args, result remote.Message) (context.Context, error) {
	return ctx, nil
}

// limitReporter counts and logs (rate-limited) the refusals of Kitex's
// limiters.
type limitReporter struct {
	metrics *serverMetrics
	log     *slog.Logger
	limiter *logLimiter
}

func (r *limitReporter) ConnOverloadReport() { r.report("connections") }
func (r *limitReporter) QPSOverloadReport()  { r.report("qps") }

func (r *limitReporter) report(which string) {
	if r.count(which) {
		r.log.Warn("rpc: server limit reached, refusing", "limit", which)
	}
}

// reportAddr reports a connection from remote refused by a per-address
// limit of max. Refusals of every address share one log budget.
func (r *limitReporter) reportAddr(which string, remote net.Addr, max int) {
	if r.count(which) {
		r.log.Warn("rpc: server limit reached, refusing", "limit", which, "max", max, "remote", remote.String())
	}
}

// count counts a refusal and says whether to log it.
func (r *limitReporter) count(which string) bool {
	if r.metrics != nil {
		r.metrics.limited.WithLabelValues(which).Inc()
	}
	ok, dropped := r.limiter.allow(which, len(which))
	if dropped > 0 {
		r.log.Warn("rpc: repeated log messages dropped", "dropped", dropped, "window", logWindow)
	}
	return ok
}

// methodMetrics are the collectors of one method, looked up once.
type methodMetrics struct {
	outcomes map[string]prometheus.Counter
	latency  prometheus.Observer
}

// serverMiddleware records metrics and turns panics of the middleware
// chain into errors. (Kitex itself recovers panics of the handler and
// returns kerrors.ErrPanic; those are counted, and logged by Kitex.)
func serverMiddleware(m *serverMetrics, log *slog.Logger) endpoint.Middleware {
	var methods sync.Map // method name -> *methodMetrics
	lookup := func(method string) *methodMetrics {
		if mm, ok := methods.Load(method); ok {
			return mm.(*methodMetrics)
		}
		mm := &methodMetrics{outcomes: make(map[string]prometheus.Counter), latency: m.latency.WithLabelValues(method)}
		for _, o := range []string{OutcomeOK, OutcomeException, OutcomeError, OutcomePanic} {
			mm.outcomes[o] = m.requests.WithLabelValues(method, o)
		}
		actual, _ := methods.LoadOrStore(method, mm)
		return actual.(*methodMetrics)
	}
	return func(next endpoint.Endpoint) endpoint.Endpoint {
		return func(ctx context.Context, req, resp any) (err error) {
			start := time.Now()
			// The caller's deadline (TTHeader's RPC timeout, read by
			// ServerTTHeaderHandler) bounds the handler's context, which
			// ends when the handler returns. Kitex's WithEnableContextTimeout
			// does the first but cancels only after an error: every
			// successful call left its context and timer alive for the
			// caller's whole timeout.
			if ri := rpcinfo.GetRPCInfo(ctx); ri != nil && ri.Config() != nil {
				if d := ri.Config().RPCTimeout(); d > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, d)
					defer cancel()
				}
			}
			// The call keeps its connection from the idle timer however
			// long it runs (parked calls too).
			if ci, _ := ctx.Value(connInfoKey{}).(*connInfo); ci != nil && ci.track != nil {
				ci.track.begin()
				defer ci.track.end()
			}
			defer func() {
				outcome := OutcomeOK
				if r := recover(); r != nil {
					stack := debug.Stack()
					method := methodName(ctx)
					log.Error("rpc: panic in server middleware", "method", method, "panic", r, "stack", string(stack))
					err = kerrors.ErrPanic.WithCauseAndStack(fmt.Errorf("rpc: panic serving %s: %v", method, r), string(stack))
					outcome = OutcomePanic
				} else {
					outcome = classify(err, resp)
				}
				if m != nil {
					mm := lookup(methodName(ctx))
					mm.outcomes[outcome].Inc()
					mm.latency.Observe(time.Since(start).Seconds())
				}
			}()
			return next(ctx, req, resp)
		}
	}
}

// methodName returns the name of the method being served.
func methodName(ctx context.Context) string {
	if ri := rpcinfo.GetRPCInfo(ctx); ri != nil && ri.Invocation() != nil {
		if name := ri.Invocation().MethodName(); name != "" {
			return name
		}
	}
	return "unknown"
}

// classify returns the outcome of a call from the error of the handler chain
// and the result struct.
func classify(err error, resp any) string {
	switch {
	case err == nil && hasException(resp):
		return OutcomeException
	case err == nil:
		return OutcomeOK
	case errors.Is(err, kerrors.ErrPanic):
		return OutcomePanic
	default:
		return OutcomeError
	}
}

// hasException reports whether resp, a generated Thrift result struct,
// carries a declared exception rather than a success value. Generated
// handlers put declared exceptions in the result and return no error.
func hasException(resp any) bool {
	if r, ok := resp.(interface{ IsSetSuccess() bool }); ok && r.IsSetSuccess() {
		return false
	}
	// No success: a void method or an exception. Exceptions are the
	// non-nil pointer fields other than Success.
	v := reflect.ValueOf(resp)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return false
	}
	v = v.Elem()
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Name == "Success" || f.Type.Kind() != reflect.Pointer {
			continue
		}
		if !v.Field(i).IsNil() {
			return true
		}
	}
	return false
}
