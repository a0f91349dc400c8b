// Package zookeeper collects lock history from ZooKeeper: the lock and
// leader-election recipes that give a lock to the lowest-sequence
// ephemeral sequential child of a lock directory. That is ZooKeeper's
// documented lock recipe (guid-lock-<seq>, and go-zookeeper's zk.Lock:
// _c_<guid>-lock-<seq>), its documented election recipe (guid-n_<seq>),
// Curator's InterProcessMutex and LeaderSelector (_c_<uuid>-lock-<seq>) and
// Curator's LeaderLatch (_c_<uuid>-latch-<seq>). The other children of a lock
// directory are waiters, queued in sequence order.
//
// A configured path is a lock directory, or the parent of lock directories
// (/locks with /locks/orders, /locks/billing below it): the collector reads
// both levels. It keeps a one-time child watch on every directory it reads
// and re-arms it with a full re-read of that directory whenever it fires
// (go-zookeeper v1.0.4 has no AddWatch, so no persistent recursive watch),
// and compares what it reads with what it read before: a new lowest child is
// a grant, a vanished one an end. A short periodic check of every directory's
// Stat catches a change whose watch was lost. The loop never waits for a
// commit: what it reads while one input commits goes into the next, so only
// a grant shorter than one re-read can pass unseen, and the next grant
// counts it (unseen_contenders, from the directory's cversion).
//
// The token is the owner node's creation zxid (czxid). Every change to
// ZooKeeper's data tree gets a zxid, and zxids rise across the whole
// ensemble, leader elections included (a new epoch is the high 32 bits), so
// a node created later has a higher czxid. The next owner of a lock is a node
// that already waited with a higher sequence number, that is, one created
// after the owner before it: each grant's czxid exceeds the previous grant's,
// also when the lock directory is deleted and created again. The sequence
// number is not a token: it counts every child ever created under that one
// parent (waiters too), starts again at 0 when the parent is recreated
// (Curator's container parents are removed once empty), and wraps to
// -2147483648 past 2147483647. It only orders the contenders of one
// directory.
//
// Renewals are invisible: a session stays alive by pings, which create no
// zxid. The lease is the owner session's negotiated timeout, which only the
// servers know: with ProbeSessions the collector asks each server's cons
// (a four-letter word) for it, and for whether the owner session is
// connected. An end is the owner node's deletion, which a release, a client
// closing its session and the server expiring it all look alike as. The
// collector calls it a release when it sees the owner session alive after
// the delete (it still owns another watched node, or cons lists it), an
// expiry when cons showed the session connected to no server before the
// delete, or connected but unanswered for over two thirds of its timeout
// (a paused client: a live one pings every third), and on none after it,
// and otherwise an inferred release whose detail says what is unknown.
//
// ZooKeeper keeps no history to resume from. The cursor is the highest zxid
// the collector has read; a restart that finds every watched directory
// unchanged records nothing, and one that finds a change records a blind
// window from the cursor's time and a snapshot. A lost connection or an
// expired collector session is a blind window from the last read to the
// re-read after the session is back. See collectors/backends.md, section
// "ZooKeeper", for the behaviour relied on.
package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// Defaults for Config's zero durations.
const (
	DefaultDialTimeout    = 5 * time.Second
	DefaultSessionTimeout = 10 * time.Second
	DefaultPollInterval   = time.Second
)

// Config configures one ZooKeeper source.
type Config struct {
	Name    string   // the source's name
	Servers []string // host:port of the ensemble's servers
	// Chroot is prepended to every path, as a connect string's /chroot
	// suffix does for ZooKeeper's clients; locks are named without it.
	Chroot string
	// Paths are the lock directories to watch, or their parents.
	Paths []string
	// Username and Password authenticate with ZooKeeper's digest scheme
	// (the identity digest ACLs name) on every connection. A password file
	// is read when the collector connects.
	Username string
	Password collectors.Secret
	// TLS, when set, connects over TLS (the servers' secureClientPort) with
	// the configuration it gives, asked for on each connection.
	TLS collectors.TLS
	// ProbeSessions asks each server's cons four-letter word (it must be in
	// 4lw.commands.whitelist, on the client port) for the owner sessions'
	// negotiated timeouts and liveness, to tell releases from expiries.
	ProbeSessions bool
	DialTimeout   time.Duration // default 5s
	// SessionTimeout is the collector's own session's: how long the server
	// keeps its watches through a disconnect. Default 10s.
	SessionTimeout time.Duration
	// PollInterval is how often the collector checks every directory's Stat
	// and, with ProbeSessions, asks the servers for the owner sessions.
	// Default 1s.
	PollInterval time.Duration
}

