// Package kubernetes_test checks the Kubernetes manifests in this directory,
// both variants as kubectl apply -k renders them (kustomize's own build):
// the single-replica one (single/, which kustomization.yaml applies) and the
// replicated one (replicated/). Every document decodes into its typed API
// object, the objects keep the invariants the deployment depends on
// (read-only RBAC on Leases, a locked down non-root pod, probes, the store,
// and for the replicas their rollout, disruption budget and ownership
// Role), and a real kube-apiserver accepts all of them in a server-side dry
// run. elector_rbac_test.go runs the real elector under the Role.
package kubernetes_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
	"github.com/leasewatch/leasewatch/collectors/kubernetes"
	"github.com/leasewatch/leasewatch/collectors/kubernetes/kubetest"
	"github.com/leasewatch/leasewatch/deploy/testproc"
)

// What the manifests must agree on.
const (
	namespace  = "leasewatch"
	appName    = "leasewatch"
	image      = "ghcr.io/leasewatch/leasewatch:latest"
	configDir  = "/etc/leasewatch"
	configKey  = "leasewatch.yaml"
	dataDir    = "/var/lib/leasewatch"
	httpPort   = 8080
	nonRootID  = int64(65532)
	ingestName = "leasewatch-ingest"
	// The Secret's key "tokens" appears as a file of that name here.
	ingestMountPath = "/var/run/secrets/leasewatch/ingest"
	ingestKey       = "tokens"
	// The replicated variant's PostgreSQL Secret: its keys "password" and
	// "ca.crt" appear as files here.
	postgresName      = "leasewatch-postgres"
	postgresMountPath = "/var/run/secrets/leasewatch/postgres"
	nameLabel         = "app.kubernetes.io/name"
	hostnameKey       = "kubernetes.io/hostname"
	fieldOwner        = "leasewatch-manifests-test"
	apiTimeout        = 2 * time.Minute
	startBudget       = 20 * time.Minute // a cold build of the apiserver takes several minutes
)

// A variant is one kustomization of the manifests.
type variant struct {
	name string // in test names
	dir  string // the kustomization's directory, relative to this one
}

var (
	single     = variant{name: "single", dir: "single"}
	replicated = variant{name: "replicated", dir: "replicated"}
	variants   = []variant{single, replicated}
)

// The apiserver shared by every test of the package (TestMain). It
// authorizes with RBAC, so that the ownership Role can be put to the test.
var (
	apiserver    *kubetest.Apiserver
	apiserverErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := run(m)
	if built.bin != "" {
		os.RemoveAll(filepath.Dir(built.bin))
	}
	os.Exit(code)
}

func run(m *testing.M) int {
	if testing.Short() && !inCI() {
		apiserverErr = errors.New("not started under -short")
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "leasewatch-deploy-test-")
	if err != nil {
		apiserverErr = err
		return m.Run()
	}
	defer os.RemoveAll(dir)
	logPath := filepath.Join(dir, "kube-apiserver.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		apiserverErr = err
		return m.Run()
	}
	defer logFile.Close()

	ctx, cancel := context.WithTimeout(context.Background(), startBudget)
	apiserver, apiserverErr = kubetest.StartWith(ctx, filepath.Join(dir, "apiserver"), logFile, kubetest.Options{RBAC: true})
	cancel()
	if apiserverErr != nil {
		apiserverErr = fmt.Errorf("%w\nlast lines of the kube-apiserver log:\n%s", apiserverErr, testproc.TailFile(logPath, 40))
	} else {
		defer apiserver.Stop()
	}
	return m.Run()
}

func inCI() bool { return os.Getenv("CI") == "true" }

// requireApiserver returns the package's apiserver. One that failed to build
// or start fails the test under CI=true and skips it elsewhere.
func requireApiserver(t *testing.T) *kubetest.Apiserver {
	t.Helper()
	if apiserverErr != nil {
		if inCI() {
			t.Fatalf("kube-apiserver unavailable (CI=true, so this is a failure): %v", apiserverErr)
		}
		t.Skipf("kube-apiserver unavailable: %v", apiserverErr)
	}
	return apiserver
}

// manifest is one object of a variant's build.
type manifest struct {
	variant variant
	raw     []byte // the object as kustomize built it
	obj     runtime.Object
	gvk     schema.GroupVersionKind
	name    string
}

func (m manifest) String() string {
	return fmt.Sprintf("%s: %s %s", m.variant.name, m.gvk.Kind, m.name)
}

// strictDecoder is client-go's scheme (scheme.Codecs.UniversalDeserializer)
// with strict decoding, so an unknown or duplicated field is an error rather
// than silently dropped.
var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// builds holds each kustomization's build, made once.
var builds = map[string]func() ([]manifest, error){}

func init() {
	for _, v := range append(variants, variant{name: "root", dir: "."}) {
		builds[v.dir] = sync.OnceValues(func() ([]manifest, error) { return build(v) })
	}
}

