package ownership_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/leasewatch/leasewatch/collectors/kubernetes/kubetest"
	"github.com/leasewatch/leasewatch/collectors/ownership"
	"github.com/leasewatch/leasewatch/collectors/ownership/ownershiptest"
)

// cluster is the package's one real kube-apiserver, started by the first
// test that needs it; each test works in namespaces of its own.
var cluster kubetest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	cluster.Stop()
	os.Exit(code)
}

// TestKubernetesElector runs the contract suite on a real kube-apiserver.
func TestKubernetesElector(t *testing.T) {
	api := cluster.Get(t)
	u, err := url.Parse(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	var namespaces atomic.Int64
	ownershiptest.Run(t, ownershiptest.Harness{
		Target: u.Host,
		Scope: func(t *testing.T) string {
			ns := fmt.Sprintf("ownership-%d", namespaces.Add(1))
			if _, err := admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			return ns
		},
		New: func(t *testing.T, ns, identity, addr string, timing ownership.Timing) ownership.Elector {
			t.Helper()
			cfg := rest.CopyConfig(api.Config)
			cfg.Host = "https://" + addr
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			el, err := ownership.NewKubernetesElector(cs, ownership.KubernetesConfig{Identity: identity, Namespace: ns, Timing: timing})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { el.Close() })
			return el
		},
	})
}
