package main

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
)

// BenchmarkAlertingEvaluate evaluates 100,000 held locks, one in a thousand
// near expiry, through the watch list; the baseline copies every lock out of
// the map and passes the evaluator all of them, as before the watch list.
func BenchmarkAlertingEvaluate(b *testing.B) {
	const n = 100_000
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cfg := alert.Config{Defaults: alert.Thresholds{RenewMarginRatio: 0.25}}
	a := newAlerting(cfg, nil, func() []audit.Source { return nil }, nil, time.Minute)
	all := make([]audit.Lock, 0, n)
	for i := range n {
		renewed := t0
		if i%1000 == 0 {
			renewed = t0.Add(-8 * time.Second) // 2 s of 10 left at t0
		}
		l := audit.Lock{Source: "s", Name: fmt.Sprintf("lock-%06d", i), Class: audit.ClassLock, State: audit.StateHeld,
			Holder: "h", RenewedAt: renewed, ExpiresAt: renewed.Add(10 * time.Second), LeaseDuration: 10 * time.Second}
		a.keep(l)
		all = append(all, l)
	}
	b.Run("WatchList", func(b *testing.B) {
		for b.Loop() {
			a.evaluate(t0)
		}
	})
	b.Run("EveryLock", func(b *testing.B) {
		eval := alert.New(cfg)
		for b.Loop() {
			all = all[:0]
			for k := range a.locks {
				l, _ := a.lock(k)
				all = append(all, l)
			}
			eval.Evaluate(t0, alert.Input{Locks: all})
		}
	})
}

// BenchmarkAlertingMemory reports the heap alerting keeps per held lock (its
// copy of the lock and the lock's watch-list entry), beyond the strings it
// shares with the tracker.
func BenchmarkAlertingMemory(b *testing.B) {
	const n = 100_000
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	locks := make([]audit.Lock, n)
	for i := range locks {
		locks[i] = audit.Lock{ID: int64(i + 1), Source: "s", Kind: audit.KindRedis, Name: fmt.Sprintf("lock-%06d", i), Class: audit.ClassLock,
			State: audit.StateHeld, Holder: fmt.Sprintf("worker-%03d", i%500), Token: audit.Int64(int64(i)), AcquiredAt: t0, RenewedAt: t0,
			ExpiresAt: t0.Add(10 * time.Second), LeaseDuration: 10 * time.Second, ChangedAt: t0}
	}
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		a := newAlerting(alert.Config{Defaults: alert.Thresholds{RenewMarginRatio: 0.25}}, nil, func() []audit.Source { return nil }, nil, time.Minute)
		a.mu.Lock()
		for _, l := range locks {
			a.keep(l)
		}
		a.mu.Unlock()
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/lock")
		runtime.KeepAlive(a)
	}
}
