package config

import "errors"

// TLSConfig is tls: serve HTTPS with this certificate. Optional, added to the
// contract; without it leasewatch serves plain HTTP (behind a terminating
// proxy, say).
//
//	tls:
//	  cert_file: /etc/leasewatch/tls/tls.crt   # PEM: the certificate, then any intermediates
//	  key_file: /etc/leasewatch/tls/tls.key    # PEM: its private key
//
// Both files are read at start, so a bad pair stops leasewatch there, and read
// again when they change (cert-manager or certbot renewing them), without a
// restart.
type TLSConfig struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Enabled reports whether HTTPS is configured.
func (t TLSConfig) Enabled() bool { return t.CertFile != "" }

func (t *TLSConfig) validate() error { return certPair(t.CertFile, t.KeyFile) }

// certPair checks that a certificate and its key are given together.
func certPair(certFile, keyFile string) error {
	switch {
	case certFile == "" && keyFile != "":
		return errors.New("cert_file: required with key_file")
	case certFile != "" && keyFile == "":
		return errors.New("key_file: required with cert_file")
	}
	return nil
}

// check loads the pair once, so a missing file or a key that does not match
// the certificate is a configuration error rather than a failed handshake.
func (t *TLSConfig) check() error {
	if !t.Enabled() {
		return nil
	}
	_, err := t.ServerConfig(nil)
	return err
}
