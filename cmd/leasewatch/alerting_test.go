package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// TestAlertingFollowsTheTracker: alerting starts from the lock rows, then
// takes each commit's locks and renewals, so a renewal that the rows get only
// at the next sync clears a near-expiry alert at once; findings fire at the
// next evaluation, and every evaluation's result reaches the notifier.
func TestAlertingFollowsTheTracker(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	orders := audit.LockKey{Source: "prod-etcd", Name: "/locks/orders"}
	held := audit.Lock{Source: orders.Source, Name: orders.Name, Kind: audit.KindEtcd, Class: audit.ClassLock, State: audit.StateHeld,
		Holder: "worker-1", Token: audit.Int64(7), AcquiredAt: t0, RenewedAt: t0, ExpiresAt: t0.Add(10 * time.Second),
		LeaseDuration: 10 * time.Second, ChangedAt: t0}
	if err := store.Apply(ctx, audit.Batch{Locks: []audit.TrackState{{Lock: held}}}); err != nil {
		t.Fatal(err)
	}

	var notified [][]alert.Alert
	a := newAlerting(alert.Config{Defaults: alert.Thresholds{RenewMarginRatio: 0.25, LostHold: time.Minute, FencingHold: time.Minute, BlindAfter: time.Minute}},
		map[string]audit.SourceKind{orders.Source: audit.KindEtcd}, func() []audit.Source { return nil }, func(as []alert.Alert) { notified = append(notified, as) }, time.Minute)
	if err := a.load(ctx, store); err != nil {
		t.Fatal(err)
	}
	names := func() []string {
		firing, _ := a.alerts()
		var out []string
		for _, al := range firing {
			out = append(out, al.Name())
		}
		return out
	}

	a.evaluate(t0.Add(5 * time.Second))
	if got := names(); len(got) != 0 {
		t.Fatalf("firing with half the lease left: %v", got)
	}
	a.evaluate(t0.Add(8 * time.Second)) // 20% left
	if got := names(); len(got) != 1 || got[0] != alert.LeaseNearExpiry {
		t.Fatalf("firing with 20%% of the lease left = %v, want LeaseNearExpiry", got)
	}
	// The renewal reaches alerting with its commit, before any sync.
	a.observe(audit.Commit{At: t0.Add(8500 * time.Millisecond), Batch: &audit.Batch{}, Renewals: []audit.Renewal{{
		Lock: orders, Seq: 1, Renewals: 1, RenewedAt: t0.Add(8500 * time.Millisecond), ExpiresAt: t0.Add(18500 * time.Millisecond), LeaseDuration: 10 * time.Second}}})
	a.evaluate(t0.Add(9 * time.Second))
	if got := names(); len(got) != 0 {
		t.Fatalf("firing after the renewal = %v, want none", got)
	}
	if _, resolved := a.alerts(); len(resolved) != 1 || resolved[0].Name() != alert.LeaseNearExpiry || !resolved[0].EndsAt.Equal(t0.Add(9*time.Second)) {
		t.Fatalf("resolved = %+v, want the near-expiry alert, ended at the evaluation", resolved)
	}

	// A critical finding committed between evaluations fires at the next.
	a.observe(audit.Commit{At: t0.Add(10 * time.Second), Batch: &audit.Batch{Findings: []audit.Finding{{Lock: orders, Kind: audit.FindingUnfencedWrite,
		At: t0.Add(10 * time.Second), Holders: []string{"worker-1"}, Tokens: []int64{6, 7}, Summary: "cache accepted token 6 after 7"}}}})
	a.evaluate(t0.Add(11 * time.Second))
	if got := names(); len(got) != 1 || got[0] != alert.FencingViolation {
		t.Fatalf("firing after an unfenced write = %v, want FencingViolation", got)
	}
	if len(notified) != 3 {
		t.Errorf("notified %d times, want once per evaluation with alerts (3)", len(notified))
	}
}

// TestAlertingJudgesLeasesAsOfTheirCollector checks that the leases of a
// source whose collector vouches for being live (Redis, Kubernetes) are
// judged as of the time it last did: not at all before its first word after
// a start (the stored rows are as old as the last run), and never past what
// it has delivered, so a collector that falls behind does not make every
// lease look late.
func TestAlertingJudgesLeasesAsOfTheirCollector(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	key := audit.LockKey{Source: "cache", Name: "lock:orders"}
	held := audit.Lock{Source: key.Source, Name: key.Name, Kind: audit.KindRedis, Class: audit.ClassLock, State: audit.StateHeld,
		Holder: "worker-1", AcquiredAt: t0, RenewedAt: t0, ExpiresAt: t0.Add(10 * time.Second), LeaseDuration: 10 * time.Second, ChangedAt: t0}
	if err := store.Apply(ctx, audit.Batch{Locks: []audit.TrackState{{Lock: held}}}); err != nil {
		t.Fatal(err)
	}
	a := newAlerting(alert.Config{Defaults: alert.Thresholds{RenewMarginRatio: 0.25, LostHold: time.Minute, FencingHold: time.Minute, BlindAfter: time.Minute}},
		map[string]audit.SourceKind{key.Source: audit.KindRedis}, func() []audit.Source { return nil }, nil, time.Minute)
	if err := a.load(ctx, store); err != nil {
		t.Fatal(err)
	}
	firing := func() int { f, _ := a.alerts(); return len(f) }
	live := func(at time.Time) {
		a.observe(audit.Commit{At: at, Batch: &audit.Batch{}, Inputs: []*audit.Input{{Source: key.Source, Kind: audit.KindRedis, At: at, Live: true}}})
	}

	a.evaluate(t0.Add(30 * time.Second))
	if n := firing(); n != 0 {
		t.Fatalf("%d alerts before the collector's first word, want none", n)
	}
	live(t0.Add(5 * time.Second))
	a.evaluate(t0.Add(9 * time.Second))
	if n := firing(); n != 0 {
		t.Fatalf("%d alerts with the collector live to 5s of a 10s lease, want none", n)
	}
	live(t0.Add(8 * time.Second))
	a.evaluate(t0.Add(9 * time.Second))
	if n := firing(); n != 1 {
		t.Fatalf("%d alerts with the collector live to 8s of a 10s lease, want LeaseNearExpiry", n)
	}
}
