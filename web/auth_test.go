package web

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/crypto/bcrypt"

	"github.com/leasewatch/leasewatch/audit"
)

// serveReal serves s on a loopback port until the test ends and returns its
// base URL, so requests cross a real TCP connection (and RemoteAddr is real).
func serveReal(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	scheme := "http://"
	if s.tls != nil {
		scheme = "https://"
	}
	return scheme + ln.Addr().String()
}

// fetch sends method to url with header pairs and returns the response and its body.
func fetch(t *testing.T, client *http.Client, method, url string, body io.Reader, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return res, string(b)
}

// lockedBuffer is a log destination safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func bcryptHash(t *testing.T, password string) string {
	t.Helper()
	// MinCost keeps the test fast; the server treats every cost alike.
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

func withAuth(a Auth) fixtureOption { return func(c *Config) { c.Auth = a } }

func basicHeader(user, password string) string {
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	req.SetBasicAuth(user, password)
	return req.Header.Get("Authorization")
}

// guardedRoutes are the dashboard and read API: one of each kind, and a
// route that does not exist (refused before it can be told apart).
func guardedRoutes(f *fixture) map[string]int {
	return map[string]int{
		"/":                                  http.StatusOK,
		"/locks?class=all":                   http.StatusOK,
		"/locks/" + itoa(f.orders.ID):        http.StatusOK,
		"/findings":                          http.StatusOK,
		"/review":                            http.StatusOK,
		"/alerts":                            http.StatusOK,
		"/api/v1/sources":                    http.StatusOK,
		"/api/v1/locks":                      http.StatusOK,
		"/api/v1/locks/" + itoa(f.orders.ID): http.StatusOK,
		"/api/v1/findings":                   http.StatusOK,
		"/no-such-page":                      http.StatusNotFound,
	}
}

func TestBasicAuth(t *testing.T) {
	f := newFixture(t, withAuth(Auth{Users: map[string]string{
		"alice": bcryptHash(t, "correct horse"),
		"bob":   bcryptHash(t, "battery staple"),
	}, Realm: "lw-test"}))
	base := serveReal(t, f.server)
	c := http.DefaultClient

	for path, okStatus := range guardedRoutes(f) {
		t.Run("Guarded"+path, func(t *testing.T) {
			for _, tt := range []struct {
				name, auth string
				want       int
			}{
				{"NoCredentials", "", http.StatusUnauthorized},
				{"WrongPassword", basicHeader("alice", "battery staple"), http.StatusUnauthorized},
				{"UnknownUser", basicHeader("mallory", "correct horse"), http.StatusUnauthorized},
				{"EmptyPassword", basicHeader("alice", ""), http.StatusUnauthorized},
				{"Bearer", "Bearer " + ingestToken, http.StatusUnauthorized},
				{"Right", basicHeader("alice", "correct horse"), okStatus},
				// Remembered credentials are the user and the password: a
				// right one does not let a wrong one through after it.
				{"WrongAfterRight", basicHeader("alice", "correct horse!"), http.StatusUnauthorized},
				{"OtherUser", basicHeader("bob", "battery staple"), okStatus},
				{"RightAgain", basicHeader("alice", "correct horse"), okStatus},
			} {
				var header []string
				if tt.auth != "" {
					header = []string{"Authorization", tt.auth}
				}
				res, body := fetch(t, c, http.MethodGet, base+path, nil, header...)
				if res.StatusCode != tt.want {
					t.Errorf("%s: status %d, want %d (body %.200s)", tt.name, res.StatusCode, tt.want, body)
				}
				if tt.want != http.StatusUnauthorized {
					continue
				}
				if got, want := res.Header.Get("WWW-Authenticate"), `Basic realm="lw-test", charset="UTF-8"`; got != want {
					t.Errorf("%s: WWW-Authenticate %q, want %q", tt.name, got, want)
				}
				if strings.Contains(body, "worker-2") || strings.Contains(body, "/locks/orders") {
					t.Errorf("%s: the refusal shows lock data: %.300s", tt.name, body)
				}
				if strings.HasPrefix(path, "/api/") {
					var e struct{ Error string }
					if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
						t.Errorf("%s: API refusal %q, want {\"error\": ...}", tt.name, body)
					}
				}
			}
		})
	}

	t.Run("OpenRoutes", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz", "/metrics", "/static/style.css", "/static/htmx.min.js"} {
			if res, _ := fetch(t, c, http.MethodGet, base+path, nil); res.StatusCode != http.StatusOK {
				t.Errorf("GET %s without credentials: status %d, want 200", path, res.StatusCode)
			}
		}
	})
	// A path that escapes /static/ is routed, and so guarded, by where it
	// lands, not by how it starts.
	t.Run("StaticPrefixGrantsNothing", func(t *testing.T) {
		for _, path := range []string{"/static/../api/v1/locks", "/static/%2e%2e/api/v1/locks"} {
			res, body := fetch(t, c, http.MethodGet, base+path, nil)
			if res.StatusCode == http.StatusOK && strings.Contains(body, "worker-2") {
				t.Errorf("GET %s without credentials served lock data", path)
			}
		}
	})
	t.Run("IngestKeepsItsBearerToken", func(t *testing.T) {
		report := `{"source":"prod-etcd","lock":"/locks/orders","resource":"orders-db","token":42,"outcome":"accepted"}`
		res, body := fetch(t, c, http.MethodPost, base+"/api/v1/writes", strings.NewReader(report),
			"Authorization", "Bearer "+ingestToken, "Content-Type", "application/json")
		if res.StatusCode != http.StatusAccepted {
			t.Errorf("POST /api/v1/writes with the bearer token: status %d, want 202 (%s)", res.StatusCode, body)
		}
		res, _ = fetch(t, c, http.MethodPost, base+"/api/v1/writes", strings.NewReader(report),
			"Authorization", basicHeader("alice", "correct horse"), "Content-Type", "application/json")
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST /api/v1/writes with a dashboard user: status %d, want 401: ingest takes only its tokens", res.StatusCode)
		}
		if got := res.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer ") {
			t.Errorf("ingest refusal: WWW-Authenticate %q, want a Bearer challenge", got)
		}
	})
}

