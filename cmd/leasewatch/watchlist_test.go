package main

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
)

func heldLock(name string, class audit.Class, renewed time.Time, lease time.Duration) audit.Lock {
	return audit.Lock{Source: "s", Name: name, Class: class, State: audit.StateHeld, Holder: "h",
		RenewedAt: renewed, ExpiresAt: renewed.Add(lease), LeaseDuration: lease}
}

// The watch list hands over exactly the held leases within the widest
// margin of their end, follows renewals and ends, and keeps one schedule
// entry per lock however often they renew.
func TestWatchListDue(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cfg := alert.Config{Defaults: alert.Thresholds{RenewMarginRatio: 0.25},
		Rules: []alert.Rule{{Lock: "slow-*", Thresholds: alert.Thresholds{RenewMarginRatio: 0.5}}}}
	w := newWatchList(cfg)
	locks := make(map[audit.LockKey]audit.Lock)
	put := func(l audit.Lock) {
		locks[l.Key()] = l
		w.update(l)
	}
	due := func(at time.Duration) []string {
		var names []string
		for _, k := range w.due(t0.Add(at), locks) {
			names = append(names, k.Name)
		}
		slices.Sort(names)
		return names
	}
	for i := range 1000 {
		put(heldLock(fmt.Sprintf("lock-%03d", i), audit.ClassLock, t0, 10*time.Second))
	}
	put(heldLock("node-1", audit.ClassHeartbeat, t0, 10*time.Second)) // left out: heartbeats
	// With the widest margin (0.5) left: due from 5 s, for the evaluator
	// to apply each lock's own.
	if got := due(4 * time.Second); len(got) != 0 {
		t.Fatalf("due at 4s = %v, want none", got)
	}
	for i := range 1000 {
		if i != 7 {
			put(heldLock(fmt.Sprintf("lock-%03d", i), audit.ClassLock, t0.Add(4*time.Second), 10*time.Second))
		}
	}
	if got := due(5 * time.Second); !slices.Equal(got, []string{"lock-007"}) {
		t.Fatalf("due at 5s = %v, want only lock-007, which did not renew", got)
	}
	// Renewed: no longer due. Released: gone.
	put(heldLock("lock-007", audit.ClassLock, t0.Add(5*time.Second), 10*time.Second))
	free := locks[audit.LockKey{Source: "s", Name: "lock-008"}]
	free.State = audit.StateFree
	put(free)
	if got := due(6 * time.Second); len(got) != 0 {
		t.Fatalf("due at 6s = %v, want none", got)
	}
	if got := due(9 * time.Second); len(got) != 998 || slices.Contains(got, "lock-008") {
		t.Fatalf("due at 9s = %d locks, want the 998 held renewed at 4s", len(got))
	}
	// Many renewals of one lock: one entry each.
	for i := range 100 {
		put(heldLock("lock-000", audit.ClassLock, t0.Add(9*time.Second+time.Duration(i)*time.Millisecond), 10*time.Second))
	}
	if n := len(w.queue); n > len(locks) {
		t.Errorf("schedule holds %d entries for %d locks", n, len(locks))
	}
}

// BenchmarkAlertingEvaluate evaluates 100,000 held locks, one in a thousand
// near expiry, through the watch list; the baseline copies every lock out of
// the map and passes the evaluator all of them, as before the watch list.
func BenchmarkAlertingEvaluate(b *testing.B) {
	const n = 100_000
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cfg := alert.Config{Defaults: alert.Thresholds{RenewMarginRatio: 0.25}}
	a := newAlerting(cfg, func() []audit.Source { return nil }, nil, time.Minute)
	all := make([]audit.Lock, 0, n)
	for i := range n {
		renewed := t0
		if i%1000 == 0 {
			renewed = t0.Add(-8 * time.Second) // 2 s of 10 left at t0
		}
		l := heldLock(fmt.Sprintf("lock-%06d", i), audit.ClassLock, renewed, 10*time.Second)
		a.locks[l.Key()] = l
		a.watch.update(l)
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
