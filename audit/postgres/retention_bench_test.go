package postgres

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// retentionKeep is how many of the newest inputs of renewals retention
// keeps in BenchmarkRetention: the workload's clock moves 1 ms per input.
const retentionKeep = 200

// sizeEvery is how often, in inputs, BenchmarkRetention reads the sizes.
const sizeEvery = 50

// BenchmarkRetention measures ingest while retention prunes: the ingest
// workload (storetest.IngestRenewals) into PostgreSQL and, alternating input
// by input, into SQLite, each store with a Retainer pruning renewals older
// than the newest retentionKeep inputs (200,000 renewals), a pass every
// 200 ms, as leasewatch serve runs it. It reports each store's events/s and
// the p99 and worst time of one input (the recorder's group commit waits
// behind a pruning transaction, so a stall shows there), the renewals
// pruned, and each database's size after the first quarter of the inputs
// and at the end: flat when pruning keeps up. Run with:
// go test -run '^$' -bench Retention -benchtime 2000x ./audit/postgres/
func BenchmarkRetention(b *testing.B) {
	ctx := context.Background()
	srv := pgtest.New(b, pgtest.Options{})
	pgStore, err := Open(ctx, srv.Database(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	liteStore, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "leasewatch.db"))
	if err != nil {
		b.Fatal(err)
	}
	type run struct {
		name   string
		store  storetest.Store
		rec    *audit.Recorder
		times  []time.Duration
		pruned atomic.Int64
		sizes  []int64 // every sizeEvery inputs
	}
	runs := []*run{{name: "", store: pgStore}, {name: "sqlite-", store: liteStore}}
	var clock atomic.Int64 // the workload's newest input time, unix ns
	clock.Store(storetest.IngestStart.UnixNano())
	passCtx, stop := context.WithCancel(ctx)
	var passes sync.WaitGroup
	for _, r := range runs {
		r.rec = startRecorder(b, r.store)
		for _, in := range storetest.IngestGrants() {
			if err := r.rec.Record(ctx, in); err != nil {
				b.Fatal(err)
			}
		}
		ret := &audit.Retainer{
			Store:     r.store,
			Retention: audit.Retention{Kinds: map[audit.EventKind]time.Duration{audit.EventRenew: retentionKeep * time.Millisecond}},
			Now:       func() time.Time { return time.Unix(0, clock.Load()) },
			Every:     200 * time.Millisecond,
			Pruned:    func(_ string, n int) { r.pruned.Add(int64(n)) },
			Log:       slog.New(slog.NewTextHandler(os.Stderr, nil)),
		}
		passes.Add(1)
		go func() {
			defer passes.Done()
			ret.Run(passCtx)
		}()
	}
	b.Cleanup(func() {
		stop()
		passes.Wait()
	})

	b.ResetTimer()
	for n := 0; b.Loop(); n++ {
		in, _ := storetest.IngestRenewals(n)
		clock.Store(in.At.UnixNano())
		for _, r := range runs {
			start := time.Now()
			if err := r.rec.Record(ctx, in); err != nil {
				b.Fatal(err)
			}
			r.times = append(r.times, time.Since(start))
		}
		if n%sizeEvery == 0 {
			for _, r := range runs {
				r.sizes = append(r.sizes, size(b, r.store))
			}
		}
	}
	b.StopTimer()
	events := float64(b.N * storetest.IngestBatch)
	for _, r := range runs {
		var total time.Duration
		for _, t := range r.times {
			total += t
		}
		slices.Sort(r.times)
		b.ReportMetric(events/total.Seconds(), r.name+"events/s")
		b.ReportMetric(float64(r.times[len(r.times)*99/100])/1e6, r.name+"p99-ms")
		b.ReportMetric(float64(r.times[len(r.times)-1])/1e6, r.name+"max-ms")
		b.ReportMetric(float64(r.pruned.Load()), r.name+"pruned")
		b.ReportMetric(float64(r.sizes[len(r.sizes)/4])/(1<<20), r.name+"MiB-at-quarter")
		b.ReportMetric(float64(size(b, r.store))/(1<<20), r.name+"MiB-at-end")
	}
}
