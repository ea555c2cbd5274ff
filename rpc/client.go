package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/connpool"
	"github.com/cloudwego/kitex/pkg/endpoint"
	"github.com/cloudwego/kitex/pkg/remote/codec"
	kconnpool "github.com/cloudwego/kitex/pkg/remote/connpool"
	"github.com/cloudwego/kitex/pkg/transmeta"
	"github.com/cloudwego/kitex/transport"
)

// Client defaults.
const (
	DefaultConnectTimeout    = time.Second
	DefaultMaxIdlePerAddress = 10 // Kitex's default
	DefaultMaxIdleGlobal     = 1000
	DefaultMaxIdleTimeout    = 30 * time.Second
	// DefaultMaxInFlight caps calls in flight per client. With the default
	// pool each one holds a connection (a file descriptor), parked or not.
	DefaultMaxInFlight = 4096
)

// Transport is the framing a client speaks.
type Transport int

const (
	// TransportTTHeader (the default) wraps each framed message in a
	// TTHeader carrying metadata, among which the call's RPC timeout: a
	// server built with ServerOptions makes it the handler's deadline.
	TransportTTHeader Transport = iota
	// TransportFramed is plain framed binary Thrift, as most non-Kitex
	// clients speak it. The server learns no deadline.
	TransportFramed
	// TransportBuffered is unframed (buffered) strict binary Thrift.
	TransportBuffered
)

func (t Transport) String() string {
	switch t {
	case TransportTTHeader:
		return "ttheader"
	case TransportFramed:
		return "framed"
	case TransportBuffered:
		return "buffered"
	default:
		return fmt.Sprintf("Transport(%d)", int(t))
	}
}

// ErrTooManyInFlight is returned, wrapped, by a call that gave up waiting
// for one of the client's MaxInFlight slots.
var ErrTooManyInFlight = errors.New("rpc: client has MaxInFlight calls in flight")

// ClientConfig configures a Kitex client built with [ClientOptions].
type ClientConfig struct {
	// Addrs lists the servers, host:port. Kitex balances calls over them.
	Addrs []string
	// ConnectTimeout bounds dialling, default DefaultConnectTimeout
	// (Kitex's own default, 50 ms, is short for a loaded machine).
	ConnectTimeout time.Duration
	// RPCTimeout bounds each call, default 0 = none. Override it per call
	// with callopt.WithRPCTimeout; a context deadline bounds the call too.
	// Only a call with an RPC timeout tells a TTHeader server its deadline.
	RPCTimeout time.Duration
	// Transport is the framing, default TransportTTHeader.
	Transport Transport
	// MaxIdlePerAddress, MaxIdleGlobal and MaxIdleTimeout configure the
	// pool of idle connections (defaults DefaultMaxIdlePerAddress,
	// DefaultMaxIdleGlobal, DefaultMaxIdleTimeout). Busy connections are
	// not pooled: every call in flight has its own. Keep MaxIdleTimeout
	// below the server's idle timeout (ServerConfig.MaxConnIdleTime,
	// default DefaultMaxConnIdleTime), so that the client drops an idle
	// connection before the server closes it under a call just being sent.
	MaxIdlePerAddress int
	MaxIdleGlobal     int
	MaxIdleTimeout    time.Duration
	// MaxInFlight caps calls in flight, and so connections, default
	// DefaultMaxInFlight. A call beyond it waits for a slot until its
	// context or RPC timeout ends.
	MaxInFlight int
	// MaxPayloadBytes bounds one framed request sent and one reply
	// received, default DefaultMaxPayloadBytes; it should match the
	// server's (ServerConfig.MaxPayloadBytes).
	MaxPayloadBytes int
	// TLS, if set, makes the client speak TLS with this configuration, on
	// Kitex's gonet transport (see tls.go). Build it with package tlsconf.
	TLS *tls.Config
	// GoNet, without TLS, makes the client speak plaintext on Kitex's gonet
	// transport instead of netpoll (see ServerConfig.GoNet for why).
	GoNet bool
}

// ClientOptions returns the Kitex client options for cfg, to pass to a
// generated NewClient. The MaxInFlight cap lives in the returned options:
// clients made from one slice share it. The client's connections stay
// open until they idle out (MaxIdleTimeout); to close them when done with
// the client, use ClientOptionsCloser.
func ClientOptions(cfg ClientConfig) ([]client.Option, error) {
	opts, _, err := ClientOptionsCloser(cfg)
	return opts, err
}

