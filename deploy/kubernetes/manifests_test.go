// Package kubernetes_test checks the Kubernetes manifests in this directory:
// every document decodes into its typed API object, the objects keep the
// invariants the deployment depends on (read-only RBAC on Leases, a locked
// down non-root pod, probes, the database on the volume), and a real
// kube-apiserver accepts all of them in a server-side dry run.
package kubernetes_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
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
	nameLabel       = "app.kubernetes.io/name"
	fieldOwner      = "leasewatch-manifests-test"
	apiTimeout      = 2 * time.Minute
	startBudget     = 20 * time.Minute // a cold build of the apiserver takes several minutes
)

// The apiserver shared by every test of the package (TestMain).
var (
	apiserver    *kubetest.Apiserver
	apiserverErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
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
	apiserver, apiserverErr = kubetest.Start(ctx, filepath.Join(dir, "apiserver"), logFile)
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

// manifest is one YAML document of one file.
type manifest struct {
	file string
	raw  []byte // the document as written
	obj  runtime.Object
	gvk  schema.GroupVersionKind
}

func (m manifest) String() string { return fmt.Sprintf("%s (%s)", m.file, m.gvk.Kind) }

// strictDecoder is client-go's scheme (scheme.Codecs.UniversalDeserializer)
// with strict decoding, so an unknown or duplicated field is an error rather
// than silently dropped.
var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

var (
	loadOnce  sync.Once
	loaded    []manifest
	loadError error
)

// manifests decodes every document of every file the kustomization lists, in
// the kustomization's order.
func manifests(t *testing.T) []manifest {
	t.Helper()
	loadOnce.Do(func() { loaded, loadError = loadManifests() })
	if loadError != nil {
		t.Fatal(loadError)
	}
	return loaded
}

func loadManifests() ([]manifest, error) {
	files, err := kustomizationResources()
	if err != nil {
		return nil, err
	}
	var out []manifest
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			if j, err := sigsyaml.YAMLToJSON(doc); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			} else if string(bytes.TrimSpace(j)) == "null" {
				continue // only comments or a separator
			}
			obj, gvk, err := strictDecoder.Decode(doc, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("%s: decode with client-go's scheme: %w", file, err)
			}
			out = append(out, manifest{file: file, raw: doc, obj: obj, gvk: *gvk})
		}
	}
	return out, nil
}

type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

func kustomizationResources() ([]string, error) {
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		return nil, err
	}
	var k kustomization
	if err := sigsyaml.UnmarshalStrict(data, &k); err != nil {
		return nil, fmt.Errorf("kustomization.yaml: %w", err)
	}
	if k.Kind != "Kustomization" || !strings.HasPrefix(k.APIVersion, "kustomize.config.k8s.io/") {
		return nil, fmt.Errorf("kustomization.yaml: apiVersion %q kind %q is not a Kustomization", k.APIVersion, k.Kind)
	}
	return k.Resources, nil
}

// one returns the only object of type T among the manifests.
func one[T runtime.Object](t *testing.T) T {
	t.Helper()
	var found []T
	for _, m := range manifests(t) {
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

func TestKustomizationListsEveryManifest(t *testing.T) {
	listed, err := kustomizationResources()
	if err != nil {
		t.Fatal(err)
	}
	onDisk, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	onDisk = slices.DeleteFunc(onDisk, func(f string) bool { return f == "kustomization.yaml" })
	sorted := slices.Clone(listed)
	sort.Strings(sorted)
	sort.Strings(onDisk)
	if !slices.Equal(sorted, onDisk) {
		t.Errorf("kustomization.yaml resources %v, want exactly the manifests in the directory %v", listed, onDisk)
	}
	if len(slices.Compact(sorted)) != len(listed) {
		t.Errorf("kustomization.yaml lists a file twice: %v", listed)
	}
}

func TestManifestsDecode(t *testing.T) {
	ms := manifests(t)
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
	want := map[string]int{
		"Namespace": 1, "ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1,
		"ConfigMap": 1, "Deployment": 1, "Service": 1, "PersistentVolumeClaim": 1,
	}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d %s manifests, want %d", kinds[k], k, n)
		}
	}
	for k := range kinds {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %s manifest (a Secret never belongs in the repository)", k)
		}
	}
}

