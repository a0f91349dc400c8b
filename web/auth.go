package web

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"github.com/leasewatch/leasewatch/audit"
)

// Auth says who may read the dashboard and the read API. The zero value
// leaves them open. Ingest (POST /api/v1/writes and /api/v1/beliefs) is never
// behind it (it takes its own bearer tokens), nor is /static/ (the assets
// every build ships).
type Auth struct {
	// Users maps user names to bcrypt password hashes: HTTP basic
	// authentication. Set Users or ProxyHeader, not both.
	Users map[string]string
	// Realm is named in the basic challenge; default "leasewatch".
	Realm string
	// ProxyHeader names the header in which an authenticating reverse proxy
	// names the user. Requests from outside TrustedProxies are refused
	// whether or not they carry it.
	ProxyHeader string
	// TrustedProxies are the addresses ProxyHeader is taken from.
	TrustedProxies []netip.Prefix
	// ProtectMetrics puts /metrics behind the authentication.
	ProtectMetrics bool
	// ProtectHealth puts /healthz and /readyz behind it.
	ProtectHealth bool
	// CheckHost makes an open dashboard (neither Users nor ProxyHeader)
	// answer only requests whose Host is a loopback name (localhost), an IP
	// address or one of Hosts, and refuse the rest with 421 Misdirected
	// Request. Without it, a web page whose own name its DNS points at this
	// server (DNS rebinding) could read the dashboard through its visitors'
	// browsers. An IP address cannot be rebound, so probes and scrapes by
	// address pass; ingest and the health probes pass whatever their Host.
	CheckHost bool
	// Hosts are the further host names CheckHost accepts (an external URL's),
	// compared without case, port or a trailing dot.
	Hosts []string
}

// Basic authentication costs a bcrypt comparison (tens of milliseconds by
// design), too much for every request of a page that refreshes itself, so a
// verified user and password is remembered for credentialTTL. Failures are not
// remembered: each costs a comparison, but at most maxBcrypt run at once, so a
// guessing client slows itself rather than starving every other request.
const (
	credentialTTL  = 5 * time.Minute
	maxCredentials = 1024
	defaultRealm   = "leasewatch"
	// refusalLogEvery limits the warnings about refused requests (failed
	// logins, user headers from outside the trusted proxies, misdirected
	// hosts): whoever sends them could otherwise flood the log.
	refusalLogEvery = time.Minute
)

// Reasons of leasewatch_auth_failures_total.
const (
	failureCredentials    = "credentials"     // basic: a wrong user name or password
	failureUntrustedProxy = "untrusted_proxy" // proxy: a user named from outside trusted_proxies
)

var maxBcrypt = max(1, runtime.GOMAXPROCS(0)/2)

// authenticator implements Auth as echo middleware.
type authenticator struct {
	users          []basicUser
	realm          string
	challenge      string
	dummy          []byte // compared against when the user is unknown
	header         string
	proxies        []netip.Prefix
	protectMetrics bool
	protectHealth  bool
	logger         *slog.Logger
	now            func() time.Time
	failures       *prometheus.CounterVec // by reason

	bcrypt chan struct{} // limits concurrent bcrypt comparisons

	failedLog, untrustedLog logLimiter

	mu       sync.Mutex
	macKey   [32]byte
	verified map[[32]byte]time.Time // MAC of user and password → expiry
}

type basicUser struct {
	nameHash [32]byte
	hash     []byte
}

