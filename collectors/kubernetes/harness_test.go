package kubernetes

import (
	"context"
	"fmt"
	"math/rand/v2"
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
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

const testSource = "cluster-test"

// Elector timings: short, so a lease runs out in two seconds, but with
// client-go's rule RenewDeadline > 1.2 * RetryPeriod.
const (
	leaseDuration = 2 * time.Second
	renewDeadline = 1500 * time.Millisecond
	retryPeriod   = 300 * time.Millisecond
)

// newSink is the test's sink: the real Recorder over a real SQLite store in
// the test's directory, with a renew margin of a quarter of a lease.
func newSink(t *testing.T) *collectortest.Sink {
	t.Helper()
	return collectortest.NewSink(t, testSource, audit.KindKubernetes, collectortest.RenewMargin(0.25))
}

func tokenOf(tok *int64) int64 {
	if tok == nil {
		return -1
	}
	return *tok
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

// runCollector starts a collector on the shared apiserver with cfg (Name
// filled in) and waits until it is ready. It stops when the test ends.
func runCollector(t *testing.T, s collectors.Sink, cfg Config, opts ...Option) *collectortest.Running {
	t.Helper()
	cfg.Name = testSource
	opts = append([]Option{WithRESTConfig(apiserver.Config)}, opts...)
	c, err := New(cfg, collectortest.Logger(t, testSource), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return collectortest.Run(t, c, s)
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
