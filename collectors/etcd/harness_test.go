package etcd

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
	"github.com/leasewatch/leasewatch/collectors/etcd/embedded"
)

// startEtcd runs a real single-member etcd in a temporary directory and
// returns its client URL. It stops when the test ends.
func startEtcd(t *testing.T) string {
	t.Helper()
	return startEtcdWith(t, embedded.Options{})
}

// startEtcdWith is startEtcd with options (TLS, say); progress notifications
// come every 200ms.
func startEtcdWith(t *testing.T, opts embedded.Options) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts.ProgressNotifyInterval = 200 * time.Millisecond
	srv, err := embedded.Start(ctx, t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv.Endpoint
}

func newClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// recorder is the test's Sink: it keeps every input in memory, keeps the
// cursor as a store would (with the input, atomically), and feeds every input
// through a real audit.Tracker so tests can assert on tenures and findings.
type recorder struct {
	mu       sync.Mutex
	inputs   []audit.Input
	cursor   audit.Cursor
	tracker  *audit.Tracker
	events   []audit.Event
	findings []audit.Finding
	tenures  map[string]audit.Tenure // by lock name and seq
}

func newRecorder() *recorder {
	return &recorder{tracker: audit.NewTracker(audit.TrackerConfig{RenewMarginRatio: 0.25}), tenures: make(map[string]audit.Tenure)}
}

func (r *recorder) Record(_ context.Context, in audit.Input) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inputs = append(r.inputs, in)
	b := r.tracker.Step(in)
	r.events = append(r.events, b.Events...)
	r.findings = append(r.findings, b.Findings...)
	for _, ten := range b.Tenures {
		r.tenures[fmt.Sprintf("%s#%d", ten.Lock.Name, ten.Seq)] = ten
	}
	for _, c := range b.Cursors {
		r.cursor = c
	}
	return nil
}

func (r *recorder) Cursor(string) (string, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cursor.Position, r.cursor.At
}

func (r *recorder) cursorRev() int64 {
	pos, _ := r.Cursor("")
	n, _ := strconv.ParseInt(pos, 10, 64)
	return n
}

func (r *recorder) allInputs() []audit.Input {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]audit.Input(nil), r.inputs...)
}

// obs returns the observations of lock (every lock if "") of the given kinds
// (every kind if none), in the order they were recorded.
func (r *recorder) obs(lock string, kinds ...audit.EventKind) []audit.Observation {
	var out []audit.Observation
	for _, in := range r.allInputs() {
		for _, ob := range in.Observations {
			if lock != "" && ob.Lock.Name != lock {
				continue
			}
			if len(kinds) > 0 && !slices.Contains(kinds, ob.Kind) {
				continue
			}
			out = append(out, ob)
		}
	}
	return out
}

func (r *recorder) findingsOf(kind audit.FindingKind) []audit.Finding {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Finding
	for _, f := range r.findings {
		if f.Kind == kind {
			out = append(out, f)
		}
	}
	return out
}

func (r *recorder) state(lock string) audit.TrackState {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, _ := r.tracker.State(audit.LockKey{Source: testSource, Name: lock})
	return st
}

// waitObs polls until an observation of lock of one of kinds exists (n of
// them, if n > 1) and returns them.
func (r *recorder) waitObs(t *testing.T, timeout time.Duration, lock string, n int, kinds ...audit.EventKind) []audit.Observation {
	t.Helper()
	var got []audit.Observation
	collectortest.Eventually(t, timeout, fmt.Sprintf("%d %v observation(s) of %s", n, kinds, lock), func() bool {
		got = r.obs(lock, kinds...)
		return len(got) >= n
	})
	return got
}

// waitCursor polls until the recorded cursor reaches rev: everything up to it
// has been recorded.
func (r *recorder) waitCursor(t *testing.T, rev int64) {
	t.Helper()
	collectortest.Eventually(t, 10*time.Second, fmt.Sprintf("cursor >= %d", rev), func() bool { return r.cursorRev() >= rev })
}

const testSource = "test-etcd"

// runCollector starts a collector dialling endpoint and waits until it is
// ready. It is stopped when the test ends.
func runCollector(t *testing.T, endpoint string, sink collectors.Sink, prefixes ...string) *collectortest.Running {
	t.Helper()
	c, err := New(testConfig(prefixes, endpoint), collectortest.Logger(t, testSource), WithProgressInterval(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return collectortest.Run(t, c, sink)
}

func testConfig(prefixes []string, endpoints ...string) Config {
	return Config{Name: testSource, Endpoints: endpoints, Prefixes: prefixes, PollInterval: 200 * time.Millisecond, DialTimeout: 2 * time.Second}
}

func newSession(t *testing.T, cli *clientv3.Client, ttl int) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// token is what a client presents as its fencing token: the CreateRevision
// of its own key (collectors/backends.md A.4).
func token(t *testing.T, cli *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		t.Fatalf("key %s is gone", key)
	}
	return resp.Kvs[0].CreateRevision
}

// head returns etcd's current revision.
func head(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), "leasewatch-test-head")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func lockMutex(t *testing.T, s *concurrency.Session, name string) *concurrency.Mutex {
	t.Helper()
	m := concurrency.NewMutex(s, name)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("lock %s: %v", name, err)
	}
	return m
}

// unlock unlocks m and returns the deletion revision.
func unlock(t *testing.T, cli *clientv3.Client, m *concurrency.Mutex) int64 {
	t.Helper()
	key := m.Key()
	resp, err := cli.Delete(context.Background(), key) // what Mutex.Unlock does, keeping the revision
	if err != nil {
		t.Fatalf("unlock %s: %v", key, err)
	}
	if resp.Deleted != 1 {
		t.Fatalf("unlock %s deleted %d keys, want 1", key, resp.Deleted)
	}
	return resp.Header.Revision
}

func leaseHolder(s *concurrency.Session) string { return fmt.Sprintf("%x", int64(s.Lease())) }

func tokenOf(ob audit.Observation) int64 {
	if ob.Token == nil {
		return -1
	}
	return *ob.Token
}

// proxy is a TCP relay between the collector and etcd that the test can cut,
// to take etcd out of the collector's reach while it keeps running.
type proxy struct {
	l      net.Listener
	target string

	mu      sync.Mutex
	down    bool
	conns   []net.Conn
	refused int // connections turned away while down
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: u.Host}
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.cut()
	})
	return p
}

func (p *proxy) url() string { return "http://" + p.l.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.refused++
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go relay(c, up)
		go relay(up, c)
	}
}

func relay(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

// cut drops every connection and refuses new ones until restore.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// refusals counts the connections turned away while cut: a client that
// tried to reach etcd and could not.
func (p *proxy) refusals() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

func (p *proxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}
