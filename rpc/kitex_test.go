package rpc_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/cloudwego/kitex/server"
	"net"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/chubbygo/chubby/gen/rpctest"
	"github.com/chubbygo/chubby/gen/rpctest/echo"
	"github.com/chubbygo/chubby/rpc"
)

// echoHandler implements the rpctest Echo service. Park parks the call on a
// Deferred kept in a table by key, as cell logic keeps parked KeepAlives,
// until the test resolves it or the call ends.
type echoHandler struct {
	mu     sync.Mutex
	parked map[string]*rpc.Deferred[string]
	kept   atomic.Pointer[context.Context] // the context of the last "keep" call
	now    atomic.Int64                    // calls parked now
	lost   atomic.Int64                    // parked calls abandoned (caller gone, bound reached)
	ended  chan parkEnd                    // if non-nil, receives how each Park ended
}

// parkEnd is how one Park call ended on the server.
type parkEnd struct {
	key     string
	v       string
	err     error // returned by Deferred.Park
	reason  error // given to OnAbandon, if it ran
	elapsed time.Duration
}

func newEchoHandler(events bool) *echoHandler {
	h := &echoHandler{parked: make(map[string]*rpc.Deferred[string])}
	if events {
		h.ended = make(chan parkEnd, 100)
	}
	return h
}

// Echo returns msg, except for a few commands: "fail" raises the declared
// TestError, "panic" panics, "deadline" reports the time left before the
// handler context's deadline (or "none"), "keep" keeps the handler's
// context for the test to look at after the call.
func (h *echoHandler) Echo(ctx context.Context, msg string) (string, error) {
	switch msg {
	case "fail":
		return "", &rpctest.TestError{Message: "asked to fail"}
	case "panic":
		panic("asked to panic")
	case "keep":
		h.kept.Store(&ctx)
		return "kept", nil
	case "deadline":
		d, ok := ctx.Deadline()
		if !ok {
			return "none", nil
		}
		return time.Until(d).String(), nil
	}
	return msg, nil
}

func (h *echoHandler) Park(ctx context.Context, key string, maxMs int64) (string, error) {
	d := rpc.NewDeferred[string]()
	var reason error // set by OnAbandon, which runs on this goroutine inside Park
	d.OnAbandon(func(r error) {
		reason = r
		h.lost.Add(1)
		h.mu.Lock()
		if h.parked[key] == d {
			delete(h.parked, key)
		}
		h.mu.Unlock()
	})
	h.mu.Lock()
	h.parked[key] = d
	h.mu.Unlock()
	h.now.Add(1)
	start := time.Now()
	v, err := d.Park(ctx, time.Duration(maxMs)*time.Millisecond)
	h.now.Add(-1)
	h.mu.Lock()
	if h.parked[key] == d {
		delete(h.parked, key)
	}
	h.mu.Unlock()
	if h.ended != nil {
		h.ended <- parkEnd{key: key, v: v, err: err, reason: reason, elapsed: time.Since(start)}
	}
	if err != nil {
		var te *rpctest.TestError
		if errors.As(err, &te) {
			return "", te
		}
		return "", &rpctest.TestError{Message: err.Error()}
	}
	return v, nil
}

// deferred returns the deferred parked under key, waiting for it to appear.
func (h *echoHandler) deferred(t testing.TB, key string) *rpc.Deferred[string] {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		h.mu.Lock()
		d := h.parked[key]
		h.mu.Unlock()
		if d != nil {
			return d
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no call parked under %q", key)
	return nil
}

// resolve resolves the call parked under key, if any.
func (h *echoHandler) resolve(key, v string) bool {
	h.mu.Lock()
	d := h.parked[key]
	delete(h.parked, key)
	h.mu.Unlock()
	return d != nil && d.Resolve(v)
}

// nextEnd returns how the next Park ended.
func (h *echoHandler) nextEnd(t testing.TB, within time.Duration) parkEnd {
	t.Helper()
	select {
	case e := <-h.ended:
		return e
	case <-time.After(within):
		t.Fatalf("no parked call ended within %v", within)
		return parkEnd{}
	}
}

// startServer serves h with NewServer(cfg) on a fresh 127.0.0.1 port and
// returns its address. The server stops when the test ends.
func startServer(t testing.TB, h rpctest.Echo, cfg rpc.ServerConfig) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listener = ln
	if cfg.ExitWaitTime == 0 {
		cfg.ExitWaitTime = 50 * time.Millisecond
	}
	svr, err := rpc.NewServer(cfg, func(opts ...server.Option) server.Server { return echo.NewServer(h, opts...) })
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svr.Run() }()
	t.Cleanup(func() {
		if err := svr.Stop(); err != nil {
			t.Logf("stopping server: %v", err)
		}
		<-done
	})
	return ln.Addr().String()
}

