package kubernetes_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/leasewatch/leasewatch/deploy/helm/helmtest"
)

// chartDir is the Helm chart, from this package.
const chartDir = "../helm/leasewatch"

// chartValues are the value sets the chart is tested with: each a values
// file's content, the kinds it must render, and those it must not.
var chartValues = []struct {
	name          string
	values        string
	kinds, absent []string
}{
	{"sqlite", "ingest: {existingSecret: lw-ingest}\n",
		[]string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Service", "PersistentVolumeClaim", "Deployment", "NetworkPolicy"},
		[]string{"Role", "RoleBinding", "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule"}},
	{"replicas-on-postgres", `replicaCount: 3
ingest: {existingSecret: lw-ingest}
postgres: {enabled: true, url: "postgres://leasewatch@pg.db.svc:5432/leasewatch?sslmode=verify-full", existingSecret: lw-pg, caKey: ca.crt}
auth: {mode: basic, existingSecret: lw-users}
serviceMonitor: {enabled: true}
prometheusRule: {enabled: true, labels: {release: prometheus}}
resources: {requests: {cpu: 100m, memory: 256Mi}, limits: {memory: 1Gi}}
`,
		[]string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Service", "Deployment", "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule"},
		[]string{"PersistentVolumeClaim", "NetworkPolicy"}},
	{"proxy-auth-no-volume", `ingest: {existingSecret: lw-ingest, tokensKey: list}
auth: {mode: proxy, trustedProxies: ["10.0.0.0/8"]}
persistence: {enabled: false}
networkPolicy: {enabled: true, from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ingress}}}]}
sources:
  - {name: etcd, kind: etcd, endpoints: ["etcd.db.svc:2379"], prefixes: ["/locks/"]}
`,
		[]string{"ServiceAccount", "ConfigMap", "Service", "Deployment", "NetworkPolicy"},
		[]string{"PersistentVolumeClaim", "PodDisruptionBudget"}},
}

// helmRun runs the package's helm with args, and returns its output.
func helmRun(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(helmtest.Helm.Require(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// renderChart runs helm template in namespace with the values file's
// content, and returns its objects.
func renderChart(t *testing.T, namespace, values string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := helmRun(t, "template", "lw", chartDir, "-n", namespace, "-f", file)
	if err != nil {
		return nil, errors.New(out)
	}
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		u, err := toUnstructured(doc)
		if err != nil {
			t.Fatalf("helm template gave %v:\n%s", err, doc)
		}
		if u.Object != nil {
			objs = append(objs, u)
		}
	}
}

// ofKind returns the rendered object of kind (the first), decoded into T.
func ofKind[T any](t *testing.T, objs []*unstructured.Unstructured, kind string) *T {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind {
			v := new(T)
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, v); err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
			return v
		}
	}
	t.Fatalf("the chart rendered no %s", kind)
	return nil
}

