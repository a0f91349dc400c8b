// Package prometheus_test checks the Prometheus rules in this directory: the
// alerts are five of the six leasewatch evaluates live (Leaderless is live
// only), under the same names and severities, over metric families
// leasewatch exports; promtool accepts the
// file (`promtool check rules`) and its unit tests pass (`promtool test
// rules`), each alert firing on a synthetic series and staying quiet when the
// series is healthy.
package prometheus_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"sort"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/deploy/families"
	"github.com/leasewatch/leasewatch/deploy/prometheus/promtooltest"
)

const (
	rulesFile     = "leasewatch-rules.yaml"
	rulesTestFile = "leasewatch-rules_test.yaml"
)

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	bin := promtooltest.Promtool.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
	t.Logf("promtool %v:\n%s", args, out)
}

func TestPromtoolCheckRules(t *testing.T) {
	runPromtool(t, "check", "rules", rulesFile)
}

func TestPromtoolTestRules(t *testing.T) {
	runPromtool(t, "test", "rules", rulesTestFile)
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no rules", rulesFile)
	}
	return rules
}

// TestAlertsMatchLiveAlerts checks the alerting rules are the live alerts of
// audit/alert, with the severities leasewatch's own sender gives them.
func TestAlertsMatchLiveAlerts(t *testing.T) {
	want := map[string]string{
		alert.LeaseNearExpiry:  "warning",
		alert.LeaseLost:        "warning",
		alert.FencingViolation: "critical",
		alert.CollectorBlind:   "warning",
		// Leaderless is live only: it resolves on the lock's next grant.
		alert.LeadershipFlapping: "warning",
	}
	got := map[string]string{}
	for _, r := range readRules(t) {
		if r.Alert == "" {
			continue
		}
		if _, dup := got[r.Alert]; dup {
			t.Errorf("alert %s is defined twice", r.Alert)
		}
		got[r.Alert] = r.Labels[alert.LabelSeverity]
		for _, a := range []string{alert.AnnotationSummary, alert.AnnotationDescription} {
			if r.Annotations[a] == "" {
				t.Errorf("alert %s has no %s annotation", r.Alert, a)
			}
		}
	}
	for name, sev := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("alert %s is missing", name)
		case g != sev:
			t.Errorf("alert %s: severity = %q, want %q", name, g, sev)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("alert %s is not one of leasewatch's live alerts", name)
		}
	}
}

// TestRulesQueryKnownFamilies checks every expression queries only metric
// families leasewatch exports, or recording rules defined in the file.
func TestRulesQueryKnownFamilies(t *testing.T) {
	rules := readRules(t)
	var recorded []string
	for _, r := range rules {
		if r.Record != "" {
			recorded = append(recorded, r.Record)
		}
	}
	for _, r := range rules {
		name := r.Record + r.Alert
		if r.Expr == "" {
			t.Errorf("rule %s has no expr", name)
			continue
		}
		if u := families.Unknown(r.Expr); len(u) > 0 {
			t.Errorf("rule %s queries unknown metric families %v", name, u)
		}
		for _, used := range recordingRulesIn(r.Expr) {
			if !slices.Contains(recorded, used) {
				t.Errorf("rule %s queries recording rule %s, which the file does not define", name, used)
			}
		}
		if len(families.Names(r.Expr)) == 0 && len(recordingRulesIn(r.Expr)) == 0 {
			t.Errorf("rule %s queries no leasewatch metric", name)
		}
	}
}

// recordingRulesIn returns the level:metric:operation names in expr.
func recordingRulesIn(expr string) []string {
	var names []string
	for _, f := range bytes.FieldsFunc([]byte(expr), func(r rune) bool {
		return !(r == '_' || r == ':' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		if bytes.Count(f, []byte(":")) == 2 && bytes.Contains(f, []byte("leasewatch_")) {
			names = append(names, string(f))
		}
	}
	sort.Strings(names)
	return slices.Compact(names)
}