func TestNamespaceEnforcesRestrictedPodSecurity(t *testing.T) {
	ns := one[*corev1.Namespace](t)
	if ns.Name != namespace {
		t.Errorf("Namespace %q, want %q", ns.Name, namespace)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Errorf("pod-security.kubernetes.io/enforce=%q, want restricted", got)
	}
}

func TestClusterRoleReadsLeasesOnly(t *testing.T) {
	cr := one[*rbacv1.ClusterRole](t)
	if cr.AggregationRule != nil {
		t.Errorf("ClusterRole has an aggregation rule: %+v", cr.AggregationRule)
	}
	if len(cr.Rules) != 1 {
		t.Fatalf("ClusterRole has %d rules, want one: %+v", len(cr.Rules), cr.Rules)
	}
	r := cr.Rules[0]
	check := func(field string, got, want []string) {
		t.Helper()
		g := slices.Clone(got)
		sort.Strings(g)
		if !slices.Equal(g, want) {
			t.Errorf("ClusterRole %s %q, want exactly %q", field, got, want)
		}
	}
	check("apiGroups", r.APIGroups, []string{"coordination.k8s.io"})
	check("resources", r.Resources, []string{"leases"})
	check("verbs", r.Verbs, []string{"get", "list", "watch"})
	if len(r.ResourceNames) != 0 || len(r.NonResourceURLs) != 0 {
		t.Errorf("ClusterRole rule has resourceNames %q / nonResourceURLs %q, want none", r.ResourceNames, r.NonResourceURLs)
	}
}

func TestClusterRoleBindingBindsTheServiceAccount(t *testing.T) {
	crb := one[*rbacv1.ClusterRoleBinding](t)
	cr := one[*rbacv1.ClusterRole](t)
	sa := one[*corev1.ServiceAccount](t)
	if crb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}) {
		t.Errorf("roleRef %+v, want the ClusterRole %q", crb.RoleRef, cr.Name)
	}
	want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}}
	if !slices.Equal(crb.Subjects, want) {
		t.Errorf("subjects %+v, want %+v", crb.Subjects, want)
	}
}

