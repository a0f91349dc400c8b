// Package config reads and validates leasewatch's configuration file
// (docs/configuration.md: every key, its default and its range).
package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/collectors"
)

// Config is the configuration file.
type Config struct {
	Listen string `yaml:"listen"`
	// Database is a SQLite file path or a postgres:// URL (database.go).
	Database string `yaml:"database"`
	// DatabasePasswordFile and DatabasePasswordEnv give a PostgreSQL
	// database's password outside the URL, as a source's password_file and
	// password_env do; DatabaseTLS is its TLS, as a source's tls.
	DatabasePasswordFile string     `yaml:"database_password_file"`
	DatabasePasswordEnv  string     `yaml:"database_password_env"`
	DatabaseTLS          *SourceTLS `yaml:"database_tls"`
	// databasePassword is what Load read from DatabasePasswordEnv.
	databasePassword string
	IngestTokens     []string `yaml:"ingest_tokens"`
	// IngestTokensFile names a file of further ingest tokens, one a line
	// (blank lines and # comments skipped): a mounted Kubernetes Secret, say,
	// so tokens stay out of the configuration file.
	IngestTokensFile string `yaml:"ingest_tokens_file"`
	// IngestTokensEnv names environment variables that each hold one further
	// ingest token (a Secret exposed as env, a systemd credential). Load
	// reads them; a variable unset or empty is an error.
	IngestTokensEnv []string `yaml:"ingest_tokens_env"`
	// CommitInterval is how long write reports and collectors' events that
	// arrive at once gather into one commit: fewer commits keep the
	// dashboard's reads warm under heavy ingest, at the cost of that much
	// latency for their answers (audit.WithCommitInterval). Optional, added
	// to the contract; default 400ms, 1ns commits each group as soon as
	// the last is done.
	CommitInterval time.Duration   `yaml:"commit_interval" lw:"nonzero"`
	Auth           AuthConfig      `yaml:"auth"`
	TLS            TLSConfig       `yaml:"tls"`
	Alerts         AlertsConfig    `yaml:"alerts"`
	Metrics        MetricsConfig   `yaml:"metrics"`
	Retention      RetentionConfig `yaml:"retention"`
	// Health tunes the leadership health findings (health.go).
	Health  HealthConfig   `yaml:"health"`
	Sources []SourceConfig `yaml:"sources"`
	// Purposes say which locks only avoid duplicate work (purpose.go).
	Purposes []PurposeConfig `yaml:"purposes"`
	// Replication shares the sources among replicas (replication.go).
	Replication ReplicationConfig `yaml:"replication"`
	// Dashboard shapes what the pages show (dashboard.go).
	Dashboard DashboardConfig `yaml:"dashboard"`
}

// MetricsConfig shapes what /metrics exports. Optional, added to the contract.
type MetricsConfig struct {
	// MaxLockSeries caps how many locks get per-lock series (expiry,
	// duration, renewal margin, holder changes, expiries); the rest are
	// counted in leasewatch_lock_series_limit_exceeded. Default 1000; a
	// Config built in code may leave it 0 for the default, and a file that
	// writes 0 is refused (it does not mean "no lock series").
	MaxLockSeries int `yaml:"max_lock_series" lw:"nonzero"`
	// MaxResourceSeries caps how many resources, of every source, get
	// series of their own in leasewatch_write_reports_total: the first
	// to report. The reports of the rest are counted in its series with
	// an empty resource label. Default 1000, refused at 0 as
	// max_lock_series is.
	MaxResourceSeries int `yaml:"max_resource_series" lw:"nonzero"`
}

// LockSeries returns the cap on per-lock series, the default when unset.
func (m MetricsConfig) LockSeries() int {
	if m.MaxLockSeries == 0 {
		return DefaultMaxLockSeries
	}
	return m.MaxLockSeries
}

// MaxLockSeriesLimit is the largest metrics.max_lock_series and
// max_resource_series: series beyond it would make every scrape slow and
// every Prometheus heavy.
const MaxLockSeriesLimit = 10_000

