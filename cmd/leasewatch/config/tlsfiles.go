package config

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
)

// watched is a value loaded from files, loaded again whenever one of the
// files' modification times changes: a certificate that cert-manager or
// certbot renews, or a CA bundle replaced in a rotation, is used without a
// restart. A change that fails to load is logged and the previous value
// kept.
type watched[T any] struct {
	files  []string
	load   func() (T, error)
	what   string // for the log: "tls certificate"
	logger *slog.Logger

	mu      sync.Mutex
	value   T
	modTime []time.Time
}

// watch loads the value with load, failing with its error.
func watch[T any](what string, load func() (T, error), logger *slog.Logger, files ...string) (*watched[T], error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &watched[T]{files: files, load: load, what: what, logger: logger}
	mt, statErr := w.modTimes() // before the read: a change during it is read again
	if err := w.reload(mt); err != nil {
		return nil, err // load's error, which names the field
	}
	if statErr != nil {
		return nil, statErr
	}
	return w, nil
}

func (w *watched[T]) modTimes() ([]time.Time, error) {
	mt := make([]time.Time, len(w.files))
	for i, f := range w.files {
		fi, err := os.Stat(f)
		if err != nil {
			return mt, err
		}
		mt[i] = fi.ModTime()
	}
	return mt, nil
}

func (w *watched[T]) reload(mt []time.Time) error {
	v, err := w.load()
	if err != nil {
		return err
	}
	w.value, w.modTime = v, mt
	return nil
}

// get returns the current value, reloading it first if the files changed.
// It runs once a connection or handshake, rare next to requests on
// kept-alive connections, so a stat of each file costs nothing that
// matters.
func (w *watched[T]) get() T {
	w.mu.Lock()
	defer w.mu.Unlock()
	if mt, err := w.modTimes(); err == nil && !slices.Equal(mt, w.modTime) {
		if err := w.reload(mt); err != nil {
			// Retry only when the files change again, not every time.
			w.modTime = mt
			w.logger.Error("reload "+w.what+"; using the previous one", "file", w.files[0], "err", err)
		} else {
			w.logger.Info(w.what+" reloaded", "file", w.files[0])
		}
	}
	return w.value
}

// ServerConfig returns the HTTPS server's TLS configuration: TLS 1.2 or later,
// serving the certificate in CertFile and its key in KeyFile, read again when
// they change.
func (t TLSConfig) ServerConfig(logger *slog.Logger) (*tls.Config, error) {
	pair, err := watch("tls certificate", func() (*tls.Certificate, error) {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			// The error names the file that failed; it never quotes key material.
			return nil, fmt.Errorf("cert_file, key_file: %w", err)
		}
		return &cert, nil
	}, logger, t.CertFile, t.KeyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return pair.get(), nil },
	}, nil
}
