package client

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/rpc/tlsconf"
)

// Defaults used by Connect for the fields of Config left at their zero value.
const (
	// EnvCell names the environment variable read when Config.Addrs is
	// empty: a comma-separated list of replica addresses (host:port), of
	// which one is enough (see Config.Addrs).
	EnvCell = "CHUBBY_CELL"

	// DefaultAddr is the cell address used when neither Config.Addrs nor
	// CHUBBY_CELL names one: where `chubbyd dev` listens.
	DefaultAddr = "127.0.0.1:7000"

	// DefaultConnectTimeout bounds establishing one TCP connection.
	DefaultConnectTimeout = time.Second

	// DefaultCallTimeout bounds one call that the cell answers at once
	// (everything but KeepAlive and Acquire, which are parked on purpose and
	// get their own bound: the lease or the wait, plus CallTimeout).
	DefaultCallTimeout = 10 * time.Second

	// DefaultGracePeriod is how long a session in jeopardy (its local lease
	// ran out with no KeepAlive reply) keeps trying to reach a master before
	// it expires: Chubby's 45 s, long enough to ride through a master
	// failover.
	DefaultGracePeriod = 45 * time.Second
)

// Config says how to reach a cell. The zero value is usable: it connects to
// CHUBBY_CELL, or to DefaultAddr when that is unset. Zero fields take the
// defaults of DefaultConfig.
type Config struct {
	// Addrs lists the cell's replicas as host:port. If empty, the
	// comma-separated list in the CHUBBY_CELL environment variable is used,
	// and if that is unset or blank, DefaultAddr. One replica is enough:
	// the client learns the others from the cell (Client.Replicas) and
	// comes back to these addresses only when none of those answers.
	Addrs []string

	// ClientName identifies this client in the cell's status (at most
	// chubby.MAX_CLIENT_NAME_BYTES bytes). Default: "<program>@<host>:<pid>".
	ClientName string

	// ConnectTimeout bounds establishing one connection to a replica.
	// Default: DefaultConnectTimeout.
	ConnectTimeout time.Duration

	// CallTimeout bounds one RPC that the cell answers at once. Parked calls
	// (KeepAlive, Acquire) are bounded by what they wait for plus CallTimeout.
	// A context deadline, when earlier, wins. Default: DefaultCallTimeout.
	CallTimeout time.Duration

	// GracePeriod is how long a session whose local lease ran out (it is
	// then in jeopardy) keeps looking for a master before it expires. It
	// counts from the end of the local lease. Default: DefaultGracePeriod.
	GracePeriod time.Duration

	// DisableCache turns off the session cache of file contents, Stats and
	// directory listings (on by default; see the package doc, "Cache").
	DisableCache bool

	// CacheMaxEntries bounds the nodes each session caches. Default:
	// DefaultCacheMaxEntries.
	CacheMaxEntries int

	// Logger receives the library's diagnostics (session expiry, retries).
	// Default: a logger that discards everything.
	Logger *slog.Logger

	// TLS, if set, is the configuration of every connection: the cell's
	// client port then speaks mutual TLS, and the certificate this client
	// presents names its principal (none: "anonymous"). If nil and
	// CHUBBY_TLS_CA is set, the client builds one from CHUBBY_TLS_CA,
	// CHUBBY_TLS_CERT and CHUBBY_TLS_KEY (certificates renewed on disk
	// are picked up; see TLSFromFiles). Neither: plaintext, for a cell
	// started without TLS.
	TLS *tls.Config
}

// Environment variables of the client's TLS files (see Config.TLS).
const (
	EnvTLSCA   = "CHUBBY_TLS_CA"
	EnvTLSCert = "CHUBBY_TLS_CERT"
	EnvTLSKey  = "CHUBBY_TLS_KEY"
	// EnvTLSServerName, if set, is the host name the replicas'
	// certificates must carry (by default any certificate the CA signed
	// for a server is a replica).
	EnvTLSServerName = "CHUBBY_TLS_SERVER_NAME"
)

// TLSFromFiles returns a client TLS configuration from PEM files: the CA
// that signed the replicas' certificates and, optionally, this client's
// certificate and key (both or neither; neither: anonymous). serverName,
// if set, must be in the replicas' certificates. The files are read again
// when they change, at most once a second, at the next new connection.
func TLSFromFiles(ca, cert, key, serverName string) (*tls.Config, error) {
	r, err := tlsconf.New(tlsconf.Config{Files: tlsconf.Files{CA: ca, Cert: cert, Key: key}, ServerName: serverName})
	if err != nil {
		return nil, fmt.Errorf("chubby: TLS: %w", err)
	}
	return r.ClientConfig(), nil
}