// ResourceSeries returns the cap on per-resource series, the default when
// unset.
func (m MetricsConfig) ResourceSeries() int {
	if m.MaxResourceSeries == 0 {
		return DefaultMaxResourceSeries
	}
	return m.MaxResourceSeries
}

func (m *MetricsConfig) validate() error {
	for key, n := range map[string]int{"max_lock_series": m.LockSeries(), "max_resource_series": m.ResourceSeries()} {
		if n < 1 || n > MaxLockSeriesLimit {
			return fmt.Errorf("%s: %d is outside 1..%d", key, n, MaxLockSeriesLimit)
		}
	}
	return nil
}

// AlertsConfig holds alerting thresholds (see package audit/alert). Every
// key but renew_margin_ratio is optional and added to the contract.
type AlertsConfig struct {
	// RenewMarginRatio: a renewal with less than this fraction of the lease
	// left is late, and a held lease with less left and no renewal is near
	// expiry.
	RenewMarginRatio float64 `yaml:"renew_margin_ratio" lw:"nonzero"`
	// BlindAfter is how long a source may be blind before CollectorBlind fires.
	BlindAfter time.Duration `yaml:"blind_after" lw:"nonzero"`
	// FencingHold is how long FencingViolation fires after a lock's latest
	// critical finding.
	FencingHold time.Duration `yaml:"fencing_hold" lw:"nonzero"`
	// LostHold is how long LeaseLost fires after a lease expired while held.
	LostHold time.Duration `yaml:"lost_hold" lw:"nonzero"`
	// IncludeHeartbeats alerts on heartbeat-class leases too.
	IncludeHeartbeats bool `yaml:"include_heartbeats"`
	// Rules override the thresholds above for one source, for the locks
	// whose names match a pattern, or both; the most specific wins.
	Rules []AlertRule `yaml:"rules"`
	// Alertmanager says where live alerts are sent.
	Alertmanager AlertmanagerConfig `yaml:"alertmanager"`
}

// AlertRule is one entry of alerts.rules. Zero thresholds are unset: a less
// specific rule or the alerts-level value applies.
type AlertRule struct {
	Source           string        `yaml:"source"`
	Lock             string        `yaml:"lock"` // a path.Match pattern: '*' does not cross '/'
	RenewMarginRatio float64       `yaml:"renew_margin_ratio" lw:"nonzero"`
	BlindAfter       time.Duration `yaml:"blind_after" lw:"nonzero"` // only in a rule without lock
	FencingHold      time.Duration `yaml:"fencing_hold" lw:"nonzero"`
	LostHold         time.Duration `yaml:"lost_hold" lw:"nonzero"`
}

// Alert returns the alert evaluator's configuration.
func (a AlertsConfig) Alert() alert.Config {
	cfg := alert.Config{
		Defaults: alert.Thresholds{
			RenewMarginRatio: a.RenewMarginRatio,
			LostHold:         a.LostHold,
			FencingHold:      a.FencingHold,
			BlindAfter:       a.BlindAfter,
		},
		IncludeHeartbeats: a.IncludeHeartbeats,
	}
	for _, r := range a.Rules {
		cfg.Rules = append(cfg.Rules, alert.Rule{Selector: audit.Selector{Source: r.Source, Lock: r.Lock}, Thresholds: alert.Thresholds{
			RenewMarginRatio: r.RenewMarginRatio,
			LostHold:         r.LostHold,
			FencingHold:      r.FencingHold,
			BlindAfter:       r.BlindAfter,
		}})
	}
	return cfg
}

