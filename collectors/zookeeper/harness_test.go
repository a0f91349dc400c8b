package zookeeper

import (
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
	"github.com/leasewatch/leasewatch/collectors/zookeeper/zkserver"
)

const testSource = "test-zk"

// server is the package's one ZooKeeper server (nil: not installed, outside
// CI); tests keep apart by their own paths.
var server *zkserver.Server

func TestMain(m *testing.M) {
	os.Exit(zkserver.Main(m, func(s *zkserver.Server) { server = s }))
}

// need returns the shared server, skipping the test without one.
func need(t *testing.T) *zkserver.Server {
	t.Helper()
	if server == nil {
		t.Skip(zkserver.ErrMissing)
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
	collectortest.Eventually(t, 10*time.Second, "a client session", func() bool { return conn.State() == zk.StateHasSession })
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

func newSink(t *testing.T) *collectortest.Sink {
	t.Helper()
	return collectortest.NewSink(t, testSource, Backend.Kind)
}

// openSink opens the store at path: a second sink on one path is a restart.
func openSink(t *testing.T, path string) *collectortest.Sink {
	t.Helper()
	return collectortest.NewSink(t, testSource, Backend.Kind, collectortest.AtPath(path))
}

// testConfig watches paths on the test server, probing sessions and
// polling every 100 ms.
func testConfig(t *testing.T, paths ...string) Config {
	return Config{
		Name: testSource, Servers: []string{need(t).Addr}, Paths: paths, ProbeSessions: true,
		DialTimeout: 5 * time.Second, SessionTimeout: 2 * time.Second, PollInterval: 100 * time.Millisecond,
	}
}

// runCollector builds a collector for cfg, runs it on sink and waits until it
// is ready. It is stopped when the test ends.
func runCollector(t *testing.T, cfg Config, sk collectors.Sink, adjust ...func(*Collector)) *collectortest.Running {
	t.Helper()
	c, err := New(cfg, collectortest.Logger(t, testSource))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range adjust {
		f(c)
	}
	return collectortest.Run(t, c, sk)
}
