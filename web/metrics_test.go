package web

import (
	"net/http"
	"strings"
	"testing"

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
