package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// AuthConfig is auth: who may read the dashboard and the read API. Optional,
// added to the contract. POST /api/v1/writes is never behind it: it has its
// own bearer tokens (ingest_tokens).
//
//	auth:
//	  mode: basic                    # basic, proxy or none (the default)
//	  # basic: HTTP basic authentication against bcrypt password hashes
//	  # (htpasswd -nbBC 12 alice, or any bcrypt library). Serve it over TLS
//	  # (tls: below, or a terminating proxy): basic sends the password with
//	  # every request.
//	  realm: leasewatch              # named in WWW-Authenticate
//	  users:                         # name: bcrypt hash
//	    alice: "$2y$12$..."
//	  users_file: /etc/leasewatch/htpasswd   # further users, htpasswd lines name:hash (a mounted Secret)
//	  # proxy: a reverse proxy in front (oauth2-proxy, an ingress with SSO)
//	  # authenticates and names the user in a header. Only requests from
//	  # trusted_proxies are served; anything else is refused with 403, header
//	  # or not, so nobody can name themselves by reaching leasewatch directly.
//	  proxy_header: X-Forwarded-User # the header naming the user
//	  trusted_proxies: ["10.0.0.0/8", "127.0.0.1"]   # the proxies' addresses or CIDRs
//	  # none: no authentication. Allowed only when listen is a loopback address,
//	  # unless allow_open says a network policy or firewall already guards it.
//	  allow_open: false
//	  protect_metrics: false         # /metrics behind the same authentication
//	  protect_health: false          # /healthz and /readyz behind it too
//
// /metrics and the health probes are open by default, whatever the mode:
// kubelets and most Prometheus set-ups cannot authenticate, and neither shows
// what the dashboard shows (holders, tokens, writes). /metrics does name
// locks and sources: set protect_metrics with basic and give Prometheus
// basic_auth credentials where lock names are sensitive. /static/ (the
// stylesheet and scripts every build ships) is always open.
type AuthConfig struct {
	Mode           string            `yaml:"mode"`
	Realm          string            `yaml:"realm"`
	Users          map[string]string `yaml:"users"`
	UsersFile      string            `yaml:"users_file"`
	ProxyHeader    string            `yaml:"proxy_header"`
	TrustedProxies []string          `yaml:"trusted_proxies"`
	AllowOpen      bool              `yaml:"allow_open"`
	ProtectMetrics bool              `yaml:"protect_metrics"`
	ProtectHealth  bool              `yaml:"protect_health"`
}

// Authentication modes of auth.mode.
const (
	AuthNone  = "none"
	AuthBasic = "basic"
	AuthProxy = "proxy"
)

// Defaults for omitted auth keys.
const (
	DefaultAuthRealm       = "leasewatch"
	DefaultAuthProxyHeader = "X-Forwarded-User"
)

// fillDefaults sets omitted keys to their defaults. Realm and header default
// whatever the mode, so that a key set for another mode is still checked.
func (a *AuthConfig) fillDefaults() {
	if a.Mode == "" {
		a.Mode = AuthNone
	}
	if a.Realm == "" {
		a.Realm = DefaultAuthRealm
	}
	if a.ProxyHeader == "" {
		a.ProxyHeader = DefaultAuthProxyHeader
	}
}

