package fence_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit/fence"
)

const ingestToken = "s3cret"

// failMode is how the ingest server fails the requests it is told to fail.
type failMode int

const (
	failUnavailable   failMode = iota // 503, stores nothing
	failTooMany                       // 429 with Retry-After, stores nothing
	failDropConn                      // closes the connection without answering, stores nothing
	failStoreThenDrop                 // stores the batch, then closes the connection: the response is lost
	failBadRequest                    // 400 naming a field, stores nothing
	failFenced                        // 503 fenced, Retry-After: 1, Connection: close, stores nothing
)

// received is one write as the ingest server decoded it.
type received struct {
	Source       string
	Lock         string
	Resource     string
	Token        *int64
	Outcome      string
	HighestToken *int64
	Holder       string
	At           time.Time
	RequestID    string
}

// ingest implements POST /api/v1/writes as the HTTP API contract describes it:
// bearer-token auth, a 1 MiB body limit, one object or an array, 400 naming
// the first bad field, dedupe by request_id and 202 {"accepted":N}. It can
// fail the first requests in one of the failModes, or hold every request until
// released.
type ingest struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	mode     failMode
	failLeft int           // requests still to fail in mode
	gate     chan struct{} // when not nil, requests wait until it is closed
	waiting  int           // requests waiting at the gate
	requests [][]string    // request_ids of every decoded request, in arrival order
	failed   int           // requests failed on purpose
	stored   map[string]received
	order    []string // request_ids in the order they were stored
	dupes    int      // writes received again after they were stored
	invalid  []string // contract violations the server answered 400 for
	conns    int      // connections clients opened

	// owns, when not nil, makes the server a replica that records only the
	// sources it names: it refuses a request naming any other as leasewatch
	// does (503 fenced, Retry-After: 1, Connection: close), storing nothing.
	owns  map[string]bool
	mixed int // requests naming more than one source
}

func newIngest(t *testing.T) *ingest {
	t.Helper()
	s := &ingest{t: t, stored: make(map[string]received)}
	s.srv = httptest.NewUnstartedServer(s)
	s.srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
		}
	}
	s.srv.Start()
	t.Cleanup(func() {
		s.release()
		s.srv.Close()
	})
	return s
}

// failFirst makes the next n requests fail in mode.
func (s *ingest) failFirst(n int, mode failMode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failLeft, s.mode = n, mode
}

// hold makes requests wait until release.
func (s *ingest) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
}

func (s *ingest) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

func (s *ingest) snapshot() (stored map[string]received, requests [][]string, invalid []string, dupes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stored = make(map[string]received, len(s.stored))
	for k, v := range s.stored {
		stored[k] = v
	}
	for _, r := range s.requests {
		requests = append(requests, slices.Clone(r))
	}
	return stored, requests, slices.Clone(s.invalid), s.dupes
}

func (s *ingest) count() (stored, requests int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.stored), len(s.requests)
}

