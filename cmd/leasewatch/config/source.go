package config

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/backends"
)

// SourceConfig is one backend endpoint: the keys every source has, and its
// backend's own section (collectors.Backend.Section), whose keys stand
// beside them in the source's entry:
//
//	sources:
//	  - name: prod-etcd
//	    kind: etcd
//	    username: leasewatch
//	    password_file: /run/secrets/etcd
//	    endpoints: ["https://etcd-0:2379"]   # etcd's section
//	    prefixes: ["/locks/"]
//
// A key of another kind's section is refused, since it would have no
// effect: patterns on an etcd source, say.
type SourceConfig struct {
	Name string `yaml:"name"`
	Kind string `yaml:"kind"`

	// Credentials, for the backends that take them (Credentials.None
	// empty). The password may instead come from a file (a mounted Secret)
	// or an environment variable, so it stays out of the configuration
	// file. Load reads password_env into Password, and checks
	// password_file, which the collector reads again on each connection
	// (Secret).
	Username     string     `yaml:"username"`
	Password     string     `yaml:"password"`
	PasswordFile string     `yaml:"password_file"`
	PasswordEnv  string     `yaml:"password_env"`
	TLS          *SourceTLS `yaml:"tls"` // nil: plain text (etcd: unless an endpoint is https://)

	// Backend is the kind's own keys; nil for a kind leasewatch does not
	// speak.
	Backend collectors.Section `yaml:"-"`

	others []string // keys of other kinds' sections the entry gave, in order
}

// UnmarshalYAML decodes the shared keys, then the kind's section from the
// same entry, and notes the keys of other kinds' sections for validate to
// refuse. A key of no kind's section is refused here, as the decoder
// refuses an unknown key elsewhere (checkFields has named it already).
func (s *SourceConfig) UnmarshalYAML(n *yaml.Node) error {
	type shared SourceConfig // without this method
	if err := n.Decode((*shared)(s)); err != nil {
		return err
	}
	kind := audit.SourceKind(s.Kind)
	var unknown error
	(&fieldChecker{budget: maxCheckedNodes}).mapping(n, "", func(k, _ *yaml.Node, key string) {
		if _, ok := structField(sharedKeysType, key); ok {
			return
		}
		_, kinds, ok := sectionField(kind, key)
		switch {
		case !ok && unknown == nil:
			unknown = fmt.Errorf("line %d: field %s not found in a source", k.Line, key)
		case ok && !slices.Contains(kinds, s.Kind):
			s.others = append(s.others, key)
		}
	})
	if unknown != nil {
		return unknown
	}
	b, ok := backends.Of(kind)
	if !ok {
		return nil // validate names the kind
	}
	s.Backend = b.Section()
	return n.Decode(s.Backend)
}

var sharedKeysType = reflect.TypeFor[SourceConfig]()

// sectionField finds the field of some backend's section that key sets,
// the kind's own first, and the kinds whose sections have it.
func sectionField(kind audit.SourceKind, key string) (f reflect.StructField, kinds []string, ok bool) {
	for _, b := range backends.All() {
		bf, has := structField(reflect.TypeOf(b.Section()).Elem(), key)
		if !has {
			continue
		}
		kinds = append(kinds, string(b.Kind))
		if !ok || b.Kind == kind {
			f, ok = bf, true
		}
	}
	return f, kinds, ok
}