func TestBasicAuthProtectMetricsAndHealth(t *testing.T) {
	f := newFixture(t, withAuth(Auth{Users: map[string]string{"prometheus": bcryptHash(t, "scrape")},
		ProtectMetrics: true, ProtectHealth: true}))
	base := serveReal(t, f.server)
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		res, _ := fetch(t, http.DefaultClient, http.MethodGet, base+path, nil)
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without credentials: status %d, want 401", path, res.StatusCode)
		}
		if got := res.Header.Get("WWW-Authenticate"); got != `Basic realm="leasewatch", charset="UTF-8"` {
			t.Errorf("GET %s: WWW-Authenticate %q, want the default realm", path, got)
		}
		res, _ = fetch(t, http.DefaultClient, http.MethodGet, base+path, nil, "Authorization", basicHeader("prometheus", "scrape"))
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s with credentials: status %d, want 200", path, res.StatusCode)
		}
	}
	if res, _ := fetch(t, http.DefaultClient, http.MethodGet, base+"/static/app.js", nil); res.StatusCode != http.StatusOK {
		t.Errorf("GET /static/app.js without credentials: status %d, want 200", res.StatusCode)
	}
}

func TestProxyAuth(t *testing.T) {
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	elsewhere := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32")}

	t.Run("FromTrustedProxy", func(t *testing.T) {
		f := newFixture(t, withAuth(Auth{ProxyHeader: "X-Forwarded-User", TrustedProxies: loopback}))
		base := serveReal(t, f.server)
		for path, okStatus := range guardedRoutes(f) {
			if res, body := fetch(t, http.DefaultClient, http.MethodGet, base+path, nil, "X-Forwarded-User", "alice@example.com"); res.StatusCode != okStatus {
				t.Errorf("GET %s naming a user: status %d, want %d (%.200s)", path, res.StatusCode, okStatus, body)
			}
			for _, user := range []string{"", "   "} {
				if res, _ := fetch(t, http.DefaultClient, http.MethodGet, base+path, nil, "X-Forwarded-User", user); res.StatusCode != http.StatusUnauthorized {
					t.Errorf("GET %s with user header %q: status %d, want 401", path, user, res.StatusCode)
				}
			}
			if res, _ := fetch(t, http.DefaultClient, http.MethodGet, base+path, nil, "X-Remote-User", "alice"); res.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s naming the user in another header: status %d, want 401", path, res.StatusCode)
			}
		}
	})

	t.Run("FromUntrustedAddress", func(t *testing.T) {
		var log lockedBuffer
		f := newFixture(t, withAuth(Auth{ProxyHeader: "X-Forwarded-User", TrustedProxies: elsewhere}),
			func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&log, nil)) })
		base := serveReal(t, f.server)
		for path := range guardedRoutes(f) {
			// Neither the user header nor a forwarded-for naming a trusted
			// proxy makes a direct request trusted.
			for _, header := range [][]string{
				{"X-Forwarded-User", "alice"},
				{"X-Forwarded-User", "alice", "X-Forwarded-For", "10.0.0.1", "X-Real-Ip", "10.0.0.1", "Forwarded", "for=10.0.0.1"},
				nil,
			} {
				res, body := fetch(t, http.DefaultClient, http.MethodGet, base+path, nil, header...)
				if res.StatusCode != http.StatusForbidden {
					t.Errorf("GET %s from 127.0.0.1 with %q: status %d, want 403", path, header, res.StatusCode)
				}
				if strings.Contains(body, "worker-2") {
					t.Errorf("GET %s from an untrusted address shows lock data", path)
				}
			}
		}
		// A misconfigured trusted_proxies shows in the log, but a flood of
		// forged headers does not flood it.
		if n := strings.Count(log.String(), "refused a request naming a user"); n != 1 {
			t.Errorf("%d warnings about user headers from outside the proxies, want 1:\n%s", n, log.String())
		}
		// Two of the three requests to each route named a user.
		if got, want := testutil.ToFloat64(f.server.metrics.authFailures.WithLabelValues(failureUntrustedProxy)),
			float64(2*len(guardedRoutes(f))); got != want {
			t.Errorf("leasewatch_auth_failures_total{reason=untrusted_proxy} = %v, want %v", got, want)
		}
		for _, path := range []string{"/healthz", "/readyz", "/metrics", "/static/style.css"} {
			if res, _ := fetch(t, http.DefaultClient, http.MethodGet, base+path, nil); res.StatusCode != http.StatusOK {
				t.Errorf("GET %s from an untrusted address: status %d, want 200 (not protected)", path, res.StatusCode)
			}
		}
		report := `{"source":"prod-etcd","lock":"/locks/orders","resource":"orders-db","token":42,"outcome":"accepted"}`
		if res, body := fetch(t, http.DefaultClient, http.MethodPost, base+"/api/v1/writes", strings.NewReader(report),
			"Authorization", "Bearer "+ingestToken, "Content-Type", "application/json"); res.StatusCode != http.StatusAccepted {
			t.Errorf("POST /api/v1/writes from outside the proxies: status %d, want 202 (%s)", res.StatusCode, body)
		}
	})
}