// The chart lints and renders with each value set, into the kinds it
// should; its leasewatch.yaml passes `leasewatch check config`; and every
// object but the Prometheus Operator's (whose CRDs the test apiserver
// lacks; their content is checked against deploy/prometheus instead)
// passes a strict server-side dry run, the pod template as a Pod under the
// restricted Pod Security Standard.
func TestHelmChart(t *testing.T) {
	a := requireApiserver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*apiTimeout)
	defer cancel()
	r := newDryRunner(t, a)
	ms := manifests(t, single)
	applyKinds(t, ctx, r, ms, "Namespace") // leasewatch, enforcing "restricted"
	ns := one[*corev1.Namespace](t, ms).Name
	bin := leasewatchBinary(t)
	for _, vs := range chartValues {
		t.Run(vs.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(file, []byte(vs.values), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := helmRun(t, "lint", "--strict", chartDir, "-f", file); err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
			objs, err := renderChart(t, ns, vs.values)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			var kinds []string
			for _, u := range objs {
				kinds = append(kinds, u.GetKind())
			}
			for _, k := range vs.kinds {
				if !slices.Contains(kinds, k) {
					t.Errorf("no %s rendered (got %v)", k, kinds)
				}
			}
			for _, k := range vs.absent {
				if slices.Contains(kinds, k) {
					t.Errorf("a %s rendered, which these values should not make", k)
				}
			}

			cm := ofKind[corev1.ConfigMap](t, objs, "ConfigMap")
			config := filepath.Join(t.TempDir(), "leasewatch.yaml")
			if err := os.WriteFile(config, []byte(cm.Data["leasewatch.yaml"]), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(bin, "check", "config", "--syntax-only", config).CombinedOutput(); err != nil {
				t.Errorf("leasewatch check config on the chart's leasewatch.yaml: %v\n%s\n%s", err, out, cm.Data["leasewatch.yaml"])
			}

			for _, u := range objs {
				switch u.GroupVersionKind().Group {
				case "monitoring.coreos.com":
					checkOperatorObject(t, u)
				default:
					t.Run(u.GetKind()+"/"+u.GetName(), func(t *testing.T) { r.checkDryRun(ctx, t, u) })
				}
			}
			d := ofKind[appsv1.Deployment](t, objs, "Deployment")
			t.Run("pod-template/restricted", func(t *testing.T) { r.checkPodSecurity(ctx, t, d) })
			if n := *d.Spec.Replicas; n > 1 && (d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType ||
				d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0) {
				t.Errorf("%d replicas with strategy %+v, want RollingUpdate with maxUnavailable 0", n, d.Spec.Strategy)
			}
		})
	}
}

// checkOperatorObject checks a rendered ServiceMonitor or PrometheusRule
// against deploy/prometheus/operator's: the same rule groups, the same
// endpoint.
func checkOperatorObject(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	b, err := os.ReadFile("../prometheus/operator/" + strings.ToLower(u.GetKind()) + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	want, err := toUnstructured(b)
	if err != nil {
		t.Fatal(err)
	}
	path := map[string][]string{"PrometheusRule": {"spec"}, "ServiceMonitor": {"spec", "endpoints"}}[u.GetKind()]
	got, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
	exp, _, _ := unstructured.NestedFieldNoCopy(want.Object, path...)
	if u.GetKind() == "ServiceMonitor" {
		// The chart's scrape timeout is the Operator's default.
		for _, e := range exp.([]any) {
			delete(e.(map[string]any), "scrapeTimeout")
		}
	}
	if !reflect.DeepEqual(got, exp) {
		g, _ := sigsyaml.Marshal(got)
		w, _ := sigsyaml.Marshal(exp)
		t.Errorf("the chart's %s %v differs from deploy/prometheus/operator's:\n%s\nwant:\n%s", u.GetKind(), path, g, w)
	}
}

// Values the chart cannot run with are refused by helm template, naming
// the key.
func TestHelmChartRefusesBadValues(t *testing.T) {
	for _, tt := range []struct{ values, want string }{
		{"{}\n", "ingest.existingSecret"},
		{"ingest: {existingSecret: s}\nreplicaCount: 2\n", "replicaCount"},
		{"ingest: {existingSecret: s}\npostgres: {enabled: true, existingSecret: pg}\n", "postgres.url"},
		{"ingest: {existingSecret: s}\npostgres: {enabled: true, url: \"postgres://u@h/d\"}\n", "postgres.existingSecret"},
		{"ingest: {existingSecret: s}\nauth: {mode: basic}\n", "auth.existingSecret"},
		{"ingest: {existingSecret: s}\nauth: {mode: oauth}\n", "auth.mode"},
		{"ingest: {existingSecret: s}\nsources: [{name: r, kind: redis, addr: \"r:6379\", password: hunter2}]\n", "sources[0].password: would be written into the ConfigMap"},
		{"ingest: {existingSecret: s}\nsources: [{name: r, kind: redis, addr: \"r:6379\", existingSecret: r, password_file: /x}]\n", "sources[0].existingSecret"},
		{"ingest: {existingSecret: s}\npostgres: {enabled: true, existingSecret: pg, url: \"postgres://u:hunter2@h/d\"}\n", "postgres.url: holds a password"},
		{"ingest: {existingSecret: s}\npostgres: {enabled: true, existingSecret: pg, url: \"host=h password = hunter2\"}\n", "postgres.url: holds a password"},
		{"ingest: {existingSecret: s}\npostgres: {enabled: true, existingSecret: pg, url: \"postgres://h/d?sslpassword=hunter2\"}\n", "postgres.url: holds a password"},
		{"ingest: {existingSecret: s}\nconfig: {ingest_tokens: [hunter2]}\n", "config.ingest_tokens"},
	} {
		_, err := renderChart(t, "leasewatch", tt.values)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("values %q: helm template = %v, want an error naming %s", tt.values, err, tt.want)
		}
	}
}

