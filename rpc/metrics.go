package rpc

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a served call, the "outcome" label of rpc_server_requests_total.
const (
	OutcomeOK        = "ok"        // the method returned its result
	OutcomeException = "exception" // the method raised a declared Thrift exception
	OutcomeError     = "error"     // any other error: undeclared error, deadline, limit
	OutcomePanic     = "panic"     // the handler panicked
)

// serverMetrics are the Prometheus collectors of one server.
type serverMetrics struct {
	requests *prometheus.CounterVec   // by method, outcome
	latency  *prometheus.HistogramVec // by method
	parked   prometheus.Gauge
	limited  *prometheus.CounterVec // by limit: connections, connections_per_ip, qps
	// idleClosed counts connections the server closed as idle, by reason:
	// first_call (never carried a call), idle.
	idleClosed *prometheus.CounterVec
	// handshakes counts TLS handshakes by outcome: ok, refused.
	handshakes *prometheus.CounterVec
}

// newServerMetrics creates the collectors and registers them with reg. If reg
// already holds collectors of the same names and labels (two servers in one
// process sharing a registry), those are reused, so the servers add up.
func newServerMetrics(reg prometheus.Registerer) (*serverMetrics, error) {
	m := &serverMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rpc_server_requests_total",
			Help: "Calls served, by method and outcome (ok, exception, error, panic).",
		}, []string{"method", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rpc_server_request_duration_seconds",
			Help: "Time from the start of the handler chain to its return, by method; parked calls included.",
			// From 50 µs (a loopback round trip) to about 60 s (a parked call).
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 11),
		}, []string{"method"}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rpc_server_parked_calls",
			Help: "Calls currently parked in Deferred.Park.",
		}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rpc_server_limit_rejections_total",
			Help: "Connections or calls refused by the server's limits, by limit (connections, connections_per_ip, qps).",
		}, []string{"limit"}),
		idleClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rpc_server_idle_closes_total",
			Help: "Connections the server closed because they carried no call, by reason (first_call: none since accepted, within the first-call timeout; idle: none running and nothing received for the idle timeout).",
		}, []string{"reason"}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rpc_server_tls_handshakes_total",
			Help: "TLS handshakes of accepted connections, by outcome (ok; refused: no certificate where one is required, an unknown CA, not TLS, too slow).",
		}, []string{"outcome"}),
	}
	var err error
	if m.requests, err = register(reg, m.requests); err != nil {
		return nil, err
	}
	if m.latency, err = register(reg, m.latency); err != nil {
		return nil, err
	}
	if m.parked, err = register(reg, m.parked); err != nil {
		return nil, err
	}
	if m.limited, err = register(reg, m.limited); err != nil {
		return nil, err
	}
	if m.handshakes, err = register(reg, m.handshakes); err != nil {
		return nil, err
	}
	if m.idleClosed, err = register(reg, m.idleClosed); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c with reg, or returns the equal collector that reg
// already has.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("rpc: registering metrics: %w", err)
}

// connInfoKey is the context key of the *connInfo a server built with
// ServerOptions puts in the context of each connection, and so of each
// handler.
type connInfoKey struct{}

// connInfo is what the server knows about a connection, for code running in
// its handlers.
type connInfo struct {
	cancel  context.CancelCauseFunc // nil if closing cannot be detected
	metrics *serverMetrics          // nil without a Registerer
	caller  CallerInfo
	track   *trackedConn // the connection's idle timer; nil if OnActive failed first
}

// parkedGauge returns the parked-calls gauge of the server whose handler
// context ctx is, or nil.
func parkedGauge(ctx context.Context) prometheus.Gauge {
	ci, _ := ctx.Value(connInfoKey{}).(*connInfo)
	if ci == nil || ci.metrics == nil {
		return nil
	}
	return ci.metrics.parked
}
