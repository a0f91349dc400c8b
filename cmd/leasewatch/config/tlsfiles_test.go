package config

import (
	"crypto/tls"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/collectors/testcert"
)

// tlsListener accepts TLS connections on loopback with cfg and sends each
// handshake's state, or its error.
func tlsListener(t *testing.T, cfg *tls.Config) (addr string, states <-chan handshake) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan handshake, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			tc.SetDeadline(time.Now().Add(10 * time.Second))
			err = tc.Handshake()
			ch <- handshake{tc.ConnectionState(), err}
			tc.Close()
		}
	}()
	return ln.Addr().String(), ch
}

type handshake struct {
	state tls.ConnectionState
	err   error
}

// clientTLS is the configuration src gives the next connection.
func clientTLS(src *SourceTLS) (*tls.Config, error) {
	get, err := src.ClientConfig(nil)
	if err != nil {
		return nil, err
	}
	return get.Get()
}

// serialOf returns the serial number of the certificate in a PEM file.
func serialOf(t *testing.T, p testcert.Pair) *big.Int {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return cert.Leaf.SerialNumber
}

// touch moves the files' modification times ahead, for file systems whose
// times are too coarse to tell a rewrite in the same instant.
func touch(t *testing.T, ahead time.Duration, paths ...string) {
	t.Helper()
	at := time.Now().Add(ahead)
	for _, p := range paths {
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

// breakKey overwrites a key file with something that is not a key.
func breakKey(t *testing.T, p testcert.Pair, ahead time.Duration) {
	t.Helper()
	if err := os.WriteFile(p.KeyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	touch(t, ahead, p.KeyFile)
}

// The HTTPS server's configuration serves TLS 1.2 or later, and serves a
// renewed certificate from the next handshake on, without a restart; a
// renewal that does not load leaves the last good one in use.
func TestServerConfigServesRenewedCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "web")
	pair := ca.Server(t, "leasewatch")
	cfg, err := TLSConfig{CertFile: pair.CertFile, KeyFile: pair.KeyFile}.ServerConfig(nil)
	if err != nil {
		t.Fatalf("ServerConfig: %v", err)
	}
	addr, states := tlsListener(t, cfg)
	served := func() *big.Int {
		t.Helper()
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer conn.Close()
		<-states
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}

	first := serialOf(t, pair)
	if got := served(); got.Cmp(first) != 0 {
		t.Fatalf("served serial %v, want %v", got, first)
	}
	renewed := ca.Server(t, "leasewatch") // the same files, a new certificate
	touch(t, time.Second, renewed.CertFile, renewed.KeyFile)
	want := serialOf(t, renewed)
	if want.Cmp(first) == 0 {
		t.Fatal("the renewal issued the same serial")
	}
	if got := served(); got.Cmp(want) != 0 {
		t.Fatalf("after renewal served serial %v, want the renewed %v", got, want)
	}
	breakKey(t, renewed, 2*time.Second)
	if got := served(); got.Cmp(want) != 0 {
		t.Fatalf("with a broken key file served serial %v, want the last good %v", got, want)
	}

	conn, err := tls.Dial("tcp", addr, &tls.Config{MaxVersion: tls.VersionTLS11, InsecureSkipVerify: true}) // only the version is under test
	if err == nil {
		conn.Close()
		t.Fatal("a TLS 1.1 handshake succeeded")
	}
	if h := <-states; h.err == nil {
		t.Fatal("the server completed a TLS 1.1 handshake")
	}
}

func TestServerConfigRejectsBadPair(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "web")
	pair, other := ca.Server(t, "a"), ca.Server(t, "b")
	for name, tt := range map[string]TLSConfig{
		"Missing":                 {CertFile: filepath.Join(dir, "nope.crt"), KeyFile: pair.KeyFile},
		"KeyOfAnotherCertificate": {CertFile: pair.CertFile, KeyFile: other.KeyFile},
		"KeyIsTheCertificate":     {CertFile: pair.CertFile, KeyFile: pair.CertFile},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := tt.ServerConfig(nil)
			if err == nil || !strings.Contains(err.Error(), "cert_file") {
				t.Fatalf("ServerConfig(%+v) = %v, want an error naming cert_file", tt, err)
			}
		})
	}
}

// A backend's client certificate is read again when it changes: the next
// connection presents the renewed one, as a server that checks client
// certificates sees it; a renewal that does not load leaves the last good
// one in use.
func TestClientConfigPresentsRenewedCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "backend")
	server := ca.Server(t, "redis")
	serverCert, err := tls.LoadX509KeyPair(server.CertFile, server.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	addr, states := tlsListener(t, &tls.Config{
		Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(), MinVersion: tls.VersionTLS12,
	})
	client := ca.Client(t, "leasewatch")
	src := &SourceTLS{CAFile: ca.CertFile, CertFile: client.CertFile, KeyFile: client.KeyFile}
	cfg, err := clientTLS(src)
	if err != nil {
		t.Fatalf("ClientConfig: %v", err)
	}
	presented := func() *big.Int {
		t.Helper()
		conn, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer conn.Close()
		h := <-states
		if h.err != nil {
			t.Fatalf("server handshake: %v", h.err)
		}
		return h.state.PeerCertificates[0].SerialNumber
	}

	first := serialOf(t, client)
	if got := presented(); got.Cmp(first) != 0 {
		t.Fatalf("presented serial %v, want %v", got, first)
	}
	renewed := ca.Client(t, "leasewatch")
	touch(t, time.Second, renewed.CertFile, renewed.KeyFile)
	want := serialOf(t, renewed)
	if got := presented(); got.Cmp(want) != 0 {
		t.Fatalf("after renewal presented serial %v, want the renewed %v", got, want)
	}
	breakKey(t, renewed, 2*time.Second)
	if got := presented(); got.Cmp(want) != 0 {
		t.Fatalf("with a broken key file presented serial %v, want the last good %v", got, want)
	}
}

// A CA bundle replaced during a rotation is trusted from the next
// connection on, without a restart; a replacement that holds no certificate
// leaves the last good bundle in use.
func TestClientConfigTrustsReplacedCA(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := testcert.NewCA(t, dir, "old"), testcert.NewCA(t, dir, "new")
	server := newCA.Server(t, "redis")
	serverCert, err := tls.LoadX509KeyPair(server.CertFile, server.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	addr, states := tlsListener(t, &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12})
	bundle := filepath.Join(dir, "ca.crt")
	testcert.Install(t, bundle, oldCA.CertFile)
	get, err := (&SourceTLS{CAFile: bundle}).ClientConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	dial := func() error {
		t.Helper()
		cfg, err := get.Get()
		if err != nil {
			t.Fatal(err)
		}
		conn, err := tls.Dial("tcp", addr, cfg)
		if err == nil {
			conn.Close()
		}
		<-states
		return err
	}

	if err := dial(); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("dial trusting only the old CA: %v, want an unknown authority", err)
	}
	testcert.Install(t, bundle, newCA.CertFile)
	if err := dial(); err != nil {
		t.Fatalf("dial after the CA file was replaced: %v", err)
	}
	if err := os.WriteFile(bundle, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	touch(t, 2*time.Second, bundle)
	if err := dial(); err != nil {
		t.Fatalf("dial with a broken CA file: %v, want the last good bundle in use", err)
	}
}