// manifests decodes every object of the variant's build.
func manifests(t *testing.T, v variant) []manifest {
	t.Helper()
	ms, err := builds[v.dir]()
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// build runs kustomize on the variant's directory, as kubectl apply -k does
// (kustomize's default load restrictions, kubectl's legacy order), and
// decodes each object with client-go's scheme.
func build(v variant) ([]manifest, error) {
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	res, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), v.dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", v.dir, err)
	}
	var out []manifest
	for _, r := range res.Resources() {
		doc, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", v.dir, r.CurId(), err)
		}
		obj, gvk, err := strictDecoder.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: decode with client-go's scheme: %w", v.dir, r.CurId(), err)
		}
		out = append(out, manifest{variant: v, raw: doc, obj: obj, gvk: *gvk, name: r.GetName()})
	}
	return out, nil
}

// forEachVariant runs check as a subtest on each variant's objects.
func forEachVariant(t *testing.T, check func(t *testing.T, v variant, ms []manifest)) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) { check(t, v, manifests(t, v)) })
	}
}

// kustomization is the part of a kustomization.yaml the variants use;
// decoded strictly, so a key beyond it fails the test rather than go
// unchecked.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Patches    []struct {
		Path string `json:"path"`
	} `json:"patches"`
}

func readKustomization(dir string) (kustomization, error) {
	var k kustomization
	file := filepath.Join(dir, "kustomization.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		return k, err
	}
	if err := sigsyaml.UnmarshalStrict(data, &k); err != nil {
		return k, fmt.Errorf("%s: %w", file, err)
	}
	if k.Kind != "Kustomization" || !strings.HasPrefix(k.APIVersion, "kustomize.config.k8s.io/") {
		return k, fmt.Errorf("%s: apiVersion %q kind %q is not a Kustomization", file, k.APIVersion, k.Kind)
	}
	return k, nil
}

// one returns the only object of type T among ms.
func one[T runtime.Object](t *testing.T, ms []manifest) T {
	t.Helper()
	var found []T
	for _, m := range ms {
		if o, ok := m.obj.(T); ok {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %T among the manifests, found %d", zero, len(found))
	}
	return found[0]
}

// TestKustomizations checks that kubectl apply -k deploy/kubernetes still
// applies the single-replica variant, and that each variant's kustomization
// uses every manifest in its directory, once.
func TestKustomizations(t *testing.T) {
	root, err := readKustomization(".")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(root.Resources, []string{single.dir}) || len(root.Patches) != 0 {
		t.Errorf("kustomization.yaml: resources %q patches %v, want exactly [%s]", root.Resources, root.Patches, single.dir)
	}
	rootBuild := manifests(t, variant{name: "root", dir: "."})
	singleBuild := manifests(t, single)
	if len(rootBuild) != len(singleBuild) {
		t.Errorf("kustomization.yaml builds %d objects, single/ %d", len(rootBuild), len(singleBuild))
	}
	for i := range min(len(rootBuild), len(singleBuild)) {
		if !bytes.Equal(rootBuild[i].raw, singleBuild[i].raw) {
			t.Errorf("kustomization.yaml builds %s differently from single/", rootBuild[i])
		}
	}

	for _, v := range variants {
		k, err := readKustomization(v.dir)
		if err != nil {
			t.Fatal(err)
		}
		var used []string
		for _, r := range k.Resources {
			if info, err := os.Stat(filepath.Join(v.dir, r)); err == nil && info.IsDir() {
				continue // another kustomization, checked in its own right
			}
			used = append(used, r)
		}
		for _, p := range k.Patches {
			used = append(used, p.Path)
		}
		onDisk, err := filepath.Glob(filepath.Join(v.dir, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range onDisk {
			onDisk[i] = filepath.Base(onDisk[i])
		}
		onDisk = slices.DeleteFunc(onDisk, func(f string) bool { return f == "kustomization.yaml" })
		sorted := slices.Sorted(slices.Values(used))
		sort.Strings(onDisk)
		if !slices.Equal(slices.Compact(slices.Clone(sorted)), onDisk) {
			t.Errorf("%s/kustomization.yaml uses %v, want exactly the manifests in the directory %v", v.dir, used, onDisk)
		}
		if len(slices.Compact(sorted)) != len(used) {
			t.Errorf("%s/kustomization.yaml uses a file twice: %v", v.dir, used)
		}
	}
}

func TestManifestsDecode(t *testing.T) {
	want := map[variant]map[string]int{
		single: {
			"Namespace": 1, "ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1,
			"ConfigMap": 1, "Deployment": 1, "Service": 1, "PersistentVolumeClaim": 1,
		},
		// No volume: the state is in PostgreSQL.
		replicated: {
			"Namespace": 1, "ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1,
			"Role": 1, "RoleBinding": 1, "ConfigMap": 1, "Deployment": 1, "Service": 1,
			"PodDisruptionBudget": 1,
		},
	}
	forEachVariant(t, func(t *testing.T, v variant, ms []manifest) {
		kinds := map[string]int{}
		for _, m := range ms {
			kinds[m.gvk.Kind]++
			acc, err := meta.Accessor(m.obj)
			if err != nil {
				t.Fatalf("%s: %v", m, err)
			}
			if acc.GetName() == "" {
				t.Errorf("%s: no metadata.name", m)
			}
			if got := acc.GetLabels()[nameLabel]; got != appName {
				t.Errorf("%s: label %s=%q, want %q", m, nameLabel, got, appName)
			}
			switch m.gvk.Kind {
			case "Namespace", "ClusterRole", "ClusterRoleBinding":
				if acc.GetNamespace() != "" {
					t.Errorf("%s: cluster-scoped object with namespace %q", m, acc.GetNamespace())
				}
			default:
				if acc.GetNamespace() != namespace {
					t.Errorf("%s: namespace %q, want %q", m, acc.GetNamespace(), namespace)
				}
			}
		}
		for k, n := range want[v] {
			if kinds[k] != n {
				t.Errorf("%d %s manifests, want %d", kinds[k], k, n)
			}
		}
		for k := range kinds {
			if _, ok := want[v][k]; !ok {
				t.Errorf("unexpected %s manifest (a Secret never belongs in the repository)", k)
			}
		}
	})
}

func TestNamespaceEnforcesRestrictedPodSecurity(t *testing.T) {
	forEachVariant(t, func(t *testing.T, _ variant, ms []manifest) {
		ns := one[*corev1.Namespace](t, ms)
		if ns.Name != namespace {
			t.Errorf("Namespace %q, want %q", ns.Name, namespace)
		}
		if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
			t.Errorf("pod-security.kubernetes.io/enforce=%q, want restricted", got)
		}
	})
}

// checkLeaseRule checks that rules are one rule on coordination.k8s.io
// leases with exactly verbs, for any name.
func checkLeaseRule(t *testing.T, what string, rules []rbacv1.PolicyRule, verbs ...string) {
	t.Helper()
	if len(rules) != 1 {
		t.Fatalf("%s has %d rules, want one: %+v", what, len(rules), rules)
	}
	r := rules[0]
	check := func(field string, got, want []string) {
		t.Helper()
		if g, w := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want)); !slices.Equal(g, w) {
			t.Errorf("%s %s %q, want exactly %q", what, field, got, w)
		}
	}
	check("apiGroups", r.APIGroups, []string{"coordination.k8s.io"})
	check("resources", r.Resources, []string{"leases"})
	check("verbs", r.Verbs, verbs)
	if len(r.ResourceNames) != 0 || len(r.NonResourceURLs) != 0 {
		t.Errorf("%s rule has resourceNames %q / nonResourceURLs %q, want none", what, r.ResourceNames, r.NonResourceURLs)
	}
}

