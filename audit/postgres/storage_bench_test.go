package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec/runcodectest"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
)

// leaseWorkload is locks of one of runcodectest's workloads, renewed for
// hours.
type leaseWorkload struct {
	runcodectest.Workload
	locks, hours int
}

// storageWorkloads are each of runcodectest.Workloads (a Kubernetes node
// lease, a client-go leader election, a Redis lock, an etcd lease), named
// as this benchmark has named them.
var storageWorkloads = func() []leaseWorkload {
	locks := map[string]int{"node": 400, "leader": 40, "redis": 60, "etcd": 20}
	names := map[string]string{"node": "NodeLease", "leader": "LeaderLease", "redis": "RedisLock", "etcd": "EtcdLease"}
	var ws []leaseWorkload
	for _, w := range runcodectest.Workloads {
		n := locks[w.Name]
		w.Name = names[w.Name]
		ws = append(ws, leaseWorkload{Workload: w, locks: n, hours: 3})
	}
	return ws
}()

// batches returns the workload's grants, then its renewals in rounds, each
// round a renewal of every lock, in batches of about 4,000 renewals, as
// the tracker records them, synced.
func (w leaseWorkload) batches(start time.Time) (audit.Batch, []audit.Batch) {
	rng := rand.New(rand.NewPCG(7, uint64(w.locks)))
	grants := audit.Batch{Synced: true}
	leases := make([]*runcodectest.Lease, w.locks)
	keys := make([]audit.LockKey, w.locks)
	for l := range keys {
		keys[l] = audit.LockKey{Source: "cluster", Name: fmt.Sprintf("%s/%04d", w.Name, l)}
		ten := audit.Tenure{Lock: keys[l], Seq: 1, Holder: keys[l].Name, Token: audit.Int64(1), GrantedAt: start, LeaseDuration: w.TTL}
		grants.Tenures = append(grants.Tenures, ten)
		leases[l] = w.Lease(rng, start)
	}
	rounds := w.hours * int(time.Hour/w.Every)
	var out []audit.Batch
	b := audit.Batch{Synced: true}
	for range rounds {
		for l, key := range keys {
			r := leases[l].Next()
			b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventRenew, At: r.At,
				Holder: key.Name, Token: audit.Int64(1), Seq: 1, TTL: r.TTL, Detail: r.EventDetail()})
		}
		if len(b.Events) >= 4000 {
			out = append(out, b)
			b = audit.Batch{Synced: true}
		}
	}
	if len(b.Events) > 0 {
		out = append(out, b)
	}
	return grants, out
}

// BenchmarkStoragePerRenewal measures what a renewal costs on disk, its
// tables' indexes and TOAST included, for each of storageWorkloads: stored
// as rows (the previous release's format: the renewals table), and the
// same renewals in a second database of the same server, batch by batch in
// alternation, then sealed into runs and the emptied partitions dropped
// (and a VACUUM, as autovacuum would, of the partition still being
// filled). It reports bytes per renewal of each, of the runs alone, what
// is left of the partitions of renewals, the
// time sealing takes per renewal, and what a run's data would cost in
// time and space with the default STORAGE of bytea (EXTENDED, which tries
// pglz first) against the table's EXTERNAL. Run with:
// go test -run '^$' -bench StoragePerRenewal -benchtime 1x ./audit/postgres/
func BenchmarkStoragePerRenewal(b *testing.B) {
	srv := pgtest.New(b, pgtest.Options{})
	for _, w := range storageWorkloads {
		b.Run(w.Name, func(b *testing.B) {
			for b.Loop() {
				measureStorage(b, srv, w)
			}
		})
	}
}

