package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/leasewatch/leasewatch/collectors/kubernetes/kubetest"
)

// kubeLoad is the Kubernetes scenario: node heartbeat Leases renewed like
// kubelets do, and leader-election Leases renewed like client-go electors.
type kubeLoad struct {
	heartbeats     int
	heartbeatEvery time.Duration
	elections      int
	electionEvery  time.Duration
	warmup         time.Duration
	duration       time.Duration
	kubeconfig     string
	leasewatch     string
	keep           bool // keep the run's folder (database, config) for inspection
}

const (
	loadSource      = "load"
	loadElectionsNS = "leasewatch-load"
	heartbeatNS     = "kube-node-lease"
)

// lease is one Lease the load renews, with the object last written and how
// many renewals the apiserver applied.
type lease struct {
	mu       sync.Mutex
	obj      *coordinationv1.Lease
	renewals int64
}

func (k *kubeLoad) run(ctx context.Context, out, log io.Writer) error {
	dir, err := os.MkdirTemp("", "leasewatch-load-")
	if err != nil {
		return err
	}
	if k.keep {
		fmt.Fprintf(log, "keeping %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	kubeconfig, restCfg := k.kubeconfig, (*rest.Config)(nil)
	if kubeconfig == "" {
		fmt.Fprintln(log, "starting a test kube-apiserver on an embedded etcd")
		api, err := kubetest.Start(ctx, dir, io.Discard)
		if err != nil {
			return err
		}
		defer api.Stop()
		kubeconfig, restCfg = api.Kubeconfig, api.Config
	} else if restCfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return err
	}
	restCfg.QPS, restCfg.Burst = 5000, 5000
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}

	fmt.Fprintf(log, "creating %d heartbeat and %d election Leases\n", k.heartbeats, k.elections)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: loadElectionsNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	heartbeats, err := createLeases(ctx, cs, heartbeatNS, "node-", k.heartbeats, 40)
	if err != nil {
		return err
	}
	elections, err := createLeases(ctx, cs, loadElectionsNS, "controller-", k.elections, 15)
	if err != nil {
		return err
	}

	lw, err := startLeasewatch(ctx, k.leasewatch, dir, fmt.Sprintf(`  - name: %s
    kind: kubernetes
    kubeconfig: %s
    namespaces: [%s, %s]
    heartbeat_namespaces: [%s]
`, loadSource, kubeconfig, heartbeatNS, loadElectionsNS, heartbeatNS), log)
	if err != nil {
		return err
	}
	defer lw.stop()
	url := lw.url
	if err := waitFor(ctx, 60*time.Second, "leasewatch to record the first snapshot", func() bool {
		mfs, err := scrape(ctx, url)
		return err == nil && counterSum(mfs, "leasewatch_events_recorded_total", map[string]string{"source": loadSource}) >= float64(k.heartbeats+k.elections)
	}); err != nil {
		return err
	}

	fmt.Fprintf(log, "renewing for %s of warm-up and %s measured\n", k.warmup, k.duration)
	var updates, conflicts, skipped atomic.Int64
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, set := range []struct {
		leases []*lease
		every  time.Duration
	}{{heartbeats, k.heartbeatEvery}, {elections, k.electionEvery}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			renewLoop(loadCtx, cs, set.leases, set.every, &updates, &conflicts, &skipped)
		}()
	}

	w, err := measure(ctx, url, lw.cmd.Process.Pid, loadSource, k.warmup, k.duration)
	stopLoad()
	wg.Wait()
	if err != nil {
		return err
	}

	// Drain: every renewal the load made must be recorded exactly once.
	drained := drain(ctx, url, loadSource, map[string]float64{"renew": float64(updates.Load())})
	got := recorded(ctx, url, loadSource, "renew")
	made := make(map[string]int64, len(heartbeats)+len(elections))
	for _, l := range append(heartbeats, elections...) {
		l.mu.Lock()
		if l.renewals > 0 {
			made[l.obj.Namespace+"/"+l.obj.Name] = l.renewals
		}
		l.mu.Unlock()
	}
	perLease, err := recordedPerLock(ctx, dir, loadSource, "renew")
	if err != nil {
		return err
	}
	differ, perLock := compareCounts(made, perLease)
	offered := float64(k.heartbeats)/k.heartbeatEvery.Seconds() + float64(k.elections)/k.electionEvery.Seconds()
	w.write(out, fmt.Sprintf("leasewatch-load kubernetes: %d heartbeat Leases every %s + %d election Leases every %s (%.0f renewals/s offered), %s measured after %s warm-up; lag is renewTime → stored",
		k.heartbeats, k.heartbeatEvery, k.elections, k.electionEvery, offered, k.duration, k.warmup), [][2]string{
		{"renewals achieved", fmt.Sprintf("%.0f/s (%d skipped while the apiserver was behind)", float64(updates.Load())/(k.warmup+k.duration).Seconds(), skipped.Load())},
		{"renewals written / recorded", fmt.Sprintf("%d / %.0f (missed %.0f, update conflicts %d; drained %s)", updates.Load(), got, float64(updates.Load())-got, conflicts.Load(), drained)},
		{"Leases whose renewals differ", fmt.Sprintf("%d: %s", differ, perLock)},
	})
	if got != float64(updates.Load()) || differ > 0 {
		return fmt.Errorf("leasewatch recorded %.0f renewals of the %d made; %d Leases differ", got, updates.Load(), differ)
	}
	return nil
}

