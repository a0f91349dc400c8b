package main

import (
	"fmt"
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
		a.locks[l.Key()] = l
		a.watch.Update(l)
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
			for _, l := range a.locks {
				all = append(all, l)
			}
			eval.Evaluate(t0, alert.Input{Locks: all})
		}
	})
}
