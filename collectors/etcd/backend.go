package etcd

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// Backend is etcd as the rest of leasewatch knows it: the collector reads
// every expiry from the watch (a lease's revocation deletes its keys), and
// a password goes with a user, as clientv3 sends them.
var Backend = collectors.Backend{
	Kind:        audit.KindEtcd,
	Credentials: collectors.Credentials{UserRequired: true},
	Section:     func() collectors.Section { return new(Section) },
}

// Section is an etcd source's own keys in the configuration file.
type Section struct {
	Endpoints []string `yaml:"endpoints"`
	Prefixes  []string `yaml:"prefixes"`
}

// Check validates the endpoints and prefixes. With tls, an endpoint that
// clientv3 would dial in plain text anyway (http://, unix://) is refused.
func (s *Section) Check(tls bool) error {
	if len(s.Endpoints) == 0 {
		return errors.New("endpoints: at least one etcd endpoint is required")
	}
	for i, e := range s.Endpoints {
		switch {
		case strings.TrimSpace(e) == "":
			return fmt.Errorf("endpoints[%d]: must not be empty", i)
		case tls && (strings.HasPrefix(e, "http://") || strings.HasPrefix(e, "unix://")):
			return fmt.Errorf("endpoints[%d]: %s is plain text, but tls is set: use https:// or leave the scheme out", i, e)
		}
	}
	if len(s.Prefixes) == 0 {
		return errors.New("prefixes: at least one key prefix is required")
	}
	for i, p := range s.Prefixes {
		if strings.TrimSpace(p) == "" {
			return fmt.Errorf("prefixes[%d]: must not be empty", i)
		}
	}
	return nil
}

// Collector returns the collector of src.
func (s *Section) Collector(src collectors.Source, logger *slog.Logger) (collectors.Collector, error) {
	return New(Config{Name: src.Name, Endpoints: s.Endpoints, Prefixes: s.Prefixes, Username: src.Username, Password: src.Password, TLS: src.TLS}, logger)
}