// Option adjusts a Collector.
type Option func(*Collector)

// WithClock replaces time.Now as the collector's clock.
func WithClock(now func() time.Time) Option { return func(c *Collector) { c.now = now } }

// Collector watches one ZooKeeper source. It implements collectors.Collector.
type Collector struct {
	cfg     Config
	now     func() time.Time
	log     *slog.Logger
	netDial func(network, addr string, timeout time.Duration) (net.Conn, error)
}

var _ collectors.Collector = (*Collector)(nil)

// New validates cfg and returns a collector for it. Errors name the offending
// field; the caller adds which source. logger should already carry the
// source's name.
func New(cfg Config, logger *slog.Logger, opts ...Option) (*Collector, error) {
	if err := Validate(cfg); err != nil {
		return nil, err
	}
	c := &Collector{cfg: cfg, now: time.Now, netDial: net.DialTimeout}
	for _, opt := range opts {
		opt(c)
	}
	if c.cfg.DialTimeout == 0 {
		c.cfg.DialTimeout = DefaultDialTimeout
	}
	if c.cfg.SessionTimeout == 0 {
		c.cfg.SessionTimeout = DefaultSessionTimeout
	}
	if c.cfg.PollInterval == 0 {
		c.cfg.PollInterval = DefaultPollInterval
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c.log = logger
	return c, nil
}

// Validate checks cfg as New does. Errors name the offending field.
func Validate(cfg Config) error {
	if strings.TrimSpace(cfg.Name) == "" {
		return audit.Errorf(audit.EINVALID, "name: required")
	}
	if len(cfg.Servers) == 0 {
		return audit.Errorf(audit.EINVALID, "servers: at least one host:port required")
	}
	for i, s := range cfg.Servers {
		if j := strings.LastIndexByte(s, ':'); j <= 0 || j == len(s)-1 {
			return audit.Errorf(audit.EINVALID, "servers[%d]: %q: want host:port", i, s)
		}
	}
	if cfg.Chroot != "" {
		if err := checkPath(cfg.Chroot); err != nil {
			return audit.Errorf(audit.EINVALID, "chroot: %v", err)
		}
	}
	if len(cfg.Paths) == 0 {
		return audit.Errorf(audit.EINVALID, "paths: at least one lock directory required")
	}
	for i, p := range cfg.Paths {
		if err := checkPath(p); err != nil {
			return audit.Errorf(audit.EINVALID, "paths[%d]: %v", i, err)
		}
	}
	switch {
	case cfg.DialTimeout < 0:
		return audit.Errorf(audit.EINVALID, "dial_timeout: must not be negative")
	case cfg.SessionTimeout < 0:
		return audit.Errorf(audit.EINVALID, "session_timeout: must not be negative")
	case cfg.PollInterval < 0:
		return audit.Errorf(audit.EINVALID, "poll_interval: must not be negative")
	case !cfg.Password.IsZero() && cfg.Username == "":
		return audit.Errorf(audit.EINVALID, "username: required with a password")
	case cfg.Username != "" && cfg.Password.IsZero():
		return audit.Errorf(audit.EINVALID, "password: required with a username")
	case strings.Contains(cfg.Username, ":"):
		return audit.Errorf(audit.EINVALID, "username: must not contain ':' (the digest scheme sends user:password)")
	}
	return nil
}

// checkPath refuses what ZooKeeper would: a path must be absolute, and
// neither end in "/" nor hold empty, "." or ".." elements.
func checkPath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q must start with /", p)
	case p == "/":
		return nil
	case strings.HasSuffix(p, "/"):
		return fmt.Errorf("%q must not end with /", p)
	case path.Clean(p) != p:
		return fmt.Errorf("%q must not hold empty, . or .. elements", p)
	}
	return nil
}

// Name is the source's configured name.
func (c *Collector) Name() string { return c.cfg.Name }

// Kind is Backend.Kind.
func (c *Collector) Kind() audit.SourceKind { return Backend.Kind }

// Run watches the source until ctx ends (returning nil) or ZooKeeper fails
// (returning the error, for the Runner to restart it). It calls ready once
// its starting snapshot, or its resume from the stored cursor, is durable.
func (c *Collector) Run(ctx context.Context, sink collectors.Sink, ready func()) error {
	conn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.close()
	r := newRun(c, conn, sink)
	err = r.run(ctx, ready)
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("watch ended")
	}
	return err
}