func newClient(t testing.TB, cfg rpc.ClientConfig) echo.Client {
	t.Helper()
	opts, err := rpc.ClientOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := echo.NewClient("Echo", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var transports = []rpc.Transport{rpc.TransportTTHeader, rpc.TransportFramed, rpc.TransportBuffered}

// TestEchoRoundTrip calls Echo through every client transport, the plain
// ones (framed and buffered binary, as non-Kitex clients speak) included,
// against the one server port.
func TestEchoRoundTrip(t *testing.T) {
	addr := startServer(t, newEchoHandler(false), rpc.ServerConfig{})
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			c := newClient(t, rpc.ClientConfig{Addrs: []string{addr}, Transport: tr})
			ctx := context.Background()
			if got, err := c.Echo(ctx, "hello"); got != "hello" || err != nil {
				t.Fatalf("Echo = %q, %v", got, err)
			}
			_, err := c.Echo(ctx, "fail")
			var te *rpctest.TestError
			if !errors.As(err, &te) || te.Message != "asked to fail" {
				t.Fatalf("Echo(fail) = %v (%T); want the declared TestError", err, err)
			}
			// A panicking handler gets an error reply; the server lives on.
			if _, err := c.Echo(ctx, "panic"); err == nil || !strings.Contains(err.Error(), "panic") {
				t.Fatalf("Echo(panic) = %v; want a panic error", err)
			}
			if got, err := c.Echo(ctx, "after panic"); got != "after panic" || err != nil {
				t.Fatalf("Echo after a panic = %q, %v", got, err)
			}
		})
	}
}

// TestDeadlineReachesHandler checks which clients' deadlines reach the
// handler: a TTHeader client's RPC timeout does; plain clients send none.
func TestDeadlineReachesHandler(t *testing.T) {
	addr := startServer(t, newEchoHandler(false), rpc.ServerConfig{})
	tests := []struct {
		name    string
		cfg     rpc.ClientConfig
		opts    []callopt.Option
		wantMax time.Duration // 0: no deadline
	}{
		{"TTHeaderRPCTimeout", rpc.ClientConfig{RPCTimeout: 2 * time.Second}, nil, 2 * time.Second},
		{"TTHeaderCallOption", rpc.ClientConfig{RPCTimeout: 2 * time.Second},
			[]callopt.Option{callopt.WithRPCTimeout(500 * time.Millisecond)}, 500 * time.Millisecond},
		{"TTHeaderNoTimeout", rpc.ClientConfig{}, nil, 0},
		{"Framed", rpc.ClientConfig{RPCTimeout: 2 * time.Second, Transport: rpc.TransportFramed}, nil, 0},
		{"Buffered", rpc.ClientConfig{RPCTimeout: 2 * time.Second, Transport: rpc.TransportBuffered}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Addrs = []string{addr}
			c := newClient(t, tt.cfg)
			got, err := c.Echo(context.Background(), "deadline", tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantMax == 0 {
				if got != "none" {
					t.Fatalf("handler saw deadline in %s; want none", got)
				}
				return
			}
			left, err := time.ParseDuration(got)
			if err != nil {
				t.Fatalf("handler said %q: %v", got, err)
			}
			if left <= 0 || left > tt.wantMax {
				t.Fatalf("handler saw deadline in %v; want within (0, %v]", left, tt.wantMax)
			}
		})
	}
}

