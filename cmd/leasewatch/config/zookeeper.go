package config

import (
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/zookeeper"
)

// ZooKeeperConfig returns the ZooKeeper collector's configuration for s, a
// zookeeper source, connecting with tlsConfig (nil: plain text).
func (s SourceConfig) ZooKeeperConfig(tlsConfig collectors.TLS) zookeeper.Config {
	return zookeeper.Config{
		Name: s.Name, Servers: s.Servers, Chroot: s.Chroot, Paths: s.Paths,
		Username: s.Username, Password: s.Secret(), TLS: tlsConfig, ProbeSessions: s.ProbeSessions,
	}
}

// validateZooKeeper checks a zookeeper source as its collector will:
// servers, chroot and paths. The credentials are validateCredentials's, and
// the TLS files and the password Load's to read, later.
func (s *SourceConfig) validateZooKeeper() error {
	zc := s.ZooKeeperConfig(nil)
	zc.Username, zc.Password = "", collectors.Secret{}
	return zookeeper.Validate(zc)
}
