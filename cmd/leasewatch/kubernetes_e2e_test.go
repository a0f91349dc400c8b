package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/collectors/kubernetes/kubetest"
)

// cluster is the package's one kube-apiserver, started by the first test
// that needs it, so the etcd and command-line tests never wait for it.
var cluster kubetest.Shared

// pg is the package's one PostgreSQL server, started by the first test
// that needs it; each test takes a database of its own from it.
var pg pgtest.Shared

func TestMain(m *testing.M) {
	code := pg.Run(m)
	cluster.Stop()
	os.Exit(code)
}

// kubeconfigWithContexts writes a copy of the test cluster's kubeconfig whose
// current context points at nothing; the cluster's own context stays "test".
func kubeconfigWithContexts(t *testing.T, api *kubetest.Apiserver) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(api.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := kc.Contexts["test"]; !ok {
		t.Fatalf("the test cluster's kubeconfig has no context \"test\": %v", kc.Contexts)
	}
	kc.Clusters["nowhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", InsecureSkipTLSVerify: true}
	kc.Contexts["nowhere"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: kc.Contexts["test"].AuthInfo}
	kc.CurrentContext = "nowhere"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// runElector runs a client-go leader elector for Lease ns/name with short
// timings until the test ends, releasing the Lease on stop. Each wrap, if
// any, wraps the elector's Lease lock.
func runElector(t *testing.T, cs clientset.Interface, ns, name, identity string, wrap ...func(resourcelock.Interface) resourcelock.Interface) (stop func()) {
	t.Helper()
	var lock resourcelock.Interface = &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	for _, w := range wrap {
		lock = w(lock)
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   2 * time.Second,
		RenewDeadline:   1500 * time.Millisecond,
		RetryPeriod:     300 * time.Millisecond,
		ReleaseOnCancel: true,
		Name:            identity,
		Callbacks:       leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		le.Run(ctx)
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

// clusterNamespace returns the package's kube-apiserver, a client of it
// and a new namespace named from prefix, for a test's Leases.
func clusterNamespace(t *testing.T, prefix string) (*kubetest.Apiserver, *clientset.Clientset, string) {
	t.Helper()
	api := cluster.Get(t)
	cs, err := clientset.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%100000)
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	return api, cs, ns
}

// leasewatch serve, configured by a file alone, records a client-go leader
// election on the cluster a kubeconfig points to: the source's kubeconfig
// and context keys select the cluster, and grants, renewals and the release
// reach the API.
func TestEndToEndServeKubernetesSource(t *testing.T) {
	api, cs, ns := clusterNamespace(t, "e2e-serve")

	base, _ := startServe(t, fmt.Sprintf(`
listen: 127.0.0.1:0
database: %s
sources:
  - name: cluster-e2e
    kind: kubernetes
    kubeconfig: %s
    context: test
`, filepath.Join(t.TempDir(), "lw.db"), kubeconfigWithContexts(t, api)))

	eventually(t, 30*time.Second, "the kubernetes source to be up", func() bool {
		var resp struct {
			Sources []struct{ Name, State, Error string }
		}
		getJSON(t, base, "/api/v1/sources", &resp)
		return len(resp.Sources) == 1 && resp.Sources[0].State == "up"
	})

	stop := runElector(t, cs, ns, "leader", "e2e-leader_1")
	name := ns + "/leader"
	lockQuery := "/api/v1/locks?" + url.Values{"source": {"cluster-e2e"}, "name": {name}}.Encode()
	var lock apiLock
	eventually(t, 20*time.Second, "the Lease held by the elector", func() bool {
		var resp struct{ Locks []apiLock }
		getJSON(t, base, lockQuery, &resp)
		if len(resp.Locks) == 1 {
			lock = resp.Locks[0]
		}
		return lock.State == "held"
	})
	if lock.Holder != "e2e-leader_1" || lock.Token == nil || *lock.Token != 0 {
		t.Fatalf("lock = %+v, want held by e2e-leader_1 with token 0 (leaseTransitions)", lock)
	}

	type event struct {
		Kind   string
		Holder string
		Token  *int64
	}
	events := func() map[string][]event {
		var resp struct{ Events []event }
		getJSON(t, base, fmt.Sprintf("/api/v1/locks/%d/events", lock.ID), &resp)
		byKind := map[string][]event{}
		for _, e := range resp.Events {
			byKind[e.Kind] = append(byKind[e.Kind], e)
		}
		return byKind
	}
	// The elector renews every RetryPeriod (300ms).
	eventually(t, 20*time.Second, "a grant and renewals of the Lease", func() bool {
		return len(events()["renew"]) >= 3
	})
	stop() // ReleaseOnCancel
	var got map[string][]event
	eventually(t, 20*time.Second, "the release of the Lease", func() bool {
		got = events()
		return len(got["release"]) == 1
	})
	for _, kind := range []string{"grant", "renew", "release"} {
		for _, e := range got[kind] {
			if e.Holder != "e2e-leader_1" || e.Token == nil || *e.Token != 0 {
				t.Errorf("%s = %+v, want e2e-leader_1 with token 0", kind, e)
			}
		}
	}
	if len(got["grant"]) != 1 {
		t.Errorf("grants = %+v, want one", got["grant"])
	}
	// A release is not an expiry, and one holder's grant has nothing to
	// overlap or reuse. (A renewal late under load may give late_renewal.)
	var findings struct{ Findings []apiFinding }
	getJSON(t, base, fmt.Sprintf("/api/v1/findings?lock=%d", lock.ID), &findings)
	for _, f := range findings.Findings {
		if f.Kind != "late_renewal" {
			t.Errorf("unexpected %s finding: %s", f.Kind, f.Summary)
		}
	}
}

// A kubernetes source's context must be one its kubeconfig has: serve stops
// at startup and names it.
func TestServeKubernetesSourceUnknownContext(t *testing.T) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["a"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	kc.Contexts["a"] = &clientcmdapi.Context{Cluster: "a"}
	kc.CurrentContext = "a"
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "leasewatch.yaml")
	config := fmt.Sprintf("listen: 127.0.0.1:0\ndatabase: %s\nsources:\n  - name: k\n    kind: kubernetes\n    kubeconfig: %s\n    context: staging\n",
		filepath.Join(dir, "lw.db"), kubeconfig)
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	if code := run(context.Background(), []string{"serve", "--config", path}, &stdout, &stderr); code != 1 {
		t.Fatalf("serve exit code = %d, want 1; stderr: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), `sources[0]: context: "staging" is not in the kubeconfig`) {
		t.Fatalf("stderr = %q, want it to name sources[0]'s context", stderr.String())
	}
}