// TestDeadlineContextEndsWithTheCall: the context that carries a caller's
// deadline ends when the handler returns, not when the deadline passes.
// Kitex's own server timeout middleware cancels it only after an error, so
// each successful call left a context and a timer registered under its
// connection's context for the caller's whole timeout: 54 MB and 76,000
// timers on a master serving 7,600 calls/s with 10 s timeouts.
func TestDeadlineContextEndsWithTheCall(t *testing.T) {
	h := newEchoHandler(false)
	addr := startServer(t, h, rpc.ServerConfig{})
	c := newClient(t, rpc.ClientConfig{Addrs: []string{addr}, RPCTimeout: 30 * time.Second})
	if got, err := c.Echo(context.Background(), "keep"); err != nil || got != "kept" {
		t.Fatalf("echo keep: %q, %v", got, err)
	}
	p := h.kept.Load()
	if p == nil {
		t.Fatal("the handler kept no context")
	}
	ctx := *p
	if _, ok := ctx.Deadline(); !ok {
		t.Fatal("the handler's context had no deadline")
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context is still live 5 s after the call returned (its deadline is 30 s)")
	}
}

// TestParkResolved parks calls and settles them from the test goroutine, as
// cell logic would, the client calling asynchronously with rpc.Go.
func TestParkResolved(t *testing.T) {
	h := newEchoHandler(true)
	addr := startServer(t, h, rpc.ServerConfig{})
	for _, tr := range transports {
		t.Run(tr.String(), func(t *testing.T) {
			c := newClient(t, rpc.ClientConfig{Addrs: []string{addr}, Transport: tr})
			ctx := context.Background()

			key := "ok-" + tr.String()
			f := rpc.Go(ctx, func(ctx context.Context) (string, error) { return c.Park(ctx, key, 10_000) })
			d := h.deferred(t, key)
			if _, _, done := f.Result(); done {
				t.Fatal("parked call returned before being resolved")
			}
			if !d.Resolve("answer") {
				t.Fatal("Resolve of a parked call returned false")
			}
			if v, err := f.Wait(ctx); v != "answer" || err != nil {
				t.Fatalf("parked call = %q, %v; want answer", v, err)
			}
			if e := h.nextEnd(t, 5*time.Second); e.err != nil || e.reason != nil {
				t.Fatalf("server side: Park = %v, abandoned with %v", e.err, e.reason)
			}

			key = "rejected-" + tr.String()
			f = rpc.Go(ctx, func(ctx context.Context) (string, error) { return c.Park(ctx, key, 10_000) })
			h.deferred(t, key).Reject(&rpctest.TestError{Message: "no"})
			var te *rpctest.TestError
			if _, err := f.Wait(ctx); !errors.As(err, &te) || te.Message != "no" {
				t.Fatalf("rejected call = %v; want TestError no", err)
			}
			h.nextEnd(t, 5*time.Second)
		})
	}
}

