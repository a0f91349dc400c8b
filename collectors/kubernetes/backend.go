package kubernetes

import (
	"fmt"
	"log/slog"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// Backend is Kubernetes as the rest of leasewatch knows it: a Lease never
// says it expired, so leases end by the clock; the kubeconfig holds the
// credentials.
var Backend = collectors.Backend{
	Kind:           audit.KindKubernetes,
	ExpiresByClock: true,
	Credentials:    collectors.Credentials{None: "a kubernetes source takes its credentials and TLS from its kubeconfig"},
	Section:        func() collectors.Section { return new(Section) },
}

// Section is a Kubernetes source's own keys in the configuration file; see
// Config for what each means.
type Section struct {
	Kubeconfig          string   `yaml:"kubeconfig"`
	Context             string   `yaml:"context"`
	Namespaces          []string `yaml:"namespaces"`
	HeartbeatNamespaces []string `yaml:"heartbeat_namespaces"`
}

// Check validates the namespace names.
func (s *Section) Check(bool) error {
	for _, f := range []struct {
		key   string
		names []string
	}{{"namespaces", s.Namespaces}, {"heartbeat_namespaces", s.HeartbeatNamespaces}} {
		for i, ns := range f.names {
			if len(validation.IsDNS1123Label(ns)) > 0 {
				return fmt.Errorf("%s[%d]: %q is not a valid namespace name", f.key, i, ns)
			}
		}
	}
	return nil
}

// Collector returns the collector of src.
func (s *Section) Collector(src collectors.Source, logger *slog.Logger) (collectors.Collector, error) {
	return New(Config{
		Name: src.Name, Kubeconfig: s.Kubeconfig, Context: s.Context,
		Namespaces: s.Namespaces, HeartbeatNamespaces: s.HeartbeatNamespaces,
	}, logger)
}