// SourceTLS is a source's tls: connect to an etcd or Redis backend over TLS.
// Its presence turns TLS on, even empty (tls: {}), which verifies the server
// against the system's roots. The names are those of Prometheus's
// tls_config.
//
//	tls:
//	  ca_file: /etc/leasewatch/etcd/ca.crt      # PEM: the CAs that sign the server's certificate
//	  cert_file: /etc/leasewatch/etcd/client.crt # PEM: a client certificate, for servers that require one
//	  key_file: /etc/leasewatch/etcd/client.key  # PEM: its private key
//	  server_name: etcd.internal                 # the name to verify; default: the address's host
//	  insecure_skip_verify: false                # never verify the server (testing only)
//
// The files are read at start, so a bad one stops leasewatch there. They
// are read again when they change (cert-manager renewing the client
// certificate, a CA bundle replaced in a rotation) and used from the next
// connection on, without a restart.
type SourceTLS struct {
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

func (t *SourceTLS) validate() error { return certPair(t.CertFile, t.KeyFile) }

// ClientConfig reads the files and returns the client TLS configuration
// for each connection, or nil when t is nil (no TLS). Errors name the
// field; none quotes key material. A changed file is read again when a
// connection asks for the configuration; one that fails to load is logged
// to logger (nil: discarded) and the previous content kept.
func (t *SourceTLS) ClientConfig(logger *slog.Logger) (collectors.TLS, error) {
	if t == nil {
		return nil, nil
	}
	if err := t.validate(); err != nil {
		return nil, err
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	if t.CertFile != "" {
		pair, err := watch("tls client certificate", t.loadKeyPair, logger, t.CertFile, t.KeyFile)
		if err != nil {
			return nil, err
		}
		base.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.get(), nil }
	}
	if t.CAFile == "" {
		return collectors.StaticTLS(base), nil
	}
	roots, err := watch("tls ca_file", t.loadCA, logger, t.CAFile)
	if err != nil {
		return nil, err
	}
	return func() (*tls.Config, error) {
		cfg := base.Clone()
		cfg.RootCAs = roots.get()
		return cfg, nil
	}, nil
}

// loadCA reads the CAs that sign the server's certificate.
func (t *SourceTLS) loadCA() (*x509.CertPool, error) {
	data, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("ca_file: %s holds no PEM certificate", t.CAFile)
	}
	return pool, nil
}

// loadKeyPair reads the client certificate and its key.
func (t *SourceTLS) loadKeyPair() (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(t.CertFile)
	if err != nil {
		return nil, fmt.Errorf("cert_file: %w", err)
	}
	keyPEM, err := os.ReadFile(t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("key_file: %w", err)
	}
	if !holdsCertificate(certPEM) {
		return nil, fmt.Errorf("cert_file: %s holds no PEM certificate", t.CertFile)
	}
	// With a certificate in cert_file, what can still fail is the key:
	// missing, unreadable or another certificate's. crypto/tls's messages
	// never quote key material.
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("key_file: %s is not the private key of cert_file %s: %w", t.KeyFile, t.CertFile, err)
	}
	return &pair, nil
}

// holdsCertificate reports whether data has a PEM CERTIFICATE block.
func holdsCertificate(data []byte) bool {
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return false
		}
		if b.Type == "CERTIFICATE" {
			return true
		}
	}
}

// Defaults for an omitted field.
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultDatabase          = "leasewatch.db"
	DefaultRenewMarginRatio  = alert.DefaultRenewMarginRatio
	DefaultBlindAfter        = alert.DefaultBlindAfter
	DefaultFencingHold       = alert.DefaultFencingHold
	DefaultLostHold          = alert.DefaultLostHold
	DefaultMaxLockSeries     = 1000
	DefaultMaxResourceSeries = 1000
)

