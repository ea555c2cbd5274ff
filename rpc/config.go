package rpc

import "log/slog"

// DefaultServerConfig returns the defaults ServerOptions gives the fields
// of a ServerConfig left at zero: MaxConnections DefaultMaxConnections,
// MaxConnectionsPerIP DefaultMaxConnectionsPerIP, MaxPayloadBytes
// DefaultMaxPayloadBytes, ExitWaitTime DefaultExitWaitTime,
// FirstCallTimeout DefaultFirstCallTimeout, MaxConnIdleTime
// DefaultMaxConnIdleTime, Logger slog.Default(). MaxQPS 0 is
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
// of a ClientConfig left at zero: ConnectTimeout DefaultConnectTimeout,
// MaxIdlePerAddress DefaultMaxIdlePerAddress, MaxIdleGlobal
// DefaultMaxIdleGlobal, MaxIdleTimeout DefaultMaxIdleTimeout, MaxInFlight
// DefaultMaxInFlight, MaxPayloadBytes DefaultMaxPayloadBytes, Transport
// TransportTTHeader. RPCTimeout 0 is none; Addrs has no default.
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
