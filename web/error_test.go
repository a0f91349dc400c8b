package web

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
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
