package operator

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/leasewatch/leasewatch/deploy/prometheus/promtooltest"
)

// The committed PrometheusRule is what the generator makes of the rules
// file now: an edit of either alone fails here (and make check).
func TestPrometheusRuleIsGenerated(t *testing.T) {
	rules, err := os.ReadFile(RulesFile)
	if err != nil {
		t.Fatal(err)
	}
	want, err := PrometheusRule(rules)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(PrometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run make generate (go generate ./deploy/prometheus/operator) and commit it", PrometheusRuleFile)
	}
	chart, err := os.ReadFile(ChartRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(chart, rules) {
		t.Errorf("%s is stale: run make generate and commit it", ChartRulesFile)
	}
}

// The PrometheusRule's spec is the rules file's content, value for value,
// and promtool accepts it as a rules file of its own.
func TestPrometheusRuleSpecIsTheRules(t *testing.T) {
	var obj struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Spec       any    `yaml:"spec"`
	}
	var rules any
	readYAML(t, PrometheusRuleFile, &obj)
	readYAML(t, RulesFile, &rules)
	if obj.APIVersion != "monitoring.coreos.com/v1" || obj.Kind != "PrometheusRule" {
		t.Errorf("apiVersion %q kind %q, want monitoring.coreos.com/v1 PrometheusRule", obj.APIVersion, obj.Kind)
	}
	if !reflect.DeepEqual(obj.Spec, rules) {
		t.Fatalf("the PrometheusRule's spec differs from %s", RulesFile)
	}
	spec, err := yaml.Marshal(obj.Spec)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(path, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtooltest.Promtool.Require(t), "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules on the PrometheusRule's spec: %v\n%s", err, out)
	}
}

// kustomize builds the directory into the two objects, in leasewatch's
// namespace, and the ServiceMonitor selects the Service of
// deploy/kubernetes by its labels and port name.
func TestKustomizationAndServiceMonitor(t *testing.T) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, r := range res.Resources() {
		kinds[r.GetKind()] = true
		if r.GetNamespace() != "leasewatch" {
			t.Errorf("%s %s in namespace %q, want leasewatch", r.GetKind(), r.GetName(), r.GetNamespace())
		}
	}
	if !kinds["PrometheusRule"] || !kinds["ServiceMonitor"] || len(kinds) != 2 {
		t.Errorf("kustomize built %v, want a PrometheusRule and a ServiceMonitor", kinds)
	}

	var sm struct {
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Endpoints []struct {
				Port string `yaml:"port"`
				Path string `yaml:"path"`
			} `yaml:"endpoints"`
		} `yaml:"spec"`
	}
	var svc struct {
		Metadata struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			Ports []struct {
				Name string `yaml:"name"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
	readYAML(t, "servicemonitor.yaml", &sm)
	readYAML(t, "../../kubernetes/single/service.yaml", &svc)
	if len(sm.Spec.Selector.MatchLabels) == 0 {
		t.Fatal("the ServiceMonitor selects no labels")
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Metadata.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, which the Service lacks (%v)", k, v, svc.Metadata.Labels)
		}
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Path != "/metrics" ||
		len(svc.Spec.Ports) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name {
		t.Errorf("ServiceMonitor endpoints %+v, Service ports %+v: want /metrics on the Service's port", sm.Spec.Endpoints, svc.Spec.Ports)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
