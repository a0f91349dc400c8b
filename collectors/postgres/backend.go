package postgres

import (
	"log/slog"
	"time"

	"github.com/leasewatch/leasewatch/collectors"
)

// Backend is PostgreSQL as the rest of leasewatch knows it: the collector
// sees an advisory lock's end as it happens (its row leaves pg_locks) and
// tells a release from a holder that died by what became of the holder's
// session, so no lease expires by the clock. A password needs no username
// here: the user can come from the url.
var Backend = collectors.Backend{
	Kind:    "postgres",
	Section: func() collectors.Section { return new(Section) },
}

// Section is a PostgreSQL source's own keys in the configuration file; see
// Config for what each means.
type Section struct {
	URL       string        `yaml:"url"`
	Databases []string      `yaml:"databases"`
	PollEvery time.Duration `yaml:"poll_every"`
	// Advisory false leaves advisory locks unwatched, for a source of
	// lease tables only; unset: watched.
	Advisory *bool `yaml:"advisory"`
	// Tables are the lease tables watched.
	Tables []TableEntry `yaml:"tables"`
}

// ExpiresByClock says whether the source watches a lease table, whose
// leases run out by the clock (collectors.ClockExpirer); its advisory locks
// and fenced tables do not.
func (s *Section) ExpiresByClock() bool {
	for _, t := range s.Tables {
		if t.Fence == "" {
			return true
		}
	}
	return false
}

// config is the collector's configuration for src.
func (s *Section) config(src collectors.Source) (Config, error) {
	ts, err := tables(s.Tables)
	if err != nil {
		return Config{}, err
	}
	return Config{
		Name: src.Name, URL: s.URL, Databases: s.Databases, PollEvery: s.PollEvery,
		NoAdvisory: s.Advisory != nil && !*s.Advisory, Tables: ts,
		Username: src.Username, Password: src.Password, TLS: src.TLS,
	}, nil
}

// Check validates the keys as New does.
func (s *Section) Check(tls bool) error {
	cfg, err := s.config(collectors.Source{Name: "source"})
	if err != nil {
		return err
	}
	if tls {
		cfg.TLS = collectors.StaticTLS(nil)
	}
	return Validate(cfg)
}

// Collector returns the collector of src.
func (s *Section) Collector(src collectors.Source, logger *slog.Logger) (collectors.Collector, error) {
	cfg, err := s.config(src)
	if err != nil {
		return nil, err
	}
	return New(cfg, logger)
}
