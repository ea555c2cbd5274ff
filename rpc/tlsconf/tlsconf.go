// Package tlsconf builds the TLS configurations of a lock cell's links —
// the client port, the peer port and the gossip channel — from PEM files,
// and follows those files: a certificate, key or CA renewed on disk is used
// from the next handshake on, without a restart.
//
// Every link is mutually authenticated with TLS 1.3. A server presents the
// current certificate; it asks its callers for theirs and verifies them
// against a CA pool (the cell's CA on the peer port and for gossip, the
// client CA, by default the same file, on the client port). A client
// verifies the server's chain against the cell's CA with the server-auth
// key usage; it does not check a host name unless told one (ServerName),
// because replicas are reached by address and what proves a replica is a
// certificate the cell's CA signed. A certificate must carry the
// key usages of its role: serverAuth to serve, clientAuth to call
// (certificates without extended key usages are accepted for both, as Go
// does); a replica's certificate needs both.
//
// A principal is the subject common name of the verified leaf certificate
// (see Principal). Files are checked for changes at most once per
// CheckInterval, by the handshake that comes after it, so a reload costs
// no goroutine; a reload that fails (a half-written file, a key that does
// not match) keeps the previous material and is logged and counted.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// DefaultCheckInterval is how often, at most, the files are checked.
const DefaultCheckInterval = time.Second

// Files names the PEM files of one replica or client.
type Files struct {
	// Cert and Key are this party's certificate (chain) and private key.
	// A client may leave both empty: it then calls as "anonymous".
	Cert, Key string
	// CA holds the certificates of the cell's CA: it verifies servers,
	// and callers on the peer port and the gossip channel.
	CA string
	// ClientCA, if set, verifies callers on the client port instead of CA:
	// with a separate client CA, no client certificate can pass for a
	// replica on the peer port.
	ClientCA string
}

// Config configures a Reloader. Zero fields take the defaults.
type Config struct {
	Files Files
	// ServerName, if set, is the host name a client requires in the
	// server's certificate.
	ServerName string
	// CheckInterval bounds how often the files are checked for changes,
	// default DefaultCheckInterval. Negative: never (load once).
	CheckInterval time.Duration
	// Logger receives reloads and failed reloads, default slog.Default().
	Logger *slog.Logger
	// OnReload, if set, is called after every reload attempt with its
	// error (nil: the new material is in use), e.g. to count them.
	OnReload func(error)
	// Now is the clock, default time.Now.
	Now func() time.Time
}

// material is one consistent load of the files.
type material struct {
	cert     *tls.Certificate // nil: none (an anonymous client)
	leaf     *x509.Certificate
	ca       *x509.CertPool
	clientCA *x509.CertPool
}

// stamp identifies a version of one file.
type stamp struct {
	size    int64
	modTime time.Time
}

// Reloader holds the current TLS material and reloads it when the files
// change. It is safe for concurrent use.
type Reloader struct {
	cfg Config

	mu        sync.Mutex
	cur       *material
	stamps    [4]stamp
	lastCheck time.Time
}

// New loads the files once and returns a Reloader, or the error that makes
// them unusable.
func New(cfg Config) (*Reloader, error) {
	if cfg.Files.CA == "" {
		return nil, errors.New("tlsconf: a CA file is required")
	}
	if (cfg.Files.Cert == "") != (cfg.Files.Key == "") {
		return nil, errors.New("tlsconf: a certificate needs its key and a key its certificate")
	}
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = DefaultCheckInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Reloader{cfg: cfg}
	m, st, err := load(cfg.Files)
	if err != nil {
		return nil, err
	}
	r.cur, r.stamps, r.lastCheck = m, st, cfg.Now()
	return r, nil
}

func (r *Reloader) paths() [4]string {
	f := r.cfg.Files
	return [4]string{f.Cert, f.Key, f.CA, f.ClientCA}
}

// load reads and checks every file of f.
func load(f Files) (*material, [4]stamp, error) {
	var st [4]stamp
	for i, p := range [4]string{f.Cert, f.Key, f.CA, f.ClientCA} {
		st[i] = statOf(p)
	}
	m := &material{}
	if f.Cert != "" {
		c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, st, fmt.Errorf("tlsconf: certificate %s with key %s: %w", f.Cert, f.Key, err)
		}
		m.cert, m.leaf = &c, c.Leaf
	}
	var err error
	if m.ca, err = loadPool(f.CA); err != nil {
		return nil, st, err
	}
	m.clientCA = m.ca
	if f.ClientCA != "" {
		if m.clientCA, err = loadPool(f.ClientCA); err != nil {
			return nil, st, err
		}
	}
	return m, st, nil
}

