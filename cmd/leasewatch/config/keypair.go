package config

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// keyPair is a certificate and its key, read from files and read again
// whenever either file's modification time changes: a certificate that
// cert-manager or certbot renews is used without a restart. A renewal that
// fails to load is logged and the previous certificate kept.
type keyPair struct {
	certFile, keyFile string
	load              func() (tls.Certificate, error)
	logger            *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	modTime [2]time.Time
}

// newKeyPair reads the pair with load, failing with its error.
func newKeyPair(certFile, keyFile string, load func() (tls.Certificate, error), logger *slog.Logger) (*keyPair, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	k := &keyPair{certFile: certFile, keyFile: keyFile, load: load, logger: logger}
	mt, statErr := k.modTimes() // before the read: a change during it is read again
	if err := k.reload(mt); err != nil {
		return nil, err // load's error, which names the field
	}
	if statErr != nil {
		return nil, statErr
	}
	return k, nil
}

func (k *keyPair) modTimes() ([2]time.Time, error) {
	var mt [2]time.Time
	for i, f := range []string{k.certFile, k.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return mt, err
		}
		mt[i] = fi.ModTime()
	}
	return mt, nil
}

func (k *keyPair) reload(mt [2]time.Time) error {
	cert, err := k.load()
	if err != nil {
		return err
	}
	k.cert, k.modTime = &cert, mt
	return nil
}

// get returns the current certificate, reloading it first if the files
// changed. It runs once a handshake, rare next to requests on kept-alive
// connections, so two stats each time cost nothing that matters.
func (k *keyPair) get() *tls.Certificate {
	k.mu.Lock()
	defer k.mu.Unlock()
	if mt, err := k.modTimes(); err == nil && mt != k.modTime {
		if err := k.reload(mt); err != nil {
			// Retry only when the files change again, not every handshake.
			k.modTime = mt
			k.logger.Error("reload tls certificate; using the previous one", "cert_file", k.certFile, "err", err)
		} else {
			k.logger.Info("tls certificate reloaded", "cert_file", k.certFile)
		}
	}
	return k.cert
}

// ServerConfig returns the HTTPS server's TLS configuration: TLS 1.2 or later,
// serving the certificate in CertFile and its key in KeyFile, read again when
// they change.
func (t TLSConfig) ServerConfig(logger *slog.Logger) (*tls.Config, error) {
	pair, err := newKeyPair(t.CertFile, t.KeyFile, func() (tls.Certificate, error) {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			// The error names the file that failed; it never quotes key material.
			return cert, fmt.Errorf("cert_file, key_file: %w", err)
		}
		return cert, nil
	}, logger)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return pair.get(), nil },
	}, nil
}