// TestParkCallEnds checks each way a parked call ends without a reply, and
// that the server-side Deferred is abandoned (OnAbandon ran, later Resolve
// refused) in each.
func TestParkCallEnds(t *testing.T) {
	h := newEchoHandler(true)
	addr := startServer(t, h, rpc.ServerConfig{})
	const bound = 400 * time.Millisecond

	tests := []struct {
		name string
		// call makes a call that parks under key and returns when the
		// client gives up.
		call    func(t *testing.T, key string)
		want    []error // acceptable server-side reasons
		atLeast time.Duration
		atMost  time.Duration
	}{{
		// The client stops waiting but keeps its connection open (Kitex
		// goes on reading in the background): nothing reaches the server,
		// so only the bound ends the call. This is why bounds exist.
		name: "ClientGivesUpBoundEnforced",
		call: func(t *testing.T, key string) {
			c := newClient(t, rpc.ClientConfig{Addrs: []string{addr}, Transport: rpc.TransportFramed})
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if _, err := c.Park(ctx, key, bound.Milliseconds()); err == nil {
				t.Error("call returned no error though its context ended")
			}
		},
		want:    []error{rpc.ErrBoundExceeded},
		atLeast: bound,
		atMost:  bound + 2*time.Second,
	}, {
		// A raw framed Thrift client sends Park and closes its socket: the
		// server sees the hang-up while the handler is parked.
		name: "RawCallerClosesConnection",
		call: func(t *testing.T, key string) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Write(framedParkRequest(key, 60_000)); err != nil {
				t.Fatal(err)
			}
			h.deferred(t, key)
			conn.Close()
		},
		want:   []error{rpc.ErrCallerGone},
		atMost: 2 * time.Second,
	}, {
		// A plain Kitex client with an RPC timeout closes the connection
		// when the timeout fires.
		name: "PlainClientTimeout",
		call: func(t *testing.T, key string) {
			c := newClient(t, rpc.ClientConfig{Addrs: []string{addr}, Transport: rpc.TransportFramed, RPCTimeout: 100 * time.Millisecond})
			if _, err := c.Park(context.Background(), key, 60_000); err == nil {
				t.Error("call returned no error though it timed out")
			}
		},
		want:   []error{rpc.ErrCallerGone},
		atMost: 2 * time.Second,
	}, {
		// A TTHeader client's RPC timeout becomes the handler's deadline;
		// the client also drops the connection then, so either may be seen
		// first.
		name: "TTHeaderDeadline",
		call: func(t *testing.T, key string) {
			c := newClient(t, rpc.ClientConfig{Addrs: []string{addr}})
			if _, err := c.Park(context.Background(), key, 60_000, callopt.WithRPCTimeout(100*time.Millisecond)); err == nil {
				t.Error("call returned no error though it timed out")
			}
		},
		want:   []error{context.DeadlineExceeded, rpc.ErrCallerGone},
		atMost: 2 * time.Second,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := tt.name
			tt.call(t, key)
			e := h.nextEnd(t, tt.atMost+5*time.Second)
			if e.key != key {
				t.Fatalf("call %q ended; want %q", e.key, key)
			}
			matches := func(err error) bool {
				for _, w := range tt.want {
					if errors.Is(err, w) {
						return true
					}
				}
				return false
			}
			if !matches(e.err) || !matches(e.reason) {
				t.Fatalf("server side: Park = %v, OnAbandon reason %v; want one of %v", e.err, e.reason, tt.want)
			}
			if e.elapsed < tt.atLeast || e.elapsed > tt.atMost {
				t.Fatalf("parked call ended after %v; want within [%v, %v]", e.elapsed, tt.atLeast, tt.atMost)
			}
			if h.resolve(key, "late") {
				t.Fatal("an abandoned call is still in the table, or accepted a Resolve")
			}
			t.Logf("ended after %v with %v", e.elapsed.Round(time.Millisecond), e.err)
		})
	}
}

// framedParkRequest encodes a Park call as a plain framed, strict binary
// Thrift message, as a non-Kitex client sends it.
func framedParkRequest(key string, maxMs int64) []byte {
	args := rpctest.NewEchoParkArgs()
	args.Key, args.MaxMs = key, maxMs
	body := make([]byte, args.BLength())
	args.FastWrite(body)

	return framedCall("Park", body)
}

// framedCall is a framed Thrift binary CALL of method with the encoded
// arguments body, sequence id 1.
func framedCall(method string, body []byte) []byte {
	var msg []byte
	msg = binary.BigEndian.AppendUint32(msg, 0x80010000|1) // version 1, CALL
	msg = binary.BigEndian.AppendUint32(msg, uint32(len(method)))
	msg = append(msg, method...)
	msg = binary.BigEndian.AppendUint32(msg, 1) // sequence id
	msg = append(msg, body...)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)
}

// TestAMI issues many calls at once through rpc.Go on the generated client
// and collects them with Then and Wait.
func TestAMI(t *testing.T) {
	addr := startServer(t, newEchoHandler(false), rpc.ServerConfig{})
	c := newClient(t, rpc.ClientConfig{Addrs: []string{addr}})
	ctx := context.Background()

	const n = 200
	futures := make([]*rpc.Future[string], n)
	var thens atomic.Int64
	for i := range futures {
		msg := fmt.Sprint("m", i)
		futures[i] = rpc.Go(ctx, func(ctx context.Context) (string, error) { return c.Echo(ctx, msg) })
		futures[i].Then(func(v string, err error) {
			if v != msg || err != nil {
				t.Errorf("Then got %q, %v; want %q", v, err, msg)
			}
			thens.Add(1)
		})
	}
	for i, f := range futures {
		if v, err := f.Wait(ctx); v != fmt.Sprint("m", i) || err != nil {
			t.Fatalf("call %d = %q, %v", i, v, err)
		}
	}
	// Then callbacks run on the completing goroutine, possibly just after
	// Wait returns.
	for deadline := time.Now().Add(5 * time.Second); thens.Load() < n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if thens.Load() != n {
		t.Fatalf("%d Then callbacks ran; want %d", thens.Load(), n)
	}

	// A failing call fails its future.
	f := rpc.Go(ctx, func(ctx context.Context) (string, error) { return c.Echo(ctx, "fail") })
	var te *rpctest.TestError
	if _, err := f.Wait(ctx); !errors.As(err, &te) {
		t.Fatalf("failing call = %v; want TestError", err)
	}
}

