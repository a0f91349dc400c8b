package sqlite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec/runcodectest"
)

// leaseWorkload is leases of one of runcodectest's workloads, renewed
// for hours.
type leaseWorkload struct {
	runcodectest.Workload
	Leases int
	Hours  int
}

// renewalWorkloads are each of runcodectest.Workloads (a Kubernetes node
// lease, a client-go leader election, a Redis lock, an etcd lease), about
// 20,000 to 170,000 renewals each.
var renewalWorkloads = func() []leaseWorkload {
	leases := map[string]int{"node": 40, "leader": 4, "redis": 20, "etcd": 10}
	var ws []leaseWorkload
	for _, w := range runcodectest.Workloads {
		ws = append(ws, leaseWorkload{Workload: w, Leases: leases[w.Name], Hours: 12})
	}
	return ws
}()

// workloadStart is the first hour of the workload's renewals.
var workloadStart = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// run stores the workload's renewals in s in time order, a batch per 5
// minutes of the simulated clock, each as the tracker records it, and
// calls hour (if set) at each hour of the simulated clock. It returns how
// many it stored.
func (w leaseWorkload) run(tb testing.TB, s *Store, hour func(time.Time)) int {
	tb.Helper()
	rng := rand.New(rand.NewPCG(1, uint64(len(w.Name))))
	tenures := make([]audit.Tenure, w.Leases)
	leases := make([]*runcodectest.Lease, w.Leases)
	next := make([]runcodectest.Renewal, w.Leases)
	for i := range tenures {
		key := audit.LockKey{Source: "cluster-a", Name: fmt.Sprintf("kube-node-lease/%s-%03d", w.Name, i)}
		tenures[i] = audit.Tenure{Lock: key, Seq: 1, Holder: key.Name, Token: audit.Int64(int64(i)), GrantedAt: workloadStart,
			LeaseDuration: w.TTL}
		leases[i] = w.Lease(rng, workloadStart)
		next[i] = leases[i].Next()
	}
	applyTB(tb, s, audit.Batch{Tenures: tenures})
	n := 0
	const commit = 5 * time.Minute // a batch of the simulated clock
	for clock := workloadStart; clock.Before(workloadStart.Add(time.Duration(w.Hours) * time.Hour)); clock = clock.Add(commit) {
		var b audit.Batch
		for i, ten := range tenures {
			for ; next[i].At.Before(clock.Add(commit)); next[i] = leases[i].Next() {
				r := next[i]
				b.Events = append(b.Events, audit.Event{Lock: ten.Lock, Kind: audit.EventRenew, At: r.At, Holder: ten.Holder,
					Token: ten.Token, TTL: r.TTL, Seq: 1, Detail: r.EventDetail()})
			}
		}
		b.Synced = true
		applyTB(tb, s, b)
		n += len(b.Events)
		if next := clock.Add(commit); next.Truncate(time.Hour).Equal(next) && hour != nil {
			hour(next)
		}
	}
	return n
}

// applyTB applies batch to s, failing tb on an error.
func applyTB(tb testing.TB, s *Store, batch audit.Batch) {
	tb.Helper()
	if err := s.Apply(context.Background(), batch); err != nil {
		tb.Fatalf("Apply: %v", err)
	}
}

// pagesOf returns the bytes of the pages of s's tables and indexes named.
func pagesOf(tb testing.TB, s *Store, names ...string) int64 {
	tb.Helper()
	var n int64
	for _, name := range names {
		var size int64
		if err := s.reader.QueryRow(`SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = ?`, name).Scan(&size); err != nil {
			tb.Fatal(err)
		}
		n += size
	}
	return n
}

// runsPacking returns how many runs s has, the mean size of a run's data
// and how many runs a leaf page of renewal_runs holds, on average.
func runsPacking(tb testing.TB, s *Store) (runs, runBytes, perPage float64) {
	tb.Helper()
	if err := s.reader.QueryRow(`SELECT count(*), coalesce(avg(length(data)), 0) FROM renewal_runs`).Scan(&runs, &runBytes); err != nil {
		tb.Fatal(err)
	}
	if err := s.reader.QueryRow(`SELECT coalesce(avg(ncell), 0) FROM dbstat WHERE name = 'renewal_runs' AND pagetype = 'leaf'`).Scan(&perPage); err != nil {
		tb.Fatal(err)
	}
	return runs, runBytes, perPage
}

// BenchmarkRenewalRuns measures the bytes a renewal takes on disk,
// indexes included, sealed into runs and, in the same run, left as rows as
// the previous release kept them: "B/renewal" is the database's pages in
// use that the renewals added (Size), sealed; "runs-B/renewal" the
// renewal_runs table and its index alone; "rows-B/renewal" the same
// workload as rows; "data-B/run" a run's data, on average, "runs/page"
// the runs a leaf page of renewal_runs holds and "renewals/run" the
// renewals a run holds. The runs' store
// is sealed every hour, as the retainer seals it, and once more at the end
// to close the last window.
func BenchmarkRenewalRuns(b *testing.B) {
	ctx := context.Background()
	for _, w := range renewalWorkloads {
		b.Run(w.Name, func(b *testing.B) {
			for b.Loop() {
				dir := b.TempDir()
				var rowsPer, sealedPer, runsPer, sealNs, runs, runBytes, perPage, perRun float64
				for _, sealed := range []bool{false, true} {
					s, err := Open(ctx, filepath.Join(dir, fmt.Sprint(sealed)+".db"))
					if err != nil {
						b.Fatal(err)
					}
					base, err := s.Size(ctx)
					if err != nil {
						b.Fatal(err)
					}
					var sealing time.Duration
					seal := func(hour time.Time) {
						start := time.Now()
						if err := audit.SealThrough(ctx, s, hour.Add(-time.Hour), func(audit.SealResult, time.Duration) error { return nil }); err != nil {
							b.Fatal(err)
						}
						sealing += time.Since(start)
					}
					if !sealed {
						seal = nil
					}
					n := w.run(b, s, seal)
					if sealed {
						end := workloadStart.Add(time.Duration(w.Hours+2) * time.Hour)
						applyTB(b, s, audit.Batch{Events: []audit.Event{{Lock: audit.LockKey{Source: "clock", Name: "tick"},
							Kind: audit.EventObserved, At: end}}, Synced: true})
						seal(end)
					}
					size, err := s.Size(ctx)
					if err != nil {
						b.Fatal(err)
					}
					per := float64(size-base) / float64(n)
					if sealed {
						sealedPer, runsPer = per, float64(pagesOf(b, s, "renewal_runs", "renewal_runs_lock_last"))/float64(n)
						sealNs = float64(sealing.Nanoseconds()) / float64(n)
						runs, runBytes, perPage = runsPacking(b, s)
						perRun = float64(n) / runs
					} else {
						rowsPer = per
					}
					s.Close()
				}
				b.ReportMetric(sealedPer, "B/renewal")
				b.ReportMetric(runsPer, "runs-B/renewal")
				b.ReportMetric(rowsPer, "rows-B/renewal")
				b.ReportMetric(sealNs, "seal-ns/renewal")
				b.ReportMetric(runBytes, "data-B/run")
				b.ReportMetric(perPage, "runs/page")
				b.ReportMetric(perRun, "renewals/run")
			}
		})
	}
}
