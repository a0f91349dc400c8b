// Package postgres collects lock history from PostgreSQL: the advisory
// locks of pg_advisory_lock and its kin, which migration tools (golang-
// migrate, goose), job runners and applications take around work that must
// not run twice; and the lease tables of job schedulers, in table*.go and
// stream*.go.
//
// PostgreSQL keeps no history of its locks and sends no notification of
// them: the collector polls pg_locks (locktype 'advisory') joined with
// pg_stat_activity every PollEvery and compares each poll with the one
// before it. A lock is a database and a key, named "<database>/<bigint>"
// for the one-bigint form (objsubid 1, the key reassembled from classid and
// objid) and "<database>/<int>,<int>" for the two-int form (objsubid 2),
// signed as the functions took them. Its holder is the session that holds
// it exclusively (mode ExclusiveLock): application name, pid, client address
// and backend start, the pid and start together naming one session since
// pids are reused. Shared holds (ShareLock, from the _shared functions) can
// have several holders at once, which leasewatch's one-holder lock cannot
// carry: they are left out, and counted on the grants of the same key.
// Waiters (granted false) are counted on each grant, and a grant to a
// session the previous poll saw waiting says how long it waited.
//
// An advisory lock carries no fencing token: every grant is unfenced, and
// the tracker says so (unfenced_lock). Nothing renews it and it has no
// lease: it ends when its row leaves pg_locks. The collector calls that a
// release when the holder's session lives on, or is gone because its
// client closed it; and an expiry when the session ended abnormally (its
// client died or lost its connection, or it was terminated), which
// pg_stat_database's session counts tell: an expiry observed, not judged by
// the clock. A session lock is told from
// a transaction lock where the server shows it (collectors/backends.md,
// "PostgreSQL"): a holder seen idle, outside a transaction, holds a session
// lock; a lock released while the transaction it was seen in goes on was a
// session lock (a transaction lock cannot be released early); one gone
// with the transaction it was seen in, from a session never seen holding
// it outside one, was most likely a transaction lock.
//
// A hold shorter than a poll can pass unseen. A failed poll or a lost
// connection is a blind window from the last good poll to the next one,
// and a server restart (pg_postmaster_start_time changed) is one too, in
// which every lock held before it ends, since a restart ends every
// session. A restarted collector records the time since its stored cursor
// as a blind window: PostgreSQL keeps nothing to resume from.
package postgres