// TestMetrics checks the request counter by outcome, the latency histogram
// and the parked-calls gauge.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newEchoHandler(true)
	addr := startServer(t, h, rpc.ServerConfig{Registerer: reg})
	c := newClient(t, rpc.ClientConfig{Addrs: []string{addr}})
	ctx := context.Background()

	for _, msg := range []string{"a", "b", "fail", "panic"} {
		c.Echo(ctx, msg)
	}
	f := rpc.Go(ctx, func(ctx context.Context) (string, error) { return c.Park(ctx, "m", 10_000) })
	h.deferred(t, "m")
	waitFor(t, func() bool { return metricValue(t, reg, "rpc_server_parked_calls", nil) == 1 })
	h.resolve("m", "done")
	if _, err := f.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	h.nextEnd(t, 5*time.Second)
	waitFor(t, func() bool {
		return metricValue(t, reg, "rpc_server_requests_total", map[string]string{"method": "Park", "outcome": "ok"}) == 1
	})

	tests := []struct {
		method, outcome string
		want            float64
	}{
		{"Echo", rpc.OutcomeOK, 2},
		{"Echo", rpc.OutcomeException, 1},
		{"Echo", rpc.OutcomePanic, 1},
		{"Echo", rpc.OutcomeError, 0},
		{"Park", rpc.OutcomeOK, 1},
	}
	for _, tt := range tests {
		got := metricValue(t, reg, "rpc_server_requests_total", map[string]string{"method": tt.method, "outcome": tt.outcome})
		if got != tt.want {
			t.Errorf("requests{%s,%s} = %v; want %v", tt.method, tt.outcome, got, tt.want)
		}
	}
	if got := metricValue(t, reg, "rpc_server_request_duration_seconds", map[string]string{"method": "Echo"}); got != 4 {
		t.Errorf("Echo latency samples = %v; want 4", got)
	}
	if got := metricValue(t, reg, "rpc_server_parked_calls", nil); got != 0 {
		t.Errorf("parked gauge = %v after the call ended; want 0", got)
	}
	// A second server on the same registry shares the collectors.
	if _, err := rpc.ServerOptions(rpc.ServerConfig{Listen: "127.0.0.1:0", Registerer: reg}); err != nil {
		t.Errorf("second server on one registry: %v", err)
	}
}

// TestConnectionLimit checks that MaxConnections refuses connections beyond
// it, and counts them, while the server keeps serving the others.
func TestConnectionLimit(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newEchoHandler(true)
	addr := startServer(t, h, rpc.ServerConfig{MaxConnections: 2, Registerer: reg})
	c := newClient(t, rpc.ClientConfig{Addrs: []string{addr}, RPCTimeout: 5 * time.Second})
	ctx := context.Background()

	var parked []*rpc.Future[string]
	for i := range 2 {
		key := fmt.Sprint("limit", i)
		parked = append(parked, rpc.Go(ctx, func(ctx context.Context) (string, error) { return c.Park(ctx, key, 10_000) }))
		h.deferred(t, key)
	}
	// Both allowed connections hold parked calls: a third is refused.
	if _, err := c.Echo(ctx, "third"); err == nil {
		t.Fatal("a call over the connection limit succeeded")
	}
	if got := metricValue(t, reg, "rpc_server_limit_rejections_total", map[string]string{"limit": "connections"}); got < 1 {
		t.Fatalf("connection rejections = %v; want >= 1", got)
	}
	for i, f := range parked {
		h.resolve(fmt.Sprint("limit", i), "ok")
		if v, err := f.Wait(ctx); v != "ok" || err != nil {
			t.Fatalf("parked call %d = %q, %v", i, v, err)
		}
		h.nextEnd(t, 5*time.Second)
	}
	// The parked calls' connections are idle again and serve new calls.
	if got, err := c.Echo(ctx, "again"); got != "again" || err != nil {
		t.Fatalf("Echo after the parked calls ended = %q, %v", got, err)
	}
}