// checkBinding checks that a binding gives the role of kind and name to the
// ServiceAccount and nobody else.
func checkBinding(t *testing.T, ref rbacv1.RoleRef, subjects []rbacv1.Subject, kind, name string, sa *corev1.ServiceAccount) {
	t.Helper()
	if ref != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: name}) {
		t.Errorf("roleRef %+v, want the %s %q", ref, kind, name)
	}
	want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}}
	if !slices.Equal(subjects, want) {
		t.Errorf("subjects %+v, want %+v", subjects, want)
	}
}

func TestClusterRoleReadsLeasesOnly(t *testing.T) {
	forEachVariant(t, func(t *testing.T, _ variant, ms []manifest) {
		cr := one[*rbacv1.ClusterRole](t, ms)
		if cr.AggregationRule != nil {
			t.Errorf("ClusterRole has an aggregation rule: %+v", cr.AggregationRule)
		}
		checkLeaseRule(t, "ClusterRole", cr.Rules, "get", "list", "watch")
	})
}

func TestClusterRoleBindingBindsTheServiceAccount(t *testing.T) {
	forEachVariant(t, func(t *testing.T, _ variant, ms []manifest) {
		crb := one[*rbacv1.ClusterRoleBinding](t, ms)
		checkBinding(t, crb.RoleRef, crb.Subjects, "ClusterRole", one[*rbacv1.ClusterRole](t, ms).Name, one[*corev1.ServiceAccount](t, ms))
	})
}

// TestOwnershipRole checks the replicas' Role: in leasewatch's own
// namespace, what the Kubernetes elector does to Leases and nothing more.
// elector_rbac_test.go shows on a real apiserver that it is enough.
func TestOwnershipRole(t *testing.T) {
	ms := manifests(t, replicated)
	role := one[*rbacv1.Role](t, ms)
	if role.Namespace != namespace {
		t.Errorf("Role namespace %q, want leasewatch's own, %q", role.Namespace, namespace)
	}
	checkLeaseRule(t, "Role", role.Rules, "get", "list", "create", "update")
	for _, verb := range []string{"delete", "deletecollection", "*"} {
		if slices.Contains(role.Rules[0].Verbs, verb) {
			t.Errorf("Role grants %q: deleting a source's Lease resets the fencing token it carries", verb)
		}
	}
	rb := one[*rbacv1.RoleBinding](t, ms)
	if rb.Namespace != role.Namespace {
		t.Errorf("RoleBinding namespace %q, want the Role's %q", rb.Namespace, role.Namespace)
	}
	checkBinding(t, rb.RoleRef, rb.Subjects, "Role", role.Name, one[*corev1.ServiceAccount](t, ms))
}

