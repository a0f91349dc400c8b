package sqlite

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// leaseWorkload is leases renewed for hours as their holders renew them:
// every Every plus a uniform jitter of up to Jitter of it, the backend's
// renewal time to the microsecond, observed 1 to 5 ms later.
type leaseWorkload struct {
	Name   string
	Leases int
	Hours  int
	Every  time.Duration
	Jitter float64
	Lease  time.Duration
}

// renewalWorkloads are a Kubernetes node lease (the kubelet renews its
// 40 s lease every 10 s, jittered by up to 4 %) and a client-go leader
// election (a 15 s lease renewed every 2 s retry period, plus the
// request's time, up to 20 ms).
var renewalWorkloads = []leaseWorkload{
	{Name: "node", Leases: 40, Hours: 12, Every: 10 * time.Second, Jitter: 0.04, Lease: 40 * time.Second},
	{Name: "leader", Leases: 4, Hours: 12, Every: 2 * time.Second, Jitter: 0.01, Lease: 15 * time.Second},
}

// workloadStart is the first hour of the workload's renewals.
var workloadStart = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// run stores the workload's renewals in s in time order, a batch per 5
// minutes of the simulated clock, each with its margin and renewal time
// in its detail as the tracker records them, and calls hour (if set) at
// each hour of the simulated clock. It returns how many it stored.
func (w leaseWorkload) run(tb testing.TB, s *Store, hour func(time.Time)) int {
	tb.Helper()
	rng := rand.New(rand.NewPCG(1, uint64(len(w.Name))))
	tenures := make([]audit.Tenure, w.Leases)
	renewed := make([]time.Time, w.Leases)
	for i := range tenures {
		key := audit.LockKey{Source: "cluster-a", Name: fmt.Sprintf("kube-node-lease/%s-%03d", w.Name, i)}
		tenures[i] = audit.Tenure{Lock: key, Seq: 1, Holder: key.Name, Token: audit.Int64(int64(i)), GrantedAt: workloadStart,
			LeaseDuration: w.Lease}
		renewed[i] = workloadStart.Add(time.Duration(rng.Int64N(int64(w.Every))))
	}
	applyTB(tb, s, audit.Batch{Tenures: tenures})
	n := 0
	const commit = 5 * time.Minute // a batch of the simulated clock
	for clock := workloadStart; clock.Before(workloadStart.Add(time.Duration(w.Hours) * time.Hour)); clock = clock.Add(commit) {
		var b audit.Batch
		for i, ten := range tenures {
			for renewed[i].Before(clock.Add(commit)) {
				next := renewed[i].Add(w.Every + time.Duration(rng.Float64()*w.Jitter*float64(w.Every))).Truncate(time.Microsecond)
				margin := math.Round(float64(renewed[i].Add(w.Lease).Sub(next))/float64(w.Lease)*1000) / 1000
				observed := next.Add(time.Millisecond + time.Duration(rng.Int64N(int64(4*time.Millisecond))))
				b.Events = append(b.Events, audit.Event{Lock: ten.Lock, Kind: audit.EventRenew, At: observed, Holder: ten.Holder,
					Token: ten.Token, TTL: w.Lease, Seq: 1,
					Detail: map[string]any{"margin_ratio": margin, "renewed_at": next.Format(time.RFC3339Nano)}})
				renewed[i] = next
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

// BenchmarkRenewalRuns measures the bytes a renewal takes on disk,
// indexes included, sealed into runs and, in the same run, left as rows as
// the previous release kept them: "B/renewal" is the database's pages in
// use that the renewals added (Size), sealed; "runs-B/renewal" the
// renewal_runs table and its index alone; "rows-B/renewal" the same
// workload as rows. The runs' store is sealed every hour, as the
// retainer seals it, and once more at the end to close the last window.
func BenchmarkRenewalRuns(b *testing.B) {
	ctx := context.Background()
	for _, w := range renewalWorkloads {
		b.Run(w.Name, func(b *testing.B) {
			for b.Loop() {
				dir := b.TempDir()
				var rowsPer, sealedPer, runsPer, sealNs float64
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
					} else {
						rowsPer = per
					}
					s.Close()
				}
				b.ReportMetric(sealedPer, "B/renewal")
				b.ReportMetric(runsPer, "runs-B/renewal")
				b.ReportMetric(rowsPer, "rows-B/renewal")
				b.ReportMetric(sealNs, "seal-ns/renewal")
			}
		})
	}
}