func TestConfigValidation(t *testing.T) {
	serverTests := []struct {
		name string
		cfg  rpc.ServerConfig
		ok   bool
	}{
		{"Listen", rpc.ServerConfig{Listen: "127.0.0.1:7000"}, true},
		{"Nothing", rpc.ServerConfig{}, false},
		{"BadAddress", rpc.ServerConfig{Listen: "nowhere"}, false},
		{"NegativeLimit", rpc.ServerConfig{Listen: "127.0.0.1:7000", MaxConnections: -1}, false},
		{"WithQPS", rpc.ServerConfig{Listen: "127.0.0.1:7000", MaxQPS: 1000}, true},
	}
	for _, tt := range serverTests {
		t.Run("Server"+tt.name, func(t *testing.T) {
			_, err := rpc.ServerOptions(tt.cfg)
			if (err == nil) != tt.ok {
				t.Fatalf("ServerOptions(%+v) error = %v; want ok=%v", tt.cfg, err, tt.ok)
			}
		})
	}
	clientTests := []struct {
		name string
		cfg  rpc.ClientConfig
		ok   bool
	}{
		{"Defaults", rpc.ClientConfig{Addrs: []string{"127.0.0.1:7000"}}, true},
		{"NoAddrs", rpc.ClientConfig{}, false},
		{"NegativeTimeout", rpc.ClientConfig{Addrs: []string{"a:1"}, RPCTimeout: -1}, false},
		{"UnknownTransport", rpc.ClientConfig{Addrs: []string{"a:1"}, Transport: 99}, false},
	}
	for _, tt := range clientTests {
		t.Run("Client"+tt.name, func(t *testing.T) {
			_, err := rpc.ClientOptions(tt.cfg)
			if (err == nil) != tt.ok {
				t.Fatalf("ClientOptions(%+v) error = %v; want ok=%v", tt.cfg, err, tt.ok)
			}
		})
	}
}

// TestClientMaxInFlight checks that a client with MaxInFlight 1 holds a
// second call until the first ends, or until its context does.
func TestClientMaxInFlight(t *testing.T) {
	h := newEchoHandler(true)
	addr := startServer(t, h, rpc.ServerConfig{})
	c := newClient(t, rpc.ClientConfig{Addrs: []string{addr}, MaxInFlight: 1})
	ctx := context.Background()

	f := rpc.Go(ctx, func(ctx context.Context) (string, error) { return c.Park(ctx, "slot", 10_000) })
	h.deferred(t, "slot")
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Echo(short, "waits"); err == nil {
		t.Fatal("a call beyond MaxInFlight went through")
	}
	second := rpc.Go(ctx, func(ctx context.Context) (string, error) { return c.Echo(ctx, "second") })
	time.Sleep(20 * time.Millisecond)
	if _, _, done := second.Result(); done {
		t.Fatal("a call beyond MaxInFlight completed while the slot was taken")
	}
	h.resolve("slot", "x")
	if _, err := f.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	h.nextEnd(t, 5*time.Second)
	if v, err := second.Wait(ctx); v != "second" || err != nil {
		t.Fatalf("queued call = %q, %v", v, err)
	}
}

// BenchmarkEchoRoundTrip measures one caller's Echo round trip over
// loopback through ServerOptions and ClientOptions (TTHeader), reporting
// the median and 99th percentile.
func BenchmarkEchoRoundTrip(b *testing.B) {
	addr := startServer(b, newEchoHandler(false), rpc.ServerConfig{})
	benchEcho(b, newClient(b, rpc.ClientConfig{Addrs: []string{addr}}))
}

// benchEcho times one caller's Echo calls through c and reports the
// median and 99th percentile.
func benchEcho(b *testing.B, c echo.Client) {
	ctx := context.Background()
	if _, err := c.Echo(ctx, "warm up"); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		if _, err := c.Echo(ctx, "ping"); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	reportPercentiles(b, lat)
}

