package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/leasewatch/leasewatch/collectors/etcd"
	"github.com/leasewatch/leasewatch/collectors/kubernetes"
	"github.com/leasewatch/leasewatch/collectors/ownership"
)

// ReplicationConfig is replication: several replicas of leasewatch serve
// share the store and the sources, each source owned by one replica at a
// time through a lease on a lock backend (collectors/ownership). Optional,
// added to the contract; without backend, one process runs every source.
//
//	replication:
//	  backend: kubernetes            # or etcd
//	  identity: leasewatch-0         # default: the host name
//	  lease_duration: 15s            # whole seconds
//	  renew_deadline: 10s
//	  retry_period: 2s
//	  namespace: leasewatch          # kubernetes: where the Leases live, leasewatch's own
//	  kubeconfig: ""                 # kubernetes: empty is KUBECONFIG, ~/.kube/config, then in-cluster
//	  context: ""
//	  endpoints: ["etcd-0:2379"]     # etcd, with the credential and tls keys of an etcd source
//	  prefix: /leasewatch/ownership/
//
// A field's kinds tag lists the backends it applies to, as a source's
// does; set for the other backend, it is refused.
type ReplicationConfig struct {
	Backend       string        `yaml:"backend"`
	Identity      string        `yaml:"identity"`
	LeaseDuration time.Duration `yaml:"lease_duration" lw:"nonzero"`
	RenewDeadline time.Duration `yaml:"renew_deadline" lw:"nonzero"`
	RetryPeriod   time.Duration `yaml:"retry_period" lw:"nonzero"`

	// Source names leasewatch's own source: the ownership leases, recorded
	// and shown like any lock (default leasewatch). A configured source of
	// that name is used as it is; otherwise one is made from the keys
	// below (OwnSource).
	Source string `yaml:"source"`

	// kubernetes
	Namespace  string `yaml:"namespace" kinds:"kubernetes"`
	Kubeconfig string `yaml:"kubeconfig" kinds:"kubernetes"`
	Context    string `yaml:"context" kinds:"kubernetes"`

	// etcd: the keys of an etcd source, and where the keys go.
	Endpoints    []string   `yaml:"endpoints" kinds:"etcd"`
	Prefix       string     `yaml:"prefix" kinds:"etcd"`
	Username     string     `yaml:"username" kinds:"etcd"`
	Password     string     `yaml:"password" kinds:"etcd"`
	PasswordFile string     `yaml:"password_file" kinds:"etcd"`
	PasswordEnv  string     `yaml:"password_env" kinds:"etcd"`
	TLS          *SourceTLS `yaml:"tls" kinds:"etcd"`
}

// The backends replication elects owners on.
const (
	ReplicationKubernetes = "kubernetes"
	ReplicationEtcd       = "etcd"
)

// maxIdentity bounds replication.identity: a Lease's holderIdentity, and a
// part of an etcd key.
const maxIdentity = 128

// Enabled reports whether replication is configured.
func (r ReplicationConfig) Enabled() bool { return r.Backend != "" }

// Timing is the ownership leases' timing.
func (r ReplicationConfig) Timing() ownership.Timing {
	return ownership.Timing{LeaseDuration: r.LeaseDuration, RenewDeadline: r.RenewDeadline, RetryPeriod: r.RetryPeriod}.WithDefaults()
}

// EtcdSource is the etcd backend as an etcd source's configuration, for
// its client: endpoints, credentials (Secret) and tls (SourceTLS).
func (r ReplicationConfig) EtcdSource() SourceConfig {
	return SourceConfig{
		Name: "replication", Kind: string(etcd.Backend.Kind), Backend: &etcd.Section{Endpoints: r.Endpoints, Prefixes: []string{r.Prefix}},
		Username: r.Username, Password: r.Password, PasswordFile: r.PasswordFile, PasswordEnv: r.PasswordEnv, TLS: r.TLS,
	}
}

// fillDefaults sets the identity to the host name and the etcd prefix,
// when replication is on.
func (r *ReplicationConfig) fillDefaults() {
	if !r.Enabled() {
		return
	}
	if r.Identity == "" {
		r.Identity, _ = os.Hostname() // none: validate asks for identity
	}
	if r.Backend == ReplicationEtcd && r.Prefix == "" {
		r.Prefix = ownership.DefaultEtcdPrefix
	}
	if r.Source == "" {
		r.Source = DefaultOwnSource
	}
}

// DefaultOwnSource is the default name of leasewatch's own source.
const DefaultOwnSource = "leasewatch"

