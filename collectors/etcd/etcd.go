// Package etcd collects lock history from etcd: concurrency.Mutex,
// concurrency.Election and the v3lock service, which all write one key per
// contender, P/<name>/<lease-id-hex>, and give the lock to the key with the
// lowest CreateRevision.
//
// The collector watches the configured prefixes from a consistent snapshot,
// derives grants and ends from the watch stream, tells releases from expiries
// by reading the lease after an owner's key is deleted, and polls the owners'
// leases to see renewals, which never reach the watch stream. Its cursor is
// the etcd revision its inputs cover, so a restart resumes exactly there.
// See collectors/backends.md, section A, for the etcd behaviour relied on.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// Defaults for Config's zero durations.
const (
	DefaultDialTimeout      = 5 * time.Second
	DefaultPollInterval     = 500 * time.Millisecond
	DefaultProgressInterval = 5 * time.Second
)

// Config configures one etcd source.
type Config struct {
	Name      string   // the source's name
	Endpoints []string // client URLs; not needed with WithClient
	// Prefixes to watch: every key P/<name>/<lease-hex> under one of them is
	// a contender for lock P/<name>. A prefix inside another is redundant.
	Prefixes    []string
	DialTimeout time.Duration // default 5s
	// PollInterval is how often the owners' lease TTLs are read to detect
	// renewals. Default 500ms.
	PollInterval time.Duration
	// Username and Password authenticate with etcd's auth (a user whose role
	// may read the prefixes). clientv3 sends them only together. A password
	// file is read on each connect: after a rotation, the first failure
	// (an expired auth token renewed with the old password, or a lost
	// connection) restarts the collector with the new one.
	Username string
	Password collectors.Secret
	// TLS, when set, connects over TLS with the configuration it gives,
	// asked for on each connect: its RootCAs verify the server and its
	// client certificate is what etcd's --client-cert-auth requires. A CA
	// replaced in a rotation is used from the next connect: Run fails, as
	// in any outage, once its watch finds the server unreachable with the
	// old one. Endpoints must then be https:// or without a scheme.
	TLS collectors.TLS
}

// Option adjusts a Collector.
type Option func(*Collector)

// WithClient makes the collector use cli, which it never closes, instead of
// dialling Config.Endpoints.
func WithClient(cli *clientv3.Client) Option { return func(c *Collector) { c.client = cli } }

// WithClock replaces time.Now as the collector's clock.
func WithClock(now func() time.Time) Option { return func(c *Collector) { c.now = now } }

// WithProgressInterval sets how often the collector asks etcd for a watch
// progress notification, which advances the cursor while the prefixes are
// quiet. Default 5s.
func WithProgressInterval(d time.Duration) Option {
	return func(c *Collector) { c.progressEvery = d }
}

// Collector watches one etcd source. It implements collectors.Collector.
type Collector struct {
	cfg           Config
	prefixes      []string // Config.Prefixes minus the ones inside another
	client        *clientv3.Client
	now           func() time.Time
	progressEvery time.Duration
	log           *slog.Logger
}

var _ collectors.Collector = (*Collector)(nil)

// NewWithClient is New with WithClient(cli): the collector uses cli, which
// the caller owns and closes, and Config.Endpoints may be empty.
func NewWithClient(cfg Config, cli *clientv3.Client, logger *slog.Logger, opts ...Option) (*Collector, error) {
	return New(cfg, logger, append([]Option{WithClient(cli)}, opts...)...)
}

