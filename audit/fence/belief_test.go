package fence_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit/fence"
)

// beliefs is an ingest server for POST /api/v1/beliefs that keeps every
// body it was sent, and refuses with refuse when set.
type beliefs struct {
	mu     sync.Mutex
	got    []map[string]any
	refuse string
}

func (s *beliefs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/api/v1/beliefs" || r.Header.Get("Authorization") != "Bearer "+ingestToken {
		apiError(w, http.StatusNotFound, "unexpected "+r.Method+" "+r.URL.Path)
		return
	}
	var m map[string]any
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		apiError(w, http.StatusBadRequest, "body: invalid JSON")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse != "" {
		apiError(w, http.StatusBadRequest, s.refuse)
		return
	}
	s.got = append(s.got, m)
	w.WriteHeader(http.StatusAccepted)
}

func (s *beliefs) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

func newBeliever(t *testing.T) (*fence.Believer, *beliefs) {
	t.Helper()
	s := &beliefs{}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	b, err := fence.NewBeliever(fence.BelieverConfig{URL: srv.URL, Token: ingestToken, Source: "prod-etcd", Holder: "694d7a1b2c3d4e5f"})
	if err != nil {
		t.Fatalf("NewBeliever: %v", err)
	}
	return b, s
}

func TestBelieverSendsBelief(t *testing.T) {
	b, s := newBeliever(t)
	before := time.Now().UTC()
	if err := b.Believe(context.Background(), "/locks/orders", 42); err != nil {
		t.Fatalf("Believe: %v", err)
	}
	if len(s.got) != 1 {
		t.Fatalf("server got %d beliefs, want 1", len(s.got))
	}
	m := s.got[0]
	if m["source"] != "prod-etcd" || m["lock"] != "/locks/orders" || m["holder"] != "694d7a1b2c3d4e5f" || m["token"] != float64(42) {
		t.Fatalf("belief = %v", m)
	}
	at, err := time.Parse(time.RFC3339Nano, m["at"].(string))
	if err != nil || at.Before(before) || at.After(time.Now()) {
		t.Fatalf("belief at %v (%v), want the time it was sent", m["at"], err)
	}

	s.refuse = "token: must not be negative"
	err = b.Believe(context.Background(), "/locks/orders", 42)
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), s.refuse) {
		t.Fatalf("Believe refused = %v, want the status and leasewatch's message", err)
	}
}

func TestBelieverHeartbeat(t *testing.T) {
	b, s := newBeliever(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Heartbeat(ctx, 5*time.Millisecond, "/locks/orders", 42)
	}()
	waitFor(t, "three heartbeats", func() bool { return s.count() >= 3 })
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Heartbeat did not return when its context ended")
	}
	n := s.count()
	// Nothing is sent once Heartbeat has returned.
	if err := b.Believe(context.Background(), "/locks/orders", 42); err != nil || s.count() != n+1 {
		t.Fatalf("after Heartbeat returned: %v, %d beliefs, want %d", err, s.count(), n+1)
	}
}

func TestNewBelieverValidatesConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  fence.BelieverConfig
		want string
	}{
		{fence.BelieverConfig{Token: "t", Source: "s"}, "BelieverConfig.URL is required"},
		{fence.BelieverConfig{URL: "ftp://x", Token: "t", Source: "s"}, "BelieverConfig.URL"},
		{fence.BelieverConfig{URL: "http://x", Source: "s"}, "BelieverConfig.Token is required"},
		{fence.BelieverConfig{URL: "http://x", Token: "t"}, "BelieverConfig.Source is required"},
	} {
		if _, err := fence.NewBeliever(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewBeliever(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