// validate checks auth against listen, the address the dashboard is served on.
// Secrets (password hashes) never appear in its messages.
func (a *AuthConfig) validate(listen string) error {
	switch a.Mode {
	case AuthNone:
		if !a.AllowOpen && !loopback(listen) {
			return fmt.Errorf("mode: none, but listen %s is not a loopback address, so anyone who reaches it could read the dashboard: set mode to basic or proxy, or allow_open: true if a firewall or network policy already guards it", listen)
		}
	case AuthBasic:
		if len(a.Users) == 0 && a.UsersFile == "" {
			return errors.New("users: mode basic needs at least one user (or users_file)")
		}
	case AuthProxy:
		if len(a.TrustedProxies) == 0 {
			return errors.New("trusted_proxies: mode proxy needs the address or CIDR of the proxy that sets " + a.ProxyHeader)
		}
	default:
		return fmt.Errorf("mode: %q is not one of basic, proxy, none", a.Mode)
	}
	if a.Mode == AuthNone && (a.ProtectMetrics || a.ProtectHealth) {
		return errors.New("protect_metrics, protect_health: mode none has no authentication to protect them with")
	}
	if a.AllowOpen && a.Mode != AuthNone {
		return fmt.Errorf("allow_open: applies only to mode none, not %s", a.Mode)
	}
	if a.Mode != AuthBasic && (len(a.Users) > 0 || a.UsersFile != "") {
		return fmt.Errorf("users: apply only to mode basic, not %s", a.Mode)
	}
	if a.Mode != AuthProxy && len(a.TrustedProxies) > 0 {
		return fmt.Errorf("trusted_proxies: apply only to mode proxy, not %s", a.Mode)
	}
	if strings.ContainsAny(a.Realm, "\"\\") || strings.ContainsFunc(a.Realm, isControl) {
		return fmt.Errorf("realm: %q must not contain quotes, backslashes or control characters", a.Realm)
	}
	for _, name := range slices.Sorted(maps.Keys(a.Users)) {
		if err := checkUser(name, a.Users[name]); err != nil {
			return fmt.Errorf("users.%s", err)
		}
	}
	if !validHeaderName(a.ProxyHeader) {
		return fmt.Errorf("proxy_header: %q is not a valid header name", a.ProxyHeader)
	}
	for i, p := range a.TrustedProxies {
		if _, err := parsePrefix(p); err != nil {
			return fmt.Errorf("trusted_proxies[%d]: %w", i, err)
		}
	}
	return nil
}

// checkUser checks one basic user; its error starts with the user's name.
func checkUser(name, hash string) error {
	switch {
	case name == "" || strings.ContainsAny(name, ":") || strings.ContainsFunc(name, isControl):
		return fmt.Errorf("%q: a user name must be non-empty, without ':' or control characters", name)
	case hash == "":
		return fmt.Errorf("%s: password hash is empty", name)
	}
	// Cost reads the hash's prefix and cost without comparing anything, so it
	// tells a bcrypt hash from a plain password cheaply. The message never
	// quotes the value: it may be a password pasted by mistake.
	if _, err := bcrypt.Cost([]byte(hash)); err != nil {
		return fmt.Errorf("%s: not a bcrypt hash ($2a$, $2b$ or $2y$); generate one with htpasswd -nbBC 12 %s", name, name)
	}
	return nil
}

// readUsersFile adds the users of auth.users_file, htpasswd lines name:hash
// (blank lines and # comments skipped), to Users.
func (a *AuthConfig) readUsersFile() error {
	if a.UsersFile == "" {
		return nil
	}
	data, err := os.ReadFile(a.UsersFile)
	if err != nil {
		return fmt.Errorf("users_file: %w", err)
	}
	if a.Users == nil {
		a.Users = make(map[string]string)
	}
	n := 0
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hash, ok := strings.Cut(line, ":")
		if !ok {
			return fmt.Errorf("users_file: %s line %d: want name:bcrypt-hash", a.UsersFile, i+1)
		}
		if err := checkUser(name, hash); err != nil {
			return fmt.Errorf("users_file: %s line %d: %w", a.UsersFile, i+1, err)
		}
		if _, dup := a.Users[name]; dup {
			return fmt.Errorf("users_file: %s line %d: user %s is already defined", a.UsersFile, i+1, name)
		}
		a.Users[name] = hash
		n++
	}
	if n == 0 {
		return fmt.Errorf("users_file: %s holds no user", a.UsersFile)
	}
	return nil
}

// Proxies returns trusted_proxies as prefixes, a bare address as a
// single-address prefix. Call it on a validated configuration.
func (a AuthConfig) Proxies() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range a.TrustedProxies {
		if p, err := parsePrefix(s); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// parsePrefix parses an address or a CIDR. IPv4-mapped IPv6 addresses are
// unmapped, as the server unmaps a client's address before matching.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR", s)
		}
		if p.Addr().Is4In6() {
			return netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0)).Masked(), nil
		}
		return p.Masked(), nil
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR", s)
	}
	addr = addr.Unmap()
	return netip.PrefixFrom(addr, addr.BitLen()), nil
}

// loopback reports whether listen binds only loopback addresses. An empty
// host binds every interface; a host name other than localhost may resolve
// to anything, so it counts as open.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && addr.Unmap().IsLoopback()
}

// validHeaderName reports whether h is a valid HTTP header field name.
func validHeaderName(h string) bool {
	if h == "" {
		return false
	}
	for _, r := range h {
		if r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return http.CanonicalHeaderKey(h) != ""
}

func isControl(r rune) bool { return r < ' ' || r == 0x7f }