func TestDeployment(t *testing.T) {
	d := one[*appsv1.Deployment](t)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("replicas %v, want 1 (SQLite has a single writer)", d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q, want Recreate (SQLite has a single writer)", d.Spec.Strategy.Type)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || sel.Empty() {
		t.Fatalf("selector %+v: %v", d.Spec.Selector, err)
	}
	tmpl := d.Spec.Template
	if !sel.Matches(labels.Set(tmpl.Labels)) {
		t.Errorf("selector %s does not match the pod template's labels %v", sel, tmpl.Labels)
	}
	pod := tmpl.Spec
	if sa := one[*corev1.ServiceAccount](t); pod.ServiceAccountName != sa.Name {
		t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, sa.Name)
	}
	if pod.AutomountServiceAccountToken != nil && !*pod.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken is false: the in-cluster kubernetes source needs the token")
	}

	psc := pod.SecurityContext
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

	sc := c.SecurityContext
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

	req, lim := c.Resources.Requests, c.Resources.Limits
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := req[r]; !ok || q.Sign() <= 0 {
			t.Errorf("no %s request", r)
		}
	}
	if q, ok := lim[corev1.ResourceMemory]; !ok {
		t.Error("no memory limit")
	} else if r := req[corev1.ResourceMemory]; q.Cmp(r) < 0 {
		t.Errorf("memory limit %s below the request %s", q.String(), r.String())
	}

	// Every mount names a volume, every volume is mounted, and the three that
	// matter are the right sources at the right paths.
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("volumeMount %q names no volume", m.Name)
		}
		mounts[m.MountPath] = m
	}
	if len(mounts) != len(volumes) {
		t.Errorf("%d volumes but %d mounts: %+v", len(volumes), len(mounts), c.VolumeMounts)
	}
	source := func(path string) corev1.VolumeSource {
		m, ok := mounts[path]
		if !ok {
			t.Errorf("nothing mounted at %s", path)
			return corev1.VolumeSource{}
		}
		return volumes[m.Name].VolumeSource
	}
	if pvc := source(dataDir).PersistentVolumeClaim; pvc == nil || pvc.ClaimName != one[*corev1.PersistentVolumeClaim](t).Name || pvc.ReadOnly {
		t.Errorf("%s: %+v, want the PersistentVolumeClaim, writable", dataDir, pvc)
	} else if mounts[dataDir].ReadOnly {
		t.Errorf("%s is mounted read-only", dataDir)
	}
	if cm := source(configDir).ConfigMap; cm == nil || cm.Name != one[*corev1.ConfigMap](t).Name {
		t.Errorf("%s: %+v, want the ConfigMap", configDir, cm)
	} else if !mounts[configDir].ReadOnly {
		t.Errorf("%s is not mounted read-only", configDir)
	}
	if source("/tmp").EmptyDir == nil {
		t.Error("/tmp is not an emptyDir (the root file system is read-only)")
	}

	// The ingest tokens come from the Secret, mounted where the ConfigMap's
	// ingest_tokens_file points; never from a literal in the manifest.
	secretVolume := ""
	for _, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == ingestName {
			secretVolume = v.Name
			if v.Secret.Optional != nil && *v.Secret.Optional {
				t.Errorf("the Secret %q is optional: leasewatch refuses to start without its ingest_tokens_file", ingestName)
			}
		}
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == secretVolume && m.MountPath == ingestMountPath && m.ReadOnly)
	}
	if secretVolume == "" || !mounted {
		t.Errorf("the Secret %q is not mounted read-only at %s", ingestName, ingestMountPath)
	}
	for _, e := range c.Env {
		if strings.Contains(strings.ToLower(e.Name), "token") && e.Value != "" {
			t.Errorf("env %s carries a literal token", e.Name)
		}
	}
}

func TestService(t *testing.T) {
	s := one[*corev1.Service](t)
	d := one[*appsv1.Deployment](t)
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
}

func TestPersistentVolumeClaim(t *testing.T) {
	pvc := one[*corev1.PersistentVolumeClaim](t)
	if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("accessModes %q, want [ReadWriteOnce]", pvc.Spec.AccessModes)
	}
	if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("storage request %s, want 1Gi", q.String())
	}
}

func TestConfigMap(t *testing.T) {
	cm := one[*corev1.ConfigMap](t)
	text, ok := cm.Data[configKey]
	if !ok {
		t.Fatalf("ConfigMap has no %s: keys %v", configKey, keys(cm.Data))
	}
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
	if path.Dir(cfg.Database) != dataDir {
		t.Errorf("database %q is not on the volume at %s", cfg.Database, dataDir)
	}
	var kube int
	for i, s := range cfg.Sources {
		if s.Kind != "kubernetes" {
			continue
		}
		kube++
		if s.Name != "cluster" {
			t.Errorf("sources[%d].name %q, want cluster", i, s.Name)
		}
		if s.Kubeconfig != "" || s.Context != "" {
			t.Errorf("sources[%d]: kubeconfig %q context %q, want an empty kubeconfig (in-cluster)", i, s.Kubeconfig, s.Context)
		}
		if !slices.Contains(s.HeartbeatNamespaces, "kube-node-lease") {
			t.Errorf("sources[%d].heartbeat_namespaces %q lacks kube-node-lease", i, s.HeartbeatNamespaces)
		}
	}
	if kube != 1 {
		t.Errorf("%d kubernetes sources, want 1", kube)
	}
}