// sourceKeys are every key a source's entry may have, of any kind, sorted.
func sourceKeys() []string {
	keys := structKeys(sharedKeysType)
	for _, b := range backends.All() {
		keys = append(keys, structKeys(reflect.TypeOf(b.Section()).Elem())...)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// source checks a source's entry n at path, as value does a struct: the
// shared keys, then each key as its kind's section (or, for a key of
// another kind, that kind's section: validate refuses it by name).
func (c *fieldChecker) source(n *yaml.Node, path string) {
	kind := audit.SourceKind(scalarOf(n, "kind"))
	c.mapping(n, path, func(k, v *yaml.Node, name string) {
		f, ok := structField(sharedKeysType, name)
		if !ok {
			f, _, ok = sectionField(kind, name)
		}
		if !ok {
			c.add(join(path, name), k.Line, "unknown key; want one of "+strings.Join(sourceKeys(), ", "))
			return
		}
		c.field(v, f, join(path, name))
	})
}

// scalarOf returns the text of mapping n's key, "" if n sets none.
func scalarOf(n *yaml.Node, key string) string {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := resolve(n.Content[i]), resolve(n.Content[i+1]); k != nil && k.Value == key && v != nil && v.Kind == yaml.ScalarNode {
			return v.Value
		}
	}
	return ""
}

// Secret is the source's password for its collector: password_file read
// on each connection, or the password given or read from password_env.
func (s SourceConfig) Secret() collectors.Secret {
	if s.PasswordFile != "" {
		return collectors.PasswordFile(s.PasswordFile)
	}
	return collectors.Password(s.Password)
}

// Collector returns the source's collector. Load has checked the password
// file and the TLS files once already.
func (s SourceConfig) Collector(logger *slog.Logger) (collectors.Collector, error) {
	if s.Backend == nil {
		return nil, fmt.Errorf("kind: %q sources are not supported by this version", s.Kind)
	}
	tlsConfig, err := s.TLS.ClientConfig(logger)
	if err != nil {
		return nil, fmt.Errorf("tls.%w", err)
	}
	return s.Backend.Collector(collectors.Source{Name: s.Name, Username: s.Username, Password: s.Secret(), TLS: tlsConfig}, logger)
}

func (s *SourceConfig) validate() error {
	switch {
	case s.Name == "":
		return errors.New("name: required")
	case strings.ContainsAny(s.Name, "/ \t\n"):
		return fmt.Errorf("name: %q must not contain '/' or white space (locks are named SOURCE/NAME)", s.Name)
	}
	b, ok := backends.Of(audit.SourceKind(s.Kind))
	if !ok {
		return fmt.Errorf("kind: %q is not one of %s", s.Kind, kindList())
	}
	for _, key := range s.others {
		_, kinds, _ := sectionField(b.Kind, key)
		return fmt.Errorf("%s: applies only to %s sources, not %s", key, strings.Join(kinds, " and "), s.Kind)
	}
	if s.Backend == nil {
		s.Backend = b.Section() // a Config built in code without one: every key empty
	}
	if err := s.validateCredentials(b); err != nil {
		return err
	}
	return s.Backend.Check(s.TLS != nil)
}

// kindList names every kind leasewatch speaks, for an error.
func kindList() string {
	var kinds []string
	for _, b := range backends.All() {
		kinds = append(kinds, string(b.Kind))
	}
	return strings.Join(kinds, ", ")
}

// validateCredentials checks username, the password keys and the tls
// files' keys, as backend b takes them.
func (s *SourceConfig) validateCredentials(b collectors.Backend) error {
	if why := b.Credentials.None; why != "" {
		for _, k := range []struct {
			key string
			set bool
		}{
			{"username", s.Username != ""}, {"password", s.Password != ""}, {"password_file", s.PasswordFile != ""},
			{"password_env", s.PasswordEnv != ""}, {"tls", s.TLS != nil},
		} {
			if k.set {
				return fmt.Errorf("%s: applies only to %s sources, not %s: %s", k.key, strings.Join(credentialKinds(), " and "), b.Kind, why)
			}
		}
		return nil
	}
	set, err := sourcePasswordKeys.check(s.Password != "", s.PasswordFile, s.PasswordEnv)
	switch {
	case err != nil:
		return err
	case b.Credentials.UserRequired && len(set) > 0 && s.Username == "":
		return fmt.Errorf("username: required with %s", set[0])
	case s.Username != "" && len(set) == 0:
		// clientv3 and go-redis send a user name only with a password;
		// alone it would be dropped without a word, and a Redis client
		// would go on as the default user.
		return errors.New("password: required with username (or password_file, password_env)")
	}
	if s.TLS == nil {
		return nil
	}
	if err := s.TLS.validate(); err != nil {
		return fmt.Errorf("tls.%w", err)
	}
	return nil
}

// credentialKinds are the kinds whose sources take credentials.
func credentialKinds() []string {
	var kinds []string
	for _, b := range backends.All() {
		if b.Credentials.None == "" {
			kinds = append(kinds, string(b.Kind))
		}
	}
	return kinds
}