// Load reads and validates the configuration file at path, with the
// secrets it names.
func Load(path string) (*Config, error) {
	cfg, err := Read(path)
	if err != nil {
		return nil, err
	}
	if err := cfg.readSecrets(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Read reads and validates the configuration file at path alone: the
// secrets it names are left unread (Parse).
func Read(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// readSecrets completes cfg from the files and environment variables it
// names: ingest tokens, basic users, and a check of the TLS pair. Parse leaves
// them alone so that a configuration can be checked where the secrets are not.
func (c *Config) readSecrets() error {
	if err := c.readDatabaseSecrets(); err != nil {
		return err
	}
	if err := c.readTokensFile(); err != nil {
		return err
	}
	if err := c.readTokensEnv(); err != nil {
		return err
	}
	if err := c.Auth.readUsersFile(); err != nil {
		return fmt.Errorf("auth.%w", err)
	}
	if err := c.TLS.check(); err != nil {
		return fmt.Errorf("tls.%w", err)
	}
	if err := c.Replication.readSecrets(); err != nil {
		return fmt.Errorf("replication.%w", err)
	}
	if err := c.Alerts.Alertmanager.readSecrets(); err != nil {
		return fmt.Errorf("alerts.alertmanager.%w", err)
	}
	for i := range c.Sources {
		if err := c.Sources[i].readSecrets(); err != nil {
			return fmt.Errorf("sources[%d].%w", i, err)
		}
	}
	return nil
}

// readSecrets checks that the source's password_file holds a password,
// reads password_env into Password, and checks its TLS files.
func (s *SourceConfig) readSecrets() error {
	if err := sourcePasswordKeys.read(s.PasswordFile, s.PasswordEnv, &s.Password); err != nil {
		return err
	}
	if _, err := s.TLS.ClientConfig(nil); err != nil {
		return fmt.Errorf("tls.%w", err)
	}
	return nil
}

// passwordKeys name the keys that may give one password: inline, a file
// (read again for each connection) and an environment variable (read at
// start), in that order.
type passwordKeys [3]string

// sourcePasswordKeys are a source's.
var sourcePasswordKeys = passwordKeys{"password", "password_file", "password_env"}

// check refuses more than one of the keys, and an environment variable name
// that is not one. It returns the names of the keys set.
func (k passwordKeys) check(inline bool, file, env string) ([]string, error) {
	var set []string
	for i, given := range []bool{inline, file != "", env != ""} {
		if given {
			set = append(set, k[i])
		}
	}
	switch {
	case len(set) > 1:
		return nil, fmt.Errorf("%s: give one of %s, %s and %s, not %s", set[1], k[0], k[1], k[2], strings.Join(set, " and "))
	case env != "" && !envName.MatchString(env):
		return nil, fmt.Errorf("%s: %q is not an environment variable name", k[2], env)
	}
	return set, nil
}

// read checks that the password file holds a password, or reads the
// environment variable into *password.
func (k passwordKeys) read(file, env string, password *string) error {
	switch {
	case file != "":
		if _, err := collectors.PasswordFile(file).Get(); err != nil {
			return fmt.Errorf("%s: %w", k[1], err)
		}
	case env != "":
		pw, err := envSecret(env)
		if err != nil {
			return fmt.Errorf("%s: %w", k[2], err)
		}
		*password = pw
	}
	return nil
}

// envSecret returns the value of the environment variable name, trimmed.
// Unset or empty is an error, which names the variable, never its value.
func envSecret(name string) (string, error) {
	v, ok := os.LookupEnv(name)
	switch {
	case !ok:
		return "", fmt.Errorf("environment variable %s is not set", name)
	case strings.TrimSpace(v) == "":
		return "", fmt.Errorf("environment variable %s is empty", name)
	}
	return strings.TrimSpace(v), nil
}

// checkToken refuses an ingest token that no request could match: the
// server trims white space from the token it receives, and no HTTP client
// sends control characters in one. Its messages never quote the token.
// Tokens from ingest_tokens_file and ingest_tokens_env are trimmed before
// (a file's line and a Secret's value often end in a newline); one in
// ingest_tokens is taken as written, so white space there is refused.
func checkToken(tok string) error {
	switch {
	case strings.TrimSpace(tok) == "":
		return errors.New("must not be empty")
	case strings.TrimSpace(tok) != tok:
		return errors.New("has white space at its start or end, which the server trims from the token a client sends, so no request could match it: remove it")
	case strings.ContainsFunc(tok, isControl):
		return errors.New("holds a control character, which no HTTP client sends in a token")
	}
	return nil
}

// readTokensEnv adds the tokens of ingest_tokens_env to IngestTokens. Errors
// name the variable, never its value.
func (c *Config) readTokensEnv() error {
	for i, name := range c.IngestTokensEnv {
		tok, err := envSecret(name)
		if err != nil {
			return fmt.Errorf("ingest_tokens_env[%d]: %w", i, err)
		}
		if err := checkToken(tok); err != nil {
			return fmt.Errorf("ingest_tokens_env[%d]: environment variable %s %w", i, name, err)
		}
		c.IngestTokens = append(c.IngestTokens, tok)
	}
	return nil
}

// readTokensFile adds the tokens of ingest_tokens_file to IngestTokens.
func (c *Config) readTokensFile() error {
	if c.IngestTokensFile == "" {
		return nil
	}
	data, err := os.ReadFile(c.IngestTokensFile)
	if err != nil {
		return fmt.Errorf("ingest_tokens_file: %w", err)
	}
	n := 0
	for i, line := range strings.Split(string(data), "\n") {
		tok := strings.TrimSpace(line)
		if tok == "" || strings.HasPrefix(tok, "#") {
			continue
		}
		if err := checkToken(tok); err != nil {
			return fmt.Errorf("ingest_tokens_file: %s line %d: %w", c.IngestTokensFile, i+1, err)
		}
		c.IngestTokens = append(c.IngestTokens, tok)
		n++
	}
	if n == 0 {
		return fmt.Errorf("ingest_tokens_file: %s holds no token", c.IngestTokensFile)
	}
	return nil
}

// Parse decodes a configuration file, fills defaults and validates it.
// Errors name the offending field, e.g. `sources[1].endpoints: ...`, in
// block and flow style alike. The file must be one YAML document that sets
// something: an empty file, one of only comments, a bare null, and a second
// document are refused, since each would be ignored; {} asks for every
// default.
func Parse(data []byte) (*Config, error) {
	doc, err := document(data)
	if err != nil {
		return nil, err
	}
	if problems := checkFields(doc); len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	cfg := &Config{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		// checkFields finds what the decoder refuses; this is for what it
		// refuses as a whole, such as excessive aliasing.
		return nil, hideValues(err)
	}
	cfg.SetDefaults()
	return cfg, cfg.Validate()
}

// errNoSettings is the error for a file that sets nothing.
var errNoSettings = errors.New("config sets nothing (the file is empty, only comments, or null): write {} to run on every default")

// document reads the one YAML document of a configuration file.
func document(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc, next yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return nil, errNoSettings
	case err != nil:
		return nil, fmt.Errorf("config is not valid YAML: %w", err)
	}
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, fmt.Errorf("config is not valid YAML: %w", err)
	default:
		return nil, fmt.Errorf("line %d: a second YAML document starts here, which leasewatch would ignore: a configuration is one document", next.Line)
	}
	if n := resolve(&doc); n == nil || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil, errNoSettings
	}
	return &doc, nil
}

