// Package redis collects lock history from Redis: string locks taken with
// SET key value NX PX (redsync, bsm/redislock, the pattern in the Redis
// docs), Redisson's hash locks (field = holder, value = re-entry count), and
// Redlock over several independent instances.
//
// Redis keeps no history and sends keyspace notifications fire-and-forget,
// so the collector shows what it saw, what it inferred and when it was blind.
// Per instance it holds a pub/sub connection subscribed to
// __keyspace@<db>__:<pattern> and, only once the subscription is confirmed,
// reads every matching key (SCAN) as its starting picture; after that each
// notification makes it read the key again, atomically (MULTI: TYPE, GET,
// HGETALL, PTTL and the token counter), and diff the hold against what it
// knew. Lost connections, server restarts (run_id) and pub/sub output-buffer
// kills become blind windows followed by a fresh SCAN; a periodic SCAN
// catches what sends no notification at all (FLUSHALL, FLUSHDB).
//
// Redis never reports a lease's expiry until it reclaims the key, which can
// lag: the collector reports each hold's deadline (read time + PTTL) and the
// tracker expires it by that clock; the expired event then confirms it.
//
// See collectors/backends.md, section C, for the Redis behaviour relied on.
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// AcquireScript is the recommended way to take a fenced Redis lock: a
// single Lua call that, only if the lock is free, increments the lock's
// counter key and sets the lock to "<token>:<holder id>" with a TTL, so the
// fencing token is taken atomically with the lock and every grant gets a
// token one higher than the last.
//
//	KEYS[1] the lock key                   ARGV[1] the holder's random id
//	KEYS[2] the counter key                ARGV[2] the lease (TTL) in milliseconds
//
// It returns the token, or nil when the lock is held. Release with a
// compare-and-delete on the whole value, and present the token to the
// protected resource with every write. leasewatch reads the token with either
// token rule: counter_key "{key}:fence" (the counter is KEYS[1] plus
// ":fence") or value_pattern '^(?P<token>\d+):(?P<holder>.+)$'. In Redis
// Cluster both keys must share a hash slot: put the lock's name in a hash tag
// (lock:{orders} and lock:{orders}:fence).
const AcquireScript = `if redis.call('EXISTS', KEYS[1]) == 0 then
  local token = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], token .. ':' .. ARGV[1], 'PX', ARGV[2])
  return token
end
return false`

// Defaults for Config's zero values.
const (
	DefaultReconcileInterval = 30 * time.Second
	DefaultPollInterval      = 250 * time.Millisecond
	DefaultDialTimeout       = 5 * time.Second
)

// Defaults for the options.
const (
	defaultReconnectMin = 100 * time.Millisecond
	defaultReconnectMax = 2 * time.Second
	defaultGiveUpAfter  = 10 * time.Second
	// pingInterval is how often the pub/sub connection is pinged. A PONG
	// comes after every notification published before the server read the
	// PING, so each one lets the collector vouch it has seen everything up to
	// then (audit.Input.Live), which bounds how late a clock expiry is
	// recorded.
	pingInterval = 250 * time.Millisecond
	// deadAfter: a pub/sub connection that says nothing, not even PONG,
	// for this long is dead.
	deadAfter = 3 * time.Second
	// liveEvery is how often, at most, the collector vouches.
	liveEvery = 250 * time.Millisecond
)

// Config configures one Redis source.
type Config struct {
	Name string // the source's name
	// Addrs are the Redis instances: one for a single instance (addr:), several
	// for Redlock (addrs:), whose lock state is the value that at least Quorum
	// of them hold. An address is host:port, or the path of a Unix socket
	// (/path/redis.sock or unix:/path/redis.sock).
	Addrs []string
	// Quorum is how many instances must hold a value for the lock to be
	// held. Default len(Addrs)/2+1; it must be more than half of Addrs.
	Quorum int
	DB     int
	// Username and Password authenticate every connection (AUTH, or an ACL
	// user); an empty Username is the default user. A password file is
	// read for each new connection, so a rotated password is used from the
	// next one on.
	Username string
	Password collectors.Secret
	// TLS, when set, connects to every address over TLS with the
	// configuration it gives (its client certificate is what
	// tls-auth-clients requires), the pub/sub connections included. It is
	// asked for on every new connection, so a CA replaced in a rotation is
	// used from the next one. The server name to verify defaults to each
	// address's host.
	TLS collectors.TLS
	// Patterns are glob-style key patterns (as for SCAN MATCH and PSUBSCRIBE):
	// every matching key is a lock, except the token rule's counter keys.
	Patterns []string
	// Token says where a lock's fencing token is. Without a rule grants carry
	// no token and the lock is reported unfenced.
	Token TokenRule
	// ReconcileInterval is how often every matching key is read again, to
	// catch what keyspace notifications never report (FLUSHALL, FLUSHDB).
	// Default 30s.
	ReconcileInterval time.Duration
	// PollInterval is how often the keys are read where keyspace
	// notifications cannot be enabled (CONFIG is renamed or denied). Default
	// 250ms.
	PollInterval time.Duration
	DialTimeout  time.Duration // default 5s
}

