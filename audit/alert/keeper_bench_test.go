package alert

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// trackerPeek returns a Peek over a tracker restored to states, as
// audit.Recorder.Peek reads the recorder's, and the states as a commit's
// changed locks.
func trackerPeek(states []audit.TrackState) (Peek, audit.Commit) {
	tr := audit.NewTracker(audit.TrackerConfig{})
	tr.Restore(states)
	return func(fn func(lock func(audit.LockKey) (audit.Lock, bool))) { fn(tr.Lock) }, audit.Commit{Batch: &audit.Batch{Locks: states}}
}

// BenchmarkAlertingEvaluate evaluates 100,000 held locks, one in a thousand
// near expiry, through the watch list; the baseline looks every lock up and
// passes the evaluator all of them, as before the watch list.
func BenchmarkAlertingEvaluate(b *testing.B) {
	const n = 100_000
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cfg := Config{Defaults: Thresholds{RenewMarginRatio: 0.25}}
	a := NewKeeper(cfg, KeeperConfig{ResendEvery: time.Minute})
	states := make([]audit.TrackState, 0, n)
	for i := range n {
		renewed := t0
		if i%1000 == 0 {
			renewed = t0.Add(-8 * time.Second) // 2 s of 10 left at t0
		}
		states = append(states, audit.TrackState{Lock: audit.Lock{Source: "s", Name: fmt.Sprintf("lock-%06d", i), Class: audit.ClassLock,
			State: audit.StateHeld, Holder: "h", RenewedAt: renewed, ExpiresAt: renewed.Add(10 * time.Second), LeaseDuration: 10 * time.Second}})
	}
	peek, commit := trackerPeek(states)
	a.peek = peek
	a.Committed(commit)
	b.Run("WatchList", func(b *testing.B) {
		for b.Loop() {
			a.evaluate(t0)
		}
	})
	b.Run("EveryLock", func(b *testing.B) {
		eval := New(cfg)
		all := make([]audit.Lock, 0, n)
		for b.Loop() {
			all = all[:0]
			peek(func(lock func(audit.LockKey) (audit.Lock, bool)) {
				for _, st := range states {
					l, _ := lock(st.Lock.Key())
					all = append(all, l)
				}
			})
			eval.Evaluate(t0, Input{Locks: all})
		}
	})
}

// BenchmarkAlertingMemory reports the heap a Keeper keeps per held lock: its
// watch-list entry, as it looks the locks themselves up in the tracker.
func BenchmarkAlertingMemory(b *testing.B) {
	const n = 100_000
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	states := make([]audit.TrackState, n)
	for i := range states {
		states[i].Lock = audit.Lock{ID: int64(i + 1), Source: "s", Kind: audit.KindRedis, Name: fmt.Sprintf("lock-%06d", i), Class: audit.ClassLock,
			State: audit.StateHeld, Holder: fmt.Sprintf("worker-%03d", i%500), Token: audit.Int64(int64(i)), AcquiredAt: t0, RenewedAt: t0,
			ExpiresAt: t0.Add(10 * time.Second), LeaseDuration: 10 * time.Second, ChangedAt: t0}
	}
	peek, commit := trackerPeek(states)
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		a := NewKeeper(Config{Defaults: Thresholds{RenewMarginRatio: 0.25}}, KeeperConfig{ResendEvery: time.Minute})
		a.peek = peek
		a.Committed(commit)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/lock")
		runtime.KeepAlive(a)
	}
}
