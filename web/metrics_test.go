package web

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The request-duration histogram labels each request with its registered
// route pattern, so lock ids and unknown paths never become label values.
func TestHTTPMetricsLabelTheRoute(t *testing.T) {
	f := newFixture(t)
	f.do(t, http.MethodGet, "/api/v1/locks/"+itoa(f.orders.ID), nil)
	f.do(t, http.MethodGet, "/api/v1/locks/999999", nil)
	f.do(t, http.MethodGet, "/no/such/page/12345", nil)
	f.do(t, "BREW", "/locks", nil)

	mfs, err := f.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]uint64)
	for _, mf := range mfs {
		if mf.GetName() != "leasewatch_http_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[strings.Join(labels, ",")] = m.GetHistogram().GetSampleCount()
		}
	}
	for _, want := range []string{
		"code=200,method=GET,route=/api/v1/locks/:id",
		"code=404,method=GET,route=/api/v1/locks/:id",
		"code=404,method=GET,route=unmatched",
		"code=405,method=other,route=/locks",
	} {
		if got[want] != 1 {
			t.Errorf("requests labelled %s = %d, want 1; have %v", want, got[want], got)
		}
	}
	for labels := range got {
		if strings.Contains(labels, "999999") || strings.Contains(labels, "12345") || strings.Contains(labels, "BREW") {
			t.Errorf("series %s carries a raw path or method; want the route pattern", labels)
		}
	}
	if n := testutil.CollectAndCount(f.server.metrics.duration); n != len(got) {
		t.Errorf("%d series collected, %d gathered", n, len(got))
	}
}

// brokenCollector reports one series it cannot make, as a collector fed a
// label value that is not valid UTF-8 would.
type brokenCollector struct{ desc *prometheus.Desc }

func (c brokenCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c brokenCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(c.desc, errors.New(`label value "lock:\xff" is not valid UTF-8`))
}

// One collector that fails costs only its own series: /metrics answers 200
// with every other series, and its body carries no error text.
func TestMetricsScrapeSurvivesABrokenCollector(t *testing.T) {
	f := newFixture(t)
	f.registry.MustRegister(brokenCollector{prometheus.NewDesc("leasewatch_test_broken", "A series that cannot be made.", []string{"lock"}, nil)})
	res, body := f.do(t, http.MethodGet, "/metrics", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d, want 200:\n%s", res.StatusCode, body)
	}
	if !strings.Contains(string(body), "leasewatch_ingest_writes_total") {
		t.Errorf("GET /metrics lacks the other series:\n%s", body)
	}
	for _, leak := range []string{"not valid UTF-8", "leasewatch_test_broken", "goroutine", ".go:"} {
		if strings.Contains(string(body), leak) {
			t.Errorf("GET /metrics carries %q:\n%s", leak, body)
		}
	}
}
