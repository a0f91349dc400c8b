package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/deploy/testproc"
)

const testSource = "test-redis"

// redisServerBin returns the path of redis-server. Without it the test is
// skipped, except in CI (CI=true), where it fails.
func redisServerBin(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server is not on PATH: install the Debian package redis-server (make install-redis)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// redisServer is a real redis-server listening on a Unix socket in a
// temporary directory, with no persistence: a restart loses every key.
type redisServer struct {
	t    *testing.T
	bin  string
	dir  string
	sock string
	conf string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startRedis starts redis-server with extra configuration lines and waits
// until it answers. It is stopped when the test ends.
func startRedis(t *testing.T, extra ...string) *redisServer {
	t.Helper()
	bin := redisServerBin(t)
	// Unix socket paths are limited to about 100 bytes: t.TempDir can be
	// longer than that.
	dir, err := os.MkdirTemp("", "lwredis")
	if err != nil {
		t.Fatal(err)
	}
	s := &redisServer{t: t, bin: bin, dir: dir, sock: filepath.Join(dir, "r.sock"), conf: filepath.Join(dir, "redis.conf")}
	lines := append([]string{
		"port 0",
		"unixsocket " + s.sock,
		"unixsocketperm 700",
		`save ""`,
		"appendonly no",
		"dir " + dir,
		"logfile " + filepath.Join(dir, "redis.log"),
	}, extra...)
	if err := os.WriteFile(s.conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			if log, err := os.ReadFile(filepath.Join(dir, "redis.log")); err == nil {
				t.Logf("redis.log:\n%s", testproc.Tail(string(log), 40))
			}
		}
		os.RemoveAll(dir)
	})
	s.start()
	return s
}

func (s *redisServer) start() {
	s.t.Helper()
	cmd := exec.Command(s.bin, s.conf)
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	cli := goredis.NewClient(&goredis.Options{Network: "unix", Addr: s.sock, MaxRetries: -1})
	defer cli.Close()
	eventually(s.t, 10*time.Second, "redis-server answering on "+s.sock, func() bool {
		select {
		case <-done:
			s.t.Fatalf("redis-server exited at start (see redis.log in %s)", s.dir)
		default:
		}
		return cli.Ping(context.Background()).Err() == nil
	})
}

// stop shuts the server down and waits for it to exit.
func (s *redisServer) stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// restart stops the server and starts a new one on the same socket: a new
// run_id and, without persistence, no keys.
func (s *redisServer) restart() {
	s.t.Helper()
	s.stop()
	s.start()
}

// client returns a client of the server, closed when the test ends.
func (s *redisServer) client(t *testing.T) *goredis.Client {
	t.Helper()
	cli := goredis.NewClient(&goredis.Options{Network: "unix", Addr: s.sock, MaxRetries: -1, Protocol: 2})
	t.Cleanup(func() { cli.Close() })
	return cli
}

// freePort returns a TCP port on the loopback interface that was free a
// moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(port)
}

// sink feeds a collector's inputs to a real audit.Recorder writing to a real
// SQLite store, and keeps the inputs for the test to look at.
type sink struct {
	rec   *audit.Recorder
	store *sqlite.Store

	mu     sync.Mutex
	inputs []audit.Input
}

func newSink(t *testing.T) *sink {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "leasewatch.db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	rec := audit.NewRecorder(st, audit.TrackerConfig{SourceKinds: map[string]audit.SourceKind{testSource: audit.KindRedis}},
		nil, audit.WithTickInterval(50*time.Millisecond))
	if err := rec.Start(ctx); err != nil {
		t.Fatalf("start recorder: %v", err)
	}
	t.Cleanup(func() {
		rec.Close()
		st.Close()
	})
	return &sink{rec: rec, store: st}
}

func (s *sink) Observe(ctx context.Context, in audit.Input) error {
	s.mu.Lock()
	s.inputs = append(s.inputs, in)
	s.mu.Unlock()
	return s.rec.Observe(ctx, in)
}

// Submit is the recorder's, so the collector pipelines as it does in
// leasewatch.
func (s *sink) Submit(ctx context.Context, in audit.Input) func() error {
	s.mu.Lock()
	s.inputs = append(s.inputs, in)
	s.mu.Unlock()
	return s.rec.Submit(ctx, in)
}

func (s *sink) Cursor(source string) (string, time.Time) { return s.rec.Cursor(source) }

func (s *sink) allInputs() []audit.Input {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]audit.Input(nil), s.inputs...)
}

// events returns the stored events of lock of the given kinds (all if none).
func (s *sink) events(t *testing.T, lock string, kinds ...audit.EventKind) []audit.Event {
	t.Helper()
	ctx := context.Background()
	l, err := s.store.LockByKey(ctx, audit.LockKey{Source: testSource, Name: lock})
	if audit.ErrorCode(err) == audit.ENOTFOUND {
		return nil
	}
	if err != nil {
		t.Fatalf("lock %s: %v", lock, err)
	}
	evs, err := s.store.Events(ctx, l.ID, audit.EventFilter{TimeFilter: audit.TimeFilter{Limit: 1000}})
	if err != nil {
		t.Fatalf("events of %s: %v", lock, err)
	}
	var out []audit.Event
	for _, e := range evs {
		if len(kinds) == 0 || hasKind(kinds, e.Kind) {
			out = append(out, e)
		}
	}
	return out
}

