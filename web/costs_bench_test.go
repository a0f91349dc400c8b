package web

import (
	"context"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/audit/sqlite/synth"
)

// BenchmarkCostsPostgres reads a window's writes (query.Reader.Costs) on
// the page benchmarks' database in PostgreSQL (benchPostgres) at its end:
// a reading by a Reader that has none kept (Read), and a request answered
// from the kept one (Kept). audit/query's BenchmarkCosts is SQLite's.
func BenchmarkCostsPostgres(b *testing.B) {
	ctx := context.Background()
	spec := synth.Default()
	st := audit.Settled(benchPostgres(b, spec))
	for _, window := range query.CostWindows {
		name := query.CostWindowName(window)
		b.Run("Read/"+name, func(b *testing.B) {
			for b.Loop() {
				if _, err := query.New(query.Config{Store: st}).Costs(ctx, spec.End, window, query.CostByLock, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("Kept/"+name, func(b *testing.B) {
			r := query.New(query.Config{Store: st})
			if _, err := r.Costs(ctx, spec.End, window, query.CostByLock, 0); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := r.Costs(ctx, spec.End.Add(time.Second), window, query.CostByNamespace, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