func statOf(p string) stamp {
	if p == "" {
		return stamp{}
	}
	fi, err := os.Stat(p)
	if err != nil {
		return stamp{size: -1}
	}
	return stamp{size: fi.Size(), modTime: fi.ModTime()}
}

func loadPool(p string) (*x509.CertPool, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tlsconf: CA file %s holds no PEM certificate", p)
	}
	return pool, nil
}

// current returns the material in use, first reloading it if the files
// changed and CheckInterval has passed since the last look.
func (r *Reloader) current() *material {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Now()
	if r.cfg.CheckInterval < 0 || now.Sub(r.lastCheck) < r.cfg.CheckInterval {
		return r.cur
	}
	r.lastCheck = now
	changed := false
	for i, p := range r.paths() {
		if statOf(p) != r.stamps[i] {
			changed = true
		}
	}
	if !changed {
		return r.cur
	}
	m, st, err := load(r.cfg.Files)
	if err != nil {
		// Keep serving with what we had; try again after the next interval
		// (the stamps stay old, so a file finished later is picked up).
		r.cfg.Logger.Error("tls: reload failed, keeping the previous certificates", "err", err)
	} else {
		r.cur, r.stamps = m, st
		r.cfg.Logger.Info("tls: certificates reloaded", "subject", subject(m.leaf), "not_after", notAfter(m.leaf))
	}
	if r.cfg.OnReload != nil {
		r.cfg.OnReload(err)
	}
	return r.cur
}

// Leaf returns this party's current certificate, nil for an anonymous
// client.
func (r *Reloader) Leaf() *x509.Certificate { return r.current().leaf }

func subject(c *x509.Certificate) string {
	if c == nil {
		return ""
	}
	return c.Subject.CommonName
}

func notAfter(c *x509.Certificate) time.Time {
	if c == nil {
		return time.Time{}
	}
	return c.NotAfter
}

// Auth says whom a server lets in.
type Auth int

const (
	// RequireCert: callers must present a certificate the CA signed (the
	// peer port, gossip).
	RequireCert Auth = iota
	// AllowAnonymous: a caller may come without a certificate and is then
	// anonymous; one it presents must verify (the client port).
	AllowAnonymous
)

// ServerConfig returns the configuration of a server: callers verified
// against the cell's CA (clientPort false) or the client CA (clientPort
// true).
func (r *Reloader) ServerConfig(auth Auth, clientPort bool) *tls.Config {
	mode := tls.RequireAndVerifyClientCert
	if auth == AllowAnonymous {
		mode = tls.VerifyClientCertIfGiven
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.current()
			if m.cert == nil {
				return nil, errors.New("tlsconf: a server needs a certificate")
			}
			pool := m.ca
			if clientPort {
				pool = m.clientCA
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*m.cert},
				ClientAuth:   mode,
				ClientCAs:    pool,
			}, nil
		},
	}
}

// ClientConfig returns the configuration of a client: it presents the
// current certificate, if any, and verifies the server against the CA.
func (r *Reloader) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain is verified in VerifyConnection, against the CA pool
		// current at the handshake (RootCAs would be fixed).
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if m := r.current(); m.cert != nil {
				return m.cert, nil
			}
			return &tls.Certificate{}, nil // none: the server decides
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyServer(cs, r.current().ca, r.cfg.ServerName)
		},
	}
}

// verifyServer checks the server's chain against pool for server auth,
// and its name if one is required.
func verifyServer(cs tls.ConnectionState, pool *x509.CertPool, name string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tlsconf: the server sent no certificate")
	}
	opts := x509.VerifyOptions{
		Roots:         pool,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSName:       name,
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return fmt.Errorf("tlsconf: server certificate %q: %w", cs.PeerCertificates[0].Subject.CommonName, err)
	}
	return nil
}

// Principal returns the principal a verified connection state names: the
// subject common name of the caller's leaf certificate, or "" when the
// caller presented none (the cell calls it anonymous). It reads only
// verified chains, so a certificate the CA did not sign names nobody.
func Principal(cs tls.ConnectionState) string {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ""
	}
	return cs.VerifiedChains[0][0].Subject.CommonName
}

// PeerPrincipal returns the common name of the server's certificate as a
// client saw it (verified by VerifyConnection), "" if none.
func PeerPrincipal(cs tls.ConnectionState) string {
	if len(cs.PeerCertificates) == 0 {
		return ""
	}
	return cs.PeerCertificates[0].Subject.CommonName
}