// TokenRule says where a Redis lock's fencing token is. At most one field
// may be set.
type TokenRule struct {
	// CounterKey is the key of a counter incremented at each acquisition
	// (see AcquireScript), read atomically with the lock; {key} stands for the
	// lock's key, e.g. "{key}:fence". Its tokens rise by one per grant, so a
	// jump means grants the collector never saw.
	CounterKey string `yaml:"counter_key"`
	// ValuePattern is a regular expression with the named groups token and
	// holder, matched against the lock's value (a hash lock's field), e.g.
	// `^(?P<token>\d+):(?P<holder>.+)$`.
	ValuePattern string `yaml:"value_pattern"`
}

// Option adjusts a Collector.
type Option func(*Collector)

// WithClock replaces time.Now as the collector's clock.
func WithClock(now func() time.Time) Option { return func(c *Collector) { c.now = now } }

// WithReconnectBackoff sets the delay before reconnecting to an instance
// after its connection is lost: min at first, doubling up to max, each
// jittered into its upper half as the Runner's restarts are
// (collectors.Backoff), and min again once a connection was up. Default
// 100ms to 2s.
func WithReconnectBackoff(min, max time.Duration) Option {
	return func(c *Collector) { c.reconnectMin, c.reconnectMax = min, max }
}

// WithGiveUpAfter sets how long Run keeps reconnecting while fewer than a
// quorum of instances are reachable before it returns an error (and the
// Runner marks the source down). Default 10s.
func WithGiveUpAfter(d time.Duration) Option { return func(c *Collector) { c.giveUpAfter = d } }

// Collector watches one Redis source. It implements collectors.Collector.
type Collector struct {
	cfg          Config
	rule         rule
	log          *slog.Logger
	now          func() time.Time
	reconnectMin time.Duration
	reconnectMax time.Duration
	giveUpAfter  time.Duration

	mu sync.Mutex
	// degraded holds, per instance, why it is not fully observed: polling
	// instead of notifications, or unreachable.
	mode, reach []string
	// Carried from one Run to the next, so a restarted Run reports the gap
	// since the last one saw its instances and keeps their picture.
	lastGood time.Time
	lastErr  string
	runIDs   []string
	states   []*instanceState
	comb     *combiner
}

var (
	_ collectors.Collector = (*Collector)(nil)
	_ collectors.Degrader  = (*Collector)(nil)
)