// SetDefaults fills the keys left zero with their defaults, as Parse does;
// for a configuration built in code (the demo's).
func (c *Config) SetDefaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Database == "" {
		c.Database = DefaultDatabase
	}
	if c.Alerts.RenewMarginRatio == 0 {
		c.Alerts.RenewMarginRatio = DefaultRenewMarginRatio
	}
	c.Alerts.Alertmanager.fillDefaults()
	c.Auth.fillDefaults()
	if c.Metrics.MaxLockSeries == 0 {
		c.Metrics.MaxLockSeries = DefaultMaxLockSeries
	}
	if c.Metrics.MaxResourceSeries == 0 {
		c.Metrics.MaxResourceSeries = DefaultMaxResourceSeries
	}
	c.Retention.fillDefaults()
	c.Health.fillDefaults()
	c.Dashboard.fillDefaults()
	c.Replication.fillDefaults()
	c.addOwnSource()
	for d, def := range map[*time.Duration]time.Duration{
		&c.CommitInterval:    audit.DefaultCommitInterval,
		&c.Alerts.BlindAfter: DefaultBlindAfter, &c.Alerts.FencingHold: DefaultFencingHold, &c.Alerts.LostHold: DefaultLostHold,
	} {
		if *d == 0 {
			*d = def
		}
	}
}

