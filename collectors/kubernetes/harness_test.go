package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

const testSource = "cluster-test"

// Elector timings: short, so a lease runs out in two seconds, but with
// client-go's rule RenewDeadline > 1.2 * RetryPeriod.
const (
	leaseDuration = 2 * time.Second
	renewDeadline = 1500 * time.Millisecond
	retryPeriod   = 300 * time.Millisecond
)

// sink is the test's collectors.Sink: the real Recorder over a real SQLite
// store in the test's directory, with the tracker's clock ticking every
// 50ms. It also keeps every input it recorded, for assertions on the
// observations themselves.
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
	t.Cleanup(func() { st.Close() })
	cfg := audit.TrackerConfig{RenewMarginRatio: 0.25, SourceKinds: map[string]audit.SourceKind{testSource: audit.KindKubernetes}}
	rec := audit.NewRecorder(st, cfg, nil, audit.WithTickInterval(50*time.Millisecond))
	if err := rec.Start(ctx); err != nil {
		t.Fatalf("start recorder: %v", err)
	}
	t.Cleanup(rec.Close)
	return &sink{rec: rec, store: st}
}

// Observe stores in and then notes it, holding mu throughout: a test that
// has seen the input's events in the store and then asks for inputs waits
// until the input is noted.
func (s *sink) Observe(ctx context.Context, in audit.Input) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Observe(ctx, in); err != nil {
		return err
	}
	s.inputs = append(s.inputs, in)
	return nil
}

func (s *sink) Cursor(source string) (string, time.Time) { return s.rec.Cursor(source) }

func (s *sink) allInputs() []audit.Input {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.inputs)
}

// obs returns the recorded observations of lock (every lock if "") of the
// given kinds (every kind if none), in order.
func (s *sink) obs(lock string, kinds ...audit.EventKind) []audit.Observation {
	var out []audit.Observation
	for _, in := range s.allInputs() {
		for _, ob := range in.Observations {
			if (lock == "" || ob.Lock.Name == lock) && (len(kinds) == 0 || slices.Contains(kinds, ob.Kind)) {
				out = append(out, ob)
			}
		}
	}
	return out
}

// lock returns the stored lock, if the store has it.
func (s *sink) lock(t *testing.T, name string) (audit.Lock, bool) {
	t.Helper()
	l, err := s.store.LockByKey(context.Background(), audit.LockKey{Source: testSource, Name: name})
	if audit.ErrorCode(err) == audit.ENOTFOUND {
		return audit.Lock{}, false
	}
	if err != nil {
		t.Fatalf("lock %s: %v", name, err)
	}
	return l, true
}

// events returns the stored events of a lock of the given kinds (all if
// none), in time order.
func (s *sink) events(t *testing.T, name string, kinds ...audit.EventKind) []audit.Event {
	t.Helper()
	l, ok := s.lock(t, name)
	if !ok {
		return nil
	}
	evs, err := s.store.Events(context.Background(), l.ID, audit.EventFilter{TimeFilter: audit.TimeFilter{Limit: 10000}})
	if err != nil {
		t.Fatalf("events of %s: %v", name, err)
	}
	var out []audit.Event
	for _, e := range evs {
		if len(kinds) == 0 || slices.Contains(kinds, e.Kind) {
			out = append(out, e)
		}
	}
	return out
}

// findings returns the stored findings of a lock (every lock if "") of the
// given kinds (all if none).
func (s *sink) findings(t *testing.T, name string, kinds ...audit.FindingKind) []audit.Finding {
	t.Helper()
	f := audit.FindingFilter{TimeFilter: audit.TimeFilter{Limit: 10000}}
	if name != "" {
		l, ok := s.lock(t, name)
		if !ok {
			return nil
		}
		f.LockID = l.ID
	}
	all, err := s.store.Findings(context.Background(), f)
	if err != nil {
		t.Fatalf("findings of %s: %v", name, err)
	}
	var out []audit.Finding
	for _, fd := range all {
		if len(kinds) == 0 || slices.Contains(kinds, fd.Kind) {
			out = append(out, fd)
		}
	}
	return out
}

func (s *sink) tenures(t *testing.T, name string) []audit.Tenure {
	t.Helper()
	l, ok := s.lock(t, name)
	if !ok {
		return nil
	}
	ts, err := s.store.Tenures(context.Background(), l.ID, audit.TimeFilter{Limit: 10000})
	if err != nil {
		t.Fatalf("tenures of %s: %v", name, err)
	}
	return ts
}

// waitEvents polls the store until lock has at least n events of kinds and
// returns them.
func (s *sink) waitEvents(t *testing.T, timeout time.Duration, name string, n int, kinds ...audit.EventKind) []audit.Event {
	t.Helper()
	var got []audit.Event
	eventually(t, timeout, fmt.Sprintf("%d %v event(s) of %s", n, kinds, name), func() bool {
		got = s.events(t, name, kinds...)
		return len(got) >= n
	})
	return got
}

// waitFindings polls the store until lock has a finding of kind.
func (s *sink) waitFindings(t *testing.T, timeout time.Duration, name string, kind audit.FindingKind) []audit.Finding {
	t.Helper()
	var got []audit.Finding
	eventually(t, timeout, fmt.Sprintf("a %s finding on %s", kind, name), func() bool {
		got = s.findings(t, name, kind)
		return len(got) > 0
	})
	return got
}

// noFindings fails the test if lock has findings of any of kinds.
func (s *sink) noFindings(t *testing.T, name string, kinds ...audit.FindingKind) {
	t.Helper()
	for _, f := range s.findings(t, name, kinds...) {
		t.Errorf("unexpected %s finding on %s: %s", f.Kind, name, f.Summary)
	}
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func tokenOf(tok *int64) int64 {
	if tok == nil {
		return -1
	}
	return *tok
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})).With("source", testSource)
}