// ClientOptionsCloser is ClientOptions with a function that closes the
// client's connections: the idle ones at once, and each busy one when its
// call ends. (Kitex's generated clients have no Close of their own.) Calls
// made after it fail or dial anew, unpooled.
func ClientOptionsCloser(cfg ClientConfig) ([]client.Option, func() error, error) {
	opts, cfg, err := clientOptions(cfg)
	if err != nil {
		return nil, nil, err
	}
	pool := kconnpool.NewLongPool("chubby", connpool.IdleConfig{
		MaxIdlePerAddress: cfg.MaxIdlePerAddress,
		MaxIdleGlobal:     cfg.MaxIdleGlobal,
		MaxIdleTimeout:    cfg.MaxIdleTimeout,
	})
	return append(opts, client.WithConnPool(pool)), pool.Close, nil
}

// clientOptions is ClientOptions without the pool, and cfg with its
// defaults.
func clientOptions(cfg ClientConfig) ([]client.Option, ClientConfig, error) {
	if len(cfg.Addrs) == 0 {
		return nil, cfg, errors.New("rpc: client config needs at least one address")
	}
	if cfg.ConnectTimeout < 0 || cfg.RPCTimeout < 0 || cfg.MaxIdlePerAddress < 0 ||
		cfg.MaxIdleGlobal < 0 || cfg.MaxIdleTimeout < 0 || cfg.MaxInFlight < 0 || cfg.MaxPayloadBytes < 0 {
		return nil, cfg, fmt.Errorf("rpc: negative limit in client config %+v", cfg)
	}
	def := DefaultClientConfig()
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = def.ConnectTimeout
	}
	if cfg.MaxIdlePerAddress == 0 {
		cfg.MaxIdlePerAddress = def.MaxIdlePerAddress
	}
	if cfg.MaxIdleGlobal == 0 {
		cfg.MaxIdleGlobal = def.MaxIdleGlobal
	}
	if cfg.MaxIdleTimeout == 0 {
		cfg.MaxIdleTimeout = def.MaxIdleTimeout
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = def.MaxInFlight
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = def.MaxPayloadBytes
	}

	opts := []client.Option{
		client.WithHostPorts(cfg.Addrs...),
		client.WithConnectTimeout(cfg.ConnectTimeout),
		client.WithMiddleware(inFlightLimit(cfg.MaxInFlight)),
		// Replies are checked like requests (see guardedCodec): a broken or
		// hostile server must not be able to crash a client either.
		client.WithCodec(codec.NewDefaultCodecWithSizeLimit(cfg.MaxPayloadBytes)),
		client.WithPayloadCodec(newGuardedCodec()),
	}
	if cfg.TLS != nil || cfg.GoNet {
		opts = append(opts, tlsClientOptions(cfg.TLS)...)
	}
	if cfg.RPCTimeout > 0 {
		opts = append(opts, client.WithRPCTimeout(cfg.RPCTimeout))
	}
	switch cfg.Transport {
	case TransportTTHeader:
		opts = append(opts,
			client.WithTransportProtocol(transport.TTHeader),
			client.WithMetaHandler(transmeta.ClientTTHeaderHandler))
	case TransportFramed:
		opts = append(opts, client.WithTransportProtocol(transport.Framed))
	case TransportBuffered:
		opts = append(opts, client.WithTransportProtocol(transport.PurePayload))
	default:
		return nil, cfg, fmt.Errorf("rpc: unknown client transport %v", cfg.Transport)
	}
	return opts, cfg, nil
}

// inFlightLimit is a client middleware letting at most n calls through at
// once. It runs inside Kitex's timeout middleware, so the wait counts
// against the call's RPC timeout as well as its context.
func inFlightLimit(n int) endpoint.Middleware {
	slots := make(chan struct{}, n)
	return func(next endpoint.Endpoint) endpoint.Endpoint {
		return func(ctx context.Context, req, resp any) error {
			select {
			case slots <- struct{}{}:
			default:
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return fmt.Errorf("%w (%d): %w", ErrTooManyInFlight, n, ctx.Err())
				}
			}
			defer func() { <-slots }()
			return next(ctx, req, resp)
		}
	}
}