func TestNewRejectsBadAuth(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	for _, tt := range []struct {
		name string
		auth Auth
		want string
	}{
		{"BothModes", Auth{Users: map[string]string{"a": string(hash)}, ProxyHeader: "X-User", TrustedProxies: trusted}, "not both"},
		{"ProxyWithoutTrusted", Auth{ProxyHeader: "X-User"}, "TrustedProxies"},
		{"PlainPassword", Auth{Users: map[string]string{"a": "hunter2"}}, "not a bcrypt hash"},
		{"ProtectWithoutMode", Auth{ProtectMetrics: true}, "ProtectMetrics"},
		{"QuoteInRealm", Auth{Users: map[string]string{"a": string(hash)}, Realm: `a"b`}, "Realm"},
		{"HostCheckWithUsers", Auth{Users: map[string]string{"a": string(hash)}, CheckHost: true}, "CheckHost"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Config{Store: audit.Settled(newFixture(t).store), Auth: tt.auth, Logger: slog.New(slog.DiscardHandler)})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want an error about %s", err, tt.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q quotes the password", err)
			}
		})
	}
}

// A guessing client cannot run more bcrypt comparisons than maxBcrypt at
// once; a request whose client has gone stops waiting for one.
func TestBasicAuthWaitEndsWithRequest(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a, err := newAuthenticator(Auth{Users: map[string]string{"a": bcryptHash(t, "pw")}}, slog.New(slog.DiscardHandler), nil, m.authFailures)
	if err != nil {
		t.Fatal(err)
	}
	for range cap(a.bcrypt) {
		a.bcrypt <- struct{}{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/", bytes.NewReader(nil))
	req.SetBasicAuth("a", "pw")
	if err := a.basic(req); err == nil {
		t.Fatal("basic succeeded with every bcrypt slot taken and the request gone")
	}
}

// Ingest takes its bearer tokens alone whatever guards the dashboard: a
// resource or holder has no dashboard user, and a proxy's SSO cannot speak
// for it. Each refusal carries the bearer challenge.
func TestIngestTakesItsTokenUnderEveryAuthMode(t *testing.T) {
	elsewhere := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	bodies := map[string]string{
		"/api/v1/writes":  `{"source":"prod-etcd","lock":"/locks/orders","resource":"orders-db","token":42,"outcome":"accepted"}`,
		"/api/v1/beliefs": `{"source":"prod-etcd","lock":"/locks/orders","holder":"worker-2","token":42}`,
	}
	for _, mode := range []struct {
		name string
		auth Auth
	}{
		{"None", Auth{}},
		{"NoneCheckingHost", Auth{CheckHost: true}},
		{"Basic", Auth{Users: map[string]string{"alice": bcryptHash(t, "correct horse")}}},
		{"BasicProtectingEverything", Auth{Users: map[string]string{"alice": bcryptHash(t, "correct horse")},
			ProtectMetrics: true, ProtectHealth: true}},
		// The test client is not a trusted proxy: the dashboard answers it 403.
		{"ProxyUntrusted", Auth{ProxyHeader: "X-Forwarded-User", TrustedProxies: elsewhere}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			f := newFixture(t, withAuth(mode.auth))
			base := serveReal(t, f.server)
			for path, body := range bodies {
				post := func(header ...string) (*http.Response, string) {
					t.Helper()
					return fetch(t, http.DefaultClient, http.MethodPost, base+path, strings.NewReader(body),
						append([]string{"Content-Type", "application/json"}, header...)...)
				}
				if res, got := post("Authorization", bearer, "X-Forwarded-User", "alice"); res.StatusCode != http.StatusAccepted {
					t.Errorf("POST %s with the ingest token: status %d, want 202 (%s)", path, res.StatusCode, got)
				}
				for name, header := range map[string][]string{
					"NoToken":       nil,
					"WrongToken":    {"Authorization", "Bearer not-the-token"},
					"DashboardUser": {"Authorization", basicHeader("alice", "correct horse")},
				} {
					res, got := post(header...)
					if res.StatusCode != http.StatusUnauthorized {
						t.Errorf("POST %s %s: status %d, want 401 (%s)", path, name, res.StatusCode, got)
					}
					if got := res.Header.Get("WWW-Authenticate"); got != `Bearer realm="leasewatch"` {
						t.Errorf("POST %s %s: WWW-Authenticate %q, want the bearer challenge", path, name, got)
					}
				}
			}
		})
	}
}

// An open dashboard answers only the names it is reached by, so a page
// whose own name rebinds to this server's address reads nothing; IP
// addresses (probes and scrapes by pod IP), loopback names, ingest and the
// health probes pass.
func TestOpenDashboardAnswersOnlyItsHosts(t *testing.T) {
	var log lockedBuffer
	f := newFixture(t, withAuth(Auth{CheckHost: true, Hosts: []string{"LeaseWatch.example."}}),
		func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&log, nil)) })
	base := serveReal(t, f.server)
	port := base[strings.LastIndex(base, ":"):]
	get := func(host, path string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s as %s: %v", path, host, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	guarded := []string{"/", "/locks?class=all", "/api/v1/locks", "/review.json", "/metrics"}
	for _, host := range []string{"attacker.example" + port, "attacker.example", "leasewatch.example.attacker.example",
		"127.0.0.1.nip.io" + port, "localhost.attacker.example"} {
		for _, path := range guarded {
			res, body := get(host, path)
			if res.StatusCode != http.StatusMisdirectedRequest {
				t.Errorf("GET %s as %s: status %d, want 421", path, host, res.StatusCode)
			}
			if strings.Contains(body, "worker-2") || strings.Contains(body, "/locks/orders") {
				t.Errorf("GET %s as %s shows lock data: %.300s", path, host, body)
			}
			if !strings.Contains(body, "misdirected request") {
				t.Errorf("GET %s as %s: body %.300s does not say why", path, host, body)
			}
			if strings.HasPrefix(path, "/api/") && !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
				t.Errorf("GET %s as %s: Content-Type %q, want JSON", path, host, res.Header.Get("Content-Type"))
			}
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			if res, _ := get(host, path); res.StatusCode != http.StatusOK {
				t.Errorf("GET %s as %s: status %d, want 200 (probes pass)", path, host, res.StatusCode)
			}
		}
		req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/writes", strings.NewReader(
			`{"source":"prod-etcd","lock":"/locks/orders","resource":"orders-db","token":42,"outcome":"accepted"}`))
		req.Host = host
		req.Header.Set("Authorization", bearer)
		req.Header.Set("Content-Type", "application/json")
		if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusAccepted {
			t.Errorf("POST /api/v1/writes as %s: %v %v, want 202 (ingest has its token)", host, res.Status, err)
		}
	}
	for _, host := range []string{"127.0.0.1" + port, "localhost" + port, "LOCALHOST", "[::1]" + port, "::1",
		"10.1.2.3:8080", "[fd00::7]:8080", "app.localhost" + port, "leasewatch.example", "LEASEWATCH.example:443",
		"leasewatch.example." + port} {
		for _, path := range guarded {
			if res, body := get(host, path); res.StatusCode != http.StatusOK {
				t.Errorf("GET %s as %s: status %d, want 200 (%.200s)", path, host, res.StatusCode, body)
			}
		}
	}
	if n := strings.Count(log.String(), "refused a request for a host"); n != 1 {
		t.Errorf("%d warnings about misdirected hosts, want 1 (at most one a minute):\n%s", n, log.String())
	}
}

