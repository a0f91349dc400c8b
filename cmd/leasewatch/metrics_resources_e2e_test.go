package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// Write reports of ever more resources, through the real ingest, grow the
// scrape by metrics.max_resource_series series at most: the first
// resources to report get series of their own, and the reports of the rest
// are counted in one series per source and outcome with resource="".
func TestWriteReportSeriesCapped(t *testing.T) {
	const max, resources = 20, 300
	srv, _ := startEtcd(t)
	base, _ := startServe(t, fmt.Sprintf(`listen: 127.0.0.1:0
database: %s
ingest_tokens: [%q]
metrics: {max_resource_series: %d}
sources:
  - {name: shop, kind: etcd, endpoints: [%q], prefixes: ["/locks/"]}
`, filepath.Join(t.TempDir(), "lw.db"), testIngestToken, max, srv.Endpoint))
	reports := make([]writeReport, resources)
	for i := range reports {
		reports[i] = writeReport{Source: "shop", Lock: "/locks/orders", Resource: fmt.Sprintf("ledger-%03d", i),
			Token: 1, Outcome: "accepted", RequestID: fmt.Sprintf("r-%d", i)}
	}
	client := &http.Client{Timeout: 30 * time.Second}
	if code, body, err := postWrites(client, base, reports); err != nil || code != http.StatusAccepted {
		t.Fatalf("POST /api/v1/writes = %d %s, %v", code, body, err)
	}

	mfs := scrapeFamilies(t, client, base)
	own, total := 0, 0.0
	var leftOut float64
	for _, m := range mfs["leasewatch_write_reports_total"].GetMetric() {
		resource := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "resource" {
				resource = l.GetValue()
			}
		}
		total += m.GetCounter().GetValue()
		if resource == "" {
			leftOut += m.GetCounter().GetValue()
		} else {
			own++
		}
	}
	if own != max || leftOut != resources-max || total != resources {
		t.Errorf("leasewatch_write_reports_total: %d resources with series of their own and %v reports under resource=\"\" of %v; want %d, %d of %d",
			own, leftOut, total, max, resources-max, resources)
	}
}
