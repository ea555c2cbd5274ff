// Package tlstest makes throw-away certificate authorities and
// certificates for tests, so no key is ever checked in. Keys are ECDSA
// P-256 (fast to make); certificates are valid from an hour ago for a day.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	PEM  []byte
}

// NewCA makes a self-signed CA named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: c, key: key, PEM: pemOf("CERTIFICATE", der)}, nil
}

// Usage is what a certificate may be used for.
type Usage int

const (
	// Both serves and calls: a replica.
	Both Usage = iota
	// Client only calls: a client of the cell.
	Client
	// Server only serves.
	Server
)

// Leaf is an issued certificate and its key, PEM-encoded.
type Leaf struct {
	CertPEM, KeyPEM []byte
}

// Issue makes a certificate for common name cn, valid for 127.0.0.1, ::1,
// localhost and the extra IP addresses given.
func (ca *CA) Issue(cn string, u Usage, ips ...net.IP) (Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, err
	}
	eku := map[Usage][]x509.ExtKeyUsage{
		Both:   {x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		Client: {x509.ExtKeyUsageClientAuth},
		Server: {x509.ExtKeyUsageServerAuth},
	}[u]
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  eku,
		DNSNames:     []string{"localhost"},
		IPAddresses:  append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, ips...),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Leaf{}, err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Leaf{}, err
	}
	return Leaf{CertPEM: pemOf("CERTIFICATE", der), KeyPEM: pemOf("PRIVATE KEY", kb)}, nil
}

// Files are the paths of a certificate, its key and its CA on disk.
type Files struct {
	Cert, Key, CA string
}

// Write issues a certificate for cn and writes it, its key and the CA's
// certificate into dir as cn.crt, cn.key and ca.crt (ca.crt is
// overwritten atomically, so a reader never sees half of it).
func (ca *CA) Write(dir, cn string, u Usage, ips ...net.IP) (Files, error) {
	l, err := ca.Issue(cn, u, ips...)
	if err != nil {
		return Files{}, err
	}
	f := Files{Cert: filepath.Join(dir, cn+".crt"), Key: filepath.Join(dir, cn+".key"), CA: filepath.Join(dir, "ca.crt")}
	for _, w := range []struct {
		path string
		b    []byte
	}{{f.Key, l.KeyPEM}, {f.Cert, l.CertPEM}, {f.CA, ca.PEM}} {
		if err := WriteAtomic(w.path, w.b); err != nil {
			return Files{}, err
		}
	}
	return f, nil
}

// WriteAtomic writes b to path through a temporary file and a rename.
func WriteAtomic(path string, b []byte) error {
	tmp := fmt.Sprintf("%s.tmp%d", path, time.Now().UnixNano())
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func pemOf(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}