// DefaultConfig returns the defaults Connect gives the fields of a Config
// left at their zero value: ConnectTimeout DefaultConnectTimeout,
// CallTimeout DefaultCallTimeout, GracePeriod DefaultGracePeriod,
// CacheMaxEntries DefaultCacheMaxEntries, the cache on, Logger one that
// discards everything. Addrs and ClientName are left
// empty, as Connect resolves them when it is called: Addrs from
// CHUBBY_CELL, or DefaultAddr when that is unset; ClientName
// "<program>@<host>:<pid>".
func DefaultConfig() Config {
	return Config{
		ConnectTimeout:  DefaultConnectTimeout,
		CallTimeout:     DefaultCallTimeout,
		GracePeriod:     DefaultGracePeriod,
		CacheMaxEntries: DefaultCacheMaxEntries,
		Logger:          slog.New(slog.DiscardHandler),
	}
}

// withDefaults returns cfg with every zero field filled in (from
// DefaultConfig) and the addresses validated. getenv is os.Getenv outside
// tests.
func (cfg Config) withDefaults(getenv func(string) string) (Config, error) {
	d := DefaultConfig()
	if len(cfg.Addrs) == 0 {
		if env := strings.TrimSpace(getenv(EnvCell)); env != "" {
			addrs, err := ParseAddrs(env)
			if err != nil {
				return Config{}, fmt.Errorf("chubby: %s: %w", EnvCell, err)
			}
			cfg.Addrs = addrs
		} else {
			cfg.Addrs = []string{DefaultAddr}
		}
	} else {
		addrs, err := validateAddrs(cfg.Addrs)
		if err != nil {
			return Config{}, fmt.Errorf("chubby: Config.Addrs: %w", err)
		}
		cfg.Addrs = addrs
	}
	if cfg.ClientName == "" {
		cfg.ClientName = defaultClientName()
	}
	if len(cfg.ClientName) > chubby.MAX_CLIENT_NAME_BYTES {
		return Config{}, fmt.Errorf("chubby: Config.ClientName is %d bytes, at most %d allowed",
			len(cfg.ClientName), chubby.MAX_CLIENT_NAME_BYTES)
	}
	if cfg.ConnectTimeout < 0 || cfg.CallTimeout < 0 || cfg.GracePeriod < 0 {
		return Config{}, fmt.Errorf("chubby: Config timeouts must not be negative")
	}
	if cfg.CacheMaxEntries <= 0 {
		cfg.CacheMaxEntries = d.CacheMaxEntries
	}
	if cfg.GracePeriod == 0 {
		cfg.GracePeriod = d.GracePeriod
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = d.ConnectTimeout
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = d.CallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = d.Logger
	}
	if cfg.TLS == nil && getenv(EnvTLSCA) != "" {
		tc, err := TLSFromFiles(getenv(EnvTLSCA), getenv(EnvTLSCert), getenv(EnvTLSKey), getenv(EnvTLSServerName))
		if err != nil {
			return Config{}, err
		}
		cfg.TLS = tc
	} else if cfg.TLS == nil && (getenv(EnvTLSCert) != "" || getenv(EnvTLSKey) != "") {
		return Config{}, fmt.Errorf("chubby: %s and %s need %s (the CA that signed the replicas)", EnvTLSCert, EnvTLSKey, EnvTLSCA)
	}
	return cfg, nil
}

// defaultClientName is "<program>@<host>:<pid>", cut to the IDL's limit.
func defaultClientName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	name := fmt.Sprintf("%s@%s:%d", filepath.Base(os.Args[0]), host, os.Getpid())
	if len(name) > chubby.MAX_CLIENT_NAME_BYTES {
		name = name[:chubby.MAX_CLIENT_NAME_BYTES]
	}
	return name
}

// ParseAddrs parses a comma-separated list of replica addresses, as found in
// CHUBBY_CELL or the CLI's --cell flag. Blanks around entries are ignored;
// empty entries, malformed addresses and duplicates are errors.
func ParseAddrs(list string) ([]string, error) {
	parts := strings.Split(list, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return validateAddrs(parts)
}

// validateAddrs checks every address with ValidateAddr and rejects
// duplicates; it returns a fresh slice.
func validateAddrs(addrs []string) ([]string, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no address given")
	}
	out := make([]string, 0, len(addrs))
	seen := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		if err := ValidateAddr(a); err != nil {
			return nil, err
		}
		if seen[a] {
			return nil, fmt.Errorf("address %q given twice", a)
		}
		seen[a] = true
		out = append(out, a)
	}
	return out, nil
}

// ValidateAddr reports whether addr is a usable replica address: host:port
// with a non-empty host (a name or an IP; IPv6 in brackets) and a decimal port
// in 1..65535. It does not resolve the name.
func ValidateAddr(addr string) error {
	if addr == "" {
		return fmt.Errorf("empty address")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: want host:port: %w", addr, err)
	}
	if host == "" {
		return fmt.Errorf("address %q: missing host", addr)
	}
	if strings.ContainsAny(host, " \t/") {
		return fmt.Errorf("address %q: malformed host", addr)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("address %q: port must be a number in 1..65535", addr)
	}
	return nil
}
