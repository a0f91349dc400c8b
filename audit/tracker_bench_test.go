package audit_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// BenchmarkTrackerMemory reports the heap the tracker keeps per lock: locks
// held and renewed, each with a few past tenures and a protected resource,
// as a busy source leaves them.
func BenchmarkTrackerMemory(b *testing.B) {
	const locks = 100_000
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tr := audit.NewTracker(audit.TrackerConfig{})
		obs := make([]audit.Observation, 0, 1000)
		for round := range 4 { // three handovers, then the current holder
			for start := 0; start < locks; start += cap(obs) {
				obs = obs[:0]
				for i := start; i < start+cap(obs); i++ {
					obs = append(obs, audit.Observation{
						Lock: audit.LockKey{Source: "redis-jobs", Name: fmt.Sprintf("jobs/lock-%06d", i)}, Kind: audit.EventGrant,
						At: at(time.Duration(round) * time.Minute), Holder: fmt.Sprintf("worker-%03d-%d", i%500, round),
						Token: audit.Int64(int64(round + 1)), LeaseDuration: 10 * time.Second,
					})
				}
				tr.Observe(audit.Input{Source: "redis-jobs", Kind: audit.KindRedis, Observations: obs, SequentialTokens: true})
			}
		}
		for i := range locks {
			tr.ReportWrite(audit.WriteReport{Source: "redis-jobs", Lock: fmt.Sprintf("jobs/lock-%06d", i), Resource: "orders-db",
				Token: audit.Int64(4), Outcome: audit.WriteAccepted, At: at(4 * time.Minute)})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/locks, "heap-bytes/lock")
		runtime.KeepAlive(tr)
	}
}