// New validates cfg and returns a collector for it. Errors name the offending
// field; the caller adds which source. logger should already carry the
// source's name (logger.With("source", name)).
func New(cfg Config, logger *slog.Logger, opts ...Option) (*Collector, error) {
	c := &Collector{
		cfg: cfg, now: time.Now,
		reconnectMin: defaultReconnectMin, reconnectMax: defaultReconnectMax,
		giveUpAfter: defaultGiveUpAfter,
	}
	for _, opt := range opts {
		opt(c)
	}
	if err := validate(&c.cfg); err != nil {
		return nil, err
	}
	r, err := newRule(cfg.Token)
	if err != nil {
		return nil, err
	}
	c.rule = r
	if c.reconnectMin <= 0 {
		c.reconnectMin = defaultReconnectMin
	}
	if c.reconnectMax < c.reconnectMin {
		c.reconnectMax = c.reconnectMin
	}
	if c.giveUpAfter <= 0 {
		c.giveUpAfter = defaultGiveUpAfter
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c.log = logger
	n := len(c.cfg.Addrs)
	c.mode, c.reach, c.runIDs = make([]string, n), make([]string, n), make([]string, n)
	c.states = make([]*instanceState, n)
	for i := range c.states {
		c.states[i] = newInstanceState()
	}
	c.comb = newCombiner(c.cfg.Name, n, c.cfg.Quorum)
	return c, nil
}

// Validate returns the first problem New would find with cfg, naming its
// field, without making a collector: for a configuration check.
func Validate(cfg Config) error {
	if err := validate(&cfg); err != nil {
		return err
	}
	_, err := newRule(cfg.Token)
	return err
}

func errorf(format string, args ...any) error { return audit.Errorf(audit.EINVALID, format, args...) }

func validate(cfg *Config) error {
	if strings.TrimSpace(cfg.Name) == "" {
		return errorf("name: required")
	}
	if len(cfg.Addrs) == 0 {
		return errorf("addrs: at least one required")
	}
	seen := make(map[string]bool, len(cfg.Addrs))
	for i, a := range cfg.Addrs {
		if strings.TrimSpace(a) == "" {
			return errorf("addrs[%d]: empty", i)
		}
		if network, _ := dialAddr(a); network == "unix" && cfg.TLS != nil {
			return errorf("addrs[%d]: %s is a Unix socket, which Redis serves without TLS: give host:port or leave tls out", i, a)
		}
		if seen[a] {
			return errorf("addrs[%d]: %s is listed twice", i, a)
		}
		seen[a] = true
	}
	n := len(cfg.Addrs)
	if cfg.Quorum == 0 {
		cfg.Quorum = n/2 + 1
	}
	if cfg.Quorum <= n/2 || cfg.Quorum > n {
		return errorf("quorum: must be more than half of the %d addrs and at most %d", n, n)
	}
	if cfg.DB < 0 {
		return errorf("db: must not be negative")
	}
	if cfg.Username != "" && cfg.Password.IsZero() {
		// go-redis authenticates only with a password: without one the
		// client would go on as the default user.
		return errorf("password: required with a username")
	}
	if len(cfg.Patterns) == 0 {
		return errorf("patterns: at least one required")
	}
	for i, p := range cfg.Patterns {
		if p == "" {
			return errorf("patterns[%d]: empty", i)
		}
	}
	if cfg.Token.CounterKey != "" && cfg.Token.ValuePattern != "" {
		return errorf("token: counter_key and value_pattern exclude each other")
	}
	if cfg.ReconcileInterval < 0 {
		return errorf("reconcile_interval: must not be negative")
	}
	if cfg.PollInterval < 0 {
		return errorf("poll_interval: must not be negative")
	}
	if cfg.DialTimeout < 0 {
		return errorf("dial_timeout: must not be negative")
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = DefaultReconcileInterval
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	return nil
}

// Name is the source's configured name.
func (c *Collector) Name() string { return c.cfg.Name }

// Kind is audit.KindRedis.
func (c *Collector) Kind() audit.SourceKind { return audit.KindRedis }

// Degraded says why the source is observed less well than it could be, or
// returns "" when it is not: an instance where keyspace notifications cannot
// be enabled (CONFIG renamed or denied by ACL) is polled instead, which sees
// holds only as often as it polls; a Redlock instance that is unreachable
// leaves the quorum to the others.
func (c *Collector) Degraded() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var reasons []string
	for i := range c.mode {
		for _, r := range []string{c.mode[i], c.reach[i]} {
			if r != "" {
				reasons = append(reasons, r)
			}
		}
	}
	return strings.Join(reasons, "; ")
}

func (c *Collector) setMode(i int, reason string) {
	c.mu.Lock()
	c.mode[i] = reason
	c.mu.Unlock()
}

func (c *Collector) setReach(i int, reason string) {
	c.mu.Lock()
	c.reach[i] = reason
	c.mu.Unlock()
}

// Run watches the source until ctx ends (returning nil) or fewer than a
// quorum of its instances stay reachable for longer than the give-up time
// (returning the error, for the Runner to restart it). It calls ready once
// its first snapshot is durable.
func (c *Collector) Run(ctx context.Context, sink collectors.Sink, ready func()) error {
	r := newRun(c, sink)
	defer r.close()
	err := r.run(ctx, ready)
	c.mu.Lock()
	defer c.mu.Unlock()
	// The next run is blind from the last moment this one saw the source;
	// a run that never saw it leaves that moment as it was (zero until the
	// source is first seen, so the first snapshot ever is "observed").
	if ctx.Err() != nil {
		if r.wasUp {
			c.lastGood = c.now()
		}
		c.lastErr = "the collector was stopped"
		return nil
	}
	if err == nil {
		err = errors.New("collector stopped")
	}
	if r.wasUp && !r.goodUntil.IsZero() {
		c.lastGood = r.goodUntil
	}
	c.lastErr = err.Error()
	return err
}

// dialAddr returns the network and address to dial for a configured address:
// unix for a socket path (/path/redis.sock, unix:/path, unix:///path), else
// tcp.
func dialAddr(addr string) (network, address string) {
	switch {
	case strings.HasPrefix(addr, "unix://"):
		return "unix", strings.TrimPrefix(addr, "unix://")
	case strings.HasPrefix(addr, "unix:"):
		return "unix", strings.TrimPrefix(addr, "unix:")
	case strings.HasPrefix(addr, "/"):
		return "unix", addr
	}
	return "tcp", addr
}

// credentials gives go-redis the user and password for a new connection.
func (c *Collector) credentials(context.Context) (user, password string, err error) {
	if password, err = c.cfg.Password.Get(); err != nil {
		return "", "", fmt.Errorf("password file: %w", err)
	}
	return c.cfg.Username, password, nil
}

// dial opens a new connection as go-redis would, with the source's TLS
// configuration as it is now.
func (c *Collector) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	tlsConfig, err := c.cfg.TLS.Get()
	if err != nil {
		return nil, err
	}
	return goredis.NewDialer(&goredis.Options{DialTimeout: c.cfg.DialTimeout, TLSConfig: tlsConfig})(ctx, network, addr)
}

