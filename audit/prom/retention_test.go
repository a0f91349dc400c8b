package prom

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// Retention's counters follow the Retainer's Pruned and Sealed hooks, and
// the database size is read from the store at scrape time.
func TestRetentionMetrics(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg := prometheus.NewRegistry()
	pruned, sealed := RegisterRetention(reg, store)
	pruned("events", 1500)
	pruned("events", 500)
	pruned("findings", 3)
	sealed(360)
	sealed(40)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP leasewatch_retention_pruned_total Rows retention deleted, by table (events or findings).
# TYPE leasewatch_retention_pruned_total counter
leasewatch_retention_pruned_total{table="events"} 2000
leasewatch_retention_pruned_total{table="findings"} 3
# HELP leasewatch_renewals_sealed_total Renewals sealed from rows into runs (docs/design/renewal-runs.md).
# TYPE leasewatch_renewals_sealed_total counter
leasewatch_renewals_sealed_total 400
`), "leasewatch_retention_pruned_total", "leasewatch_renewals_sealed_total"); err != nil {
		t.Error(err)
	}
	want, err := store.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "leasewatch_database_bytes" {
			if got := mf.GetMetric()[0].GetGauge().GetValue(); got != float64(want) || got <= 0 {
				t.Errorf("leasewatch_database_bytes = %v, want the store's size %d", got, want)
			}
			return
		}
	}
	t.Error("leasewatch_database_bytes not exported")
}