// newAuthenticator returns nil when a leaves the dashboard open. It counts
// refused logins in failures, by reason.
func newAuthenticator(a Auth, logger *slog.Logger, now func() time.Time, failures *prometheus.CounterVec) (*authenticator, error) {
	basic, proxy := len(a.Users) > 0, a.ProxyHeader != ""
	switch {
	case basic && proxy:
		return nil, errors.New("web: Auth: set Users or ProxyHeader, not both")
	case proxy && len(a.TrustedProxies) == 0:
		return nil, errors.New("web: Auth.TrustedProxies is required with ProxyHeader")
	case (basic || proxy) && a.CheckHost:
		return nil, errors.New("web: Auth.CheckHost applies to an open dashboard only: Users and ProxyHeader already keep a rebinding page out")
	case !basic && !proxy:
		if a.ProtectMetrics || a.ProtectHealth {
			return nil, errors.New("web: Auth: ProtectMetrics and ProtectHealth need Users or ProxyHeader")
		}
		return nil, nil
	}
	au := &authenticator{
		realm:          a.Realm,
		header:         http.CanonicalHeaderKey(a.ProxyHeader),
		proxies:        a.TrustedProxies,
		protectMetrics: a.ProtectMetrics,
		protectHealth:  a.ProtectHealth,
		logger:         logger,
		now:            now,
		failures:       failures,
		bcrypt:         make(chan struct{}, maxBcrypt),
		verified:       make(map[[32]byte]time.Time),
	}
	if au.now == nil {
		au.now = time.Now
	}
	if au.realm == "" {
		au.realm = defaultRealm
	}
	if strings.ContainsAny(au.realm, "\"\\\r\n") {
		return nil, fmt.Errorf("web: Auth.Realm %q must not contain quotes, backslashes or line breaks", au.realm)
	}
	au.challenge = fmt.Sprintf(`Basic realm="%s", charset="UTF-8"`, au.realm)
	dummyCost := bcrypt.MinCost
	for name, hash := range a.Users {
		cost, err := bcrypt.Cost([]byte(hash))
		if err != nil {
			return nil, fmt.Errorf("web: Auth.Users[%s]: not a bcrypt hash", name)
		}
		dummyCost = max(dummyCost, cost)
		au.users = append(au.users, basicUser{nameHash: sha256.Sum256([]byte(name)), hash: []byte(hash)})
	}
	if basic {
		// As costly as the costliest user's hash, so an unknown name takes no
		// less time than a known one.
		dummy, err := bcrypt.GenerateFromPassword([]byte("no such user"), dummyCost)
		if err != nil {
			return nil, fmt.Errorf("web: Auth: %w", err)
		}
		au.dummy = dummy
		if _, err := rand.Read(au.macKey[:]); err != nil {
			return nil, fmt.Errorf("web: Auth: %w", err)
		}
		failures.WithLabelValues(failureCredentials) // from zero, so rate() sees the first
	} else {
		failures.WithLabelValues(failureUntrustedProxy)
	}
	return au, nil
}

// ingestRoute reports whether route is an ingest endpoint, which takes the
// ingest tokens alone: never the dashboard's authentication or Host check.
func ingestRoute(route string) bool {
	return route == "/api/v1/writes" || route == "/api/v1/beliefs"
}

// guards reports whether the route needs authentication. It decides by the
// route echo matched, not the raw path, so no spelling of a path
// ("/static/../locks") reaches a guarded handler through an open route.
func (a *authenticator) guards(route string) bool {
	if ingestRoute(route) {
		return false
	}
	switch route {
	case "/static/*":
		return false
	case "/metrics":
		return a.protectMetrics
	case "/healthz", "/readyz":
		return a.protectHealth
	}
	return true
}

// middleware authenticates each guarded request.
func (a *authenticator) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !a.guards(c.Path()) {
			return next(c)
		}
		var err error
		if a.header != "" {
			err = a.proxy(c.Request())
		} else {
			err = a.basic(c.Request())
			if err != nil && audit.ErrorCode(err) == audit.EUNAUTHORIZED {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, a.challenge)
			}
		}
		if err != nil {
			return err
		}
		return next(c)
	}
}

var errCredentials = audit.Errorf(audit.EUNAUTHORIZED, "authentication required: a valid user name and password")

// basic checks the request's basic credentials. Every configured user is
// compared, and an unknown user still costs a bcrypt comparison, so the time
// taken tells nothing of which names exist.
func (a *authenticator) basic(req *http.Request) error {
	name, password, ok := req.BasicAuth()
	if !ok {
		return errCredentials
	}
	mac := a.mac(name, password)
	if a.remembered(mac) {
		return nil
	}
	nameHash := sha256.Sum256([]byte(name))
	hash, found := a.dummy, 0
	for _, u := range a.users {
		eq := subtle.ConstantTimeCompare(nameHash[:], u.nameHash[:])
		found |= eq
		if eq == 1 {
			hash = u.hash
		}
	}
	if err := a.acquire(req.Context()); err != nil {
		return err
	}
	err := bcrypt.CompareHashAndPassword(hash, []byte(password))
	<-a.bcrypt
	if err != nil || found != 1 {
		a.failures.WithLabelValues(failureCredentials).Inc()
		if ok, skipped := a.failedLog.allow(a.now()); ok {
			a.logger.Warn("failed login: wrong user name or password (logged once a minute at most)",
				"user", truncate(name, 64), "remote", req.RemoteAddr, "failures_not_logged", skipped)
		}
		return errCredentials
	}
	a.remember(mac)
	return nil
}

// acquire waits for a bcrypt slot or the request's end.
func (a *authenticator) acquire(ctx context.Context) error {
	select {
	case a.bcrypt <- struct{}{}:
		return nil
	case <-ctx.Done():
		return audit.Errorf(audit.EUNAVAILABLE, "request ended while waiting to check credentials")
	}
}

