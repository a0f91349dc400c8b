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
	reportHeapPerLock(b, locks, func(tr *audit.Tracker) {
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
				tr.Step(audit.Input{Source: "redis-jobs", Kind: audit.KindRedis, Observations: obs, SequentialTokens: true})
			}
		}
		for i := range locks {
			tr.ReportWrite(audit.WriteReport{Source: "redis-jobs", Lock: fmt.Sprintf("jobs/lock-%06d", i), Resource: "orders-db",
				Token: audit.Int64(4), Outcome: audit.WriteAccepted, At: at(4 * time.Minute)})
		}
	})
}

// BenchmarkTrackerMemoryHeartbeats reports the heap the tracker keeps per
// Kubernetes node Lease, the bulk of a large cluster's locks: observed at
// start, then renewed, one tenure each and no resource.
func BenchmarkTrackerMemoryHeartbeats(b *testing.B) {
	const leases = 100_000
	reportHeapPerLock(b, leases, func(tr *audit.Tracker) {
		obs := make([]audit.Observation, 0, 1000)
		for round := range 2 { // the snapshot, then a renewal
			kind := []audit.EventKind{audit.EventObserved, audit.EventRenew}[round]
			for start := 0; start < leases; start += cap(obs) {
				obs = obs[:0]
				for i := start; i < start+cap(obs); i++ {
					node := fmt.Sprintf("node-%06d", i)
					obs = append(obs, audit.Observation{
						Lock: audit.LockKey{Source: "k8s", Name: "kube-node-lease/" + node}, Kind: kind, Class: audit.ClassHeartbeat,
						At: at(time.Duration(round) * 10 * time.Second), Holder: node, Position: fmt.Sprint(1000 + i), LeaseDuration: 40 * time.Second,
					})
				}
				tr.Step(audit.Input{Source: "k8s", Kind: audit.KindKubernetes, Observations: obs, ExpireByClock: true, SequentialTokens: true, HolderClock: true})
			}
		}
	})
}

// reportHeapPerLock reports the heap a new tracker keeps after fill, per
// lock of locks.
func reportHeapPerLock(b *testing.B, locks int, fill func(*audit.Tracker)) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tr := audit.NewTracker(audit.TrackerConfig{})
		fill(tr)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(locks), "heap-bytes/lock")
		runtime.KeepAlive(tr)
	}
}

// BenchmarkTrackerTick measures a Tick (four a second in a running
// leasewatch) over 100,000 held locks that expire by the clock, their leases
// a minute long: Scan is a Tick that looks at every lock, as each did before
// the tracker kept the earliest expiry; NothingDue is a Tick before it.
func BenchmarkTrackerTick(b *testing.B) {
	const locks = 100_000
	tr := audit.NewTracker(audit.TrackerConfig{})
	obs := make([]audit.Observation, 0, locks)
	for i := range locks {
		obs = append(obs, audit.Observation{
			Lock: audit.LockKey{Source: "redis-jobs", Name: fmt.Sprintf("jobs/lock-%06d", i)}, Kind: audit.EventGrant,
			At: at(0), Holder: fmt.Sprintf("worker-%03d", i%500), Token: audit.Int64(1), LeaseDuration: time.Minute,
		})
	}
	tr.Step(audit.Input{Source: "redis-jobs", Kind: audit.KindRedis, Observations: obs, ExpireByClock: true, Live: true, At: at(time.Second)})
	states := make([]audit.TrackState, 0, locks)
	for _, ob := range obs {
		st, _ := tr.State(ob.Lock)
		states = append(states, st)
	}
	b.Run("Scan", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			tr.Restore(states) // forgets the earliest expiry
			b.StartTimer()
			if n := len(tr.Tick(at(time.Second)).Events); n != 0 {
				b.Fatalf("%d events, want none", n)
			}
		}
	})
	b.Run("NothingDue", func(b *testing.B) {
		tr.Tick(at(time.Second))
		for b.Loop() {
			if n := len(tr.Tick(at(time.Second)).Events); n != 0 {
				b.Fatalf("%d events, want none", n)
			}
		}
	})
}

// BenchmarkTrackerReportWrite measures the tracker's part of a write
// report, on a lock whose other resources number 0 or 1,000: judging it
// and making its batch, which the recorder then writes. Each report raises
// its resource's highest token, so the resource's state changes every time.
func BenchmarkTrackerReportWrite(b *testing.B) {
	for _, others := range []int{0, 1000} {
		b.Run(fmt.Sprintf("Resources=%d", others), func(b *testing.B) {
			tr := audit.NewTracker(audit.TrackerConfig{})
			lock := audit.LockKey{Source: "src", Name: "orders"}
			tr.Step(audit.Input{Source: "src", Kind: audit.KindEtcd, Observations: []audit.Observation{{
				Lock: lock, Kind: audit.EventGrant, At: at(0), Holder: "a", Token: audit.Int64(1), LeaseDuration: time.Hour,
			}}})
			write := func(resource string, token int64) audit.WriteReport {
				return audit.WriteReport{Source: "src", Lock: lock.Name, Resource: resource, Holder: "a",
					Token: audit.Int64(token), Outcome: audit.WriteAccepted, At: at(time.Second)}
			}
			for i := range others {
				tr.ReportWrite(write(fmt.Sprintf("shard-%04d", i), 1))
			}
			token := int64(1)
			for b.Loop() {
				token++
				tr.ReportWrite(write("ledger", token))
			}
		})
	}
}
