package postgres

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// BenchmarkIngest measures renewals through the whole write path (the
// recorder's tracker and group commit into the store) into PostgreSQL and,
// alternating input by input in the same run, into SQLite, the same
// workload as audit/sqlite's BenchmarkIngest (storetest.IngestRenewals).
// The server is one of its own with PostgreSQL's defaults, fsync and
// synchronous_commit on, as SQLite runs with synchronous=FULL; it shares the
// machine's cores with the benchmark. It reports events/s of each, their
// ratio (PostgreSQL over SQLite), the allocations per event of the
// PostgreSQL recorder, and what the renewals add to each database, indexes
// included. Run with: make bench-ingest, or
// go test -run '^$' -bench Ingest -benchtime 300x ./audit/postgres/
func BenchmarkIngest(b *testing.B) {
	ctx := context.Background()
	srv := pgtest.New(b, pgtest.Options{})
	pgStore, err := Open(ctx, srv.Database(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	var clock storetest.IngestClock
	pgRec := startRecorder(b, pgStore, audit.WithClock(clock.Now))
	liteStore, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "leasewatch.db"))
	if err != nil {
		b.Fatal(err)
	}
	liteRec := startRecorder(b, liteStore, audit.WithClock(clock.Now))
	for _, in := range storetest.IngestGrants() {
		for _, rec := range []*audit.Recorder{pgRec, liteRec} {
			if err := rec.Record(ctx, in); err != nil {
				b.Fatal(err)
			}
		}
	}

	// Storage per renewal is what the renewals add, without the locks'
	// and tenures' rows, which the grants made.
	pgBefore, liteBefore := size(b, pgStore), size(b, liteStore)
	eventsBefore := eventTablesSize(b, pgStore)
	tablesBefore := tableSizes(b, pgStore)
	var pgTime, liteTime time.Duration
	var before, after runtime.MemStats
	var allocs uint64
	b.ResetTimer()
	for n := 0; b.Loop(); n++ {
		in, _ := storetest.IngestRenewals(n)
		clock.Next()

		start := time.Now()
		if err := liteRec.Record(ctx, in); err != nil {
			b.Fatal(err)
		}
		liteTime += time.Since(start)

		runtime.ReadMemStats(&before)
		start = time.Now()
		if err := pgRec.Record(ctx, in); err != nil {
			b.Fatal(err)
		}
		pgTime += time.Since(start)
		runtime.ReadMemStats(&after)
		allocs += after.Mallocs - before.Mallocs
	}
	b.StopTimer()
	events := float64(b.N * storetest.IngestBatch)
	b.ReportMetric(events/pgTime.Seconds(), "events/s")
	b.ReportMetric(events/liteTime.Seconds(), "sqlite-events/s")
	b.ReportMetric(liteTime.Seconds()/pgTime.Seconds(), "ratio")
	b.ReportMetric(float64(allocs)/events, "allocs/event")
	b.ReportMetric(float64(size(b, pgStore)-pgBefore)/events, "db-bytes/renewal")
	b.ReportMetric(float64(eventTablesSize(b, pgStore)-eventsBefore)/events, "events-bytes/renewal")
	for name, n := range tableSizes(b, pgStore) {
		if d := n - tablesBefore[name]; d > 0 {
			b.Logf("%s: %.1f bytes per renewal", name, float64(d)/events)
		}
	}
	b.ReportMetric(float64(size(b, liteStore)-liteBefore)/events, "sqlite-db-bytes/renewal")
}

// startRecorder starts a recorder on j, closed with j at the benchmark's
// end.
func startRecorder(b *testing.B, j interface {
	audit.Journal
	Close() error
}, opts ...audit.RecorderOption) *audit.Recorder {
	b.Helper()
	rec := audit.NewRecorder(j, audit.TrackerConfig{}, nil, opts...)
	if err := rec.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		rec.Close()
		j.Close()
	})
	return rec
}

func size(tb testing.TB, s interface {
	Size(context.Context) (int64, error)
}) int64 {
	tb.Helper()
	n, err := s.Size(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// eventTablesSize is what the tables of events take, indexes and TOAST
// included: events, the partitions of renewals and the renewal log.
func eventTablesSize(b *testing.B, s *Store) int64 {
	b.Helper()
	var n int64
	if err := s.reader.QueryRow(context.Background(), `SELECT coalesce(sum(pg_total_relation_size(oid)), 0)::bigint
		FROM pg_class WHERE relkind = 'r' AND (relname IN ('events', 'renewal_log') OR relname ~ '^renewals_[0-9]+$')`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// tableSizes are the bytes of each table's heap and of each index.
func tableSizes(b *testing.B, s *Store) map[string]int64 {
	b.Helper()
	rows, err := s.reader.Query(context.Background(), `SELECT c.relname::text, pg_relation_size(c.oid)
		FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
		WHERE ns.nspname = current_schema() AND c.relkind IN ('r', 'i')`)
	if err != nil {
		b.Fatal(err)
	}
	out := make(map[string]int64)
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			b.Fatal(err)
		}
		out[name] = n
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}