import (
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// Bounds and default of Config.PollEvery.
const (
	DefaultPollEvery = time.Second
	MinPollEvery     = 50 * time.Millisecond
	MaxPollEvery     = time.Minute
)

// AllDatabases in Config.Databases watches the locks of every database.
const AllDatabases = "*"

// applicationName is the collector's own application_name unless the url
// sets one.
const applicationName = "leasewatch"

// Config configures one PostgreSQL source.
type Config struct {
	Name string // the source's name
	// URL is a PostgreSQL connection URL (postgres://host:port/db?sslmode=...)
	// or key=value string, as libpq takes them, without the password.
	URL string
	// Databases whose advisory locks are watched; AllDatabases for every
	// one. Empty: the URL's database.
	Databases []string
	// PollEvery is how often pg_locks is read: default 1s, from 50ms to 1m.
	PollEvery time.Duration
	// Username overrides the URL's user; Password is the user's password,
	// read again (a file) on each connection.
	Username string
	Password collectors.Secret
	// TLS, when set, is used on every connection, and the URL's sslmode
	// must not be disable; unset, the URL's sslmode decides, as in libpq.
	TLS collectors.TLS
	// NoAdvisory leaves the advisory locks unwatched; Tables must then
	// list a table.
	NoAdvisory bool
	// Tables are the lease tables of the URL's database: streamed through
	// the source's slot and publication (SlotName), or polled every
	// PollEvery.
	Tables []Table
}

// Option adjusts a Collector.
type Option func(*Collector)

// WithClock replaces time.Now as the collector's clock.
func WithClock(now func() time.Time) Option { return func(c *Collector) { c.now = now } }

// DefaultPollDeadline is the least time a poll's queries may take before
// the poll fails: a server that stopped answering is a blind window, not a
// hung collector.
const DefaultPollDeadline = 5 * time.Second

// WithPollDeadline bounds a poll's queries by d instead of the larger of
// DefaultPollDeadline and ten polls.
func WithPollDeadline(d time.Duration) Option { return func(c *Collector) { c.deadline = d } }

// DefaultMaxReconnect caps the delay between attempts to connect again.
const DefaultMaxReconnect = 30 * time.Second

// WithMaxReconnect caps the delay between attempts to connect again, which
// doubles from the poll interval (a second for the lease tables' stream),
// jittered as the Runner's restarts are (collectors.Backoff), instead of
// DefaultMaxReconnect.
func WithMaxReconnect(d time.Duration) Option { return func(c *Collector) { c.maxReconnect = d } }

// Collector watches one PostgreSQL source's advisory locks. It implements
// collectors.Collector.
type Collector struct {
	cfg      Config
	now      func() time.Time
	log      *slog.Logger
	deadline time.Duration // a poll's queries' bound, and a connection's
	// maxReconnect caps the backoff between attempts to connect again.
	maxReconnect time.Duration
	// polled, when set (by tests), is handed each good poll's state.
	polled func(*state)
	slot   slotMetrics
}

var _ collectors.Collector = (*Collector)(nil)

// New validates cfg and returns a collector for it. Errors name the offending
// key; the caller adds which source.
func New(cfg Config, logger *slog.Logger, opts ...Option) (*Collector, error) {
	if err := Validate(cfg); err != nil {
		return nil, err
	}
	if cfg.PollEvery == 0 {
		cfg.PollEvery = DefaultPollEvery
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Collector{cfg: cfg, now: time.Now, log: logger, deadline: max(DefaultPollDeadline, 10*cfg.PollEvery),
		maxReconnect: DefaultMaxReconnect}
	c.slot.desc = retainedDesc(cfg.Name)
	c.slot.retained.Store(-1)
	for _, opt := range opts {
		opt(c)
	}
	return c, nil
}

// passwordKey finds a password in a key=value connection string.
var passwordKey = regexp.MustCompile(`(^|\s)password\s*=`)

// Validate checks cfg as New does. Errors start with the key.
func Validate(cfg Config) error {
	if strings.TrimSpace(cfg.Name) == "" {
		return audit.Errorf(audit.EINVALID, "name: required")
	}
	if err := checkURL(cfg); err != nil {
		return err
	}
	for i, d := range cfg.Databases {
		switch {
		case d == "" || strings.TrimSpace(d) != d:
			return audit.Errorf(audit.EINVALID, "databases[%d]: %q: want a database name", i, d)
		case len(d) > 63:
			return audit.Errorf(audit.EINVALID, "databases[%d]: longer than PostgreSQL's 63 bytes", i)
		case d == AllDatabases && len(cfg.Databases) > 1:
			return audit.Errorf(audit.EINVALID, "databases[%d]: %q watches every database: give it alone", i, d)
		}
		for _, e := range cfg.Databases[:i] {
			if e == d {
				return audit.Errorf(audit.EINVALID, "databases[%d]: %q given twice", i, d)
			}
		}
	}
	switch p := cfg.PollEvery; {
	case p != 0 && p < MinPollEvery:
		return audit.Errorf(audit.EINVALID, "poll_every: %s is below the minimum %s", p, MinPollEvery)
	case p > MaxPollEvery:
		return audit.Errorf(audit.EINVALID, "poll_every: %s is above the maximum %s", p, MaxPollEvery)
	}
	if cfg.NoAdvisory && len(cfg.Tables) == 0 {
		return audit.Errorf(audit.EINVALID, "advisory: false leaves nothing to watch: list tables")
	}
	return checkTables(cfg.Tables)
}

// checkURL checks the url as the collector will use it: parsable by pgx,
// with no password in it, naming a database when Databases does not, and
// not refusing TLS when the source sets it.
func checkURL(cfg Config) error {
	if strings.TrimSpace(cfg.URL) == "" {
		return audit.Errorf(audit.EINVALID, "url: required (postgres://host:port/database, or host=... dbname=...)")
	}
	if u, err := url.Parse(cfg.URL); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		if _, ok := u.User.Password(); ok {
			return audit.Errorf(audit.EINVALID, "url: holds a password: give it as password, password_file or password_env")
		}
		if u.Query().Has("password") {
			return audit.Errorf(audit.EINVALID, "url: holds a password: give it as password, password_file or password_env")
		}
	} else if passwordKey.MatchString(cfg.URL) {
		return audit.Errorf(audit.EINVALID, "url: holds a password: give it as password, password_file or password_env")
	}
	pc, err := pgx.ParseConfig(cfg.URL)
	if err != nil {
		return audit.Errorf(audit.EINVALID, "url: %v", err) // pgx leaves passwords out of its parse errors
	}
	if len(cfg.Databases) == 0 && pc.Database == "" {
		return audit.Errorf(audit.EINVALID, "url: names no database, and databases is empty")
	}
	if cfg.TLS != nil && pc.TLSConfig == nil {
		return audit.Errorf(audit.EINVALID, "url: sslmode=disable refuses the tls the source sets")
	}
	return nil
}
