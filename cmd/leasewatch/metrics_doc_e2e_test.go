package main

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// documentedFamilies reads the README's table of metric families: the
// leasewatch_ names of its rows, and the prefixes of its go_* and
// process_* rows.
func documentedFamilies(t *testing.T) (names map[string]bool, prefixes []string) {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "\n### Metrics\n")
	if start < 0 {
		t.Fatal(`README.md has no "### Metrics" section`)
	}
	section := readme[start:]
	section = section[:strings.Index(section[1:], "\n## ")+1]
	names = map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell := strings.SplitN(line, "|", 3)[1]
		for _, m := range regexp.MustCompile("`([a-z_]+)(\\*?)`").FindAllStringSubmatch(cell, -1) {
			if m[2] == "*" {
				prefixes = append(prefixes, m[1])
			} else {
				names[m[1]] = true
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("README.md's metrics table names no family")
	}
	return names, prefixes
}

// everyFamilyDocumented scrapes base's /metrics and fails on each family
// the README's table does not list.
func everyFamilyDocumented(t *testing.T, base string) {
	t.Helper()
	names, prefixes := documentedFamilies(t)
	mfs := scrapeFamilies(t, http.DefaultClient, base)
	leasewatch := 0
	for name := range mfs {
		if names[name] {
			leasewatch++
			continue
		}
		documented := false
		for _, p := range prefixes {
			documented = documented || strings.HasPrefix(name, p)
		}
		if !documented {
			t.Errorf("/metrics exposes %s, which the README's metrics table does not list", name)
		}
	}
	if leasewatch < 10 {
		t.Errorf("only %d of the README's families in the scrape: not a real one?", leasewatch)
	}
}

// scrapeFamilies scrapes base's /metrics with client and parses it.
func scrapeFamilies(t *testing.T, client *http.Client, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}