func TestDeployment(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant, ms []manifest) {
		d := one[*appsv1.Deployment](t, ms)
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Fatalf("selector %+v: %v", d.Spec.Selector, err)
		}
		tmpl := d.Spec.Template
		if !sel.Matches(labels.Set(tmpl.Labels)) {
			t.Errorf("selector %s does not match the pod template's labels %v", sel, tmpl.Labels)
		}
		mounts := checkPod(t, ms, tmpl.Spec)
		switch v {
		case single:
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
				t.Errorf("replicas %v, want 1 (SQLite has a single writer)", d.Spec.Replicas)
			}
			if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
				t.Errorf("strategy %q, want Recreate (SQLite has a single writer)", d.Spec.Strategy.Type)
			}
			if pvc := mounts.source(dataDir).PersistentVolumeClaim; pvc == nil || pvc.ClaimName != one[*corev1.PersistentVolumeClaim](t, ms).Name || pvc.ReadOnly {
				t.Errorf("%s: %+v, want the PersistentVolumeClaim, writable", dataDir, pvc)
			} else if mounts.mounts[dataDir].ReadOnly {
				t.Errorf("%s is mounted read-only", dataDir)
			}
		case replicated:
			checkReplicas(t, d, mounts)
		}
	})
}

// checkPod checks what both variants' pods share: the ServiceAccount, a
// non-root locked down container of the image running serve, its probes,
// resources, configuration and ingest tokens. It returns the container's
// mounts.
func checkPod(t *testing.T, ms []manifest, pod corev1.PodSpec) podMounts {
	t.Helper()
	if sa := one[*corev1.ServiceAccount](t, ms); pod.ServiceAccountName != sa.Name {
		t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, sa.Name)
	}
	if pod.AutomountServiceAccountToken != nil && !*pod.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken is false: the in-cluster kubernetes source needs the token")
	}

	checkPodSecurity(t, pod.SecurityContext)

	if len(pod.InitContainers) != 0 || len(pod.Containers) != 1 {
		t.Fatalf("%d init containers and %d containers, want 0 and 1", len(pod.InitContainers), len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != image {
		t.Errorf("image %q, want %q", c.Image, image)
	}
	wantArgs := []string{"serve", "--config", configDir + "/" + configKey}
	if !slices.Equal(c.Args, wantArgs) || len(c.Command) != 0 {
		t.Errorf("command %q args %q, want the image's entrypoint with %q", c.Command, c.Args, wantArgs)
	}

	checkContainerSecurity(t, c.SecurityContext)
	checkPortAndProbes(t, c)
	checkResources(t, c.Resources)

	mounts := mountSources(t, pod, c)
	if cm := mounts.source(configDir).ConfigMap; cm == nil || cm.Name != one[*corev1.ConfigMap](t, ms).Name {
		t.Errorf("%s: %+v, want the ConfigMap", configDir, cm)
	} else if !mounts.mounts[configDir].ReadOnly {
		t.Errorf("%s is not mounted read-only", configDir)
	}
	if mounts.source("/tmp").EmptyDir == nil {
		t.Error("/tmp is not an emptyDir (the root file system is read-only)")
	}
	// The ingest tokens come from the Secret, mounted where the ConfigMap's
	// ingest_tokens_file points; never from a literal in the manifest.
	mounts.requireSecret(ingestName, ingestMountPath)
	for _, e := range c.Env {
		if strings.Contains(strings.ToLower(e.Name), "token") && e.Value != "" {
			t.Errorf("env %s carries a literal token", e.Name)
		}
	}
	return mounts
}

// checkPodSecurity checks the pod's securityContext: a non-root user and
// group, and the runtime's default seccomp profile.
func checkPodSecurity(t *testing.T, psc *corev1.PodSecurityContext) {
	t.Helper()
	if psc == nil {
		t.Fatal("no pod securityContext")
	}
	if !isTrue(psc.RunAsNonRoot) || !is(psc.RunAsUser, nonRootID) || !is(psc.RunAsGroup, nonRootID) || !is(psc.FSGroup, nonRootID) {
		t.Errorf("pod securityContext runAsNonRoot=%v runAsUser=%v runAsGroup=%v fsGroup=%v, want true and %d",
			deref(psc.RunAsNonRoot), deref(psc.RunAsUser), deref(psc.RunAsGroup), deref(psc.FSGroup), nonRootID)
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccompProfile %+v, want RuntimeDefault", psc.SeccompProfile)
	}
}

// checkContainerSecurity checks the container's securityContext: non-root,
// a read-only root file system, no privilege and no capability.
func checkContainerSecurity(t *testing.T, sc *corev1.SecurityContext) {
	t.Helper()
	if sc == nil {
		t.Fatal("no container securityContext")
	}
	switch {
	case !isTrue(sc.RunAsNonRoot), !is(sc.RunAsUser, nonRootID), !is(sc.RunAsGroup, nonRootID):
		t.Errorf("container runAsNonRoot=%v runAsUser=%v runAsGroup=%v, want true and %d",
			deref(sc.RunAsNonRoot), deref(sc.RunAsUser), deref(sc.RunAsGroup), nonRootID)
	}
	if !isTrue(sc.ReadOnlyRootFilesystem) {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if isTrue(sc.Privileged) {
		t.Error("privileged container")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("capabilities %+v, want drop [ALL] and no add", sc.Capabilities)
	}
	if sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container seccompProfile %+v, want RuntimeDefault", sc.SeccompProfile)
	}
}

// checkPortAndProbes checks the port named http and the probes on it.
func checkPortAndProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	// The port the config listens on, named http, is what the probes use.
	var http *corev1.ContainerPort
	for i, p := range c.Ports {
		if p.Name == "http" {
			http = &c.Ports[i]
		}
	}
	if http == nil || http.ContainerPort != httpPort {
		t.Errorf("ports %+v, want %d named http", c.Ports, httpPort)
	}
	// /readyz answers for the store alone (audit.Recorder.Ready), never for
	// which sources a replica owns: a standby replica stays ready and
	// serves the dashboard.
	probe := func(name string, p *corev1.Probe, path string) {
		t.Helper()
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe %+v, want an HTTP GET of %s", name, p, path)
			return
		}
		if p.HTTPGet.Path != path {
			t.Errorf("%s probe path %q, want %q", name, p.HTTPGet.Path, path)
		}
		if p.HTTPGet.Port != intstr.FromString("http") && p.HTTPGet.Port != intstr.FromInt32(httpPort) {
			t.Errorf("%s probe port %s, want http", name, p.HTTPGet.Port.String())
		}
	}
	probe("liveness", c.LivenessProbe, "/healthz")
	probe("readiness", c.ReadinessProbe, "/readyz")
	if c.StartupProbe != nil {
		probe("startup", c.StartupProbe, "/healthz")
	}
}

