package prom

import (
	"context"
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterRetention registers retention's counters and the database's
// size, and returns the Retainer's Pruned and Sealed hooks.
func RegisterRetention(reg prometheus.Registerer, store interface {
	Size(context.Context) (int64, error)
}) (pruned func(string, int), sealed func(int)) {
	prunedRows := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasewatch_retention_pruned_total",
		Help: "Rows retention deleted, by table (events or findings).",
	}, []string{"table"})
	for _, t := range []string{"events", "findings"} {
		prunedRows.WithLabelValues(t)
	}
	sealedRenewals := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasewatch_renewals_sealed_total",
		Help: "Renewals sealed from rows into runs (docs/design/renewal-runs.md).",
	})
	size := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "leasewatch_database_bytes",
		Help: "Bytes the database takes: SQLite's pages in use (less the free ones), or PostgreSQL's tables with their indexes. Retention frees space that new rows reuse, so this levels off.",
	}, func() float64 {
		n, err := store.Size(context.Background())
		if err != nil {
			return math.NaN()
		}
		return float64(n)
	})
	reg.MustRegister(prunedRows, sealedRenewals, size)
	return func(table string, n int) { prunedRows.WithLabelValues(table).Add(float64(n)) },
		func(n int) { sealedRenewals.Add(float64(n)) }
}