// client returns a go-redis client for one address. Every connection it
// makes, pub/sub included, uses the source's credentials and TLS, as they
// are when it connects.
func (c *Collector) client(addr string) *goredis.Client {
	network, address := dialAddr(addr)
	return goredis.NewClient(&goredis.Options{
		Network:                    network,
		Addr:                       address,
		CredentialsProviderContext: c.credentials,
		Dialer:                     c.dial,
		DB:                         c.cfg.DB,
		// RESP2: pub/sub messages as plain replies, and no maintenance
		// notifications (they need RESP3).
		Protocol:                 2,
		DisableIdentity:          true,
		DialTimeout:              c.cfg.DialTimeout,
		ReadTimeout:              c.cfg.DialTimeout,
		WriteTimeout:             c.cfg.DialTimeout,
		MaxRetries:               1,
		DialerRetries:            1, // the collector's own backoff paces reconnects
		PoolSize:                 4,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// ACLRules returns the least a Redis ACL user needs to grant the collector
// for cfg, as ACL SETUSER rules: the lock keys (and the token rule's counter
// keys), the keyspace channels of the patterns, and only the commands the
// collector sends, all of which only read: PING on its pub/sub connection,
// INFO (the run_id), CONFIG GET (the notification flags), PSUBSCRIBE, SCAN,
// the read script by EVALSHA or EVAL and the commands inside it (with MULTI
// and EXEC for the same reads where scripts are denied), and SELECT for a db
// other than 0. It leaves CONFIG SET out: the server must then publish the
// notifications already (notify-keyspace-events Kg$hxe, or a superset), or
// the collector polls.
//
//	ACL SETUSER leasewatch on >PASSWORD <rules>
func ACLRules(cfg Config) string {
	// Whole key permissions (~, not %R~): Redis takes every key of EVAL as
	// written to. The commands allowed, in scripts too, only read.
	rules := []string{"resetkeys"}
	for _, p := range cfg.Patterns {
		rules = append(rules, "~"+p)
		if cfg.Token.CounterKey != "" {
			rules = append(rules, "~"+strings.ReplaceAll(cfg.Token.CounterKey, "{key}", p))
		}
	}
	rules = append(rules, "resetchannels")
	for _, p := range cfg.Patterns {
		rules = append(rules, fmt.Sprintf("&__keyspace@%d__:%s", cfg.DB, p))
	}
	rules = append(rules, "-@all", "+ping", "+info", "+config|get", "+psubscribe", "+scan", "+evalsha", "+eval",
		"+multi", "+exec", "+type", "+get", "+hgetall", "+pttl", "+pexpiretime")
	if cfg.DB != 0 {
		rules = append(rules, "+select")
	}
	return strings.Join(rules, " ")
}

// joinBlinds merges blind windows into one covering them all.
func joinBlinds(bs []*audit.Blind) *audit.Blind {
	var out *audit.Blind
	var reasons []string
	for _, b := range bs {
		if b == nil {
			continue
		}
		if out == nil {
			c := *b
			out = &c
		}
		if b.From.Before(out.From) {
			out.From = b.From
		}
		if b.To.After(out.To) {
			out.To = b.To
		}
		reasons = append(reasons, b.Reason)
	}
	if out != nil {
		sort.Strings(reasons)
		out.Reason = strings.Join(reasons, "; ")
	}
	return out
}