// secretValues set every value of the chart that takes a secret: the
// PostgreSQL password and CA, the ingest tokens, basic auth's users, and an
// etcd, a Redis and a ZooKeeper source's password.
const secretValues = `ingest: {existingSecret: lw-ingest}
replicaCount: 2
postgres: {enabled: true, url: "host=pg.db.svc user=leasewatch dbname=leasewatch sslmode=verify-full", existingSecret: lw-pg, caKey: ca.crt}
auth: {mode: basic, existingSecret: lw-users}
sources:
  - {name: cluster, kind: kubernetes, kubeconfig: ""}
  - {name: etcd, kind: etcd, endpoints: ["etcd.db.svc:2379"], prefixes: ["/locks/"], username: leasewatch, existingSecret: lw-etcd}
  - {name: redis, kind: redis, addr: "redis.db.svc:6379", patterns: ["lock:*"], username: leasewatch, existingSecret: lw-redis, passwordKey: redis-password}
  - {name: zk, kind: zookeeper, servers: ["zk.db.svc:2181"], paths: ["/locks"], username: leasewatch, existingSecret: lw-zk}
`

// inlineSecret is a value of leasewatch.yaml that holds a secret: a
// PostgreSQL URL with a password, or a keyword/value string with one.
var inlineSecret = regexp.MustCompile(`(?i)postgres(ql)?://[^/]*:[^/]*@|(^|[\s?&'])(ssl)?password\s*=`)

// secretKeys are the keys of leasewatch.yaml whose value is a secret itself.
var secretKeys = []string{"password", "bearer_token", "ingest_tokens", "token_value"}

// With every value that takes a secret, no rendered ConfigMap holds a
// password, a token or a PostgreSQL URL with a password, and every file
// leasewatch.yaml reads a secret from (password_file, users_file,
// ingest_tokens_file, database_password_file) is in a Secret the
// Deployment mounts.
func TestHelmChartKeepsSecretsOutOfTheConfigMap(t *testing.T) {
	objs, err := renderChart(t, "leasewatch", secretValues)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	var files []string
	for _, u := range objs {
		if u.GetKind() != "ConfigMap" {
			continue
		}
		data, _, _ := unstructured.NestedStringMap(u.Object, "data")
		for name, text := range data {
			var doc any
			if err := sigsyaml.Unmarshal([]byte(text), &doc); err != nil {
				t.Fatalf("ConfigMap %s, %s: %v", u.GetName(), name, err)
			}
			files = append(files, secretsIn(t, u.GetName()+"/"+name, doc)...)
		}
	}
	d := ofKind[appsv1.Deployment](t, objs, "Deployment")
	secretDirs := make(map[string]string)
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
				if m.Name == v.Name {
					secretDirs[m.MountPath] = v.Secret.SecretName
				}
			}
		}
	}
	mounted := make(map[string]bool)
	for _, f := range files {
		if secretDirs[filepath.Dir(f)] == "" {
			t.Errorf("leasewatch.yaml reads a secret from %s, which no Secret the Deployment mounts holds (Secret mounts: %v)", f, secretDirs)
		}
		mounted[secretDirs[filepath.Dir(f)]] = true
	}
	for _, secret := range []string{"lw-ingest", "lw-pg", "lw-users", "lw-etcd", "lw-redis", "lw-zk"} {
		if !mounted[secret] {
			t.Errorf("no secret file of leasewatch.yaml is read from the Secret %s (read: %v)", secret, files)
		}
	}
}