func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func (s *ingest) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/api/v1/writes" {
		apiError(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
		return
	}
	s.mu.Lock()
	gate := s.gate
	if gate != nil {
		s.waiting++
	}
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	if r.Header.Get("Authorization") != "Bearer "+ingestToken {
		apiError(w, http.StatusUnauthorized, "missing or invalid ingest token")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		apiError(w, http.StatusRequestEntityTooLarge, "body over 1 MiB")
		return
	}
	writes, err := decodeWrites(body)
	if err != nil {
		s.mu.Lock()
		s.invalid = append(s.invalid, err.Error())
		s.mu.Unlock()
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}

	s.mu.Lock()
	ids := make([]string, len(writes))
	for i, wr := range writes {
		ids[i] = wr.RequestID
	}
	s.requests = append(s.requests, ids)
	fail := s.failLeft > 0
	if fail {
		s.failLeft--
		s.failed++
	}
	mode := s.mode
	foreign := writes[0].Source // the source a fenced refusal names
	if slices.ContainsFunc(writes, func(wr received) bool { return wr.Source != writes[0].Source }) {
		s.mixed++
	}
	if i := slices.IndexFunc(writes, func(wr received) bool { return s.owns != nil && !s.owns[wr.Source] }); i >= 0 {
		fail, mode, foreign = true, failFenced, writes[i].Source
	}
	if !fail || s.mode == failStoreThenDrop {
		for _, wr := range writes {
			if _, ok := s.stored[wr.RequestID]; ok {
				s.dupes++
				continue
			}
			s.stored[wr.RequestID] = wr
			s.order = append(s.order, wr.RequestID)
		}
	}
	s.mu.Unlock()

	if !fail {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"accepted":%d}`, len(writes))
		return
	}
	switch mode {
	case failUnavailable:
		apiError(w, http.StatusServiceUnavailable, "store unavailable")
	case failTooMany:
		// Far above the test's MaxRetryDelay: the reporter must cap it.
		w.Header().Set("Retry-After", "3600")
		apiError(w, http.StatusTooManyRequests, "slow down")
	case failBadRequest:
		apiError(w, http.StatusBadRequest, "lock: required")
	case failFenced:
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Connection", "close")
		apiError(w, http.StatusServiceUnavailable, fmt.Sprintf("source %q is not recorded by this replica", foreign))
	case failDropConn, failStoreThenDrop:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			s.t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
	}
}

// contractFields are the fields of a POST /api/v1/writes element.
var contractFields = []string{"source", "lock", "resource", "token", "outcome", "highest_token", "holder", "at", "request_id"}

// decodeWrites decodes and validates a request body, naming the first bad
// field. The reporter always sends every field, so a missing or unknown one
// is an error here even where the server would take a default.
func decodeWrites(body []byte) ([]received, error) {
	var raws []json.RawMessage
	if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 && trimmed[0] == '[' {
		if err := json.Unmarshal(trimmed, &raws); err != nil {
			return nil, fmt.Errorf("body: %v", err)
		}
	} else {
		raws = []json.RawMessage{trimmed}
	}
	if len(raws) == 0 {
		return nil, errors.New("body: empty array")
	}
	out := make([]received, len(raws))
	for i, raw := range raws {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil {
			return nil, fmt.Errorf("[%d]: %v", i, err)
		}
		for name := range fields {
			if !slices.Contains(contractFields, name) {
				return nil, fmt.Errorf("[%d].%s: unknown field", i, name)
			}
		}
		for _, name := range contractFields {
			if _, ok := fields[name]; !ok {
				return nil, fmt.Errorf("[%d].%s: missing", i, name)
			}
		}
		w := &out[i]
		var at string
		for name, dst := range map[string]any{
			"source": &w.Source, "lock": &w.Lock, "resource": &w.Resource, "token": &w.Token,
			"outcome": &w.Outcome, "highest_token": &w.HighestToken, "holder": &w.Holder,
			"at": &at, "request_id": &w.RequestID,
		} {
			if err := json.Unmarshal(fields[name], dst); err != nil {
				return nil, fmt.Errorf("[%d].%s: %v", i, name, err)
			}
		}
		for name, v := range map[string]string{"source": w.Source, "lock": w.Lock, "resource": w.Resource, "request_id": w.RequestID} {
			if v == "" {
				return nil, fmt.Errorf("[%d].%s: required", i, name)
			}
		}
		if w.Outcome != "accepted" && w.Outcome != "rejected" {
			return nil, fmt.Errorf("[%d].outcome: %q is not accepted or rejected", i, w.Outcome)
		}
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil || !strings.HasSuffix(at, "Z") {
			return nil, fmt.Errorf("[%d].at: %q is not RFC 3339 in UTC", i, at)
		}
		w.At = t
	}
	return out, nil
}

func newReporter(t *testing.T, s *ingest, cfg fence.Config) *fence.Reporter {
	t.Helper()
	cfg.URL = s.srv.URL
	return startReporter(t, cfg)
}

// startReporter starts a Reporter of source prod-etcd and resource
// accounts-db, sending to cfg.URL.
func startReporter(t *testing.T, cfg fence.Config) *fence.Reporter {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = ingestToken
	}
	cfg.Source, cfg.Resource = "prod-etcd", "accounts-db"
	if cfg.MaxRetryDelay == 0 {
		cfg.MaxRetryDelay = 10 * time.Millisecond
	}
	r, err := fence.NewReporter(cfg)
	if err != nil {
		t.Fatalf("NewReporter: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.Close(ctx)
	})
	return r
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func flush(t *testing.T, r *fence.Reporter) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.Flush(ctx)
}

func checkStats(t *testing.T, r *fence.Reporter, want fence.Stats) {
	t.Helper()
	if got := r.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

func ptr(v int64) *int64 { return &v }

// tokens returns the sorted tokens of the stored writes.
func tokens(stored map[string]received) []int64 {
	var out []int64
	for _, w := range stored {
		out = append(out, *w.Token)
	}
	slices.Sort(out)
	return out
}

func seq(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}

func TestNewReporterValidatesConfig(t *testing.T) {
	valid := fence.Config{URL: "http://127.0.0.1:8080", Token: "t", Source: "s", Resource: "r"}
	tests := []struct {
		name   string
		change func(*fence.Config)
		field  string
	}{
		{"MissingURL", func(c *fence.Config) { c.URL = "" }, "URL"},
		{"URLWithoutScheme", func(c *fence.Config) { c.URL = "127.0.0.1:8080" }, "URL"},
		{"URLWrongScheme", func(c *fence.Config) { c.URL = "ftp://host" }, "URL"},
		{"URLWithoutHost", func(c *fence.Config) { c.URL = "http://" }, "URL"},
		{"MissingToken", func(c *fence.Config) { c.Token = "" }, "Token"},
		{"MissingSource", func(c *fence.Config) { c.Source = "" }, "Source"},
		{"MissingResource", func(c *fence.Config) { c.Resource = "" }, "Resource"},
		{"NegativeQueueSize", func(c *fence.Config) { c.QueueSize = -1 }, "QueueSize"},
		{"NegativeBatchSize", func(c *fence.Config) { c.BatchSize = -1 }, "BatchSize"},
		{"NegativeFlushInterval", func(c *fence.Config) { c.FlushInterval = -time.Second }, "FlushInterval"},
		{"NegativeMaxRetryDelay", func(c *fence.Config) { c.MaxRetryDelay = -time.Second }, "MaxRetryDelay"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid
			tc.change(&cfg)
			r, err := fence.NewReporter(cfg)
			if err == nil {
				r.Close(context.Background())
				t.Fatalf("NewReporter accepted %+v", cfg)
			}
			if !strings.Contains(err.Error(), "Config."+tc.field) {
				t.Fatalf("error %q does not name Config.%s", err, tc.field)
			}
		})
	}
	t.Run("ValidWithDefaults", func(t *testing.T) {
		r, err := fence.NewReporter(valid)
		if err != nil {
			t.Fatalf("NewReporter(%+v): %v", valid, err)
		}
		if err := r.Close(context.Background()); err != nil {
			t.Fatalf("Close of an idle reporter: %v", err)
		}
	})
}

func TestReporterDelivers(t *testing.T) {
	s := newIngest(t)
	// With an hour's FlushInterval, only full batches and Flush send.
	r := newReporter(t, s, fence.Config{BatchSize: 100, FlushInterval: time.Hour})

	const n = 1234
	zone := time.FixedZone("UTC+2", 2*60*60)
	base := time.Date(2025, 3, 1, 12, 0, 0, 123456789, zone)
	want := make(map[int64]fence.Write, n) // by token
	before := time.Now()
	for i := range n {
		w := fence.Write{Lock: "/locks/accounts", Token: ptr(int64(i)), Outcome: fence.Accepted, Holder: fmt.Sprintf("worker-%d", i%7)}
		if i%3 == 0 {
			w.Outcome, w.HighestToken = fence.Rejected, ptr(int64(i+1))
		}
		if i%10 == 0 {
			w.At = base.Add(time.Duration(i) * time.Millisecond)
			w.RequestID = fmt.Sprintf("caller-%d", i)
		}
		want[int64(i)] = w
		r.Report(w)
	}
	after := time.Now()
	if err := flush(t, r); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	checkStats(t, r, fence.Stats{Sent: n})

	stored, requests, invalid, dupes := s.snapshot()
	if len(invalid) > 0 {
		t.Fatalf("server found contract violations: %q", invalid)
	}
	if dupes != 0 {
		t.Errorf("server saw %d duplicate writes without any failure", dupes)
	}
	// 12 full batches as the queue filled, then the rest on Flush.
	if len(requests) != 13 {
		t.Errorf("requests = %d, want 13", len(requests))
	}
	for i, ids := range requests {
		if len(ids) > 100 {
			t.Errorf("request %d carries %d writes, over BatchSize 100", i, len(ids))
		}
	}
	if got := tokens(stored); !slices.Equal(got, seq(n)) {
		t.Fatalf("stored %d writes, want tokens 0..%d once each", len(got), n-1)
	}
	for id, got := range stored {
		w := want[*got.Token]
		if got.Source != "prod-etcd" || got.Resource != "accounts-db" || got.Lock != w.Lock ||
			got.Outcome != string(w.Outcome) || got.Holder != w.Holder {
			t.Fatalf("token %d stored as %+v, want %+v from source prod-etcd, resource accounts-db", *got.Token, got, w)
		}
		if (got.HighestToken == nil) != (w.HighestToken == nil) ||
			got.HighestToken != nil && *got.HighestToken != *w.HighestToken {
			t.Fatalf("token %d: highest_token = %v, want %v", *got.Token, got.HighestToken, w.HighestToken)
		}
		if w.RequestID != "" {
			if id != w.RequestID {
				t.Fatalf("token %d: request_id = %q, want the caller's %q", *got.Token, id, w.RequestID)
			}
		} else if b, err := hex.DecodeString(id); err != nil || len(b) != 16 {
			t.Fatalf("token %d: generated request_id %q is not 32 hex digits", *got.Token, id)
		}
		if !w.At.IsZero() {
			if !got.At.Equal(w.At) {
				t.Fatalf("token %d: at = %v, want the caller's %v", *got.Token, got.At, w.At)
			}
		} else if got.At.Before(before) || got.At.After(after) {
			t.Fatalf("token %d: default at = %v, want the time of Report (%v..%v)", *got.Token, got.At, before, after)
		}
	}
}

func TestReporterSendsAfterFlushInterval(t *testing.T) {
	s := newIngest(t)
	r := newReporter(t, s, fence.Config{FlushInterval: 10 * time.Millisecond})
	for i := range 3 {
		r.Report(fence.Write{Lock: "/locks/a", Token: ptr(int64(i)), Outcome: fence.Accepted})
	}
	waitFor(t, "3 writes stored without Flush", func() bool {
		n, _ := s.count()
		return n == 3
	})
	waitFor(t, "Stats.Sent = 3", func() bool { return r.Stats().Sent == 3 })
}

func TestReporterRetries(t *testing.T) {
	tests := []struct {
		name      string
		mode      failMode
		wantDupes int // writes the server received again after storing them
	}{
		{"ServiceUnavailable", failUnavailable, 0},
		{"TooManyRequests", failTooMany, 0},
		{"ConnectionDropped", failDropConn, 0},
		// The server stored the first batch but its answers were lost, so the
		// reporter sent it three more times; dedupe by request_id keeps one.
		{"ResponseLostAfterStore", failStoreThenDrop, 3 * 50},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newIngest(t)
			s.failFirst(3, tc.mode)
			r := newReporter(t, s, fence.Config{BatchSize: 50, FlushInterval: time.Hour})

			const n = 120
			for i := range n {
				r.Report(fence.Write{Lock: "/locks/a", Token: ptr(int64(i)), Outcome: fence.Accepted, Holder: "a"})
			}
			if err := flush(t, r); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			checkStats(t, r, fence.Stats{Sent: n, Retries: 3})

			stored, requests, invalid, dupes := s.snapshot()
			if len(invalid) > 0 {
				t.Fatalf("server found contract violations: %q", invalid)
			}
			if got := tokens(stored); !slices.Equal(got, seq(n)) {
				t.Fatalf("stored %d writes, want tokens 0..%d once each", len(got), n-1)
			}
			if dupes != tc.wantDupes {
				t.Errorf("server received %d writes again, want %d", dupes, tc.wantDupes)
			}
			// Three failures and the success of the first batch, then two more batches.
			if len(requests) != 6 {
				t.Fatalf("requests = %d, want 6", len(requests))
			}
			for i := 1; i <= 3; i++ {
				if !slices.Equal(requests[i], requests[0]) {
					t.Fatalf("retry %d sent request_ids %v, want the first attempt's %v", i, requests[i], requests[0])
				}
			}
		})
	}
}

func TestReporterDropsRefusedBatch(t *testing.T) {
	t.Run("BadRequest", func(t *testing.T) {
		s := newIngest(t)
		s.failFirst(1, failBadRequest)
		r := newReporter(t, s, fence.Config{BatchSize: 50, FlushInterval: time.Hour})

		for i := range 30 {
			r.Report(fence.Write{Lock: "/locks/a", Token: ptr(int64(i)), Outcome: fence.Accepted})
		}
		if err := flush(t, r); !errors.Is(err, fence.ErrDropped) {
			t.Fatalf("Flush after a 400 = %v, want ErrDropped", err)
		}
		checkStats(t, r, fence.Stats{Dropped: 30, Refused: 30})

		// The refused batch does not hold up later writes.
		for i := range 10 {
			r.Report(fence.Write{Lock: "/locks/a", Token: ptr(int64(100 + i)), Outcome: fence.Accepted})
		}
		if err := flush(t, r); err != nil {
			t.Fatalf("Flush after recovery: %v", err)
		}
		checkStats(t, r, fence.Stats{Sent: 10, Dropped: 30, Refused: 30})
		stored, requests, _, _ := s.snapshot()
		if len(requests) != 2 {
			t.Errorf("requests = %d, want 2 (the refused batch is not retried)", len(requests))
		}
		if len(stored) != 10 {
			t.Errorf("stored = %d writes, want 10", len(stored))
		}
	})
	t.Run("Unauthorized", func(t *testing.T) {
		s := newIngest(t)
		r := newReporter(t, s, fence.Config{Token: "wrong", FlushInterval: time.Hour})
		r.Report(fence.Write{Lock: "/locks/a", Token: ptr(1), Outcome: fence.Rejected})
		if err := flush(t, r); !errors.Is(err, fence.ErrDropped) {
			t.Fatalf("Flush with a wrong token = %v, want ErrDropped", err)
		}
		checkStats(t, r, fence.Stats{Dropped: 1, Refused: 1})
	})
}

func TestReporterDropsInvalidWrites(t *testing.T) {
	s := newIngest(t)
	r := newReporter(t, s, fence.Config{})
	r.Report(fence.Write{Token: ptr(1), Outcome: fence.Accepted})                                         // no lock
	r.Report(fence.Write{Lock: "/locks/a", Token: ptr(1), Outcome: "maybe"})                              // bad outcome
	r.Report(fence.Write{Lock: "/locks/a", Token: ptr(2), HighestToken: ptr(1), Outcome: fence.Rejected}) // rejected above the highest
	r.Report(fence.Write{Lock: "/locks/a", Token: ptr(1), Outcome: fence.Accepted})                       // fine
	if err := flush(t, r); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	checkStats(t, r, fence.Stats{Sent: 1, Dropped: 3})
	if _, requests := s.count(); requests != 1 {
		t.Errorf("requests = %d, want 1", requests)
	}
}

// The server answers 413 above 1 MiB, which the reporter cannot fix by
// retrying, so it must cut batches to fit.
func TestReporterSplitsLargeBatches(t *testing.T) {
	s := newIngest(t)
	r := newReporter(t, s, fence.Config{FlushInterval: time.Hour})
	holder := strings.Repeat("h", 200<<10)
	for i := range 12 {
		r.Report(fence.Write{Lock: "/locks/a", Token: ptr(int64(i)), Outcome: fence.Accepted, Holder: holder})
	}
	if err := flush(t, r); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	checkStats(t, r, fence.Stats{Sent: 12})
	stored, requests, _, _ := s.snapshot()
	if got := tokens(stored); !slices.Equal(got, seq(12)) {
		t.Fatalf("stored tokens %v, want 0..11", got)
	}
	if len(requests) < 3 {
		t.Errorf("12 writes of 200 KiB went in %d requests, want at least 3", len(requests))
	}

	huge := strings.Repeat("h", 1<<20)
	r.Report(fence.Write{Lock: "/locks/a", Token: ptr(99), Outcome: fence.Accepted, Holder: huge})
	checkStats(t, r, fence.Stats{Sent: 12, Dropped: 1})
}

func TestReportNeverBlocks(t *testing.T) {
	s := newIngest(t)
	s.hold()
	const queueSize, n = 100, 1000
	r := newReporter(t, s, fence.Config{QueueSize: queueSize, BatchSize: 10, FlushInterval: time.Millisecond})

	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			r.Report(fence.Write{Lock: "/locks/a", Token: ptr(int64(i)), Outcome: fence.Accepted})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("Report blocked while leasewatch hangs (Stats %+v)", r.Stats())
	}
	// Nothing is acknowledged while the server holds the first request, so
	// exactly QueueSize writes are pending and the rest were dropped.
	checkStats(t, r, fence.Stats{Dropped: n - queueSize, Pending: queueSize})

	s.release()
	if err := flush(t, r); err != nil {
		t.Fatalf("Flush after release: %v", err)
	}
	checkStats(t, r, fence.Stats{Sent: queueSize, Dropped: n - queueSize})
	stored, _, _, _ := s.snapshot()
	if got := tokens(stored); !slices.Equal(got, seq(queueSize)) {
		t.Fatalf("stored %d writes, want the first %d tokens", len(got), queueSize)
	}
}

func TestCloseGivesUpWhenServerHangs(t *testing.T) {
	s := newIngest(t)
	s.hold()
	r := newReporter(t, s, fence.Config{FlushInterval: time.Millisecond})
	for i := range 20 {
		r.Report(fence.Write{Lock: "/locks/a", Token: ptr(int64(i)), Outcome: fence.Accepted})
	}
	waitFor(t, "a request held by the server", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.waiting > 0
	})

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := r.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close while the server hangs = %v, want context.DeadlineExceeded", err)
	}
	checkStats(t, r, fence.Stats{Dropped: 20})

	r.Report(fence.Write{Lock: "/locks/a", Token: ptr(21), Outcome: fence.Accepted})
	checkStats(t, r, fence.Stats{Dropped: 21})
	if err := flush(t, r); err != nil {
		t.Errorf("Flush after Close = %v, want nil", err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

func TestCloseDeliversPending(t *testing.T) {
	s := newIngest(t)
	r := newReporter(t, s, fence.Config{FlushInterval: time.Hour})
	for i := range 5 {
		r.Report(fence.Write{Lock: "/locks/a", Token: ptr(int64(i)), Outcome: fence.Accepted})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	checkStats(t, r, fence.Stats{Sent: 5})
	if n, _ := s.count(); n != 5 {
		t.Fatalf("stored = %d, want 5", n)
	}
}

func TestFlushCanceled(t *testing.T) {
	s := newIngest(t)
	s.hold()
	r := newReporter(t, s, fence.Config{})
	r.Report(fence.Write{Lock: "/locks/a", Token: ptr(1), Outcome: fence.Accepted})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := r.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush while the server hangs = %v, want context.DeadlineExceeded", err)
	}
	s.release()
	// The write was not given up: a later Flush delivers it.
	if err := flush(t, r); err != nil {
		t.Fatalf("Flush after release: %v", err)
	}
	checkStats(t, r, fence.Stats{Sent: 1})
}

func (s *ingest) mixedRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mixed
}

// storedInOrder returns the tokens of s's stored writes of source, in the
// order they were stored.
func storedInOrder(s *ingest, source string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int64
	for _, id := range s.order {
		if w := s.stored[id]; w.Source == source {
			out = append(out, *w.Token)
		}
	}
	return out
}

// With replicas, each source is recorded by the replica that owns it, which
// refuses a request naming any other source: a request of two sources owned
// by two replicas would be refused by both. So the Reporter sends each
// source's writes in requests of their own, each source's in report order.
func TestReporterSendsOneSourcePerRequest(t *testing.T) {
	s := newIngest(t)
	r := newReporter(t, s, fence.Config{FlushInterval: time.Hour})
	var want = map[string][]int64{}
	for i := range 10 {
		source := []string{"", "prod-k8s"}[i%2] // "" is Config.Source, prod-etcd
		r.Report(fence.Write{Source: source, Lock: "/locks/a", Token: ptr(int64(i)), Outcome: fence.Accepted})
		if source == "" {
			source = "prod-etcd"
		}
		want[source] = append(want[source], int64(i))
	}
	if err := flush(t, r); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	checkStats(t, r, fence.Stats{Sent: 10})
	_, requests, invalid, _ := s.snapshot()
	if len(invalid) > 0 {
		t.Fatalf("server found contract violations: %q", invalid)
	}
	if mixed := s.mixedRequests(); mixed != 0 || len(requests) != 2 {
		t.Fatalf("%d requests, %d of them naming several sources; want 2 requests of one source each", len(requests), mixed)
	}
	for source, tokens := range want {
		if got := storedInOrder(s, source); !slices.Equal(got, tokens) {
			t.Errorf("source %s: stored tokens %v in this order, want %v", source, got, tokens)
		}
	}
}

// newBalancer returns the URL of a TCP balancer that forwards each
// connection it accepts to the next of backends in turn, as a Kubernetes
// Service does: it balances connections, not requests.
func newBalancer(t *testing.T, backends ...*ingest) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				b, err := net.Dial("tcp", backends[i%len(backends)].srv.Listener.Addr().String())
				if err != nil {
					return
				}
				track(b)
				defer b.Close()
				// Either side's close (the server's after Connection: close)
				// ends the pair.
				done := make(chan struct{}, 2)
				go func() { io.Copy(b, c); done <- struct{}{} }()
				go func() { io.Copy(c, b); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// Two replicas behind a Service, each owning one of the Reporter's two
// sources: every write reaches its source's owner and is stored there once,
// in report order, however the writes of the two sources interleave. The
// Reporter follows each fenced refusal (503, Connection: close) on a new
// connection, which the balancer sends to the other replica.
func TestReporterReachesEachSourcesOwner(t *testing.T) {
	etcdOwner, k8sOwner := newIngest(t), newIngest(t)
	etcdOwner.owns = map[string]bool{"prod-etcd": true}
	k8sOwner.owns = map[string]bool{"prod-k8s": true}
	r := startReporter(t, fence.Config{URL: newBalancer(t, etcdOwner, k8sOwner), BatchSize: 40, FlushInterval: time.Hour})

	const n = 300
	want := map[string][]int64{}
	// Runs of 1, 2, 3 and 4 writes of a source in turn, then the other's.
	for i, run, source := 0, 1, "prod-etcd"; i < n; run = run%4 + 1 {
		for range run {
			r.Report(fence.Write{Source: source, Lock: "/locks/a", Token: ptr(int64(i)), Outcome: fence.Accepted})
			want[source] = append(want[source], int64(i))
			i++
		}
		source = map[string]string{"prod-etcd": "prod-k8s", "prod-k8s": "prod-etcd"}[source]
	}
	if err := flush(t, r); err != nil {
		t.Fatalf("Flush: %v (Stats %+v)", err, r.Stats())
	}
	st := r.Stats()
	if st.Sent != n || st.Dropped != 0 || st.Pending != 0 {
		t.Fatalf("Stats = %+v, want %d sent and none dropped", st, n)
	}
	if st.Retries == 0 {
		t.Fatalf("no request was refused: the test did not reach a replica that does not own a source")
	}
	for _, s := range []*ingest{etcdOwner, k8sOwner} {
		stored, _, invalid, dupes := s.snapshot()
		if mixed := s.mixedRequests(); len(invalid) > 0 || dupes != 0 || mixed != 0 {
			t.Fatalf("replica saw %q invalid, %d duplicate writes, %d requests of several sources", invalid, dupes, mixed)
		}
		for _, w := range stored {
			if !s.owns[w.Source] {
				t.Fatalf("replica owning %v stored a write of %s", s.owns, w.Source)
			}
		}
	}
	for source, tokens := range want {
		owner := map[string]*ingest{"prod-etcd": etcdOwner, "prod-k8s": k8sOwner}[source]
		if got := storedInOrder(owner, source); !slices.Equal(got, tokens) {
			t.Errorf("source %s: its owner stored tokens %v in this order, want %v", source, got, tokens)
		}
	}
}

// A fenced refusal closes its connection, so that the retry can reach
// another replica; the Reporter's client must then open a new one, while a
// 503 without Connection: close keeps the connection it has.
func TestReporterRetriesOnANewConnection(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mode      failMode
		wantConns int
	}{
		{"Fenced", failFenced, 4}, // three refusals, each closing its connection, then the 202
		{"Unavailable", failUnavailable, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newIngest(t)
			s.failFirst(3, tc.mode)
			r := newReporter(t, s, fence.Config{FlushInterval: time.Hour})
			for i := range 5 {
				r.Report(fence.Write{Lock: "/locks/a", Token: ptr(int64(i)), Outcome: fence.Accepted})
			}
			if err := flush(t, r); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			checkStats(t, r, fence.Stats{Sent: 5, Retries: 3})
			s.mu.Lock()
			conns := s.conns
			s.mu.Unlock()
			if conns != tc.wantConns {
				t.Fatalf("4 requests went on %d connections, want %d", conns, tc.wantConns)
			}
		})
	}
}