// OwnSource is leasewatch's own source as replication makes it: on etcd,
// the elections' keys under the prefix; on Kubernetes, the Leases of
// leasewatch's own namespace (the members' Leases too, each a lock its
// replica holds).
func (r ReplicationConfig) OwnSource() SourceConfig {
	if r.Backend == ReplicationEtcd {
		src := r.EtcdSource()
		src.Name = r.Source
		src.Backend = &etcd.Section{Endpoints: r.Endpoints, Prefixes: []string{ownership.EtcdSourcesPrefix(r.Prefix)}}
		return src
	}
	return SourceConfig{Name: r.Source, Kind: string(kubernetes.Backend.Kind), Backend: &kubernetes.Section{
		Kubeconfig: r.Kubeconfig, Context: r.Context, Namespaces: []string{r.Namespace}}}
}

// OwnLock is the lock of leasewatch's own source that source's ownership
// lease is recorded as.
func (r ReplicationConfig) OwnLock(source string) string {
	if r.Backend == ReplicationEtcd {
		return ownership.EtcdSourceLock(r.Prefix, source)
	}
	return r.Namespace + "/" + ownership.SourceLeaseName(source)
}

// addOwnSource adds OwnSource to sources unless one of that name is
// configured.
func (c *Config) addOwnSource() {
	r := &c.Replication
	if !r.Enabled() || slices.ContainsFunc(c.Sources, func(s SourceConfig) bool { return s.Name == r.Source }) {
		return
	}
	c.Sources = append(c.Sources, r.OwnSource())
}

// validate checks replication; database is the store replicas would share.
func (r *ReplicationConfig) validate(c *Config) error {
	if !r.Enabled() {
		if !reflect.ValueOf(*r).IsZero() {
			return errors.New("backend: required when any other replication key is set (kubernetes or etcd)")
		}
		return nil
	}
	if r.Backend != ReplicationKubernetes && r.Backend != ReplicationEtcd {
		return fmt.Errorf("backend: %q is not one of kubernetes, etcd", r.Backend)
	}
	if !c.Postgres() {
		return errors.New("backend: replicas share the store, so database must be a postgres:// URL, not a SQLite file")
	}
	if err := keysOfKind(r, r.Backend, "replication backends"); err != nil {
		return err
	}
	if err := checkIdentity(r.Identity); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	if err := r.Timing().Validate(); err != nil {
		return err
	}
	switch r.Backend {
	case ReplicationKubernetes:
		if r.Namespace == "" {
			return errors.New("namespace: required: leasewatch's own namespace, where the ownership Leases live")
		}
		if !dnsLabel.MatchString(r.Namespace) {
			return fmt.Errorf("namespace: %q is not a valid namespace name", r.Namespace)
		}
	case ReplicationEtcd:
		if !strings.HasPrefix(r.Prefix, "/") || !strings.HasSuffix(r.Prefix, "/") || len(r.Prefix) < 2 {
			return fmt.Errorf("prefix: %q must start and end with '/' and name something (/leasewatch/ownership/, say)", r.Prefix)
		}
		src := r.EtcdSource()
		if err := src.validateCredentials(etcd.Backend); err != nil {
			return err
		}
		if err := src.Backend.Check(src.TLS != nil); err != nil {
			return err
		}
	}
	return nil
}

// readSecrets reads password_env and checks password_file and the TLS
// files, as for an etcd source.
func (r *ReplicationConfig) readSecrets() error {
	if r.Backend != ReplicationEtcd {
		return nil
	}
	src := r.EtcdSource()
	if err := src.readSecrets(); err != nil {
		return err
	}
	r.Password = src.Password
	return nil
}

// checkIdentity accepts a replica identity: printable, without white
// space, and bounded.
func checkIdentity(id string) error {
	switch {
	case id == "":
		return errors.New("required (the host name is unknown)")
	case len(id) > maxIdentity:
		return fmt.Errorf("%d bytes, longer than %d", len(id), maxIdentity)
	}
	for _, r := range id {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("%q holds white space or a character that is not printable", id)
		}
	}
	return nil
}

// keysOfKind refuses a field of the struct *v set for a kind other than
// kind: the field's kinds tag lists the kinds it applies to (none: every
// kind); what names what the kinds are of.
func keysOfKind(v any, kind, what string) error {
	rv := reflect.ValueOf(v).Elem()
	for _, f := range reflect.VisibleFields(rv.Type()) {
		kinds := f.Tag.Get("kinds")
		if kinds == "" || rv.FieldByIndex(f.Index).IsZero() || slices.Contains(strings.Split(kinds, ","), kind) {
			continue
		}
		return fmt.Errorf("%s: applies only to %s %s, not %s", yamlKey(f), strings.ReplaceAll(kinds, ",", " and "), what, kind)
	}
	return nil
}
