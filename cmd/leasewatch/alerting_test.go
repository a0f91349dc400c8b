package main

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// alertingRig is alerting following a real recorder over a real store, as
// leasewatch serve wires them, with the recorder's clock set by the test.
type alertingRig struct {
	store *sqlite.Store
	rec   *audit.Recorder
	a     *alerting

	mu  sync.Mutex
	now time.Time
}

// startAlerting starts a recorder over store and alerting following it, and
// closes the recorder when the test ends. The recorder syncs renewals to the
// rows only hourly, so the rows lag behind the tracker.
func startAlerting(t *testing.T, store *sqlite.Store, now time.Time, kinds map[string]audit.SourceKind, notify func([]alert.Alert)) *alertingRig {
	t.Helper()
	ctx := context.Background()
	r := &alertingRig{store: store, now: now}
	r.a = newAlerting(alert.Config{Defaults: alert.Thresholds{RenewMarginRatio: 0.25, LostHold: time.Minute, FencingHold: time.Minute, BlindAfter: time.Minute}},
		kinds, func() []audit.Source { return nil }, notify, time.Minute)
	r.rec = audit.NewRecorder(store, audit.TrackerConfig{RenewMarginRatio: 0.25, SourceKinds: kinds}, nil,
		audit.WithCommitHook(r.a.observe), audit.WithClock(r.clock), audit.WithSyncInterval(time.Hour))
	if err := r.rec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.rec.Close)
	if err := r.a.follow(ctx, r.rec.Peek, r.rec.Fresh(store)); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *alertingRig) clock() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now
}

func (r *alertingRig) set(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = now
}

// firing returns the names of the firing alerts.
func (r *alertingRig) firing() []string {
	firing, _ := r.a.alerts()
	var out []string
	for _, al := range firing {
		out = append(out, al.Name())
	}
	return out
}

// observe records in through the recorder, at in's time.
func (r *alertingRig) observe(t *testing.T, in audit.Input) {
	t.Helper()
	r.set(in.At)
	if err := r.rec.Observe(context.Background(), in); err != nil {
		t.Fatal(err)
	}
}

// TestAlertingFollowsTheTracker: alerting starts from the lock rows a
// previous run left, then looks locks up in the tracker, so a renewal that
// the rows get only at the next sync clears a near-expiry alert at once;
// findings fire at the next evaluation, and every evaluation's result reaches
// the notifier.
func TestAlertingFollowsTheTracker(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lw.db")
	store, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	orders := audit.LockKey{Source: "prod-etcd", Name: "/locks/orders"}
	kinds := map[string]audit.SourceKind{orders.Source: audit.KindEtcd}
	grant := audit.Input{Source: orders.Source, Kind: audit.KindEtcd, At: t0, Observations: []audit.Observation{{Lock: orders,
		Kind: audit.EventGrant, At: t0, Holder: "worker-1", Token: audit.Int64(7), LeaseDuration: 10 * time.Second}}}
	first := startAlerting(t, store, t0, kinds, nil)
	first.observe(t, grant)
	first.rec.Close()

	var notified [][]alert.Alert
	r := startAlerting(t, store, t0, kinds, func(as []alert.Alert) { notified = append(notified, as) })
	r.a.evaluate(t0.Add(5 * time.Second))
	if got := r.firing(); len(got) != 0 {
		t.Fatalf("firing with half the lease left: %v", got)
	}
	r.a.evaluate(t0.Add(8 * time.Second)) // 20% left
	if got := r.firing(); len(got) != 1 || got[0] != alert.LeaseNearExpiry {
		t.Fatalf("firing with 20%% of the lease left = %v, want LeaseNearExpiry", got)
	}
	// The renewal reaches alerting with its commit, before any sync.
	renewedAt := t0.Add(8500 * time.Millisecond)
	r.observe(t, audit.Input{Source: orders.Source, Kind: audit.KindEtcd, At: renewedAt, Observations: []audit.Observation{{Lock: orders,
		Kind: audit.EventRenew, At: renewedAt, Holder: "worker-1", Token: audit.Int64(7), LeaseDuration: 10 * time.Second}}})
	if l, err := store.LockByKey(ctx, orders); err != nil || !l.RenewedAt.Equal(t0) {
		t.Fatalf("the lock row was renewed at %v (%v); the test needs it unsynced, renewed at %v", l.RenewedAt, err, t0)
	}
	r.a.evaluate(t0.Add(9 * time.Second))
	if got := r.firing(); len(got) != 0 {
		t.Fatalf("firing after the renewal = %v, want none", got)
	}
	if _, resolved := r.a.alerts(); len(resolved) != 1 || resolved[0].Name() != alert.LeaseNearExpiry || !resolved[0].EndsAt.Equal(t0.Add(9*time.Second)) {
		t.Fatalf("resolved = %+v, want the near-expiry alert, ended at the evaluation", resolved)
	}

	// The renewal scheduled the lease again: near expiry once more with 15%
	// of its new lease left.
	r.a.evaluate(t0.Add(17 * time.Second))
	if got := r.firing(); len(got) != 1 || got[0] != alert.LeaseNearExpiry {
		t.Fatalf("firing near the renewed lease's end = %v, want LeaseNearExpiry", got)
	}

	// A critical finding committed between evaluations fires at the next:
	// a resource accepts an older token than the one granted.
	r.set(t0.Add(17500 * time.Millisecond))
	if err := r.rec.ReportWrites(ctx, []audit.WriteReport{{Source: orders.Source, Lock: orders.Name, Resource: "cache",
		Token: audit.Int64(6), Outcome: audit.WriteAccepted, Holder: "worker-0", At: t0.Add(17500 * time.Millisecond)}}); err != nil {
		t.Fatal(err)
	}
	r.a.evaluate(t0.Add(18 * time.Second))
	if got := r.firing(); len(got) != 2 || !slices.Contains(got, alert.FencingViolation) || !slices.Contains(got, alert.LeaseNearExpiry) {
		t.Fatalf("firing after an unfenced write = %v, want FencingViolation and LeaseNearExpiry", got)
	}
	if len(notified) != 4 {
		t.Errorf("notified %d times, want once per evaluation with alerts (4)", len(notified))
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
	kinds := map[string]audit.SourceKind{key.Source: audit.KindRedis}
	live := func(r *alertingRig, at time.Time, obs ...audit.Observation) {
		r.observe(t, audit.Input{Source: key.Source, Kind: audit.KindRedis, At: at, Observations: obs, ExpireByClock: true, Live: true})
	}
	first := startAlerting(t, store, t0, kinds, nil)
	live(first, t0, audit.Observation{Lock: key, Kind: audit.EventGrant, At: t0, Holder: "worker-1", LeaseDuration: 10 * time.Second})
	first.rec.Close()

	r := startAlerting(t, store, t0, kinds, nil)
	r.set(t0.Add(30 * time.Second))
	r.a.evaluate(t0.Add(30 * time.Second))
	if got := r.firing(); len(got) != 0 {
		t.Fatalf("%v before the collector's first word, want none", got)
	}
	live(r, t0.Add(5*time.Second))
	r.a.evaluate(t0.Add(9 * time.Second))
	if got := r.firing(); len(got) != 0 {
		t.Fatalf("%v with the collector live to 5s of a 10s lease, want none", got)
	}
	live(r, t0.Add(8*time.Second))
	r.a.evaluate(t0.Add(9 * time.Second))
	if got := r.firing(); len(got) != 1 || got[0] != alert.LeaseNearExpiry {
		t.Fatalf("%v with the collector live to 8s of a 10s lease, want LeaseNearExpiry", got)
	}
}
