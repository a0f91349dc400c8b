package query

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/audit/sqlite/synth"
)

// BenchmarkCosts reads a window's writes on the page benchmarks' database
// (synth.Default: 50,000 locks, 11.7M events over 30 days, generated into
// .cache/bench/ at the repository root on first use) at its end: a reading
// (Read), and a request answered from the kept reading (Kept), as the
// overview's are between readings.
func BenchmarkCosts(b *testing.B) {
	ctx := context.Background()
	spec := synth.Default()
	path, _, err := synth.Cached(ctx, filepath.Join("..", "..", ".cache", "bench"), spec)
	if err != nil {
		b.Fatal(err)
	}
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	reads := audit.Settled(st).(audit.WriteLoadStore)
	for _, window := range CostWindows {
		name := CostWindowName(window)
		b.Run("Read/"+name, func(b *testing.B) {
			for b.Loop() {
				t, err := readTally(ctx, reads, audit.TimeFilter{From: spec.End.Add(-window), To: spec.End})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(t.tenures)), "tenures")
			}
		})
		b.Run("Kept/"+name, func(b *testing.B) {
			r := New(Config{Store: audit.Settled(st)})
			if _, err := r.Costs(ctx, spec.End, window, CostByLock, OverviewTopWriters); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := r.Costs(ctx, spec.End.Add(time.Second), window, CostByNamespace, OverviewTopWriters); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