// BenchmarkEchoRoundTripParallel is BenchmarkEchoRoundTrip with 16 callers
// per CPU; ns/op is then the inverse of throughput.
func BenchmarkEchoRoundTripParallel(b *testing.B) {
	addr := startServer(b, newEchoHandler(false), rpc.ServerConfig{})
	c := newClient(b, rpc.ClientConfig{Addrs: []string{addr}})
	ctx := context.Background()
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			start := time.Now()
			if _, err := c.Echo(ctx, "ping"); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(start))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	reportPercentiles(b, lat)
}

// parkSignal is an Echo service whose Park hands each call's Deferred to
// the benchmark, which resolves it.
type parkSignal struct{ parked chan *rpc.Deferred[string] }

func (p *parkSignal) Echo(ctx context.Context, msg string) (string, error) { return msg, nil }

func (p *parkSignal) Park(ctx context.Context, key string, maxMs int64) (string, error) {
	d := rpc.NewDeferred[string]()
	p.parked <- d
	return d.Park(ctx, time.Duration(maxMs)*time.Millisecond)
}

// BenchmarkParkedCall measures one caller's Park call that the server
// parks on a Deferred and another goroutine resolves: the round trip of a
// parked call through ServerOptions and ClientOptions (TTHeader).
func BenchmarkParkedCall(b *testing.B) {
	h := &parkSignal{parked: make(chan *rpc.Deferred[string], 1)}
	addr := startServer(b, h, rpc.ServerConfig{})
	c := newClient(b, rpc.ClientConfig{Addrs: []string{addr}})
	ctx := context.Background()
	call := func() {
		f := rpc.Go(ctx, func(ctx context.Context) (string, error) { return c.Park(ctx, "k", 10_000) })
		(<-h.parked).Resolve("v")
		if v, err := f.Wait(ctx); v != "v" || err != nil {
			b.Fatalf("Park = %q, %v", v, err)
		}
	}
	call() // warm up
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		call()
		lat = append(lat, time.Since(start))
	}
	reportPercentiles(b, lat)
}

// BenchmarkParkedCallMemory parks 1,000 calls at once (one connection
// each, as the default client pool does) and reports the heap and stack
// they hold while parked, connections included, client and server together
// (both live in this process; TestTenThousandParkedCalls measures the
// server alone). Only the first round is measured: later rounds reuse the
// pooled connections of the first.
func BenchmarkParkedCallMemory(b *testing.B) {
	const n = 1000
	h := &parkSignal{parked: make(chan *rpc.Deferred[string], n)}
	addr := startServer(b, h, rpc.ServerConfig{})
	c := newClient(b, rpc.ClientConfig{Addrs: []string{addr}})
	ctx := context.Background()
	mem := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc + m.StackInuse
	}
	before := mem()
	var perCall float64
	for b.Loop() {
		fs := make([]*rpc.Future[string], n)
		for i := range fs {
			fs[i] = rpc.Go(ctx, func(ctx context.Context) (string, error) { return c.Park(ctx, "k", 30_000) })
		}
		ds := make([]*rpc.Deferred[string], n)
		for i := range ds {
			ds[i] = <-h.parked
		}
		if perCall == 0 {
			perCall = float64(mem()-before) / n
		}
		for _, d := range ds {
			d.Resolve("v")
		}
		for _, f := range fs {
			if _, err := f.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(perCall, "B/parked-call(client+server)")
}

// BenchmarkConnectAndCall measures a new connection's accept and first
// call: a plain framed Thrift client dials, makes one Echo call and
// closes.
func BenchmarkConnectAndCall(b *testing.B) {
	addr := startServer(b, newEchoHandler(false), rpc.ServerConfig{})
	for b.Loop() {
		if err := framedEcho(addr, "ping"); err != nil {
			b.Fatal(err)
		}
	}
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	at := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

// metricValue returns the value of the metric name with the given labels
// (a counter's or gauge's value, a histogram's sample count), 0 if absent.
func metricValue(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue metrics
				}
			}
			return valueOf(m)
		}
	}
	return 0
}

func valueOf(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 5s")
}