// mac keys the verified credentials. Keyed with a per-process secret, so what
// stays in memory is no cheaper to attack than the bcrypt hashes.
func (a *authenticator) mac(name, password string) [32]byte {
	h := hmac.New(sha256.New, a.macKey[:])
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(password))
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

func (a *authenticator) remembered(mac [32]byte) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	exp, ok := a.verified[mac]
	return ok && a.now().Before(exp)
}

func (a *authenticator) remember(mac [32]byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if len(a.verified) >= maxCredentials {
		for k, exp := range a.verified {
			if !now.Before(exp) {
				delete(a.verified, k)
			}
		}
		if len(a.verified) >= maxCredentials {
			clear(a.verified)
		}
	}
	a.verified[mac] = now.Add(credentialTTL)
}

// proxy accepts a request from a trusted proxy that names a user. The client's address
// is the connection's peer, never a forwarded-for header: that is as easy to
// forge as the user header itself.
func (a *authenticator) proxy(req *http.Request) error {
	user := strings.TrimSpace(req.Header.Get(a.header))
	ap, err := netip.ParseAddrPort(req.RemoteAddr)
	if err != nil || !a.trusted(ap.Addr().Unmap()) {
		if user != "" {
			a.failures.WithLabelValues(failureUntrustedProxy).Inc()
			if ok, skipped := a.untrustedLog.allow(a.now()); ok {
				a.logger.Warn("refused a request naming a user from outside auth.trusted_proxies (logged once a minute at most)",
					"remote", req.RemoteAddr, "header", a.header, "refusals_not_logged", skipped)
			}
		}
		return echo.NewHTTPError(http.StatusForbidden)
	}
	if user == "" {
		return audit.Errorf(audit.EUNAUTHORIZED, "the authenticating proxy named no user in %s", a.header)
	}
	return nil
}

func (a *authenticator) trusted(addr netip.Addr) bool {
	for _, p := range a.proxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// logLimiter lets a warning about refused requests through at most once
// every refusalLogEvery, and counts the ones it held back.
type logLimiter struct {
	last    atomic.Int64 // unix nanoseconds of the last warning let through
	skipped atomic.Int64 // warnings held back since
}

// allow reports whether to log now, and how many warnings were held back
// since the last one logged.
func (l *logLimiter) allow(now time.Time) (bool, int64) {
	n, last := now.UnixNano(), l.last.Load()
	if n-last >= int64(refusalLogEvery) && l.last.CompareAndSwap(last, n) {
		return true, l.skipped.Swap(0)
	}
	l.skipped.Add(1)
	return false, 0
}

// hostCheck refuses requests to an open dashboard that name a host it does
// not answer to (Auth.CheckHost).
type hostCheck struct {
	names  map[string]bool
	logger *slog.Logger
	now    func() time.Time
	log    logLimiter
}

// newHostCheck returns nil when a does not ask for the check.
func newHostCheck(a Auth, logger *slog.Logger, now func() time.Time) *hostCheck {
	if !a.CheckHost {
		return nil
	}
	h := &hostCheck{names: make(map[string]bool), logger: logger, now: now}
	for _, n := range a.Hosts {
		if n = hostName(n); n != "" {
			h.names[n] = true
		}
	}
	return h
}

// middleware answers 421 to a request for another host. It decides by the
// route echo matched, as the authenticator does.
func (h *hostCheck) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		route, req := c.Path(), c.Request()
		if ingestRoute(route) || route == "/healthz" || route == "/readyz" || h.answers(req.Host) {
			return next(c)
		}
		shown := strconv.Quote(truncate(req.Host, 64))
		if ok, skipped := h.log.allow(h.now()); ok {
			h.logger.Warn("refused a request for a host the open dashboard does not answer to; if users reach it by this name, "+
				"set dashboard.external_url (logged once a minute at most)",
				"host", shown, "remote", req.RemoteAddr, "refusals_not_logged", skipped)
		}
		return &statusError{status: http.StatusMisdirectedRequest, msg: fmt.Sprintf(
			"misdirected request: this server does not answer for host %s; reach it by its address, localhost, or its configured external URL", shown)}
	}
}

// answers reports whether hostport (a Host header) names this server: a
// loopback name, an IP address (which no DNS can rebind) or a configured
// name.
func (h *hostCheck) answers(hostport string) bool {
	name := hostName(hostport)
	if name == "" {
		return false
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	// localhost and .localhost resolve to loopback without DNS (RFC 6761),
	// so no one can point them elsewhere.
	return name == "localhost" || strings.HasSuffix(name, ".localhost") || h.names[name]
}

// hostName is the host of a Host header or URL host, lower case, without
// its port, brackets or a trailing dot.
func hostName(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.TrimSuffix(strings.ToLower(host), ".")
}