func (s *sink) tenures(t *testing.T, lock string) []audit.Tenure {
	t.Helper()
	ctx := context.Background()
	l, err := s.store.LockByKey(ctx, audit.LockKey{Source: testSource, Name: lock})
	if err != nil {
		t.Fatalf("lock %s: %v", lock, err)
	}
	ts, err := s.store.Tenures(ctx, l.ID, audit.TimeFilter{Limit: 1000})
	if err != nil {
		t.Fatalf("tenures of %s: %v", lock, err)
	}
	return ts
}

func (s *sink) lock(t *testing.T, name string) audit.Lock {
	t.Helper()
	l, err := s.store.LockByKey(context.Background(), audit.LockKey{Source: testSource, Name: name})
	if err != nil {
		t.Fatalf("lock %s: %v", name, err)
	}
	return l
}

// findings returns the stored findings of kind about lock ("" for every lock).
func (s *sink) findings(t *testing.T, lock string, kind audit.FindingKind) []audit.Finding {
	t.Helper()
	fs, err := s.store.Findings(context.Background(), audit.FindingFilter{Kind: kind, TimeFilter: audit.TimeFilter{Limit: 1000}})
	if err != nil {
		t.Fatalf("findings: %v", err)
	}
	var out []audit.Finding
	for _, f := range fs {
		if lock == "" || f.Lock.Name == lock {
			out = append(out, f)
		}
	}
	return out
}

// waitEvents polls until lock has at least n events of the given kinds and
// returns them.
func (s *sink) waitEvents(t *testing.T, timeout time.Duration, lock string, n int, kinds ...audit.EventKind) []audit.Event {
	t.Helper()
	var got []audit.Event
	eventually(t, timeout, fmt.Sprintf("%d %v event(s) of %s", n, kinds, lock), func() bool {
		got = s.events(t, lock, kinds...)
		return len(got) >= n
	})
	return got
}

// waitHeld polls until the stored lock is held by holder.
func (s *sink) waitHeld(t *testing.T, timeout time.Duration, lock, holder string) audit.Lock {
	t.Helper()
	var l audit.Lock
	eventually(t, timeout, fmt.Sprintf("%s held by %s", lock, holder), func() bool {
		var err error
		l, err = s.store.LockByKey(context.Background(), audit.LockKey{Source: testSource, Name: lock})
		return err == nil && l.State == audit.StateHeld && l.Holder == holder
	})
	return l
}

func hasKind(kinds []audit.EventKind, k audit.EventKind) bool {
	for _, x := range kinds {
		if x == k {
			return true
		}
	}
	return false
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})).With("source", testSource)
}

// testConfig watches lock:* on the given servers.
func testConfig(servers ...*redisServer) Config {
	cfg := Config{Name: testSource, Patterns: []string{"lock:*"}, DialTimeout: 2 * time.Second, PollInterval: 100 * time.Millisecond}
	for _, s := range servers {
		cfg.Addrs = append(cfg.Addrs, s.sock)
	}
	return cfg
}

// collectorRun is one running collector.
type collectorRun struct {
	c      *Collector
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// runCollector builds a collector for cfg, runs it on sink and waits until it
// is ready. It is stopped when the test ends.
func runCollector(t *testing.T, cfg Config, sk collectors.Sink, opts ...Option) *collectorRun {
	t.Helper()
	c, err := New(cfg, testLogger(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cr := &collectorRun{c: c, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	var once sync.Once
	go func() { cr.done <- c.Run(ctx, sk, func() { once.Do(func() { close(ready) }) }) }()
	select {
	case <-ready:
	case err := <-cr.done:
		cancel()
		t.Fatalf("collector stopped before ready: %v", err)
	case <-time.After(15 * time.Second):
		cancel()
		t.Fatal("collector not ready after 15s")
	}
	t.Cleanup(func() { cr.stop(t) })
	return cr
}

// stop cancels the collector and checks it returned nil. Safe to call twice.
func (cr *collectorRun) stop(t *testing.T) {
	t.Helper()
	cr.once.Do(func() {
		cr.cancel()
		select {
		case err := <-cr.done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v after cancel, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of cancel")
		}
	})
}

// waitPTTLBelow polls until key's PTTL is below d, so that setting its TTL
// again visibly moves its deadline.
func waitPTTLBelow(t *testing.T, cli *goredis.Client, key string, d time.Duration) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("PTTL of %s below %s", key, d), func() bool {
		ttl, err := cli.PTTL(context.Background(), key).Result()
		return err == nil && ttl > 0 && ttl < d
	})
}

func holders(evs []audit.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Holder)
	}
	return out
}

func kinds(evs []audit.Event) []audit.EventKind {
	var out []audit.EventKind
	for _, e := range evs {
		out = append(out, e.Kind)
	}
	return out
}

// pid returns the running redis-server's process id.
func (s *redisServer) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process.Pid
}
