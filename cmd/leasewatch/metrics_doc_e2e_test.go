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

// metricsPage documents every metric family, in the table of its
// "## Families" section.
const metricsPage = "../../docs/metrics.md"

// documentedFamilies reads the metrics page's table of families: the
// leasewatch_ names of its rows, and the prefixes of its go_* and
// process_* rows.
func documentedFamilies(t *testing.T) (names map[string]bool, prefixes []string) {
	t.Helper()
	b, err := os.ReadFile(metricsPage)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	start := strings.Index(page, "\n## Families\n")
	if start < 0 {
		t.Fatalf(`%s has no "## Families" section`, metricsPage)
	}
	section := page[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
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
		t.Fatalf("%s's table names no family", metricsPage)
	}
	return names, prefixes
}

// everyFamilyDocumented scrapes base's /metrics and fails on each family
// the metrics page's table does not list.
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
			t.Errorf("/metrics exposes %s, which the table of %s does not list", name, metricsPage)
		}
	}
	if leasewatch < 10 {
		t.Errorf("only %d of the families of %s in the scrape: not a real one?", leasewatch, metricsPage)
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
