package alert

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// lookup is locks as WatchList.Due asks for them.
func lookup(locks map[audit.LockKey]audit.Lock) func(audit.LockKey) (audit.Lock, bool) {
	return func(k audit.LockKey) (audit.Lock, bool) { l, ok := locks[k]; return l, ok }
}

func heldLock(name string, class audit.Class, renewed time.Time, lease time.Duration) audit.Lock {
	return audit.Lock{Source: "s", Name: name, Class: class, State: audit.StateHeld, Holder: "h",
		RenewedAt: renewed, ExpiresAt: renewed.Add(lease), LeaseDuration: lease}
}

// The watch list hands over exactly the held leases within the widest
// margin of their end, follows renewals and ends, and keeps one schedule
// entry per lock however often they renew.
func TestWatchList(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cfg := Config{Defaults: Thresholds{RenewMarginRatio: 0.25},
		Rules: []Rule{{Selector: audit.Selector{Lock: "slow-*"}, Thresholds: Thresholds{RenewMarginRatio: 0.5}}}}
	w := NewWatchList(cfg)
	locks := make(map[audit.LockKey]audit.Lock)
	put := func(l audit.Lock) {
		locks[l.Key()] = l
		w.Update(l)
	}
	due := func(at time.Duration) []string {
		var names []string
		for _, k := range w.Due(t0.Add(at), nil, lookup(locks)) {
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

// A lease due by the clock but not by what its collector has delivered waits
// in the watch list until the collector catches up.
func TestWatchListWaitsForTheCollector(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	w := NewWatchList(Config{Defaults: Thresholds{RenewMarginRatio: 0.25}})
	l := heldLock("lock-1", audit.ClassLock, t0, 10*time.Second)
	locks := map[audit.LockKey]audit.Lock{l.Key(): l}
	w.Update(l)
	if got := w.Due(t0.Add(9*time.Second), map[string]time.Time{"s": t0.Add(5 * time.Second)}, lookup(locks)); len(got) != 0 {
		t.Fatalf("due with the collector live to 5s = %v, want none", got)
	}
	if got := w.Due(t0.Add(9*time.Second), map[string]time.Time{"s": t0.Add(8 * time.Second)}, lookup(locks)); len(got) != 1 {
		t.Fatalf("due with the collector live to 8s = %v, want lock-1", got)
	}
}
