// Package testcert issues short-lived certificates for tests that connect to
// real backends over TLS: a CA, server certificates for the loopback
// addresses and client certificates, written as PEM files.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority whose certificate is in CertFile.
type CA struct {
	// CertFile is the CA certificate, PEM: what a server's or client's
	// ca_file names.
	CertFile string

	dir  string
	name string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Pair is a certificate and its key, PEM files.
type Pair struct {
	CertFile, KeyFile string
}

var serial atomic.Int64

// NewCA creates a CA named name with its files in dir.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	ca := &CA{dir: dir, name: name}
	ca.cert, ca.key = issue(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil, nil)
	ca.CertFile = writePEM(t, filepath.Join(dir, name+"-ca.crt"), "CERTIFICATE", ca.cert.Raw)
	return ca
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(t testing.TB, name string) Pair {
	t.Helper()
	return ca.pair(t, name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// Client issues a client certificate with common name cn (the user name
// etcd takes from it).
func (ca *CA) Client(t testing.TB, cn string) Pair {
	t.Helper()
	return ca.pair(t, cn, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// Pool returns a pool holding the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// ClientTLS returns a client configuration that trusts ca and presents
// client, if it has files.
func ClientTLS(t testing.TB, ca *CA, client Pair) *tls.Config {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if client.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(client.CertFile, client.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

func (ca *CA) pair(t testing.TB, name string, tmpl *x509.Certificate) Pair {
	t.Helper()
	cert, key := issue(t, tmpl, ca.cert, ca.key)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(ca.dir, ca.name+"-"+name)
	return Pair{
		CertFile: writePEM(t, base+".crt", "CERTIFICATE", cert.Raw),
		KeyFile:  writePEM(t, base+".key", "PRIVATE KEY", keyDER),
	}
}

// issue signs tmpl with parent's key, or self-signs it when parent is nil.
func issue(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func writePEM(t testing.TB, path, typ string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Install writes src's content to dst, as a rotation replaces a mounted
// file, and sets dst's modification time to now, or to a second past its
// previous one if that is later, so that a watcher on a file system whose
// times are coarse still sees the change.
func Install(t testing.TB, dst, src string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	if fi, err := os.Stat(dst); err == nil && at.Before(fi.ModTime().Add(time.Second)) {
		at = fi.ModTime().Add(time.Second)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(dst, at, at); err != nil {
		t.Fatal(err)
	}
}