// MaxCommitInterval is the longest commit_interval: write reports' answers
// and the dashboard's view of a handover wait for the commit.
const MaxCommitInterval = 5 * time.Second

// Validate checks every field and returns the first problem, naming it.
func (c *Config) Validate() error {
	if _, _, err := SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if err := c.validateDatabase(); err != nil {
		return err
	}
	for i, tok := range c.IngestTokens {
		if err := checkToken(tok); err != nil {
			return fmt.Errorf("ingest_tokens[%d]: %w", i, err)
		}
	}
	for i, name := range c.IngestTokensEnv {
		if !envName.MatchString(name) {
			return fmt.Errorf("ingest_tokens_env[%d]: %q is not an environment variable name", i, name)
		}
	}
	switch {
	case c.CommitInterval < 0:
		return fmt.Errorf("commit_interval: %v is negative; 1ns commits each group as soon as the last is done", c.CommitInterval)
	case c.CommitInterval > MaxCommitInterval:
		return fmt.Errorf("commit_interval: %v is longer than %v: every report's answer would wait that long", c.CommitInterval, MaxCommitInterval)
	}
	if err := c.Auth.validate(c.Listen); err != nil {
		return fmt.Errorf("auth.%w", err)
	}
	if err := c.TLS.validate(); err != nil {
		return fmt.Errorf("tls.%w", err)
	}
	if err := c.Alerts.validate(c.Sources); err != nil {
		return fmt.Errorf("alerts.%w", err)
	}
	if err := c.Metrics.validate(); err != nil {
		return fmt.Errorf("metrics.%w", err)
	}
	if err := c.Retention.validate(); err != nil {
		return fmt.Errorf("retention.%w", err)
	}
	if err := c.Health.validate(); err != nil {
		return fmt.Errorf("health.%w", err)
	}
	if err := c.Dashboard.validate(); err != nil {
		return fmt.Errorf("dashboard.%w", err)
	}
	if err := validatePurposes(c.Purposes, c.Sources); err != nil {
		return err
	}
	if err := c.Replication.validate(c); err != nil {
		return fmt.Errorf("replication.%w", err)
	}
	if c.Replication.Enabled() && c.Alerts.Alertmanager.Enabled() {
		if err := c.Alerts.Alertmanager.coversTakeover(c.Replication.Timing()); err != nil {
			return fmt.Errorf("alerts.alertmanager.%w", err)
		}
	}
	names := make(map[string]int)
	for i, s := range c.Sources {
		field := fmt.Sprintf("sources[%d]", i)
		if err := s.validate(); err != nil {
			return fmt.Errorf("%s.%w", field, err)
		}
		if j, dup := names[s.Name]; dup {
			return fmt.Errorf("%s.name: %q is already the name of sources[%d]", field, s.Name, j)
		}
		names[s.Name] = i
	}
	return nil
}

func (a *AlertsConfig) validate(sources []SourceConfig) error {
	if r := a.RenewMarginRatio; r <= 0 || r >= 1 {
		return fmt.Errorf("renew_margin_ratio: %v is outside (0, 1)", r)
	}
	if err := positive(a.BlindAfter, a.FencingHold, a.LostHold); err != nil {
		return err
	}
	seen := make(map[[2]string]int)
	for i, r := range a.Rules {
		field := fmt.Sprintf("rules[%d]", i)
		if err := r.validate(field, sources); err != nil {
			return err
		}
		if j, dup := seen[[2]string{r.Source, r.Lock}]; dup {
			return fmt.Errorf("%s: rules[%d] already has this source and lock", field, j)
		}
		seen[[2]string{r.Source, r.Lock}] = i
	}
	if err := a.Alertmanager.validate(); err != nil {
		return fmt.Errorf("alertmanager.%w", err)
	}
	return nil
}

