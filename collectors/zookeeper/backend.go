package zookeeper

import (
	"log/slog"

	"github.com/leasewatch/leasewatch/collectors"
)

// Backend is ZooKeeper as the rest of leasewatch knows it: the server
// deletes an expired session's nodes, and the collector sees the delete;
// its digest scheme takes a user and a password together.
var Backend = collectors.Backend{
	Kind:        "zookeeper",
	Credentials: collectors.Credentials{UserRequired: true},
	Section:     func() collectors.Section { return new(Section) },
}

// Section is a ZooKeeper source's own keys in the configuration file; see
// Config for what each means.
type Section struct {
	Servers       []string `yaml:"servers"`
	Chroot        string   `yaml:"chroot"`
	Paths         []string `yaml:"paths"`
	ProbeSessions bool     `yaml:"probe_sessions"` // ask the servers' cons for owner sessions
}

// config is the collector's configuration for src.
func (s *Section) config(src collectors.Source) Config {
	return Config{
		Name: src.Name, Servers: s.Servers, Chroot: s.Chroot, Paths: s.Paths,
		Username: src.Username, Password: src.Password, TLS: src.TLS, ProbeSessions: s.ProbeSessions,
	}
}

// Check validates the servers, chroot and paths as New does.
func (s *Section) Check(bool) error { return Validate(s.config(collectors.Source{Name: "source"})) }

// Collector returns the collector of src.
func (s *Section) Collector(src collectors.Source, logger *slog.Logger) (collectors.Collector, error) {
	return New(s.config(src), logger)
}