func measureStorage(b *testing.B, srv *pgtest.Server, w leaseWorkload) {
	ctx := context.Background()
	rows := openBench(b, srv, Options{})
	// Partitions of 2^16 ids, so that sealing most of the workload's
	// leaves them empty and drops them, as it does every partition of the
	// default span in a store that runs for days.
	sealed := openBench(b, srv, Options{RenewalSpan: 1 << 16})
	start := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	grants, batches := w.batches(start)
	for _, s := range []*Store{rows, sealed} {
		if err := s.Apply(ctx, grants); err != nil {
			b.Fatal(err)
		}
	}
	rowsBefore, sealedBefore := renewalTablesSize(b, rows), renewalTablesSize(b, sealed)
	n := 0
	for _, batch := range batches {
		for _, s := range []*Store{rows, sealed} {
			if err := s.Apply(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
		n += len(batch.Events)
	}
	began := time.Now()
	var renewals int
	err := audit.SealThrough(ctx, sealed, start.Add(time.Duration(w.hours+1)*time.Hour), func(res audit.SealResult, _ time.Duration) error {
		renewals += res.Sealed
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	took := time.Since(began)
	if renewals != n {
		b.Fatalf("sealed %d renewals of %d", renewals, n)
	}
	if _, err := sealed.writer.Exec(ctx, `VACUUM renewals`); err != nil {
		b.Fatal(err)
	}
	perRenewal := func(d int64) float64 { return float64(d) / float64(n) }
	b.ReportMetric(perRenewal(renewalTablesSize(b, rows)-rowsBefore), "rows-bytes/renewal")
	b.ReportMetric(perRenewal(renewalTablesSize(b, sealed)-sealedBefore), "sealed-bytes/renewal")
	b.ReportMetric(perRenewal(relationSize(b, sealed, "renewal_runs")), "runs-bytes/renewal")
	// What sealing leaves of the rows: the partition still being filled,
	// its heap vacuumed, its index as large as it grew, until sealing
	// drops it once filled. Bounded by a partition, whatever the history.
	b.ReportMetric(float64(count(b, sealed, `SELECT coalesce(sum(pg_total_relation_size(oid)), 0)::bigint FROM pg_class
		WHERE relkind = 'r' AND relname ~ '^renewals_[0-9]+$'`))/1024, "left-KiB")
	b.ReportMetric(float64(took.Microseconds())/float64(n), "seal-µs/renewal")
	b.ReportMetric(float64(n)/float64(count(b, sealed, `SELECT count(*) FROM renewal_runs`)), "renewals/run")
	compareStorage(b, sealed, n)
}

// openBench opens a store on a new database of srv, closed at the end.
func openBench(b *testing.B, srv *pgtest.Server, opts Options) *Store {
	b.Helper()
	s, err := Open(context.Background(), srv.Database(b), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// renewalTablesSize is what the tables that hold renewals take: events,
// the partitions of renewals and the runs, indexes and TOAST included.
func renewalTablesSize(b *testing.B, s *Store) int64 {
	b.Helper()
	return count(b, s, `SELECT coalesce(sum(pg_total_relation_size(oid)), 0)::bigint FROM pg_class
		WHERE relkind = 'r' AND (relname IN ('events', 'renewal_runs') OR relname ~ '^renewals_[0-9]+$')`)
}

// relationSize is pg_total_relation_size of one table.
func relationSize(b *testing.B, s *Store, table string) int64 {
	b.Helper()
	return count(b, s, `SELECT pg_total_relation_size('`+table+`')`)
}

// compareStorage copies the runs' data, inside the server, into two
// tables that differ only in the column's STORAGE, EXTENDED (bytea's
// default, which tries pglz on a value too long for the row before it is
// stored out of line) and EXTERNAL (this store's), alternating, 15 times
// each. It reports the fastest copy of each per renewal, each table's size
// per renewal, and how many values pglz did compress (none: the data is
// bit-packed).
func compareStorage(b *testing.B, s *Store, n int) {
	b.Helper()
	ctx := context.Background()
	storages := []string{"EXTENDED", "EXTERNAL"}
	best := make(map[string]time.Duration)
	for _, storage := range storages {
		table := "runs_" + strings.ToLower(storage)
		if _, err := s.writer.Exec(ctx, `CREATE TABLE `+table+` (data BYTEA NOT NULL);
			ALTER TABLE `+table+` ALTER COLUMN data SET STORAGE `+storage); err != nil {
			b.Fatal(err)
		}
	}
	for range 15 {
		for _, storage := range storages {
			table := "runs_" + strings.ToLower(storage)
			if _, err := s.writer.Exec(ctx, `TRUNCATE `+table); err != nil {
				b.Fatal(err)
			}
			began := time.Now()
			if _, err := s.writer.Exec(ctx, `INSERT INTO `+table+` SELECT data FROM renewal_runs`); err != nil {
				b.Fatal(err)
			}
			if took := time.Since(began); best[storage] == 0 || took < best[storage] {
				best[storage] = took
			}
		}
	}
	for _, storage := range storages {
		table := "runs_" + strings.ToLower(storage)
		b.ReportMetric(float64(best[storage].Nanoseconds())/float64(n), storage+"-ns/renewal")
		b.ReportMetric(float64(relationSize(b, s, table))/float64(n), storage+"-bytes/renewal")
	}
	b.ReportMetric(float64(count(b, s, `SELECT count(*) FROM runs_extended WHERE pg_column_compression(data) IS NOT NULL`)), "pglz-compressed-runs")
}
