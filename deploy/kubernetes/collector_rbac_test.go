package kubernetes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/leasewatch/leasewatch/deploy/testproc"
)

// applyKinds creates the objects of ms whose kind is one of kinds, as the
// variant builds them, on a kube-apiserver (skipping those an earlier test
// created), and deletes them, Namespaces excepted, when the test ends.
func applyKinds(t *testing.T, ctx context.Context, r *dryRunner, ms []manifest, kinds ...string) {
	t.Helper()
	for _, m := range ms {
		if !slices.Contains(kinds, m.gvk.Kind) {
			continue
		}
		u, err := toUnstructured(m.raw)
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		c := r.client(t, u)
		if _, err := c.Create(ctx, u, metav1.CreateOptions{FieldManager: fieldOwner}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s: %v", m, err)
		}
		if m.gvk.Kind == "Namespace" {
			continue
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
			defer cancel()
			if err := c.Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("clean up %s: %v", m, err)
			}
		})
	}
}

// TestLeasewatchUnderTheClusterRole applies the single variant's
// ServiceAccount, ClusterRole and ClusterRoleBinding to a kube-apiserver
// that authorizes with RBAC, asks the TokenRequest API for that
// ServiceAccount's token, and runs `leasewatch serve` with it, watching
// every namespace: it records the Leases of two namespaces. With the same
// token, reading a Secret, writing a Lease and listing Pods are refused.
func TestLeasewatchUnderTheClusterRole(t *testing.T) {
	a := requireApiserver(t)
	ms := manifests(t, single)
	ctx, cancel := context.WithTimeout(context.Background(), 3*apiTimeout)
	defer cancel()
	admin, err := kubernetes.NewForConfig(a.Config)
	if err != nil {
		t.Fatal(err)
	}
	applyKinds(t, ctx, newDryRunner(t, a), ms, "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")
	sa := one[*corev1.ServiceAccount](t, ms)
	tok, err := admin.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", sa.Namespace, sa.Name, err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: a.URL, InsecureSkipTLSVerify: true}
	kc.AuthInfos["leasewatch"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "leasewatch"}
	kc.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}

	// Leases in two namespaces of their own, made by the admin.
	names := map[string]string{"rbac-team-a": "scheduler", "rbac-team-b": "controller"}
	for ns, lease := range names {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		holder, secs := "holder-of-"+lease, int32(60)
		now := metav1.NewMicroTime(time.Now())
		if _, err := admin.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: lease},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}

	base := serveLeasewatch(t, dir, kubeconfig)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got := recordedLocks(base)
		for ns, lease := range names {
			if !got[ns+"/"+lease] {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("leasewatch under the ClusterRole did not record %v: %v (recorded %v)", names, err, recordedLocks(base))
	}

	// Nothing beyond reading Leases.
	podConfig := rest.AnonymousClientConfig(a.Config)
	podConfig.BearerToken = tok.Status.Token
	pod, err := kubernetes.NewForConfig(podConfig)
	if err != nil {
		t.Fatal(err)
	}
	holder := "intruder"
	for what, err := range map[string]error{
		"get a Secret":     errOf(pod.CoreV1().Secrets("rbac-team-a").Get(ctx, "anything", metav1.GetOptions{})),
		"list Secrets":     errOf(pod.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})),
		"create a Lease":   errOf(pod.CoordinationV1().Leases("rbac-team-a").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}, metav1.CreateOptions{})),
		"delete a Lease":   pod.CoordinationV1().Leases("rbac-team-b").Delete(ctx, "controller", metav1.DeleteOptions{}),
		"create in its ns": errOf(pod.CoordinationV1().Leases(sa.Namespace).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}, metav1.CreateOptions{})),
		"list Pods":        errOf(pod.CoreV1().Pods("").List(ctx, metav1.ListOptions{})),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s with the ServiceAccount's token: %v, want Forbidden", what, err)
		}
	}
}

// built is the leasewatch binary of the package's tests, built once.
var built struct {
	once sync.Once
	bin  string
	err  error
}

// leasewatchBinary builds leasewatch on the first call of the test process.
func leasewatchBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "leasewatch-bin-")
		if err != nil {
			built.err = err
			return
		}
		built.bin = filepath.Join(dir, "leasewatch")
		if out, err := exec.Command("go", "build", "-o", built.bin, "github.com/leasewatch/leasewatch/cmd/leasewatch").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("build leasewatch: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// serveLeasewatch builds leasewatch and runs `leasewatch serve` watching
// every namespace through kubeconfig, until the test ends. It returns the
// base URL once the source is up.
func serveLeasewatch(t *testing.T, dir, kubeconfig string) string {
	t.Helper()
	bin := leasewatchBinary(t)
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("listen: 127.0.0.1:%d\ndatabase: %s\nsources:\n  - name: cluster\n    kind: kubernetes\n    kubeconfig: %s\n",
		port, filepath.Join(dir, "lw.db"), kubeconfig)
	path := filepath.Join(dir, "leasewatch.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "leasewatch.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", path)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		testproc.Terminate(cmd.Process, done, 15*time.Second)
		log.Close()
		if t.Failed() {
			t.Logf("leasewatch's log:\n%s", testproc.TailFile(log.Name(), 30))
		}
	})
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// recordedLocks returns the names of the locks leasewatch at base lists.
func recordedLocks(base string) map[string]bool {
	out := map[string]bool{}
	resp, err := http.Get(base + "/api/v1/locks?limit=1000")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	var body struct {
		Locks []struct {
			Name string `json:"name"`
		} `json:"locks"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) == nil {
		for _, l := range body.Locks {
			out[l.Name] = true
		}
	}
	return out
}