// Wrong passwords are counted and logged, at most once a minute, with the
// user and the address and never the password; a request without
// credentials (a browser's first, before its user types them) is neither.
func TestFailedLoginsLoggedAndCounted(t *testing.T) {
	var log lockedBuffer
	f := newFixture(t, withAuth(Auth{Users: map[string]string{"alice": bcryptHash(t, "correct horse")}}),
		func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&log, nil)) })
	base := serveReal(t, f.server)
	failures := func() float64 {
		return testutil.ToFloat64(f.server.metrics.authFailures.WithLabelValues(failureCredentials))
	}
	if got := failures(); got != 0 {
		t.Fatalf("failures before any request = %v, want 0", got)
	}
	for _, auth := range []string{"", basicHeader("alice", "hunter2"), basicHeader("mallory", "hunter2"),
		basicHeader("alice", "correct horse"), basicHeader("alice", "hunter2!")} {
		var header []string
		if auth != "" {
			header = []string{"Authorization", auth}
		}
		fetch(t, http.DefaultClient, http.MethodGet, base+"/", nil, header...)
	}
	if got := failures(); got != 3 {
		t.Errorf("leasewatch_auth_failures_total{reason=credentials} = %v, want 3", got)
	}
	logged := log.String()
	if n := strings.Count(logged, "failed login"); n != 1 {
		t.Errorf("%d failed-login lines, want 1 (at most one a minute):\n%s", n, logged)
	}
	if !strings.Contains(logged, "user=alice") || !strings.Contains(logged, "remote=127.0.0.1:") {
		t.Errorf("failed login line does not name the user and address:\n%s", logged)
	}
	if strings.Contains(logged, "hunter2") {
		t.Errorf("the log holds a password:\n%s", logged)
	}
}
