package web

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// errorLog keeps what a server logs at error level.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= slog.LevelError }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }

func (l *errorLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

// A request its client abandoned is not a server error: the page's queries
// fail with the request's context, and that must be neither a 500 nor an
// error in the log (a load of browsers that come and go filled it).
func TestClientGoneIsNotAServerError(t *testing.T) {
	log := &errorLog{}
	f := newFixture(t, func(c *Config) { c.Logger = slog.New(log) })
	for _, path := range []string{"/", "/locks", "/findings", "/api/v1/locks", "/api/v1/findings"} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req := httptest.NewRequest(http.MethodGet, path, nil).WithContext(ctx)
		rec := httptest.NewRecorder()
		f.handler.ServeHTTP(rec, req)
		if rec.Code != statusClientClosed {
			t.Errorf("GET %s by a client that went away: status %d, want %d", path, rec.Code, statusClientClosed)
		}
		live := httptest.NewRecorder()
		f.handler.ServeHTTP(live, httptest.NewRequest(http.MethodGet, path, nil))
		if live.Code != http.StatusOK {
			t.Errorf("GET %s: status %d, want 200", path, live.Code)
		}
	}
	if msgs := log.all(); len(msgs) > 0 {
		t.Errorf("logged at error level: %s", strings.Join(msgs, "; "))
	}
}

// A replica that does not own a source refuses its write reports (fenced),
// and would refuse every retry sent on the same connection: behind a
// Service, which balances connections rather than requests, only a new
// connection can reach the owner. So the fenced 503, and only it, closes the
// connection (over HTTP/2, net/http sends GOAWAY for it); a store outage's
// 503 keeps it, since any replica would answer the same. Checked through the
// server's own Serve and a net/http client.
func TestFencedRefusalClosesConnection(t *testing.T) {
	body := `{"source":"cache","lock":"lock:late","resource":"r","outcome":"accepted"}`
	for _, tc := range []struct {
		name, code     string
		http2          bool
		wantRetryAfter string
		wantClose      bool
	}{
		{"Fenced", audit.EFENCED, false, retryAfterFenced, true},
		{"Unavailable", audit.EUNAVAILABLE, false, retryAfter, false},
		{"FencedHTTP2", audit.EFENCED, true, retryAfterFenced, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
			opts := []fixtureOption{func(c *Config) {
				c.Writes = failingWrites{audit.Errorf(tc.code, "source cache: refused")}
			}}
			if tc.http2 {
				certFile, keyFile, cert := selfSigned(t, t.TempDir(), "replica")
				opts = append(opts, func(c *Config) { c.TLS = serverTLS(t, certFile, keyFile) })
				pool := x509.NewCertPool()
				pool.AddCert(cert)
				client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
			}
			f := newFixture(t, opts...)
			base := serveReal(t, f.server)
			t.Cleanup(client.CloseIdleConnections)

			// send makes one request and reports whether it went on a
			// connection an earlier request had used.
			send := func(method, path, body string) (*http.Response, bool) {
				t.Helper()
				var reused bool
				trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
				req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace),
					method, base+path, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", bearer)
				res, err := client.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", method, path, err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if want := map[bool]int{false: 1, true: 2}[tc.http2]; res.ProtoMajor != want {
					t.Fatalf("%s %s went over %s, want HTTP/%d", method, path, res.Proto, want)
				}
				return res, reused
			}

			// A first request opens the connection the report may reuse.
			if res, _ := send(http.MethodGet, "/healthz", ""); res.StatusCode != http.StatusOK {
				t.Fatalf("GET /healthz = %d, want 200", res.StatusCode)
			}
			res, reused := send(http.MethodPost, "/api/v1/writes", body)
			if !reused {
				t.Fatalf("the report did not reuse the kept-alive connection; the test cannot tell a closed one")
			}
			if res.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("POST /api/v1/writes = %d, want 503", res.StatusCode)
			}
			if got := res.Header.Get("Retry-After"); got != tc.wantRetryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tc.wantRetryAfter)
			}
			// HTTP/2 has no Connection header: its server sends GOAWAY instead.
			if closed := res.Close; !tc.http2 && closed != tc.wantClose {
				t.Errorf("response asks to close the connection: %v, want %v (Connection %q)",
					closed, tc.wantClose, res.Header.Get("Connection"))
			}
			// The retry: on a new connection after a fenced refusal, on the
			// same one after an outage. The HTTP/2 client learns of the
			// GOAWAY from its reader, so poll for it briefly.
			deadline := time.Now().Add(5 * time.Second)
			for {
				_, reused := send(http.MethodPost, "/api/v1/writes", body)
				if reused != tc.wantClose {
					break
				}
				if !tc.http2 || time.Now().After(deadline) {
					t.Fatalf("retry reused the connection: %v, want %v", reused, !tc.wantClose)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
