package redis

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
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
	s.launch(s.t)
}

// launch starts the server, failing t if it does not answer.
func (s *redisServer) launch(t *testing.T) {
	t.Helper()
	cmd := exec.Command(s.bin, s.conf)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
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
	collectortest.Eventually(t, 10*time.Second, "redis-server answering on "+s.sock, func() bool {
		select {
		case <-done:
			t.Fatalf("redis-server exited at start (see redis.log in %s)", s.dir)
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
	testproc.Terminate(cmd.Process, done, 10*time.Second)
}

// crash kills the server, as a crash does, and waits for it to exit.
func (s *redisServer) crash() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	cmd.Process.Kill()
	<-done
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

// newSink is a collectortest sink for the source testSource.
func newSink(t *testing.T) *collectortest.Sink {
	t.Helper()
	return collectortest.NewSink(t, testSource, audit.KindRedis)
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

// testConfig watches lock:* on the given servers.
func testConfig(servers ...*redisServer) Config {
	cfg := Config{Name: testSource, Patterns: []string{"lock:*"}, DialTimeout: 2 * time.Second, PollInterval: 100 * time.Millisecond}
	for _, s := range servers {
		cfg.Addrs = append(cfg.Addrs, s.sock)
	}
	return cfg
}

// runCollector builds a collector for cfg, runs it on sink and waits until
// it is ready. It is stopped when the test ends.
func runCollector(t *testing.T, cfg Config, sk collectors.Sink, opts ...Option) (*Collector, *collectortest.Running) {
	t.Helper()
	c, err := New(cfg, collectortest.Logger(t, testSource), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, collectortest.Run(t, c, sk)
}

// waitPTTLBelow polls until key's PTTL is below d, so that setting its TTL
// again visibly moves its deadline.
func waitPTTLBelow(t *testing.T, cli *goredis.Client, key string, d time.Duration) {
	t.Helper()
	collectortest.Eventually(t, 5*time.Second, fmt.Sprintf("PTTL of %s below %s", key, d), func() bool {
		ttl, err := cli.PTTL(context.Background(), key).Result()
		return err == nil && ttl > 0 && ttl < d
	})
}

// pid returns the running redis-server's process id.
func (s *redisServer) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process.Pid
}
