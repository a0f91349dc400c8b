package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// Backend is Redis as the rest of leasewatch knows it: a key's expired
// event can come late, so leases end by the clock; AUTH takes a password
// alone, the default user's.
var Backend = collectors.Backend{
	Kind:           audit.KindRedis,
	ExpiresByClock: true,
	Section:        func() collectors.Section { return new(Section) },
}

// Section is a Redis source's own keys in the configuration file; see
// Config for what each means.
type Section struct {
	Addr     string     `yaml:"addr"`
	Addrs    []string   `yaml:"addrs"`               // several instances: Redlock
	Quorum   int        `yaml:"quorum" lw:"nonzero"` // Redlock quorum; default len(addrs)/2+1
	DB       int        `yaml:"db"`
	Patterns []string   `yaml:"patterns"`
	Token    *TokenRule `yaml:"token"`
}

// config is the collector's configuration for src.
func (s *Section) config(src collectors.Source) Config {
	cfg := Config{
		Name: src.Name, Addrs: s.Addrs, Quorum: s.Quorum, DB: s.DB,
		Username: src.Username, Password: src.Password, TLS: src.TLS, Patterns: s.Patterns,
	}
	if s.Addr != "" {
		cfg.Addrs = []string{s.Addr}
	}
	if s.Token != nil {
		cfg.Token = *s.Token
	}
	return cfg
}

// Check validates the keys as they are written (addr or addrs, the
// quorum, the patterns, one token rule), then as New does (addrs listed
// twice, the token rule's counter key and pattern). With tls, a Unix
// socket, which Redis serves without TLS, is refused.
func (s *Section) Check(tls bool) error {
	switch {
	case s.Addr == "" && len(s.Addrs) == 0:
		return errors.New("addr: required (or addrs, for Redlock over several instances)")
	case s.Addr != "" && len(s.Addrs) > 0:
		return errors.New("addrs: give addr or addrs, not both")
	case s.Quorum != 0 && len(s.Addrs) == 0:
		return errors.New("quorum: applies only to addrs (Redlock)")
	case s.Quorum != 0 && (s.Quorum <= len(s.Addrs)/2 || s.Quorum > len(s.Addrs)):
		return fmt.Errorf("quorum: %d must be more than half of the %d addrs and at most all of them", s.Quorum, len(s.Addrs))
	case s.DB < 0:
		return fmt.Errorf("db: %d is negative", s.DB)
	case len(s.Patterns) == 0:
		return errors.New(`patterns: at least one key pattern is required, e.g. ["lock:*"]`)
	case s.Token != nil && s.Token.CounterKey != "" && s.Token.ValuePattern != "":
		return errors.New("token: give counter_key or value_pattern, not both")
	}
	for i, p := range s.Patterns {
		if strings.TrimSpace(p) == "" {
			return fmt.Errorf("patterns[%d]: must not be empty", i)
		}
	}
	if tls {
		for i, a := range append([]string{s.Addr}, s.Addrs...) {
			field := "addr"
			if i > 0 {
				field = fmt.Sprintf("addrs[%d]", i-1)
			}
			if strings.HasPrefix(a, "/") || strings.HasPrefix(a, "unix:") {
				return fmt.Errorf("%s: %s is a Unix socket, which Redis serves without TLS: give host:port or leave tls out", field, a)
			}
		}
	}
	return Validate(s.config(collectors.Source{Name: "source"}))
}

// Collector returns the collector of src. go-redis's own messages (dial
// failures while the source reconnects, which the collector reports
// itself) go to the debug log.
func (s *Section) Collector(src collectors.Source, logger *slog.Logger) (collectors.Collector, error) {
	goredis.SetLogger(debugLogger{logger})
	return New(s.config(src), logger)
}

// debugLogger routes go-redis's messages to the debug log.
type debugLogger struct{ log *slog.Logger }

func (l debugLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}
