package collectors

import "crypto/tls"

// TLS gives a collector the client TLS configuration for one connection to
// its backend; nil is plain text. A collector calls it each time it
// connects, so a configuration built from files (a CA bundle replaced
// during a rotation) is read again then, without a restart. An error says
// why no configuration could be made, naming the file or field.
type TLS func() (*tls.Config, error)

// StaticTLS is cfg for every connection.
func StaticTLS(cfg *tls.Config) TLS { return func() (*tls.Config, error) { return cfg, nil } }

// Get returns the configuration for the next connection: nil, without an
// error, when t is nil.
func (t TLS) Get() (*tls.Config, error) {
	if t == nil {
		return nil, nil
	}
	return t()
}