// checkResources checks the CPU and memory requests and the memory limit.
func checkResources(t *testing.T, r corev1.ResourceRequirements) {
	t.Helper()
	req, lim := r.Requests, r.Limits
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := req[name]; !ok || q.Sign() <= 0 {
			t.Errorf("no %s request", name)
		}
	}
	if q, ok := lim[corev1.ResourceMemory]; !ok {
		t.Error("no memory limit")
	} else if m := req[corev1.ResourceMemory]; q.Cmp(m) < 0 {
		t.Errorf("memory limit %s below the request %s", q.String(), m.String())
	}
}

// podMounts is a container's volume mounts by path, with the pod's volumes.
type podMounts struct {
	t       *testing.T
	volumes map[string]corev1.Volume
	mounts  map[string]corev1.VolumeMount
}

// mountSources checks that every mount names a volume and every volume is
// mounted.
func mountSources(t *testing.T, pod corev1.PodSpec, c corev1.Container) podMounts {
	t.Helper()
	m := podMounts{t: t, volumes: map[string]corev1.Volume{}, mounts: map[string]corev1.VolumeMount{}}
	for _, v := range pod.Volumes {
		m.volumes[v.Name] = v
	}
	for _, vm := range c.VolumeMounts {
		if _, ok := m.volumes[vm.Name]; !ok {
			t.Errorf("volumeMount %q names no volume", vm.Name)
		}
		m.mounts[vm.MountPath] = vm
	}
	if len(m.mounts) != len(m.volumes) {
		t.Errorf("%d volumes but %d mounts: %+v", len(m.volumes), len(m.mounts), c.VolumeMounts)
	}
	return m
}

// source is the volume mounted at path.
func (m podMounts) source(path string) corev1.VolumeSource {
	m.t.Helper()
	vm, ok := m.mounts[path]
	if !ok {
		m.t.Errorf("nothing mounted at %s", path)
		return corev1.VolumeSource{}
	}
	return m.volumes[vm.Name].VolumeSource
}

// requireSecret checks that the Secret is mounted read-only at path, and
// required: leasewatch refuses to start without the files the
// configuration names there.
func (m podMounts) requireSecret(name, path string) {
	m.t.Helper()
	vm, ok := m.mounts[path]
	s := m.volumes[vm.Name].Secret
	switch {
	case !ok || s == nil || s.SecretName != name:
		m.t.Errorf("the Secret %q is not mounted at %s", name, path)
	case !vm.ReadOnly:
		m.t.Errorf("the Secret %q is mounted writable at %s", name, path)
	case s.Optional != nil && *s.Optional:
		m.t.Errorf("the Secret %q is optional: leasewatch refuses to start without the files it holds", name)
	}
}