// secretsIn walks a decoded leasewatch.yaml: it fails on each secret it
// holds, and returns the files it names that hold secrets.
func secretsIn(t *testing.T, at string, v any) []string {
	t.Helper()
	var files []string
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			switch {
			case slices.Contains(secretKeys, k) && e != nil && e != "":
				t.Errorf("%s.%s holds a secret in the ConfigMap", at, k)
			case slices.Contains([]string{"password_file", "users_file", "ingest_tokens_file", "database_password_file", "bearer_token_file"}, k):
				files = append(files, fmt.Sprint(e))
			}
			files = append(files, secretsIn(t, at+"."+k, e)...)
		}
	case []any:
		for i, e := range x {
			files = append(files, secretsIn(t, fmt.Sprintf("%s[%d]", at, i), e)...)
		}
	case string:
		if inlineSecret.MatchString(x) {
			t.Errorf("%s holds a password in the ConfigMap", at)
		}
	}
	return files
}

// The kustomize manifests stay, and agree with the chart where both say the
// same thing: the RBAC rules, the pod's and container's security, the
// probes, and the strategies.
func TestHelmChartAgreesWithTheManifests(t *testing.T) {
	for _, tt := range []struct {
		v      variant
		values string
	}{
		{single, chartValues[0].values},
		{replicated, chartValues[1].values},
	} {
		t.Run(tt.v.name, func(t *testing.T) {
			ms := manifests(t, tt.v)
			objs, err := renderChart(t, "leasewatch", tt.values)
			if err != nil {
				t.Fatal(err)
			}
			chart := ofKind[appsv1.Deployment](t, objs, "Deployment")
			kust := one[*appsv1.Deployment](t, ms)
			cp, kp := chart.Spec.Template.Spec, kust.Spec.Template.Spec
			cc, kc := cp.Containers[0], kp.Containers[0]
			for what, pair := range map[string][2]any{
				"pod securityContext":       {cp.SecurityContext, kp.SecurityContext},
				"container securityContext": {cc.SecurityContext, kc.SecurityContext},
				"probes":                    {[]any{cc.StartupProbe, cc.LivenessProbe, cc.ReadinessProbe}, []any{kc.StartupProbe, kc.LivenessProbe, kc.ReadinessProbe}},
				"ports":                     {cc.Ports, kc.Ports},
				"args":                      {cc.Args, kc.Args},
				"strategy":                  {chart.Spec.Strategy, kust.Spec.Strategy},
			} {
				if !reflect.DeepEqual(pair[0], pair[1]) {
					t.Errorf("%s: the chart's %+v, the manifests' %+v", what, pair[0], pair[1])
				}
			}
			if cr := ofKind[rbacv1.ClusterRole](t, objs, "ClusterRole"); !reflect.DeepEqual(cr.Rules, one[*rbacv1.ClusterRole](t, manifests(t, single)).Rules) {
				t.Errorf("ClusterRole rules: the chart's %+v", cr.Rules)
			}
			if tt.v == replicated {
				if r := ofKind[rbacv1.Role](t, objs, "Role"); !reflect.DeepEqual(r.Rules, one[*rbacv1.Role](t, ms).Rules) {
					t.Errorf("Role rules: the chart's %+v, the manifests' %+v", r.Rules, one[*rbacv1.Role](t, ms).Rules)
				}
			}
		})
	}
}

// The commands the chart's README and the repository's README show install
// the chart: their helm install lines, as helm template, render it.
func TestHelmInstallAsDocumented(t *testing.T) {
	for _, doc := range []string{chartDir + "/README.md", "../../README.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		// A command continued with a backslash is one line.
		for _, line := range strings.Split(strings.ReplaceAll(string(b), "\\\n", " "), "\n") {
			args, ok := strings.CutPrefix(strings.TrimSpace(line), "helm install ")
			if !ok {
				continue
			}
			found = true
			fields := strings.Fields(args)
			// helm install NAME CHART ...: the chart's path is the repository's.
			fields[1] = chartDir
			if out, err := helmRun(t, append([]string{"template"}, fields...)...); err != nil {
				t.Errorf("%s: helm install %s: %v\n%s", doc, args, err, out)
			}
		}
		if !found {
			t.Errorf("%s shows no helm install", doc)
		}
	}
}