// New validates cfg and returns a collector for it. Errors name the offending
// field; the caller adds which source. logger should already carry the
// source's name (logger.With("source", name)).
func New(cfg Config, logger *slog.Logger, opts ...Option) (*Collector, error) {
	c := &Collector{cfg: cfg, now: time.Now, progressEvery: DefaultProgressInterval}
	for _, opt := range opts {
		opt(c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.cfg.DialTimeout == 0 {
		c.cfg.DialTimeout = DefaultDialTimeout
	}
	if c.cfg.PollInterval == 0 {
		c.cfg.PollInterval = DefaultPollInterval
	}
	if c.progressEvery <= 0 {
		c.progressEvery = DefaultProgressInterval
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c.log = logger
	c.prefixes = outermost(cfg.Prefixes)
	return c, nil
}

func (c *Collector) validate() error {
	cfg := c.cfg
	if strings.TrimSpace(cfg.Name) == "" {
		return audit.Errorf(audit.EINVALID, "name: required")
	}
	if c.client == nil {
		if len(cfg.Endpoints) == 0 {
			return audit.Errorf(audit.EINVALID, "endpoints: at least one required")
		}
		for i, ep := range cfg.Endpoints {
			if strings.TrimSpace(ep) == "" {
				return audit.Errorf(audit.EINVALID, "endpoints[%d]: empty", i)
			}
			// clientv3 dials http:// and unix:// endpoints in plain text even
			// with a TLS configuration.
			if cfg.TLS != nil && (strings.HasPrefix(ep, "http://") || strings.HasPrefix(ep, "unix://")) {
				return audit.Errorf(audit.EINVALID, "endpoints[%d]: %s is plain text, but tls is set: use https:// or leave the scheme out", i, ep)
			}
		}
	}
	if len(cfg.Prefixes) == 0 {
		return audit.Errorf(audit.EINVALID, "prefixes: at least one required")
	}
	for i, p := range cfg.Prefixes {
		if p == "" {
			return audit.Errorf(audit.EINVALID, "prefixes[%d]: empty (it would watch the whole keyspace)", i)
		}
	}
	if cfg.DialTimeout < 0 {
		return audit.Errorf(audit.EINVALID, "dial_timeout: must not be negative")
	}
	if cfg.PollInterval < 0 {
		return audit.Errorf(audit.EINVALID, "poll_interval: must not be negative")
	}
	if !cfg.Password.IsZero() && cfg.Username == "" {
		return audit.Errorf(audit.EINVALID, "username: required with a password")
	}
	if cfg.Username != "" && cfg.Password.IsZero() {
		return audit.Errorf(audit.EINVALID, "password: required with a username")
	}
	return nil
}

// outermost drops prefixes that lie inside another (their keys are watched
// anyway) and duplicates, keeping the given order.
func outermost(prefixes []string) []string {
	var out []string
	for i, p := range prefixes {
		inside := false
		for j, q := range prefixes {
			if i != j && strings.HasPrefix(p, q) && (p != q || j < i) {
				inside = true
				break
			}
		}
		if !inside {
			out = append(out, p)
		}
	}
	return out
}

// checkConnection reads the first prefix's key count straight through the
// gRPC connection, within the dial timeout. clientv3 reports a connection
// that never comes up as a bare "context deadline exceeded"; gRPC's own error
// says why: a TLS handshake refused, an unknown authority, no route.
func checkConnection(ctx context.Context, cli *clientv3.Client, timeout time.Duration, p string) error {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := pb.NewKVClient(cli.ActiveConnection()).Range(cctx, &pb.RangeRequest{
		Key: []byte(p), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(p)), CountOnly: true,
	})
	return rpctypes.Error(err)
}

// Dial connects to the etcd of cfg (its endpoints, credentials and TLS)
// and checks that it answers and lets the user read under its first prefix
// (the whole keyspace without one); the client lives until closed or ctx
// ends.
func Dial(ctx context.Context, cfg Config) (*clientv3.Client, error) {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	var prefix string
	if len(cfg.Prefixes) > 0 {
		prefix = cfg.Prefixes[0]
	}
	return dial(ctx, cfg, prefix)
}

func dial(ctx context.Context, cfg Config, prefix string) (*clientv3.Client, error) {
	password, err := cfg.Password.Get()
	if err != nil {
		return nil, fmt.Errorf("connect to etcd %v: password file: %w", cfg.Endpoints, err)
	}
	tlsConfig, err := cfg.TLS.Get()
	if err != nil {
		return nil, fmt.Errorf("connect to etcd %v: %w", cfg.Endpoints, err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Username:             cfg.Username,
		Password:             password,
		TLS:                  tlsConfig,
		Logger:               zap.NewNop(),
		Context:              ctx,
	})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd %v: %w", cfg.Endpoints, err)
	}
	if err := checkConnection(ctx, cli, cfg.DialTimeout, prefix); err != nil {
		cli.Close()
		return nil, fmt.Errorf("connect to etcd %v: %w", cfg.Endpoints, err)
	}
	return cli, nil
}

// Name is the source's configured name.
func (c *Collector) Name() string { return c.cfg.Name }

// Kind is audit.KindEtcd.
func (c *Collector) Kind() audit.SourceKind { return audit.KindEtcd }

// Run watches the source until ctx ends (returning nil) or etcd fails
// (returning the error, for the Runner to restart it). It calls ready once
// its starting snapshot, or its resume from the stored cursor, is done.
func (c *Collector) Run(ctx context.Context, sink collectors.Sink, ready func()) error {
	cli := c.client
	if cli == nil {
		var err error
		if cli, err = dial(ctx, c.cfg, c.prefixes[0]); err != nil {
			return err
		}
		defer cli.Close()
	}
	r := newRun(c, cli, sink)
	err := r.run(ctx, ready)
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("watch ended")
	}
	return err
}