// checkReplicas checks what makes the replicated Deployment survive a node
// and a rollout: two replicas, rolled without ever running fewer, spread
// across nodes where there are several, no volume, the database password
// from its Secret, and each pod's host name its own (the replica's
// identity).
func checkReplicas(t *testing.T, d *appsv1.Deployment, mounts podMounts) {
	t.Helper()
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", deref(d.Spec.Replicas))
	}
	s := d.Spec.Strategy
	if s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate == nil {
		t.Fatalf("strategy %+v, want RollingUpdate", s)
	}
	if u, g := s.RollingUpdate.MaxUnavailable, s.RollingUpdate.MaxSurge; u == nil || *u != intstr.FromInt32(0) || g == nil || *g != intstr.FromInt32(1) {
		t.Errorf("rollingUpdate maxUnavailable %v maxSurge %v, want 0 and 1 (never fewer than two replicas)", deref(u), deref(g))
	}
	pod := d.Spec.Template.Spec
	spread := false
	for _, c := range pod.TopologySpreadConstraints {
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil {
			t.Fatalf("topologySpreadConstraints selector: %v", err)
		}
		if c.WhenUnsatisfiable == corev1.DoNotSchedule {
			t.Errorf("topology spread on %s is DoNotSchedule: a one-node cluster could not run both replicas", c.TopologyKey)
		}
		spread = spread || (c.TopologyKey == hostnameKey && c.MaxSkew == 1 && !sel.Empty() && sel.Matches(labels.Set(d.Spec.Template.Labels)))
	}
	if !spread {
		t.Errorf("topologySpreadConstraints %+v, want the pods spread across %s", pod.TopologySpreadConstraints, hostnameKey)
	}
	if a := pod.Affinity; a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
		t.Error("required pod anti-affinity: a one-node cluster could not run both replicas")
	}
	for path, vm := range mounts.mounts {
		if mounts.volumes[vm.Name].PersistentVolumeClaim != nil {
			t.Errorf("%s is a PersistentVolumeClaim: the replicas keep their state in PostgreSQL", path)
		}
	}
	if _, ok := mounts.mounts[dataDir]; ok {
		t.Errorf("%s is still mounted", dataDir)
	}
	mounts.requireSecret(postgresName, postgresMountPath)
	// replication.identity defaults to the host name: the pod's name, unless
	// the pod shares the node's or sets its own.
	if pod.HostNetwork || pod.Hostname != "" || pod.Subdomain != "" {
		t.Errorf("hostNetwork %v hostname %q subdomain %q: the replicas' host names must be their pods' names", pod.HostNetwork, pod.Hostname, pod.Subdomain)
	}
}

func TestService(t *testing.T) {
	forEachVariant(t, func(t *testing.T, _ variant, ms []manifest) {
		s := one[*corev1.Service](t, ms)
		d := one[*appsv1.Deployment](t, ms)
		if s.Spec.Type != "" && s.Spec.Type != corev1.ServiceTypeClusterIP {
			t.Errorf("type %q, want ClusterIP", s.Spec.Type)
		}
		if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("selector %v does not select the Deployment's pods %v", s.Spec.Selector, d.Spec.Template.Labels)
		}
		if len(s.Spec.Ports) != 1 {
			t.Fatalf("ports %+v, want one", s.Spec.Ports)
		}
		p := s.Spec.Ports[0]
		if p.Port != httpPort || p.TargetPort != intstr.FromString("http") {
			t.Errorf("port %d → %s, want %d → http", p.Port, p.TargetPort.String(), httpPort)
		}
	})
}

func TestPersistentVolumeClaim(t *testing.T) {
	pvc := one[*corev1.PersistentVolumeClaim](t, manifests(t, single))
	if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("accessModes %q, want [ReadWriteOnce]", pvc.Spec.AccessModes)
	}
	if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("storage request %s, want 1Gi", q.String())
	}
}

// TestPodDisruptionBudget checks that a drain may evict one replica and
// never both.
func TestPodDisruptionBudget(t *testing.T) {
	ms := manifests(t, replicated)
	pdb := one[*policyv1.PodDisruptionBudget](t, ms)
	d := one[*appsv1.Deployment](t, ms)
	if pdb.Spec.MinAvailable == nil || *pdb.Spec.MinAvailable != intstr.FromInt32(1) || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("minAvailable %v maxUnavailable %v, want minAvailable 1 alone", deref(pdb.Spec.MinAvailable), deref(pdb.Spec.MaxUnavailable))
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas <= 1 {
		t.Errorf("replicas %v: minAvailable 1 would block every drain", deref(d.Spec.Replicas))
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || sel.Empty() {
		t.Fatalf("selector %+v: %v", pdb.Spec.Selector, err)
	}
	if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("selector %s does not select the Deployment's pods %v", sel, d.Spec.Template.Labels)
	}
}

