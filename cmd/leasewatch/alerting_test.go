package main

import (
	"context"
	"log/slog"
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
	return startAlertingWith(t, store, now, kinds, func() []audit.Source { return nil }, notify, false)
}

// startAlertingWith is startAlerting with the collectors' states from
// sources, and, if replicated, alerting for the sources it is granted only.
func startAlertingWith(t *testing.T, store *sqlite.Store, now time.Time, kinds map[string]audit.SourceKind, sources func() []audit.Source,
	notify func([]alert.Alert), replicated bool) *alertingRig {
	t.Helper()
	ctx := context.Background()
	r := &alertingRig{store: store, now: now}
	r.a = newAlerting(alert.Config{Defaults: alert.Thresholds{RenewMarginRatio: 0.25, LostHold: time.Minute, FencingHold: time.Minute, BlindAfter: time.Minute}},
		kinds, sources, notify, time.Minute)
	if replicated {
		r.a.ownSourcesOnly(slog.New(slog.DiscardHandler))
	}
	r.rec = audit.NewRecorder(store, audit.TrackerConfig{RenewMarginRatio: 0.25, SourceKinds: kinds}, nil,
		audit.WithSubscribers(r.a), audit.WithClock(r.clock), audit.WithSyncInterval(time.Hour))
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

// alertingStore opens a SQLite store for a test of alerting, closed at its
// end, and returns the time its story starts at.
func alertingStore(t *testing.T) (*sqlite.Store, time.Time) {
	t.Helper()
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "lw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
}

// TestAlertingJudgesLeasesAsOfTheirCollector checks that the leases of a
// source whose collector vouches for being live (Redis, Kubernetes) are
// judged as of the time it last did: not at all before its first word after
// a start (the stored rows are as old as the last run), and never past what
// it has delivered, so a collector that falls behind does not make every
// lease look late.
func TestAlertingJudgesLeasesAsOfTheirCollector(t *testing.T) {
	store, t0 := alertingStore(t)
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

// TestAlertingHandsSourcesOver is the alerting of two replicas of one store
// (ownSourcesOnly): a replica evaluates only the sources it owns, so its
// tracker's stale picture of the others raises nothing; the replica that
// gives a source up forgets its alerts without sending any resolved; the one
// that takes it over sends the same alerts (the same fingerprint and start),
// the findings' ones at once from the store, the locks' ones once its
// collector is up.
func TestAlertingHandsSourcesOver(t *testing.T) {
	store, t0 := alertingStore(t)
	orders := audit.LockKey{Source: "prod-etcd", Name: "/locks/orders"}
	billing := audit.LockKey{Source: orders.Source, Name: "/locks/billing"}
	kinds := map[string]audit.SourceKind{orders.Source: audit.KindEtcd}
	state := audit.SourceUp
	var stateMu sync.Mutex
	sources := func() []audit.Source {
		stateMu.Lock()
		defer stateMu.Unlock()
		return []audit.Source{{Name: orders.Source, Kind: audit.KindEtcd, State: state}}
	}
	type replica struct {
		*alertingRig
		sent []alert.Alert
	}
	start := func() *replica {
		r := &replica{}
		r.alertingRig = startAlertingWith(t, store, t0, kinds, sources, func(as []alert.Alert) { r.sent = append(r.sent, as...) }, true)
		return r
	}
	grant := func(k audit.LockKey, holder string, token int64, s int) audit.Observation {
		return audit.Observation{Lock: k, Kind: audit.EventGrant, At: t0.Add(time.Duration(s) * time.Second), Holder: holder,
			Token: audit.Int64(token), LeaseDuration: 10 * time.Second}
	}

	owner := start()
	owner.a.gain(orders.Source)
	owner.observe(t, audit.Input{Source: orders.Source, Kind: audit.KindEtcd, At: t0,
		Observations: []audit.Observation{grant(orders, "worker-1", 7, 0), grant(billing, "worker-2", 3, 0)}})
	// billing's lease expires while held: LeaseLost. orders is renewed
	// until 3s, so at 11s it is near expiry.
	renew := grant(orders, "worker-1", 7, 3)
	renew.Kind = audit.EventRenew
	expire := audit.Observation{Lock: billing, Kind: audit.EventExpire, At: t0.Add(10 * time.Second), Holder: "worker-2", Token: audit.Int64(3)}
	owner.observe(t, audit.Input{Source: orders.Source, Kind: audit.KindEtcd, At: t0.Add(10 * time.Second), Observations: []audit.Observation{renew, expire}})
	// The standby starts now: its tracker has orders as the store has it,
	// and, as it runs no collector of the source, it will never see it
	// renewed.
	standby := start()
	owner.a.evaluate(t0.Add(11 * time.Second))
	standby.a.evaluate(t0.Add(11 * time.Second))
	firing := map[string]alert.Alert{}
	for _, al := range owner.sent {
		firing[al.Name()] = al
	}
	if len(owner.sent) != 2 || firing[alert.LeaseNearExpiry].Labels == nil || firing[alert.LeaseLost].Labels == nil {
		t.Fatalf("the owner sent %v, want LeaseNearExpiry and LeaseLost", ids(owner.sent))
	}
	if len(standby.sent) != 0 {
		t.Fatalf("the standby, which does not own %s, sent %v", orders.Source, ids(standby.sent))
	}

	// A handover: the owner gives the source up (lose, then the recorder
	// forgets it), the standby is granted it.
	owner.a.lose(orders.Source)
	if err := owner.rec.DropFence(context.Background(), orders.Source); err != nil {
		t.Fatal(err)
	}
	owner.sent = nil
	owner.a.evaluate(t0.Add(12 * time.Second))
	if f, _ := owner.a.alerts(); len(owner.sent) != 0 || len(f) != 0 {
		t.Fatalf("the old owner sent %v and shows %v firing after giving the source up, want nothing", ids(owner.sent), ids(f))
	}

	stateMu.Lock()
	state = audit.SourceDown // its collector is starting
	stateMu.Unlock()
	standby.a.gain(orders.Source)
	standby.a.evaluate(t0.Add(12 * time.Second))
	if got := ids(standby.sent); !slices.Equal(got, []string{"LeaseLost"}) {
		t.Fatalf("the new owner, its collector not up yet, sent %v, want LeaseLost read back from the store", got)
	}
	stateMu.Lock()
	state = audit.SourceUp
	stateMu.Unlock()
	standby.a.evaluate(t0.Add(12500 * time.Millisecond))
	if got := ids(standby.sent); !slices.Equal(got, []string{"LeaseLost", "LeaseNearExpiry"}) {
		for _, al := range standby.sent {
			t.Logf("%v %v %v", al.Labels, al.StartsAt, al.EndsAt)
		}
		t.Fatalf("the new owner, its collector up, sent %v, want LeaseLost then LeaseNearExpiry", got)
	}
	for _, al := range standby.sent {
		was := firing[al.Name()]
		if !al.Firing() || al.Fingerprint() != was.Fingerprint() || !al.StartsAt.Equal(was.StartsAt) {
			t.Errorf("the new owner sent %s firing=%v fingerprint %s starting %v; the old owner sent it with %s starting %v",
				al.Name(), al.Firing(), al.Fingerprint(), al.StartsAt, was.Fingerprint(), was.StartsAt)
		}
	}
}

// ids names alerts for failure messages.
func ids(as []alert.Alert) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Name()
		if !a.Firing() {
			out[i] += " (resolved)"
		}
	}
	return out
}
