package audit_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// BenchmarkRecorderReportWrite measures one durable write report through
// the recorder into SQLite, on a lock whose other resources number 0 or
// 1,000. Each report raises its resource's highest token, so the
// resource's state changes with every report, as it does whenever a new
// token reaches a resource.
func BenchmarkRecorderReportWrite(b *testing.B) {
	for _, others := range []int{0, 1000} {
		b.Run(fmt.Sprintf("Resources=%d", others), func(b *testing.B) {
			ctx := context.Background()
			rec := benchRecorder(b)
			lock := audit.LockKey{Source: "src", Name: "orders"}
			if err := rec.Record(ctx, audit.Input{Source: "src", Kind: audit.KindEtcd, Observations: []audit.Observation{{
				Lock: lock, Kind: audit.EventGrant, At: at(0), Holder: "a", Token: audit.Int64(1), LeaseDuration: time.Hour,
			}}}); err != nil {
				b.Fatal(err)
			}
			write := func(resource string, token int64) audit.WriteReport {
				return audit.WriteReport{Source: "src", Lock: lock.Name, Resource: resource, Holder: "a",
					Token: audit.Int64(token), Outcome: audit.WriteAccepted, At: at(time.Second)}
			}
			setup := make([]audit.WriteReport, 0, others)
			for i := range others {
				setup = append(setup, write(fmt.Sprintf("shard-%04d", i), 1))
			}
			if len(setup) > 0 {
				if err := rec.ReportWrites(ctx, setup); err != nil {
					b.Fatal(err)
				}
			}
			token := int64(1)
			for b.Loop() {
				token++
				if err := rec.ReportWrites(ctx, []audit.WriteReport{write("ledger", token)}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRecorderNewResources measures one durable request that names
// 1,000 resources new to its lock, a fresh lock each time: the ingest
// API's largest request within the bound on resources per lock.
func BenchmarkRecorderNewResources(b *testing.B) {
	ctx := context.Background()
	rec := benchRecorder(b)
	writes := make([]audit.WriteReport, 1000)
	n := 0
	for b.Loop() {
		n++
		for i := range writes {
			writes[i] = audit.WriteReport{Source: "src", Lock: fmt.Sprintf("orders-%d", n), Resource: fmt.Sprintf("shard-%04d", i), Holder: "a",
				Token: audit.Int64(1), Outcome: audit.WriteAccepted, At: at(time.Second)}
		}
		if err := rec.ReportWrites(ctx, writes); err != nil {
			b.Fatal(err)
		}
	}
}

// benchRecorder returns a started recorder of one etcd source, "src", on a
// SQLite store of its own, both closed when b ends.
func benchRecorder(b *testing.B) *audit.Recorder {
	b.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "lw.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	rec := audit.NewRecorder(st, audit.TrackerConfig{SourceKinds: map[string]audit.SourceKind{"src": audit.KindEtcd}}, slog.New(slog.DiscardHandler))
	if err := rec.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rec.Close() })
	return rec
}
