package kubernetes_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
	"github.com/leasewatch/leasewatch/collectors/kubernetes/kubetest"
	"github.com/leasewatch/leasewatch/collectors/ownership"
)

// TestElectorUnderTheOwnershipRole applies the replicated variant's
// ServiceAccount, Role and RoleBinding (and not the collector's
// ClusterRole) to a kube-apiserver that authorizes with RBAC, then runs two
// replicas' real ownership managers as that ServiceAccount, with the
// configuration's namespace and timing. The Role is enough when the first
// replica creates and renews a Lease per source and its member Lease, and
// the second joins (counting the member Leases), takes one source over
// from the first (which releases it) under a higher token. It grants no
// more when deleting a Lease, patching one, watching them, and writing one
// in another namespace are all refused.
func TestElectorUnderTheOwnershipRole(t *testing.T) {
	a := requireApiserver(t)
	ms := manifests(t, replicated)
	cm := one[*corev1.ConfigMap](t, ms)
	cfg, err := config.Parse([]byte(cm.Data[configKey]))
	if err != nil {
		t.Fatalf("%s: %v", configKey, err)
	}
	rcfg := cfg.Replication
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	admin, err := kubernetes.NewForConfig(a.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := applyOwnershipRBAC(t, ctx, a, admin, ms)
	pod := serviceAccountClient(t, ctx, a, one[*corev1.ServiceAccount](t, ms), ns)

	sources := []string{"cluster", "dc-east"}
	first := startReplica(t, pod, rcfg, ns, "leasewatch-6d4b9c7f8-first", sources)
	held := first.waitHolding(t, len(sources))
	for _, src := range sources {
		l, err := admin.CoordinationV1().Leases(ns).Get(ctx, ownership.SourceLeaseName(src), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("source %s's Lease: %v", src, err)
		}
		if h := l.Spec.HolderIdentity; h == nil || !strings.HasPrefix(*h, first.identity+"/") {
			t.Errorf("source %s's Lease held by %v, want a campaign of %s", src, deref(h), first.identity)
		}
	}
	if _, err := admin.CoordinationV1().Leases(ns).Get(ctx, ownership.MemberLeaseName(first.identity), metav1.GetOptions{}); err != nil {
		t.Errorf("the first replica's member Lease: %v", err)
	}

	second := startReplica(t, pod, rcfg, ns, "leasewatch-6d4b9c7f8-second", sources)
	taken := second.waitHolding(t, 1)
	first.waitHolding(t, 1)
	for src, token := range taken {
		if token <= held[src] {
			t.Errorf("source %s taken over under token %d, not above the first replica's %d", src, token, held[src])
		}
	}
	checkNothingBeyondTheElector(t, ctx, admin, pod, ns, ownership.SourceLeaseName(sources[0]))
}

// applyOwnershipRBAC creates the manifests' Namespace, ServiceAccount, Role
// and RoleBinding (and removes them, and the Leases, when the test ends:
// the dry-run test expects none of the manifests' objects to exist). It
// returns the namespace.
func applyOwnershipRBAC(t *testing.T, ctx context.Context, a *kubetest.Apiserver, admin kubernetes.Interface, ms []manifest) string {
	t.Helper()
	ns := one[*rbacv1.Role](t, ms).Namespace
	applyKinds(t, ctx, newDryRunner(t, a), ms, "Namespace", "ServiceAccount", "Role", "RoleBinding")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		defer cancel()
		err := admin.CoordinationV1().Leases(ns).DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: ownership.LabelManagedBy + "=leasewatch"})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("clean up the Leases: %v", err)
		}
	})
	return ns
}

// serviceAccountClient returns the pods' client: the ServiceAccount sa, as
// the apiserver authenticates its token (its user name; the apiserver adds
// its groups), once RBAC lets it get Leases in ns (the authorizer's cache
// has the binding).
func serviceAccountClient(t *testing.T, ctx context.Context, a *kubetest.Apiserver, sa *corev1.ServiceAccount, ns string) kubernetes.Interface {
	t.Helper()
	podConfig := rest.CopyConfig(a.Config)
	podConfig.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", sa.Namespace, sa.Name)}
	pod, err := kubernetes.NewForConfig(podConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		r, err := pod.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: "get", Group: "coordination.k8s.io", Resource: "leases",
			}},
		}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed, err
	}); err != nil {
		t.Fatalf("the RoleBinding never took effect: %v", err)
	}
	return pod
}

// checkNothingBeyondTheElector checks that the ServiceAccount's client pod
// may do nothing the elector does not: every other verb on Leases, Leases
// elsewhere and Secrets are forbidden, and the source Lease victim is
// still there.
func checkNothingBeyondTheElector(t *testing.T, ctx context.Context, admin, pod kubernetes.Interface, ns, victim string) {
	t.Helper()
	leases := pod.CoordinationV1().Leases(ns)
	refused := map[string]error{
		"delete a Lease":            leases.Delete(ctx, victim, metav1.DeleteOptions{}),
		"delete every Lease":        leases.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}),
		"create a Lease in default": errOf(pod.CoordinationV1().Leases(metav1.NamespaceDefault).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "intruder"}}, metav1.CreateOptions{})),
		"patch a Lease":             errOf(leases.Patch(ctx, victim, types.MergePatchType, []byte(`{"spec":{"leaseTransitions":0}}`), metav1.PatchOptions{})),
		"watch the Leases":          errOf(leases.Watch(ctx, metav1.ListOptions{})),
		"read a Secret":             errOf(pod.CoreV1().Secrets(ns).Get(ctx, postgresName, metav1.GetOptions{})),
	}
	for _, what := range slices.Sorted(maps.Keys(refused)) {
		if err := refused[what]; !apierrors.IsForbidden(err) {
			t.Errorf("%s as the ServiceAccount: err = %v, want Forbidden", what, err)
		}
	}
	if _, err := admin.CoordinationV1().Leases(ns).Get(ctx, victim, metav1.GetOptions{}); err != nil {
		t.Errorf("Lease %s after the refused delete: %v", victim, err)
	}
}

func errOf[T any](_ T, err error) error { return err }

// replica is one replica's ownership manager, run as serve runs it.
type replica struct {
	identity string
	timing   ownership.Timing
	manager  *ownership.Manager
}

// startReplica runs a manager of sources on a Kubernetes elector with cs,
// until the test ends.
func startReplica(t *testing.T, cs kubernetes.Interface, cfg config.ReplicationConfig, ns, identity string, sources []string) *replica {
	t.Helper()
	timing := cfg.Timing()
	el, err := ownership.NewKubernetesElector(cs, ownership.KubernetesConfig{Identity: identity, Namespace: ns, Timing: timing})
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{identity: identity, timing: timing, manager: ownership.NewManager(el, ownership.ManagerConfig{Sources: sources, RetryPeriod: timing.RetryPeriod})}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.manager.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		el.Close()
	})
	return r
}

// waitHolding waits until the replica holds n sources, and returns them
// with their tokens.
func (r *replica) waitHolding(t *testing.T, n int) map[string]int64 {
	t.Helper()
	// A takeover waits for the holder to resign (a retry period) and for
	// the candidate's next try; a few lease durations bound both.
	var held map[string]int64
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 4*r.timing.LeaseDuration, true, func(context.Context) (bool, error) {
		held = r.manager.Held()
		return len(held) == n, nil
	}); err != nil {
		t.Fatalf("replica %s holds %v, want %d sources (is the Role short of a verb? the elector's errors are in klog's output): %v", r.identity, held, n, err)
	}
	return held
}
