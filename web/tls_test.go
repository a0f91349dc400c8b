package web

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
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key to
// dir and returns their paths and the certificate.
func selfSigned(t *testing.T, dir, name string) (certFile, keyFile string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{certFile, "CERTIFICATE", der}, {keyFile, "PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile, cert
}

func clientTrusting(certs ...*x509.Certificate) *http.Client {
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	// No keep-alive: each request is a new handshake.
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true,
	}}
}

// serverTLS serves the pair. The configuration leasewatch serves, with its
// minimum version and its reloading of renewed certificates, is config's
// TLSConfig.ServerConfig, tested there.
func serverTLS(t *testing.T, certFile, keyFile string) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}}
}

// The server serves HTTPS, with its security headers, when given a TLS
// configuration.
func TestServeTLS(t *testing.T) {
	certFile, keyFile, cert := selfSigned(t, t.TempDir(), "first")
	f := newFixture(t, func(c *Config) { c.TLS = serverTLS(t, certFile, keyFile) }, withAuth(Auth{Users: map[string]string{"alice": bcryptHash(t, "pw")}}))
	base := serveReal(t, f.server)
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("base %q, want https", base)
	}

	t.Run("RoundTrip", func(t *testing.T) {
		res, body := fetch(t, clientTrusting(cert), http.MethodGet, base+"/api/v1/locks", nil, "Authorization", basicHeader("alice", "pw"))
		if res.StatusCode != http.StatusOK || !strings.Contains(body, `"worker-2"`) {
			t.Fatalf("GET /api/v1/locks over TLS: status %d, body %.200s", res.StatusCode, body)
		}
		if res.TLS == nil || res.TLS.Version < tls.VersionTLS12 {
			t.Fatalf("response TLS state %+v, want TLS 1.2 or later", res.TLS)
		}
		if got := res.TLS.PeerCertificates[0].Subject.CommonName; got != "first" {
			t.Errorf("server certificate %q, want first", got)
		}
		checkSecurityHeaders(t, "over TLS", res.Header)
	})
	t.Run("UntrustedCertificateRefused", func(t *testing.T) {
		if _, err := (&http.Client{Timeout: 10 * time.Second}).Get(base + "/healthz"); err == nil {
			t.Fatal("a client without the self-signed certificate in its roots connected")
		}
	})
	t.Run("PlainHTTPRefused", func(t *testing.T) {
		res, err := http.Get("http://" + strings.TrimPrefix(base, "https://") + "/api/v1/locks")
		if err == nil {
			defer res.Body.Close()
			if res.StatusCode != http.StatusBadRequest {
				t.Fatalf("plain HTTP to the TLS port: status %d, want 400 or an error", res.StatusCode)
			}
		}
	})
}
