package alert

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// BenchmarkEvaluateManyLost evaluates with 10,000 LeaseLost alerts firing,
// as after a collector's blind window on a busy source: every evaluation
// checks, orders and hands out each of them.
func BenchmarkEvaluateManyLost(b *testing.B) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	e := New(Config{})
	var findings []audit.Finding
	for i := range 10_000 {
		findings = append(findings, audit.Finding{Kind: audit.FindingLeaseExpired, At: t0,
			Lock: audit.LockKey{Source: "cache", Name: fmt.Sprintf("lock:%05d", i)}, Holders: []string{"holder"}})
	}
	e.Evaluate(t0, Input{Findings: findings})
	for b.Loop() {
		if out := e.Evaluate(t0.Add(time.Second), Input{}); len(out) != 10_000 {
			b.Fatalf("%d alerts, want 10,000", len(out))
		}
	}
}

// BenchmarkEvaluateManyNear evaluates with 10,000 held leases near expiry and
// unchanged since the previous evaluation, as when the collector or recorder
// falls behind a busy source and every renewal arrives late.
func BenchmarkEvaluateManyNear(b *testing.B) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	e := New(Config{})
	locks := make([]audit.Lock, 10_000)
	for i := range locks {
		locks[i] = audit.Lock{Source: "cache", Name: fmt.Sprintf("lock:%05d", i), Class: audit.ClassLock, State: audit.StateHeld,
			Holder: "holder", RenewedAt: t0, ExpiresAt: t0.Add(2 * time.Second), LeaseDuration: 2 * time.Second}
	}
	e.Evaluate(t0.Add(1600*time.Millisecond), Input{Locks: locks})
	for b.Loop() {
		if out := e.Evaluate(t0.Add(1700*time.Millisecond), Input{Locks: locks}); len(out) != 10_000 {
			b.Fatalf("%d alerts, want 10,000", len(out))
		}
	}
}
