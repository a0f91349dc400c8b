package present

import (
	"reflect"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/views"
)

func TestTopWriters(t *testing.T) {
	if got := topWriters(nil); got.Shown {
		t.Errorf("top writers of no reading = %+v, want not shown", got)
	}
	to := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c := &query.Costs{Window: audit.TimeFilter{From: to.Add(-time.Hour), To: to}, Groups: 40,
		Total: query.Writes{Grants: 10, Renewals: 1_234_560, Releases: 30},
		Rows: []query.CostRow{{Key: "kube-system/kube-scheduler", Source: "cluster-a", LockID: 7,
			Writes: query.Writes{Grants: 1, Renewals: 1799}, PerSecond: 0.5}}}
	want := views.TopWriters{Shown: true, More: "/api/v1/costs?window=1h&by=namespace",
		Total: "1,234,600 writes, 343/s, from 40 locks",
		Rows: []views.WriterRow{{ID: 7, Source: "cluster-a", Name: "kube-system/kube-scheduler", Writes: "1,800",
			PerSecond: "0.50/s", Grants: "1", Renewals: "1,799", Releases: "0"}}}
	if got := topWriters(c); !reflect.DeepEqual(got, want) {
		t.Errorf("top writers =\n%+v, want\n%+v", got, want)
	}
	for r, want := range map[float64]string{0: "0.00/s", 2.0 / 3600: "<0.01/s", 0.5: "0.50/s", 12.4: "12/s"} {
		if got := writeRate(r); got != want {
			t.Errorf("writeRate(%v) = %q, want %q", r, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 123456: "123,456", -1234: "-1,234"} {
		if got := grouped(n); got != want {
			t.Errorf("grouped(%d) = %q, want %q", n, got, want)
		}
	}
}
