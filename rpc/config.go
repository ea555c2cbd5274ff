package rpc

import "log/slog"

// DefaultServerConfig returns the defaults ServerOptions gives the fields
// of a ServerConfig left at zero: MaxConnections DefaultMaxConnections
// (15,000), MaxConnectionsPerIP DefaultMaxConnectionsPerIP (1,024),
// MaxPayloadBytes DefaultMaxPayloadBytes, ExitWaitTime DefaultExitWaitTime
// (1 s), FirstCallTimeout DefaultFirstCallTimeout (10 s), MaxConnIdleTime
// DefaultMaxConnIdleTime (2 min), Logger slog.Default(). MaxQPS 0 is
// unlimited; ConnLimits are added to DefaultConnLimits (loopback: no
// per-address cap); Listen, Listener and Registerer have no default.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		MaxConnections:      DefaultMaxConnections,
		MaxConnectionsPerIP: DefaultMaxConnectionsPerIP,
		MaxPayloadBytes:     DefaultMaxPayloadBytes,
		ExitWaitTime:        DefaultExitWaitTime,
		FirstCallTimeout:    DefaultFirstCallTimeout,
		MaxConnIdleTime:     DefaultMaxConnIdleTime,
		Logger:              slog.Default(),
	}
}

// DefaultClientConfig returns the defaults ClientOptions gives the fields
// of a ClientConfig left at zero: ConnectTimeout DefaultConnectTimeout
// (1 s), MaxIdlePerAddress DefaultMaxIdlePerAddress (10),
// MaxIdleGlobal DefaultMaxIdleGlobal (1000), MaxIdleTimeout
// DefaultMaxIdleTimeout (30 s), MaxInFlight DefaultMaxInFlight (4096),
// MaxPayloadBytes DefaultMaxPayloadBytes (4 MiB), Transport TransportTTHeader. RPCTimeout 0 is none; Addrs has no default.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{
		ConnectTimeout:    DefaultConnectTimeout,
		Transport:         TransportTTHeader,
		MaxIdlePerAddress: DefaultMaxIdlePerAddress,
		MaxIdleGlobal:     DefaultMaxIdleGlobal,
		MaxIdleTimeout:    DefaultMaxIdleTimeout,
		MaxInFlight:       DefaultMaxInFlight,
		MaxPayloadBytes:   DefaultMaxPayloadBytes,
	}
}