// admin returns a clientset that acts as a cluster admin.
func admin(t *testing.T) clientset.Interface {
	t.Helper()
	return clientFor(t, apiserver.Config)
}

func clientFor(t *testing.T, cfg *rest.Config) clientset.Interface {
	t.Helper()
	cs, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// newNamespace creates a namespace of the test's own, so tests sharing the
// apiserver do not see each other's Leases.
func newNamespace(t *testing.T) string {
	t.Helper()
	name := strings.ToLower(strings.TrimPrefix(t.Name(), "Test"))
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, name)
	if len(name) > 40 {
		name = name[:40]
	}
	name = fmt.Sprintf("%s-%05d", strings.Trim(name, "-"), rand.IntN(100000))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := admin(t).CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// collectorRun is one running collector.
type collectorRun struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// runCollector starts a collector on the shared apiserver with cfg (Name
// filled in) and waits until it is ready. It stops when the test ends.
func runCollector(t *testing.T, s *sink, cfg Config, opts ...Option) *collectorRun {
	t.Helper()
	cfg.Name = testSource
	opts = append([]Option{WithRESTConfig(apiserver.Config)}, opts...)
	c, err := New(cfg, testLogger(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return startCollector(t, c, s)
}

func startCollector(t *testing.T, c *Collector, s *sink) *collectorRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cr := &collectorRun{cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	var once sync.Once
	go func() { cr.done <- c.Run(ctx, s, func() { once.Do(func() { close(ready) }) }) }()
	select {
	case <-ready:
	case err := <-cr.done:
		cancel()
		t.Fatalf("collector stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("collector not ready after 30s")
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

// acquisition is what an elector saw when it became leader: the Lease read
// back right away, as a holder would to learn its fencing token.
type acquisition struct {
	lease    string // namespace/name
	identity string
	holder   string
	token    int64
}

// electionLog collects the acquisitions of a test's electors in order.
type electionLog struct {
	mu   sync.Mutex
	acqs []acquisition
}

func (l *electionLog) add(a acquisition) {
	l.mu.Lock()
	l.acqs = append(l.acqs, a)
	l.mu.Unlock()
}

func (l *electionLog) all() []acquisition {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acqs)
}

// elector is a running client-go leader elector.
type elector struct {
	identity string
	cancel   context.CancelFunc
	done     chan struct{}
	leading  chan struct{} // closed when it starts leading
}

// electorConfig tunes an elector.
type electorConfig struct {
	// Release gives the Lease up on stop (ReleaseOnCancel); without it the
	// elector just stops renewing.
	Release bool
	// LeaseDuration defaults to leaseDuration; RenewDeadline is 3/4 of it,
	// RetryPeriod always retryPeriod.
	LeaseDuration time.Duration
	// Log, if not nil, receives each acquisition.
	Log *electionLog
}

// startElector runs a real client-go leader elector for Lease ns/name. It is
// stopped when the test ends.
func startElector(t *testing.T, ns, name, identity string, cfg electorConfig) *elector {
	t.Helper()
	cs := admin(t)
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = leaseDuration
	}
	renew := renewDeadline
	if cfg.LeaseDuration != leaseDuration {
		renew = cfg.LeaseDuration * 3 / 4
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &elector{identity: identity, cancel: cancel, done: make(chan struct{}), leading: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		},
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   renew,
		RetryPeriod:     retryPeriod,
		ReleaseOnCancel: cfg.Release,
		Name:            identity,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				if cfg.Log != nil {
					// What a holder does to learn its fencing token.
					l, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
					if err == nil {
						cfg.Log.add(acquisition{lease: ns + "/" + name, identity: identity, holder: deref(l.Spec.HolderIdentity), token: int64(deref(l.Spec.LeaseTransitions))})
					}
				}
				close(e.leading)
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(e.done)
		le.Run(ctx)
	}()
	t.Cleanup(e.stop)
	return e
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// waitLeading waits until the elector leads.
func (e *elector) waitLeading(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-e.leading:
	case <-time.After(timeout):
		t.Fatalf("elector %s not leading after %s", e.identity, timeout)
	}
}

// stop cancels the elector and waits until it has returned (and, with
// ReleaseOnCancel, released the Lease).
func (e *elector) stop() {
	e.cancel()
	<-e.done
}

// getLease reads a Lease.
func getLease(t *testing.T, ns, name string) *coordinationv1.Lease {
	t.Helper()
	l, err := admin(t).CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Lease %s/%s: %v", ns, name, err)
	}
	return l
}

// updateLease changes a Lease by hand, retrying on conflicts with its
// writers.
func updateLease(t *testing.T, ns, name string, change func(*coordinationv1.Lease)) *coordinationv1.Lease {
	t.Helper()
	for attempt := 0; ; attempt++ {
		l := getLease(t, ns, name)
		change(l)
		out, err := admin(t).CoordinationV1().Leases(ns).Update(context.Background(), l, metav1.UpdateOptions{})
		if err == nil {
			return out
		}
		if attempt > 10 {
			t.Fatalf("update Lease %s/%s: %v", ns, name, err)
		}
	}
}

// createLease creates a Lease by hand.
func createLease(t *testing.T, ns, name string, spec coordinationv1.LeaseSpec) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	out, err := admin(t).CoordinationV1().Leases(ns).Create(context.Background(), l, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Lease %s/%s: %v", ns, name, err)
	}
	return out
}

func now() *metav1.MicroTime { return &metav1.MicroTime{Time: time.Now()} }