func TestConfigMap(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant, ms []manifest) {
		cm := one[*corev1.ConfigMap](t, ms)
		// Nothing but the configuration, which holds no secret (below).
		if k := keys(cm.Data); !slices.Equal(k, []string{configKey}) || len(cm.BinaryData) != 0 {
			t.Fatalf("ConfigMap keys %v and %d binary keys, want %s alone", k, len(cm.BinaryData), configKey)
		}
		text := cm.Data[configKey]
		var raw map[string]any
		if err := yaml.Unmarshal([]byte(text), &raw); err != nil {
			t.Fatalf("%s is not YAML: %v", configKey, err)
		}
		if _, ok := raw["ingest_tokens"]; ok {
			t.Errorf("%s sets ingest_tokens: tokens belong in the Secret %q", configKey, ingestName)
		}
		// leasewatch's own parser: unknown or misspelt keys and bad values fail.
		cfg, err := config.Parse([]byte(text))
		if err != nil {
			t.Fatalf("%s is not a valid leasewatch configuration: %v", configKey, err)
		}
		if cfg.IngestTokensFile != ingestMountPath+"/"+ingestKey {
			t.Errorf("ingest_tokens_file %q, want the Secret's mounted file %s/%s", cfg.IngestTokensFile, ingestMountPath, ingestKey)
		}
		if cfg.Listen != fmt.Sprintf("0.0.0.0:%d", httpPort) {
			t.Errorf("listen %q, want 0.0.0.0:%d (the pod IP, for the Service and the probes)", cfg.Listen, httpPort)
		}
		var kube int
		for i, s := range cfg.Sources {
			if s.Kind != "kubernetes" {
				continue
			}
			sec := s.Backend.(*kubernetes.Section)
			if cfg.Replication.Enabled() && s.Name == cfg.Replication.Source {
				// leasewatch's own source: the ownership Leases, in its namespace.
				if !slices.Equal(sec.Namespaces, []string{cfg.Replication.Namespace}) {
					t.Errorf("leasewatch's own source %q watches %q, want the replication namespace %q", s.Name, sec.Namespaces, cfg.Replication.Namespace)
				}
				continue
			}
			kube++
			if s.Name != "cluster" {
				t.Errorf("sources[%d].name %q, want cluster", i, s.Name)
			}
			if sec.Kubeconfig != "" || sec.Context != "" {
				t.Errorf("sources[%d]: kubeconfig %q context %q, want an empty kubeconfig (in-cluster)", i, sec.Kubeconfig, sec.Context)
			}
			if !slices.Contains(sec.HeartbeatNamespaces, "kube-node-lease") {
				t.Errorf("sources[%d].heartbeat_namespaces %q lacks kube-node-lease", i, sec.HeartbeatNamespaces)
			}
		}
		if kube != 1 {
			t.Errorf("%d kubernetes sources, want 1", kube)
		}
		switch v {
		case single:
			if path.Dir(cfg.Database) != dataDir {
				t.Errorf("database %q is not on the volume at %s", cfg.Database, dataDir)
			}
			if cfg.Replication.Enabled() {
				t.Error("replication is on: SQLite has a single writer")
			}
		case replicated:
			checkReplicatedConfig(t, ms, cfg, raw)
		}
	})
}

// checkReplicatedConfig checks the replicas' store and replication: the
// PostgreSQL password and CA from the Secret's files, never the
// configuration, and the ownership Leases where the Role lets the replicas
// write them.
func checkReplicatedConfig(t *testing.T, ms []manifest, cfg *config.Config, raw map[string]any) {
	t.Helper()
	if !cfg.Postgres() {
		t.Fatalf("database %q is not a postgres:// URL: the replicas share the store", cfg.DatabaseName())
	}
	u, err := url.Parse(cfg.Database)
	if err != nil {
		t.Fatalf("database: %v", err)
	}
	if _, set := u.User.Password(); set || u.Query().Has("password") {
		t.Error("database: the URL carries a password; it belongs in the Secret")
	}
	if got := u.Query().Get("sslmode"); got != "verify-full" {
		t.Errorf("database: sslmode %q, want verify-full", got)
	}
	if cfg.DatabasePasswordEnv != "" || cfg.DatabasePasswordFile != postgresMountPath+"/password" {
		t.Errorf("database_password_file %q database_password_env %q, want the Secret's mounted file %s/password",
			cfg.DatabasePasswordFile, cfg.DatabasePasswordEnv, postgresMountPath)
	}
	if cfg.DatabaseTLS == nil || cfg.DatabaseTLS.CAFile != postgresMountPath+"/ca.crt" || cfg.DatabaseTLS.InsecureSkipVerify {
		t.Errorf("database_tls %+v, want ca_file %s/ca.crt, verified", deref(cfg.DatabaseTLS), postgresMountPath)
	}

	r := cfg.Replication
	if r.Backend != config.ReplicationKubernetes {
		t.Errorf("replication.backend %q, want %s", r.Backend, config.ReplicationKubernetes)
	}
	if role := one[*rbacv1.Role](t, ms); r.Namespace != role.Namespace {
		t.Errorf("replication.namespace %q, but the Role lets the replicas write Leases in %q", r.Namespace, role.Namespace)
	}
	if r.Kubeconfig != "" || r.Context != "" {
		t.Errorf("replication: kubeconfig %q context %q, want an empty kubeconfig (in-cluster)", r.Kubeconfig, r.Context)
	}
	// Without identity each replica is its host name, its pod's name: a
	// fixed one would be the same for both replicas.
	if rep, _ := raw["replication"].(map[string]any); rep == nil {
		t.Error("no replication section")
	} else if id, ok := rep["identity"]; ok {
		t.Errorf("replication.identity %v: both replicas would share it; leave it out for the pod's name", id)
	}
}

// TestServerSideDryRun creates the Namespace on a real kube-apiserver, then
// creates every manifest with dryRun=All and strict field validation: the
// apiserver validates, defaults and admits each object (Pod Security
// "restricted" included) without storing it. Both variants, in turn.
func TestServerSideDryRun(t *testing.T) {
	a := requireApiserver(t)
	forEachVariant(t, func(t *testing.T, _ variant, ms []manifest) { dryRun(t, a, ms) })
}

