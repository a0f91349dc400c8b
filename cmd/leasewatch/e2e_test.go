package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/leasewatch/leasewatch/audit/fence"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
	"github.com/leasewatch/leasewatch/collectors/etcd"
	"github.com/leasewatch/leasewatch/collectors/etcd/embedded"
	"github.com/leasewatch/leasewatch/collectors/zookeeper/zkserver"
)

// These tests run the whole chain: real embedded etcd, real lock clients,
// the etcd collector, the recorder, SQLite, and the HTTP API.

const testIngestToken = "test-token"

func startEtcd(t *testing.T) (*embedded.Server, *clientv3.Client) {
	t.Helper()
	srv, err := embedded.Start(context.Background(), t.TempDir(), embedded.Options{ProgressNotifyInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(srv.Close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return srv, cli
}

type runningService struct {
	svc  *service
	stop func()
}

// startTestService runs leasewatch serve against etcd with its database at
// dbPath, and waits until the collector is up.
func startTestService(t *testing.T, endpoint, dbPath string) *runningService {
	t.Helper()
	cfg := &config.Config{
		Listen: "127.0.0.1:0", Database: dbPath, IngestTokens: []string{testIngestToken},
		Sources: []config.SourceConfig{{Name: "e2e", Kind: "etcd", Backend: &etcd.Section{Endpoints: []string{endpoint}, Prefixes: []string{"/locks/"}}}},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := startService(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatalf("start service: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.serve(ctx) }()
	upCtx, upCancel := context.WithTimeout(ctx, 30*time.Second)
	defer upCancel()
	if err := svc.waitUp(upCtx); err != nil {
		cancel()
		t.Fatalf("collector never came up: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &runningService{svc: svc, stop: stop}
}

func getJSON(t *testing.T, base, path string, v any) {
	t.Helper()
	if err := fetchJSON(base, path, v); err != nil {
		t.Fatal(err)
	}
}

// fetchJSON is getJSON for a goroutine of its own: it returns the error
// rather than failing the test.
func fetchJSON(base, path string, v any) error {
	resp, err := http.Get(base + path)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: decode %s: %w", path, body, err)
	}
	return nil
}

type apiLock struct {
	ID     int64  `json:"id"`
	Name   string `json:"name"`
	State  string `json:"state"`
	Holder string `json:"holder"`
	Token  *int64 `json:"token"`
	// Verdict is the kept verdict over the last 24 hours.
	Verdict string `json:"verdict"`
}

type apiFinding struct {
	Kind     string  `json:"kind"`
	Severity string  `json:"severity"`
	Tokens   []int64 `json:"tokens"`
	Resource string  `json:"resource"`
	Summary  string  `json:"summary"`
}

type apiTenure struct {
	Holder string  `json:"holder"`
	Token  *int64  `json:"token"`
	End    *string `json:"end"`
}

type apiEvent struct {
	Kind  string `json:"kind"`
	Token *int64 `json:"token"`
}

func lockID(t *testing.T, base, name string) (int64, bool) {
	t.Helper()
	var resp struct{ Locks []apiLock }
	getJSON(t, base, "/api/v1/locks?name="+url.QueryEscape(name), &resp)
	if len(resp.Locks) == 0 {
		return 0, false
	}
	return resp.Locks[0].ID, true
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func lockToken(t *testing.T, cli *clientv3.Client, m *concurrency.Mutex) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), m.Key())
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("read lock key %s: %v", m.Key(), err)
	}
	return resp.Kvs[0].CreateRevision
}

// A holder pauses past its lease; the next holder takes over; the paused
// holder's late write is rejected by a fenced resource (stale_write) and
// accepted by an unfenced one (unfenced_write).
// testStores are the databases the end-to-end tests run leasewatch on: a
// SQLite file, and a database of the package's PostgreSQL server.
var testStores = []struct {
	name     string
	database func(t *testing.T) string
}{
	{"SQLite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "lw.db") }},
	{"Postgres", func(t *testing.T) string { return pg.Get(t).Database(t) }},
}

// onEachStore runs test as a subtest per store, with a new database.
func onEachStore(t *testing.T, test func(t *testing.T, database string)) {
	for _, s := range testStores {
		t.Run(s.name, func(t *testing.T) { test(t, s.database(t)) })
	}
}

func TestEndToEndPausedHolderWrites(t *testing.T) {
	onEachStore(t, endToEndPausedHolderWrites)
}

func endToEndPausedHolderWrites(t *testing.T, database string) {
	srv, cli := startEtcd(t)
	rs := startTestService(t, srv.Endpoint, database)
	base := rs.svc.URL()
	const lock = "/locks/accounts"

	reporter := func(resource string) *fence.Reporter {
		r, err := fence.NewReporter(fence.Config{URL: base, Token: testIngestToken, Source: "e2e", Resource: resource, FlushInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(context.Background()) })
		return r
	}
	ledger, cache := reporter("ledger"), reporter("cache")
	var guard fence.Guard
	fencedWrite := func(holder string, token int64) fence.Outcome {
		outcome, highest := guard.Check(lock, token)
		ledger.Report(fence.Write{Lock: lock, Token: &token, Outcome: outcome, HighestToken: &highest, Holder: holder})
		return outcome
	}

	ctx := context.Background()
	sa, err := concurrency.NewSession(cli, concurrency.WithTTL(2))
	if err != nil {
		t.Fatal(err)
	}
	ma := concurrency.NewMutex(sa, lock)
	if err := ma.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	tokA := lockToken(t, cli, ma)
	holderA := fmt.Sprintf("%x", sa.Lease())
	if got := fencedWrite(holderA, tokA); got != fence.Accepted {
		t.Fatalf("A's first write: %s, want accepted", got)
	}

	sb, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	mb := concurrency.NewMutex(sb, lock)
	acquired := make(chan error, 1)
	go func() { acquired <- mb.Lock(ctx) }()

	sa.Orphan() // A stalls: no more keepalives
	select {
	case err := <-acquired:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("B never acquired the lock after A's lease ran out")
	}
	tokB := lockToken(t, cli, mb)
	holderB := fmt.Sprintf("%x", sb.Lease())
	// A's pause outlasts the collector's lag: leasewatch has seen the
	// handover by the time B and then A write. A write stamped before the
	// collector saw the grant is judged against the tenure held then.
	var id int64
	var tenures struct{ Tenures []apiTenure }
	eventually(t, 10*time.Second, "B's grant recorded", func() bool {
		var ok bool
		if id, ok = lockID(t, base, lock); !ok {
			return false
		}
		getJSON(t, base, fmt.Sprintf("/api/v1/locks/%d/tenures", id), &tenures)
		return len(tenures.Tenures) == 2
	})
	if got := fencedWrite(holderB, tokB); got != fence.Accepted {
		t.Fatalf("B's write: %s, want accepted", got)
	}

	// A wakes up and writes with its old token.
	if got := fencedWrite(holderA, tokA); got != fence.Rejected {
		t.Fatalf("A's late fenced write: %s, want rejected", got)
	}
	cache.Report(fence.Write{Lock: lock, Token: &tokA, Outcome: fence.Accepted, Holder: holderA})
	for _, r := range []*fence.Reporter{ledger, cache} {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := r.Flush(fctx); err != nil {
			t.Fatalf("flush reports: %v", err)
		}
		cancel()
	}

	var findings struct{ Findings []apiFinding }
	defer func() {
		if t.Failed() {
			_, events := get(t, base, fmt.Sprintf("/api/v1/locks/%d/events", id))
			t.Logf("findings: %+v\nevents: %s", findings.Findings, events)
		}
	}()
	eventually(t, 10*time.Second, "stale_write, unfenced_write and lease_expired findings", func() bool {
		getJSON(t, base, fmt.Sprintf("/api/v1/findings?lock=%d", id), &findings)
		kinds := map[string]bool{}
		for _, f := range findings.Findings {
			kinds[f.Kind] = true
		}
		return kinds["stale_write"] && kinds["unfenced_write"] && kinds["lease_expired"]
	})
	for _, f := range findings.Findings {
		switch f.Kind {
		case "stale_write":
			if f.Severity != "info" || f.Resource != "ledger" || !slices.Contains(f.Tokens, tokA) {
				t.Errorf("stale_write = %+v, want info on ledger with token %d", f, tokA)
			}
		case "unfenced_write":
			if f.Severity != "critical" || f.Resource != "cache" || !slices.Contains(f.Tokens, tokA) {
				t.Errorf("unfenced_write = %+v, want critical on cache with token %d", f, tokA)
			}
		}
	}

	getJSON(t, base, fmt.Sprintf("/api/v1/locks/%d/tenures", id), &tenures)
	if len(tenures.Tenures) != 2 {
		t.Fatalf("tenures = %+v, want A's then B's", tenures.Tenures)
	}
	a, b := tenures.Tenures[0], tenures.Tenures[1]
	if a.Holder != holderA || *a.Token != tokA || a.End == nil || *a.End != "expired" {
		t.Errorf("A's tenure = %+v, want holder %s token %d ended by expiry", a, holderA, tokA)
	}
	if b.Holder != holderB || *b.Token != tokB || b.End != nil {
		t.Errorf("B's tenure = %+v, want holder %s token %d still held", b, holderB, tokB)
	}

	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`leasewatch_events_recorded_total{kind="grant",source="e2e"} 2`,
		`leasewatch_events_recorded_total{kind="write_rejected",source="e2e"} 1`,
		`leasewatch_observation_lag_seconds_count{source="e2e"}`,
		`leasewatch_database_bytes `,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	everyPage(t, base, id, lock, holderA)
}

// everyPage gets each page, export and API endpoint once, for a lock id
// whose name is lock and whose history names holder, and fails on any
// answer but 200 or one that lacks what it is about.
func everyPage(t *testing.T, base string, id int64, lock, holder string) {
	t.Helper()
	// The unfenced write fires FencingViolation once alerting next runs.
	eventually(t, 30*time.Second, "FencingViolation on /alerts", func() bool {
		code, body := get(t, base, "/alerts")
		return code == http.StatusOK && strings.Contains(body, "FencingViolation")
	})
	window := url.Values{"lock": {"e2e/" + lock}, "from": {time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}}.Encode()
	for path, want := range map[string]string{
		"/":                                 lock,
		"/locks":                            lock,
		fmt.Sprintf("/locks/%d", id):        holder,
		"/findings":                         "stale_write",
		"/sources":                          "e2e",
		"/alerts":                           "",
		"/review?" + window:                 holder,
		"/review.md?" + window:              holder,
		"/review.json?" + window:            holder,
		"/healthz":                          "",
		"/readyz":                           "ready",
		"/api/v1/sources":                   `"name":"e2e"`,
		"/api/v1/locks":                     lock,
		fmt.Sprintf("/api/v1/locks/%d", id): lock,
		fmt.Sprintf("/api/v1/locks/%d/events", id):  holder,
		fmt.Sprintf("/api/v1/locks/%d/tenures", id): holder,
		"/api/v1/findings":                          "unfenced_write",
	} {
		code, body := get(t, base, path)
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want 200 with %q:\n%.500s", path, code, want, body)
		}
	}
}

// Stopping leasewatch while locks keep changing hands and starting it again
// on the same database records every grant exactly once.
func TestEndToEndRestartRecordsEveryGrantOnce(t *testing.T) {
	srv, cli := startEtcd(t)
	dbPath := filepath.Join(t.TempDir(), "lw.db")
	const lock = "/locks/restart"
	var tokens []int64
	cycle := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
			if err != nil {
				t.Fatal(err)
			}
			m := concurrency.NewMutex(s, lock)
			if err := m.Lock(context.Background()); err != nil {
				t.Fatal(err)
			}
			tokens = append(tokens, lockToken(t, cli, m))
			if err := m.Unlock(context.Background()); err != nil {
				t.Fatal(err)
			}
			s.Close()
		}
	}

	first := startTestService(t, srv.Endpoint, dbPath)
	cycle(5)
	base := first.svc.URL()
	eventually(t, 10*time.Second, "the first five grants", func() bool {
		return len(grantTokens(t, base, lock)) == 5
	})
	first.stop()

	cycle(5) // while leasewatch is down

	second := startTestService(t, srv.Endpoint, dbPath)
	cycle(3)
	base = second.svc.URL()
	eventually(t, 15*time.Second, "all 13 grants", func() bool {
		return len(grantTokens(t, base, lock)) >= len(tokens)
	})
	if got := grantTokens(t, base, lock); !slices.Equal(got, tokens) {
		t.Fatalf("grant tokens = %v, want each of %v exactly once", got, tokens)
	}
}

func grantTokens(t *testing.T, base, lock string) []int64 {
	t.Helper()
	id, ok := lockID(t, base, lock)
	if !ok {
		return nil
	}
	var events struct{ Events []apiEvent }
	getJSON(t, base, fmt.Sprintf("/api/v1/locks/%d/events?kind=grant", id), &events)
	var got []int64
	for _, e := range events.Events {
		got = append(got, *e.Token)
	}
	return got
}

// syncBuffer is an io.Writer safe to read while the demo writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// demoVerdicts checks each verdict, from the demo's own history: worker-1's
// orders lock is unsafe through the unfenced cache, the election is
// unverified, since nothing reports writes under it, and billing is fenced.
// The verdicts the locks list keeps (over the last 24 hours, all of the
// demo's history) catch up with them within the keeper's round.
func demoVerdicts(t *testing.T, base string) {
	t.Helper()
	want := map[string]string{"/locks/orders": "unsafe", "/election/scheduler": "unverified", "/locks/billing": "fenced"}
	got, kept := map[string]string{}, map[string]string{}
	eventually(t, 30*time.Second, "the demo's locks judged unsafe, unverified and fenced, and kept so", func() bool {
		var locks struct{ Locks []apiLock }
		getJSON(t, base, "/api/v1/locks?source=demo-etcd", &locks)
		for _, l := range locks.Locks {
			var v struct{ Verdict string }
			getJSON(t, base, fmt.Sprintf("/api/v1/locks/%d/verdict", l.ID), &v)
			got[l.Name], kept[l.Name] = v.Verdict, l.Verdict
		}
		for name, verdict := range want {
			if got[name] != verdict || kept[name] != verdict {
				return false
			}
		}
		return true
	})
}

// demoPostgres checks, where PostgreSQL is installed (always in CI), that
// the demo shows its advisory lock held in turn by both workers, without a
// token, and ShedLock's lock granted to both nodes, each grant with its
// commit LSN as the token (the table is streamed), and renewed.
func demoPostgres(t *testing.T, base string) {
	t.Helper()
	var sources struct{ Sources []struct{ Name string } }
	getJSON(t, base, "/api/v1/sources", &sources)
	if !slices.ContainsFunc(sources.Sources, func(s struct{ Name string }) bool { return s.Name == demoPostgresSource }) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no %s source under CI=true: %v", demoPostgresSource, pgtest.ErrNotInstalled)
		}
		t.Logf("no %s source: PostgreSQL is not installed", demoPostgresSource)
		return
	}
	advisory := fmt.Sprintf("%s/%d", demoPGDatabase, demoPGAdvisoryKey)
	shedLock := "shedlock/" + demoShedLockName
	var seen string
	defer func() {
		if t.Failed() {
			t.Logf("the PostgreSQL locks' holders (application name: with a token) and renewals: %s", seen)
		}
	}()
	eventually(t, 30*time.Second, "the advisory lock held by both workers, ShedLock's granted to both nodes with tokens and renewed", func() bool {
		var locks struct{ Locks []apiLock }
		getJSON(t, base, "/api/v1/locks?source="+demoPostgresSource, &locks)
		holders := map[string]map[string]bool{}
		renewals := map[string]int{}
		for _, l := range locks.Locks {
			var tenures struct{ Tenures []apiTenure }
			getJSON(t, base, fmt.Sprintf("/api/v1/locks/%d/tenures", l.ID), &tenures)
			holders[l.Name] = map[string]bool{}
			for _, tn := range tenures.Tenures {
				app, _, _ := strings.Cut(tn.Holder, " ") // an advisory holder is its session: "pg-worker-1 pid=..."
				holders[l.Name][app] = tn.Token != nil
			}
			var events struct{ Events []apiEvent }
			getJSON(t, base, fmt.Sprintf("/api/v1/locks/%d/events?kind=renew", l.ID), &events)
			renewals[l.Name] = len(events.Events)
		}
		seen = fmt.Sprint(holders, renewals)
		return maps.Equal(holders[advisory], map[string]bool{"pg-worker-1": false, "pg-worker-2": false}) &&
			maps.Equal(holders[shedLock], map[string]bool{"report-node-1": true, "report-node-2": true}) && renewals[shedLock] > 0
	})
	// ShedLock's nodes extend and unlock in time: a lease run out, or a
	// renewal taken for a grant (token_reuse), is the stream falling behind
	// and vouching for changes it has not read.
	var findings struct{ Findings []apiFinding }
	getJSON(t, base, "/api/v1/findings?lock="+url.QueryEscape(demoPostgresSource+"/"+shedLock), &findings)
	for _, f := range findings.Findings {
		if f.Kind == "token_reuse" || f.Kind == "lease_expired" {
			t.Errorf("%s: a %s finding: %s", shedLock, f.Kind, f.Summary)
		}
	}
}