// positive checks blind_after, fencing_hold and lost_hold, in that order.
func positive(blindAfter, fencingHold, lostHold time.Duration) error {
	for _, d := range []struct {
		field string
		d     time.Duration
	}{{"blind_after", blindAfter}, {"fencing_hold", fencingHold}, {"lost_hold", lostHold}} {
		if d.d <= 0 {
			return fmt.Errorf("%s: %v must be positive", d.field, d.d)
		}
	}
	return nil
}

// validate checks one rule; field is its place, rules[N].
func (r *AlertRule) validate(field string, sources []SourceConfig) error {
	switch {
	case r.Source == "" && r.Lock == "":
		return fmt.Errorf("%s: names neither a source nor a lock pattern, so it would apply everywhere: set the alerts-level keys instead", field)
	case r.Source != "" && !slices.ContainsFunc(sources, func(s SourceConfig) bool { return s.Name == r.Source }):
		return fmt.Errorf("%s.source: %q is not the name of a configured source", field, r.Source)
	case r.Lock != "" && !audit.ValidPattern(r.Lock):
		return fmt.Errorf("%s.lock: %q is not a valid pattern (path.Match syntax: *, ?, [a-z], \\)", field, r.Lock)
	case r.RenewMarginRatio < 0 || r.RenewMarginRatio >= 1:
		return fmt.Errorf("%s.renew_margin_ratio: %v is outside (0, 1)", field, r.RenewMarginRatio)
	case r.BlindAfter != 0 && r.Lock != "":
		return fmt.Errorf("%s.blind_after: a source is blind as a whole, not per lock: set it in a rule without lock", field)
	case r.RenewMarginRatio == 0 && r.BlindAfter == 0 && r.FencingHold == 0 && r.LostHold == 0:
		return fmt.Errorf("%s: sets no threshold (renew_margin_ratio, blind_after, fencing_hold or lost_hold)", field)
	}
	// Zero durations are unset; only negative ones are wrong.
	for _, d := range []struct {
		field string
		d     time.Duration
	}{{"blind_after", r.BlindAfter}, {"fencing_hold", r.FencingHold}, {"lost_hold", r.LostHold}} {
		if d.d < 0 {
			return fmt.Errorf("%s.%s: %v is negative", field, d.field, d.d)
		}
	}
	return nil
}

// envName is a portable environment variable name (POSIX: letters, digits
// and underscores, not starting with a digit).
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// dnsLabel is what Kubernetes accepts as a namespace name (RFC 1123 label).
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// SourceKinds maps each configured source to its kind.
func (c *Config) SourceKinds() map[string]audit.SourceKind {
	m := make(map[string]audit.SourceKind, len(c.Sources))
	for _, s := range c.Sources {
		m[s.Name] = audit.SourceKind(s.Kind)
	}
	return m
}

// SplitHostPort checks that addr is HOST:PORT with a valid port.
func SplitHostPort(addr string) (string, int, error) {
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return "", 0, fmt.Errorf("%q: want HOST:PORT", addr)
	}
	port, err := strconv.Atoi(addr[i+1:])
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port must be a number from 0 to 65535", addr)
	}
	return addr[:i], port, nil
}

// quoteRE is a value yaml quotes in a message: "cannot unmarshal !!str `change-...`".
var quoteRE = regexp.MustCompile("`[^`]*`")

// secretField reports whether the field at path holds a secret, whose value
// must not reach an error message (and so the log).
func secretField(path string) bool {
	return strings.HasPrefix(path, "ingest_tokens") || strings.HasPrefix(path, "auth.users") ||
		strings.HasSuffix(path, ".password") || strings.HasSuffix(path, ".bearer_token") || path == "database"
}

// hideValues rewrites an error of yaml's decoder as one line, without the
// values yaml quotes: not knowing the field, it cannot tell a secret's.
func hideValues(err error) error {
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	for i, m := range msgs {
		msgs[i] = quoteRE.ReplaceAllString(m, "(value hidden)")
	}
	return errors.New(oneLine(strings.Join(msgs, "; ")))
}
