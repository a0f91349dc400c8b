package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/zookeeper/zktest"
)

const testSource = "test-zk"

// server is the package's one ZooKeeper server (nil: not installed, outside
// CI); tests keep apart by their own paths.
var server *zktest.Server

func TestMain(m *testing.M) {
	os.Exit(zktest.Main(m, func(s *zktest.Server) { server = s }))
}

// need returns the shared server, skipping the test without one.
func need(t *testing.T) *zktest.Server {
	t.Helper()
	if server == nil {
		t.Skip(zktest.ErrMissing)
	}
	return server
}

// client is a ZooKeeper client of the test server whose connection the
// test can cut: after cut it refuses to dial again, so the server expires
// its session about one session timeout later.
type client struct {
	*zk.Conn
	mu     sync.Mutex
	nc     net.Conn
	dead   bool
	frozen chan struct{} // closed by thaw; nil until freeze
}

// connect opens a client with the given session timeout, closed when the
// test ends, and waits for its session.
func connect(t *testing.T, timeout time.Duration) *client {
	t.Helper()
	c := &client{}
	dial := func(network, addr string, d time.Duration) (net.Conn, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.dead {
			return nil, errors.New("cut by the test")
		}
		nc, err := net.DialTimeout(network, addr, d)
		if err != nil {
			return nil, err
		}
		c.nc = nc
		return pausable{nc, c}, nil
	}
	conn, _, err := zk.Connect([]string{need(t).Addr}, timeout, zk.WithDialer(dial), zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	c.Conn = conn
	t.Cleanup(conn.Close)
	eventually(t, 10*time.Second, "a client session", func() bool { return conn.State() == zk.StateHasSession })
	return c
}

// cut closes the client's connection and keeps it from reconnecting.
func (c *client) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead = true
	if c.nc != nil {
		c.nc.Close()
	}
}

// freeze stops the client as a paused process does: nothing more reaches
// the server, yet its connection stays open there, so the server expires
// the session about one timeout after its last ping while cons still lists
// it. The connection closes when the test ends.
func (c *client) freeze(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead, c.frozen = true, make(chan struct{})
	t.Cleanup(c.thaw)
}

func (c *client) thaw() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.frozen)
	c.nc.Close()
}

func (c *client) isFrozen() (chan struct{}, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frozen, c.frozen != nil
}

// pausable is a client's connection that freeze can stop.
type pausable struct {
	net.Conn
	c *client
}

func (p pausable) Write(b []byte) (int, error) {
	if _, frozen := p.c.isFrozen(); frozen {
		return len(b), nil // dropped: the server hears nothing
	}
	return p.Conn.Write(b)
}

func (p pausable) Close() error {
	if _, frozen := p.c.isFrozen(); frozen {
		return nil // kept open on the server's side until thaw
	}
	return p.Conn.Close()
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// mkdirs creates p and its parents as persistent nodes.
func mkdirs(t *testing.T, c *client, p string) {
	t.Helper()
	var cur string
	for _, part := range splitPath(p) {
		cur += "/" + part
		if _, err := c.Create(cur, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %v", cur, err)
		}
	}
}

func splitPath(p string) []string { return strings.Split(strings.TrimPrefix(p, "/"), "/") }

// sink feeds a collector's inputs to a real audit.Recorder writing to a real
// SQLite store, and keeps the inputs for the test to look at.
type sink struct {
	rec    *audit.Recorder
	store  *sqlite.Store
	closed sync.Once

	mu     sync.Mutex
	inputs []audit.Input
}

func newSink(t *testing.T) *sink {
	t.Helper()
	return openSink(t, filepath.Join(t.TempDir(), "leasewatch.db"))
}

// openSink opens the store at path: a second sink on one path is a restart.
func openSink(t *testing.T, path string) *sink {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	rec := audit.NewRecorder(st, audit.TrackerConfig{SourceKinds: map[string]audit.SourceKind{testSource: audit.KindZooKeeper}},
		nil, audit.WithTickInterval(50*time.Millisecond))
	if err := rec.Start(ctx); err != nil {
		t.Fatalf("start recorder: %v", err)
	}
	s := &sink{rec: rec, store: st}
	t.Cleanup(s.close)
	return s
}

// close stops the recorder and closes the store. Safe to call twice.
func (s *sink) close() {
	s.closed.Do(func() {
		s.rec.Close()
		s.store.Close()
	})
}

func (s *sink) Observe(ctx context.Context, in audit.Input) error {
	s.mu.Lock()
	s.inputs = append(s.inputs, in)
	s.mu.Unlock()
	return s.rec.Observe(ctx, in)
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
		if len(kinds) == 0 || slicesContains(kinds, e.Kind) {
			out = append(out, e)
		}
	}
	return out
}

func slicesContains(kinds []audit.EventKind, k audit.EventKind) bool {
	for _, x := range kinds {
		if x == k {
			return true
		}
	}
	return false
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

func kinds(evs []audit.Event) []audit.EventKind {
	var out []audit.EventKind
	for _, e := range evs {
		out = append(out, e.Kind)
	}
	return out
}

// testConfig watches paths on the test server, probing sessions and
// polling every 100 ms.
func testConfig(t *testing.T, paths ...string) Config {
	return Config{
		Name: testSource, Servers: []string{need(t).Addr}, Paths: paths, ProbeSessions: true,
		DialTimeout: 5 * time.Second, SessionTimeout: 2 * time.Second, PollInterval: 100 * time.Millisecond,
	}
}

// collectorRun is one running collector.
type collectorRun struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// runCollector builds a collector for cfg, runs it on sink and waits until it
// is ready. It is stopped when the test ends.
func runCollector(t *testing.T, cfg Config, sk collectors.Sink, adjust ...func(*Collector)) *collectorRun {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})).With("source", testSource)
	c, err := New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range adjust {
		f(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cr := &collectorRun{cancel: cancel, done: make(chan error, 1)}
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
			if err != nil {
				t.Errorf("Run returned %v after cancel, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of cancel")
		}
	})
}