// startDemo runs leasewatch demo until the test ends and returns its URL,
// once its banner is out.
func startDemo(t *testing.T, flags ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	args := append([]string{"demo", "--listen", "127.0.0.1:0"}, flags...)
	go func() { done <- run(ctx, args, &stdout, &stderr) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("demo exited %d: %s", code, stderr.String())
		}
	})
	var base string
	eventually(t, 30*time.Second, "the demo's banner", func() bool {
		out := stdout.String()
		if i := strings.Index(out, "open http://"); i >= 0 {
			base = strings.Fields(out[i+len("open "):])[0]
			return true
		}
		return false
	})
	return base
}

// A new user running the demo sees held locks, a handover, a stale_write,
// an unfenced_write and a zombie_holder within 20 seconds of its banner.
func TestDemoShowsTheStoryWithinTwentySeconds(t *testing.T) {
	base := startDemo(t)
	start := time.Now()
	var held, handover, stale, unfenced, zombie bool
	eventually(t, 20*time.Second, "held locks, a handover, a stale_write, an unfenced_write and a zombie_holder", func() bool {
		var locks struct{ Locks []apiLock }
		getJSON(t, base, "/api/v1/locks", &locks)
		for _, l := range locks.Locks {
			held = held || l.State == "held"
			var tenures struct{ Tenures []apiTenure }
			getJSON(t, base, fmt.Sprintf("/api/v1/locks/%d/tenures", l.ID), &tenures)
			handover = handover || len(tenures.Tenures) >= 2
		}
		var findings struct{ Findings []apiFinding }
		getJSON(t, base, "/api/v1/findings?kind=stale_write", &findings)
		stale = len(findings.Findings) > 0
		getJSON(t, base, "/api/v1/findings?kind=unfenced_write", &findings)
		unfenced = len(findings.Findings) > 0
		getJSON(t, base, "/api/v1/findings?kind=zombie_holder", &findings)
		zombie = len(findings.Findings) > 0
		return held && handover && stale && unfenced && zombie
	})
	t.Logf("demo story complete %s after the banner", time.Since(start).Round(time.Millisecond))

	demoVerdicts(t, base)
	demoPostgres(t, base)

	// With redis-server installed (always in CI), the demo shows Redis locks too.
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not on PATH: make deps installs Debian's redis-server")
		}
		t.Skip("redis-server is not on PATH: the demo runs etcd only")
	}
	eventually(t, 20*time.Second, "Redis locks changing hands and a fenced Redis write rejected", func() bool {
		var locks struct{ Locks []apiLock }
		getJSON(t, base, "/api/v1/locks?source=demo-redis", &locks)
		handovers := 0
		for _, l := range locks.Locks {
			var tenures struct{ Tenures []apiTenure }
			getJSON(t, base, fmt.Sprintf("/api/v1/locks/%d/tenures", l.ID), &tenures)
			if len(tenures.Tenures) >= 2 {
				handovers++
			}
		}
		var findings struct{ Findings []apiFinding }
		getJSON(t, base, "/api/v1/findings?kind=stale_write&resource=payments", &findings)
		return handovers == 2 && len(findings.Findings) > 0
	})

	// With ZooKeeper installed (always in CI), it shows ZooKeeper's lock
	// and election changing hands, each grant with its zxid as the token.
	if _, err := os.Stat(zkserver.Jar); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(zkserver.ErrMissing)
		}
		t.Skip(zkserver.ErrMissing)
	}
	eventually(t, 30*time.Second, "the ZooKeeper lock and election changing hands, with tokens", func() bool {
		handed := map[string]bool{}
		var locks struct{ Locks []apiLock }
		getJSON(t, base, "/api/v1/locks?source=demo-zookeeper", &locks)
		for _, l := range locks.Locks {
			var tenures struct{ Tenures []apiTenure }
			getJSON(t, base, fmt.Sprintf("/api/v1/locks/%d/tenures", l.ID), &tenures)
			n := 0
			for _, tn := range tenures.Tenures {
				if tn.Token != nil {
					n++
				}
			}
			handed[l.Name] = n >= 2
		}
		return handed["/locks/reports"] && handed["/election/leader"]
	})
	// Its lock page names the queue behind each grant, and the incident
	// review and its exports take the ZooKeeper lock like any other.
	var locks struct{ Locks []apiLock }
	getJSON(t, base, "/api/v1/locks?source=demo-zookeeper", &locks)
	for _, l := range locks.Locks {
		if l.Name != "/locks/reports" {
			continue
		}
		window := url.Values{"lock": {"demo-zookeeper/" + l.Name}, "from": {time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}}.Encode()
		for path, want := range map[string]string{
			fmt.Sprintf("/locks/%d", l.ID): "queue",
			"/review?" + window:            l.Name,
			"/review.md?" + window:         l.Name,
			"/review.json?" + window:       l.Name,
		} {
			if code, body := get(t, base, path); code != http.StatusOK || !strings.Contains(body, want) {
				t.Errorf("GET %s: %d, want 200 with %q:\n%.500s", path, code, want, body)
			}
		}
		return
	}
	t.Error("no /locks/reports among demo-zookeeper's locks")
}