// TestServerSideDryRun creates the Namespace on a real kube-apiserver, then
// creates every manifest with dryRun=All and strict field validation: the
// apiserver validates, defaults and admits each object (Pod Security
// "restricted" included) without storing it.
func TestServerSideDryRun(t *testing.T) {
	a := requireApiserver(t)
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()

	warnings := &warningRecorder{}
	cfg := rest.CopyConfig(a.Config)
	cfg.WarningHandler = warnings
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	client := func(u *unstructured.Unstructured) dynamic.ResourceInterface {
		t.Helper()
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			return dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		return dyn.Resource(m.Resource)
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict", FieldManager: fieldOwner}

	ms := manifests(t)
	var objs []*unstructured.Unstructured
	for _, m := range ms {
		u, err := toUnstructured(m.raw)
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		objs = append(objs, u)
	}

	// The Namespace: a dry run like everything else, then for real, so the
	// namespaced objects have somewhere to go.
	for _, u := range objs {
		if u.GetKind() != "Namespace" {
			continue
		}
		if _, err := client(u).Create(ctx, u, dryRun); err != nil {
			t.Fatalf("dry-run create Namespace %s: %v", u.GetName(), err)
		}
		if _, err := client(u).Create(ctx, u, metav1.CreateOptions{FieldValidation: "Strict", FieldManager: fieldOwner}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create Namespace %s: %v", u.GetName(), err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := client(u).Get(ctx, u.GetName(), metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil && got.GetLabels()["pod-security.kubernetes.io/enforce"] == "restricted", err
		}); err != nil {
			t.Fatalf("Namespace %s never appeared: %v", u.GetName(), err)
		}
	}
	if warn := warnings.take(); len(warn) != 0 {
		t.Errorf("warnings creating the Namespace: %q", warn)
	}

	for i, u := range objs {
		if u.GetKind() == "Namespace" {
			continue // above
		}
		m := ms[i]
		t.Run(strings.TrimSuffix(m.file, ".yaml")+"/"+u.GetKind(), func(t *testing.T) {
			got, err := client(u).Create(ctx, u, dryRun)
			if err != nil {
				t.Fatalf("dry-run create %s %s: %v", u.GetKind(), u.GetName(), err)
			}
			if warn := warnings.take(); len(warn) != 0 {
				t.Errorf("apiserver warnings: %q", warn)
			}
			if got.GetName() != u.GetName() || got.GetKind() != u.GetKind() {
				t.Errorf("dry run answered %s %s, want %s %s", got.GetKind(), got.GetName(), u.GetKind(), u.GetName())
			}
			// A dry run stores nothing.
			if _, err := client(u).Get(ctx, u.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("after a dry run, get %s %s = %v, want NotFound", u.GetKind(), u.GetName(), err)
			}
		})
	}

	// Pod Security admission only warns about a Deployment's template; it
	// enforces on Pods. Submit the template as a Pod so "restricted" is
	// enforced, and show with a privileged variant that it would refuse one.
	d := one[*appsv1.Deployment](t)
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
		_, err = client(u).Create(ctx, u, dryRun)
		return err
	}
	t.Run("pod-template/restricted", func(t *testing.T) {
		if err := createPod(pod); err != nil {
			t.Errorf("the Deployment's pod template as a Pod in namespace %s: %v", d.Namespace, err)
		}
		if warn := warnings.take(); len(warn) != 0 {
			t.Errorf("apiserver warnings: %q", warn)
		}
		bad := pod.DeepCopy()
		bad.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr(true)
		if err := createPod(bad); !apierrors.IsForbidden(err) {
			t.Errorf("a Pod allowing privilege escalation: err = %v, want Forbidden by Pod Security (is the namespace not enforcing restricted?)", err)
		}
		warnings.take()
	})
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
