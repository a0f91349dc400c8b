package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// BenchmarkIngestWrites stores write reports as ingest's group commit does:
// batches of 200, from 200 resources about 20 locks, a tenth of them
// rejected and a tenth without a token, a few milliseconds apart. It reports
// writes/s and the database's bytes per write.
func BenchmarkIngestWrites(b *testing.B) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "leasewatch.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const batch = 200
	t0 := time.Now().Add(-time.Hour)
	sizeBefore, err := s.Size(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var n int
	b.ResetTimer()
	for b.Loop() {
		events := make([]audit.Event, batch)
		for i := range events {
			e := audit.Event{Lock: audit.LockKey{Source: "etcd", Name: fmt.Sprintf("/locks/%02d", n%20)}, Kind: audit.EventWriteAccepted,
				Resource: fmt.Sprintf("db-%03d", n%200), At: t0.Add(time.Duration(n) * 3 * time.Millisecond), Token: audit.Int64(int64(n / 1000))}
			if n%10 == 3 {
				e.Kind = audit.EventWriteRejected
			}
			if n%10 == 7 {
				e.Token = nil
			}
			events[i] = e
			n++
		}
		if err := s.Apply(ctx, audit.Batch{Events: events}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "writes/s")
	if size, err := s.Size(ctx); err == nil {
		b.ReportMetric(float64(size-sizeBefore)/float64(n), "db-bytes/write")
	}
}
