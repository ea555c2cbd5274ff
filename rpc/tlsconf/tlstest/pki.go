package tlstest

import (
	"crypto/tls"
	"path/filepath"
	"testing"

	"github.com/chubbygo/chubby/rpc/tlsconf"
)

// PKI is a CA with its certificate and the certificates it issues in a
// test's temporary directory: Dir/ca.crt, Dir/CN.crt and Dir/CN.key.
type PKI struct {
	CA  *CA
	Dir string
}

// NewPKI makes a CA named name, its directory and Dir/ca.crt.
func NewPKI(tb testing.TB, name string) *PKI {
	tb.Helper()
	ca, err := NewCA(name)
	if err != nil {
		tb.Fatal(err)
	}
	p := &PKI{CA: ca, Dir: tb.TempDir()}
	if err := WriteAtomic(p.CAFile(), ca.PEM); err != nil {
		tb.Fatal(err)
	}
	return p
}

// CAFile is the path of the CA's certificate.
func (p *PKI) CAFile() string { return filepath.Join(p.Dir, "ca.crt") }

// Files issues a new certificate for cn and writes it and its key as
// Dir/cn.crt and Dir/cn.key (the key first: a reader between the two sees
// a pair that does not match and keeps what it had). Issuing again for the
// same cn renews the files in place, as an operator rotating them does.
func (p *PKI) Files(tb testing.TB, cn string, u Usage) Files {
	tb.Helper()
	l, err := p.CA.Issue(cn, u)
	if err != nil {
		tb.Fatal(err)
	}
	f := Files{Cert: filepath.Join(p.Dir, cn+".crt"), Key: filepath.Join(p.Dir, cn+".key"), CA: p.CAFile()}
	if err := WriteAtomic(f.Key, l.KeyPEM); err != nil {
		tb.Fatal(err)
	}
	if err := WriteAtomic(f.Cert, l.CertPEM); err != nil {
		tb.Fatal(err)
	}
	return f
}

// Reloader issues a certificate for cn (Files) and returns the TLS
// material of its holder, which trusts trust's CA (nil: p's own). A cn of
// "" is a party without a certificate (an anonymous client).
func (p *PKI) Reloader(tb testing.TB, cn string, u Usage, trust *PKI) *tlsconf.Reloader {
	tb.Helper()
	if trust == nil {
		trust = p
	}
	files := tlsconf.Files{CA: trust.CAFile()}
	if cn != "" {
		f := p.Files(tb, cn, u)
		files.Cert, files.Key = f.Cert, f.Key
	}
	r, err := tlsconf.New(tlsconf.Config{Files: files})
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// ClientTLS is the client configuration of principal cn ("" anonymous),
// trusting p's CA.
func (p *PKI) ClientTLS(tb testing.TB, cn string) *tls.Config {
	tb.Helper()
	return p.Reloader(tb, cn, Client, nil).ClientConfig()
}