func dryRun(t *testing.T, a *kubetest.Apiserver, ms []manifest) {
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	r := newDryRunner(t, a)
	var objs []*unstructured.Unstructured
	for _, m := range ms {
		u, err := toUnstructured(m.raw)
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		objs = append(objs, u)
	}
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			r.createNamespace(ctx, t, u)
		}
	}
	if warn := r.warnings.take(); len(warn) != 0 {
		t.Errorf("warnings creating the Namespace: %q", warn)
	}
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			continue // above
		}
		t.Run(u.GetKind()+"/"+u.GetName(), func(t *testing.T) { r.checkDryRun(ctx, t, u) })
	}
	t.Run("pod-template/restricted", func(t *testing.T) { r.checkPodSecurity(ctx, t, one[*appsv1.Deployment](t, ms)) })
}

// dryRunner submits manifests to an apiserver, as dry runs with strict
// field validation, and keeps the warnings it answers.
type dryRunner struct {
	warnings *warningRecorder
	dyn      dynamic.Interface
	mapper   meta.RESTMapper
	dryRun   metav1.CreateOptions
}

func newDryRunner(t *testing.T, a *kubetest.Apiserver) *dryRunner {
	t.Helper()
	r := &dryRunner{warnings: &warningRecorder{}, dryRun: metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict", FieldManager: fieldOwner}}
	cfg := rest.CopyConfig(a.Config)
	cfg.WarningHandler = r.warnings
	var err error
	if r.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	return r
}

// client returns the dynamic client of u's resource.
func (r *dryRunner) client(t *testing.T, u *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	gvk := u.GroupVersionKind()
	m, err := r.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s: %v", gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return r.dyn.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	return r.dyn.Resource(m.Resource)
}

// createNamespace submits the Namespace u as a dry run like everything
// else, then for real, so the namespaced objects have somewhere to go.
// Once an earlier test has created it, the dry run applies the manifest
// over it instead.
func (r *dryRunner) createNamespace(ctx context.Context, t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	_, err := r.client(t, u).Create(ctx, u, r.dryRun)
	if apierrors.IsAlreadyExists(err) {
		_, err = r.client(t, u).Apply(ctx, u.GetName(), u, metav1.ApplyOptions{DryRun: r.dryRun.DryRun, Force: true, FieldManager: fieldOwner})
	}
	if err != nil {
		t.Fatalf("dry-run create Namespace %s: %v", u.GetName(), err)
	}
	if _, err := r.client(t, u).Create(ctx, u, metav1.CreateOptions{FieldValidation: "Strict", FieldManager: fieldOwner}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create Namespace %s: %v", u.GetName(), err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := r.client(t, u).Get(ctx, u.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && got.GetLabels()["pod-security.kubernetes.io/enforce"] == "restricted", err
	}); err != nil {
		t.Fatalf("Namespace %s never appeared: %v", u.GetName(), err)
	}
}

// checkDryRun checks that the apiserver takes u, without a warning, and
// that a dry run stores nothing.
func (r *dryRunner) checkDryRun(ctx context.Context, t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	got, err := r.client(t, u).Create(ctx, u, r.dryRun)
	if err != nil {
		t.Fatalf("dry-run create %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	if warn := r.warnings.take(); len(warn) != 0 {
		t.Errorf("apiserver warnings: %q", warn)
	}
	if got.GetName() != u.GetName() || got.GetKind() != u.GetKind() {
		t.Errorf("dry run answered %s %s, want %s %s", got.GetKind(), got.GetName(), u.GetKind(), u.GetName())
	}
	if _, err := r.client(t, u).Get(ctx, u.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after a dry run, get %s %s = %v, want NotFound", u.GetKind(), u.GetName(), err)
	}
}

// checkPodSecurity submits d's pod template as a Pod. Pod Security
// admission only warns about a Deployment's template; it enforces on Pods,
// so "restricted" is enforced, and a privileged variant shows that it would
// refuse one.
func (r *dryRunner) checkPodSecurity(ctx context.Context, t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "leasewatch-pod-security-check", Namespace: d.Namespace, Labels: d.Spec.Template.Labels},
		Spec:       *d.Spec.Template.Spec.DeepCopy(),
	}
	createPod := func(p *corev1.Pod) error {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		_, err = r.client(t, u).Create(ctx, u, r.dryRun)
		return err
	}
	if err := createPod(pod); err != nil {
		t.Errorf("the Deployment's pod template as a Pod in namespace %s: %v", d.Namespace, err)
	}
	if warn := r.warnings.take(); len(warn) != 0 {
		t.Errorf("apiserver warnings: %q", warn)
	}
	bad := pod.DeepCopy()
	bad.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr(true)
	if err := createPod(bad); !apierrors.IsForbidden(err) {
		t.Errorf("a Pod allowing privilege escalation: err = %v, want Forbidden by Pod Security (is the namespace not enforcing restricted?)", err)
	}
	r.warnings.take()
}

func toUnstructured(doc []byte) (*unstructured.Unstructured, error) {
	j, err := sigsyaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		return nil, err
	}
	return u, nil
}

// warningRecorder keeps the apiserver's Warning headers.
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningRecorder) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

func keys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for key := range m {
		k = append(k, key)
	}
	sort.Strings(k)
	return k
}

func ptr[T any](v T) *T { return &v }

func isTrue(b *bool) bool { return b != nil && *b }

func is(p *int64, v int64) bool { return p != nil && *p == v }

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
