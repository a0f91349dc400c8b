package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/leasewatch/leasewatch/collectors/kubernetes/kubetest"
)

// cluster is the kube-apiserver of the Kubernetes load's tests.
var cluster kubetest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	cluster.Stop()
	if replicaBinary.dir != "" {
		os.RemoveAll(replicaBinary.dir)
	}
	os.Exit(code)
}

// A Lease whose holder writes it again only after it ran out is taken anew:
// leasewatch records an expiry and a grant, not a renewal. The load's check
// must expect exactly that, Lease by Lease, and still catch a write that was
// not recorded. Before, the load counted every committed write as a renewal,
// so such Leases showed "one renewal short" that never drained.
func TestKubeLoadChecksWritesAfterTheLeaseRanOut(t *testing.T) {
	const ns = "ran-out"
	ctx, api, cs, bin, dir, log := startKubeTest(t, ns)
	// A long Lease the first snapshot records, so the Leases created after
	// it reach leasewatch through the watch.
	sentinel, err := createLeases(ctx, cs, ns, "sentinel-", 1, 600)
	if err != nil {
		t.Fatal(err)
	}
	lw, err := startLeasewatch(ctx, bin, dir, "", fmt.Sprintf(`  - name: %s
    kind: kubernetes
    kubeconfig: %s
    namespaces: [%s]
`, loadSource, api.Kubeconfig, ns), log)
	if err != nil {
		t.Fatal(err)
	}
	defer lw.stop()
	waitRecorded(t, ctx, lw.url, "observed", 1)

	const n, duration = 3, 3 * time.Second
	leases, err := createLeases(ctx, cs, ns, "controller-", n, int32(duration/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waitRecorded(t, ctx, lw.url, "grant", n)
	// Let every Lease run out, past where leasewatch could still take the
	// next write as a renewal.
	waitRecorded(t, ctx, lw.url, "expire", n)
	for _, l := range leases {
		deadline := renewTimeOf(l.obj).Add(duration + judgedLate)
		waitUntil(t, ctx, "Lease "+l.obj.Name+" well past its deadline", func() bool { return time.Now().After(deadline) })
	}
	var conflicts atomic.Int64
	for _, l := range leases {
		for range 3 { // the first takes the Lease anew, the others renew it
			if !renew(ctx, cs, l, &conflicts) {
				t.Fatalf("renew %s failed", l.obj.Name)
			}
		}
	}

	all := append(sentinel, leases...)
	want := expectedKinds(all)
	if want.writes != 3*n || want.ranOut != n || want.grant != n || want.renew != 2*n || want.unknown != 0 {
		t.Fatalf("tally = %+v, want %d writes: %d after the Lease ran out (grants), %d renewals", want, 3*n, n, 2*n)
	}
	if d := drain(ctx, lw.url, loadSource, map[string]float64{"renew": float64(want.renew), "grant": float64(n + want.grant)}); !strings.HasPrefix(d, "in ") {
		t.Fatalf("drain: %s", d)
	}
	stored, err := recordedWrites(ctx, sqliteIn(dir), loadSource)
	if err != nil {
		t.Fatal(err)
	}
	c := checkLeases(all, stored)
	if c.matched != want.writes || len(c.diffs) != 0 || c.ranOutAs["grant"] != n {
		t.Fatalf("%d of %d writes matched, %v of the ones after the Lease ran out; differences:\n%s", c.matched, want.writes, c.ranOutAs, strings.Join(c.diffs, "\n"))
	}

	// The check is not blind: a write leasewatch did not record, or
	// recorded as another kind, is a difference of its Lease.
	l := leases[0]
	l.writes = append(l.writes, leaseWrite{rv: "1", renewed: time.Now(), deadline: time.Now().Add(time.Hour)})
	delete(stored, leases[1].obj.Namespace+"/"+leases[1].obj.Name)
	for i, e := range stored[leases[2].obj.Namespace+"/"+leases[2].obj.Name] {
		if e.kind == "grant" && e.position != leases[2].created {
			stored[leases[2].obj.Namespace+"/"+leases[2].obj.Name][i].kind = "renew"
		}
	}
	if diffs := checkLeases(leases, stored).diffs; len(diffs) != 3 ||
		!strings.Contains(diffs[0], "resourceVersion 1 (") || !strings.Contains(diffs[1], "not recorded") || !strings.Contains(diffs[2], "recorded as renew, want grant") {
		t.Fatalf("differences = \n%s\nwant one per Lease: a write not recorded, writes not recorded, a grant recorded as a renewal", strings.Join(diffs, "\n"))
	}
}

// waitRecorded polls leasewatch at url until it recorded at least n events
// of kind for the load's source.
func waitRecorded(t *testing.T, ctx context.Context, url, kind string, n int) {
	t.Helper()
	waitUntil(t, ctx, fmt.Sprintf("%d %s events", n, kind), func() bool { return recorded(ctx, url, loadSource, kind) >= float64(n) })
}

func waitUntil(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	if err := waitFor(ctx, 60*time.Second, what, cond); err != nil {
		t.Fatal(err)
	}
}

// The replay records a real apiserver's watch of heartbeat renewals and
// serves it to leasewatch as the heartbeats of many Leases: leasewatch's
// collector must take the replay for an apiserver (list, watch, /version),
// and the run's check must find every renewal sent recorded once, by its
// renewTime, since a renewal is stored without its resourceVersion.
func TestKubeReplayRecordsEveryRenewal(t *testing.T) {
	const ns = "replay-recording"
	ctx, _, cs, bin, dir, log := startKubeTest(t, ns)
	rec, err := recordWatch(ctx, cs, ns)
	if err != nil {
		t.Fatal(err)
	}
	frames, err := rec.save(dir)
	if err != nil {
		t.Fatal(err)
	}
	k := kubeLoad{replay: true, frames: frames, leasewatch: bin, heartbeats: 300, heartbeatEvery: time.Second, warmup: time.Second, duration: 3 * time.Second}
	var out syncBuffer
	if err := k.run(ctx, &out, log); err != nil {
		t.Fatalf("replay: %v\n%s", err, out.String())
	}
	if got := out.String(); !strings.Contains(got, "| Leases that differ | 0 |") || !strings.Contains(got, "replayed from a kube-apiserver's recorded watch") {
		t.Fatalf("replay's report:\n%s\nwant every Lease as sent, and the replay said", got)
	}
	t.Logf("%s", out.String())
}

// startKubeTest is what a test of the Kubernetes load starts from: the
// shared apiserver, a client of it with namespace ns created, leasewatch
// built into a directory of the test's, and leasewatch's log, printed if
// the test fails. ctx ends with the test, at the latest in 3 minutes.
func startKubeTest(t *testing.T, ns string) (ctx context.Context, api *kubetest.Apiserver, cs *kubernetes.Clientset, bin, dir string, log *syncBuffer) {
	t.Helper()
	api = cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	log = new(syncBuffer)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of leasewatch:\n%s", log.String())
		}
	})
	dir = t.TempDir()
	bin, err := buildLeasewatch(ctx, dir, log, raceFlags()...)
	if err != nil {
		t.Fatal(err)
	}
	if cs, err = kubernetes.NewForConfig(api.Config); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ctx, api, cs, bin, dir, log
}
