package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// BenchmarkIngest measures renewals through the whole write path (the
// recorder's tracker and group commit into the store) against a baseline that
// inserts the same event rows with a plain prepared statement, one
// transaction per batch, on the same schema. The two alternate batch by
// batch so machine noise hits both alike; it reports events/s of each, their
// ratio, and the recorder's allocations per event. The recorder's clock
// (storetest.IngestClock) has its sync rounds mark about every 64 inputs.
func BenchmarkIngest(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	base := openBaseline(b, filepath.Join(dir, "baseline.db"))
	var clock storetest.IngestClock
	rec, store := openRecorder(b, filepath.Join(dir, "leasewatch.db"), audit.WithClock(clock.Now))

	for _, in := range storetest.IngestGrants() {
		if err := rec.Record(ctx, in); err != nil {
			b.Fatal(err)
		}
	}

	// Storage per renewal is what the renewals add, without the locks'
	// and tenures' rows, which the grants made.
	sizeBefore, err := store.Size(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var recTime, baseTime time.Duration
	var before, after runtime.MemStats
	var allocs uint64
	b.ResetTimer()
	for n := 0; b.Loop(); n++ {
		in, first := storetest.IngestRenewals(n)
		clock.Next()

		start := time.Now()
		if err := base.insert(first, in.At); err != nil {
			b.Fatal(err)
		}
		baseTime += time.Since(start)

		runtime.ReadMemStats(&before)
		start = time.Now()
		if err := rec.Record(ctx, in); err != nil {
			b.Fatal(err)
		}
		recTime += time.Since(start)
		runtime.ReadMemStats(&after)
		allocs += after.Mallocs - before.Mallocs
	}
	events := float64(b.N * storetest.IngestBatch)
	if size, err := store.Size(ctx); err == nil {
		b.ReportMetric(float64(size-sizeBefore)/events, "db-bytes/renewal")
	}
	b.ReportMetric(events/recTime.Seconds(), "events/s")
	b.ReportMetric(events/baseTime.Seconds(), "baseline-events/s")
	b.ReportMetric(baseTime.Seconds()/recTime.Seconds(), "ratio")
	b.ReportMetric(float64(allocs)/events, "allocs/event")
}

func openRecorder(b *testing.B, path string, opts ...audit.RecorderOption) (*audit.Recorder, *sqlite.Store) {
	b.Helper()
	store, err := sqlite.Open(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	rec := audit.NewRecorder(store, audit.TrackerConfig{}, nil, opts...)
	if err := rec.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		rec.Close()
		store.Close()
	})
	return rec, store
}

// baseline writes event rows the plainest way SQLite allows, into a database
// with leasewatch's schema.
type baseline struct {
	db *sql.DB
}

func openBaseline(b *testing.B, path string) *baseline {
	b.Helper()
	store, err := sqlite.Open(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	store.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	b.Cleanup(func() { db.Close() })
	tx, err := db.Begin()
	if err != nil {
		b.Fatal(err)
	}
	for i := range storetest.IngestLocks {
		k := storetest.IngestKey(i)
		if _, err := tx.Exec(`INSERT INTO locks (id, source, name) VALUES (?, ?, ?)`, i+1, k.Source, k.Name); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	return &baseline{db: db}
}

// insert writes one batch of renewals of consecutive locks from first.
func (bl *baseline) insert(first int, at time.Time) error {
	tx, err := bl.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// The rows leasewatch stores for these renewals: its compact form,
	// naming the tenure and its margin.
	stmt, err := tx.Prepare(`INSERT INTO events (lock_id, kind, at, holder, token, ttl_ms,
		position, inferred, resource, request_id, detail, seq, margin_permille, renewed_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for j := range storetest.IngestBatch {
		i := (first + j) % storetest.IngestLocks
		if _, err := stmt.Exec(i+1, "renew", at.UnixNano(), "", nil, storetest.IngestTTL.Milliseconds(),
			"", false, "", nil, nil, 1, 999, nil); err != nil {
			return err
		}
	}
	return tx.Commit()
}
