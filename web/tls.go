package web

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// TLSConfig returns a server TLS configuration serving the certificate in
// certFile and its key in keyFile (PEM). It loads them now, failing on a bad
// pair, and again whenever either file's modification time changes, so a
// renewed certificate (cert-manager, certbot) is served without a restart. A
// renewal that fails to load is logged and the previous certificate kept.
func TLSConfig(certFile, keyFile string, logger *slog.Logger) (*tls.Config, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &certReloader{certFile: certFile, keyFile: keyFile, logger: logger}
	if err := r.load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.get,
	}, nil
}

type certReloader struct {
	certFile, keyFile string
	logger            *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	modTime [2]time.Time
}

func (r *certReloader) modTimes() ([2]time.Time, error) {
	var mt [2]time.Time
	for i, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return mt, err
		}
		mt[i] = fi.ModTime()
	}
	return mt, nil
}

func (r *certReloader) load() error {
	mt, err := r.modTimes()
	if err != nil {
		return fmt.Errorf("tls certificate: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("tls certificate %s, key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert, r.modTime = &cert, mt
	return nil
}

// get serves the current certificate, reloading it first if the files
// changed. Handshakes are rare next to requests (connections are kept alive),
// so two stats on each cost nothing that matters.
func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if mt, err := r.modTimes(); err == nil && mt != r.modTime {
		if err := r.load(); err != nil {
			// Retry only when the files change again, not on every handshake.
			r.modTime = mt
			r.logger.Error("reload tls certificate; serving the previous one", "err", err)
		} else {
			r.logger.Info("tls certificate reloaded", "cert_file", r.certFile)
		}
	}
	return r.cert, nil
}