func createLeases(ctx context.Context, cs kubernetes.Interface, ns, prefix string, n int, durationSeconds int32) ([]*lease, error) {
	out := make([]*lease, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			now := metav1.NewMicroTime(time.Now())
			obj := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s%d", prefix, i), Namespace: ns},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity: ptr.To(fmt.Sprintf("%s%d_holder", prefix, i)), LeaseDurationSeconds: ptr.To(durationSeconds),
					AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To[int32](0),
				},
			}
			created, err := cs.CoordinationV1().Leases(ns).Create(ctx, obj, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				created, err = cs.CoordinationV1().Leases(ns).Get(ctx, obj.Name, metav1.GetOptions{})
			}
			if err != nil {
				errs <- err
				return
			}
			out[i] = &lease{obj: created}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, fmt.Errorf("create leases in %s: %w", ns, err)
	}
	return out, nil
}

// renewLoop renews every lease once per period, spread evenly over it, until
// ctx ends. Requests in flight then finish (on their own deadline), so every
// renewal the apiserver applied is counted.
func renewLoop(ctx context.Context, cs kubernetes.Interface, leases []*lease, every time.Duration, updates, conflicts, skipped *atomic.Int64) {
	if len(leases) == 0 {
		return
	}
	work := make(chan *lease, len(leases))
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range work {
				reqCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if renew(reqCtx, cs, l, conflicts) {
					updates.Add(1)
				}
				cancel()
			}
		}()
	}
	defer func() {
		close(work)
		wg.Wait()
	}()
	dispatch(ctx, len(leases), every, func(i int) {
		select {
		case work <- leases[i]:
		default: // the apiserver is behind: skip rather than queue without bound
			skipped.Add(1)
		}
	})
}

// renew writes a new renewTime as the holder would; a conflict re-reads.
func renew(ctx context.Context, cs kubernetes.Interface, l *lease, conflicts *atomic.Int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for attempt := 0; attempt < 3; attempt++ {
		obj := l.obj.DeepCopy()
		obj.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		updated, err := cs.CoordinationV1().Leases(obj.Namespace).Update(ctx, obj, metav1.UpdateOptions{})
		if err == nil {
			l.obj = updated
			l.renewals++
			return true
		}
		if !apierrors.IsConflict(err) {
			return false
		}
		conflicts.Add(1)
		if fresh, err := cs.CoordinationV1().Leases(obj.Namespace).Get(ctx, obj.Name, metav1.GetOptions{}); err == nil {
			l.obj = fresh
		}
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(100 * time.Microsecond).String()
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
