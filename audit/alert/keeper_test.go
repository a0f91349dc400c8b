package alert

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// keeperRig is a Keeper following a real recorder over a real store, as
// leasewatch serve wires them, with the recorder's clock set by the test.
type keeperRig struct {
	store *sqlite.Store
	rec   *audit.Recorder
	a     *Keeper

	mu  sync.Mutex
	now time.Time
}

// startKeeper starts a recorder over store and a Keeper following it, and
// closes the recorder when the test ends. The recorder syncs renewals to the
// rows only hourly, so the rows lag behind the tracker.
func startKeeper(t *testing.T, store *sqlite.Store, now time.Time, kinds map[string]audit.SourceKind, notify func([]Alert)) *keeperRig {
	t.Helper()
	return startKeeperWith(t, store, now, kinds, func() []audit.Source { return nil }, notify, false)
}

// startKeeperWith is startKeeper with the collectors' states from
// sources, and, if replicated, alerts for the sources it is granted only.
func startKeeperWith(t *testing.T, store *sqlite.Store, now time.Time, kinds map[string]audit.SourceKind, sources func() []audit.Source,
	notify func([]Alert), replicated bool) *keeperRig {
	t.Helper()
	ctx := context.Background()
	r := &keeperRig{store: store, now: now}
	r.a = NewKeeper(Config{Defaults: Thresholds{RenewMarginRatio: 0.25, LostHold: time.Minute, FencingHold: time.Minute, BlindAfter: time.Minute}},
		KeeperConfig{Sources: sources, ByClock: byClock(kinds), Notify: notify, ResendEvery: time.Minute})
	if replicated {
		r.a.OwnSourcesOnly(slog.New(slog.DiscardHandler))
	}
	r.rec = audit.NewRecorder(store, audit.TrackerConfig{RenewMarginRatio: 0.25, SourceKinds: kinds}, nil,
		audit.WithSubscribers(r.a), audit.WithClock(r.clock), audit.WithSyncInterval(time.Hour))
	if err := r.rec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.rec.Close)
	if err := r.a.Follow(ctx, r.rec.Peek, r.rec.Fresh(store)); err != nil {
		t.Fatal(err)
	}
	return r
}

// byClock returns the sources of kinds whose leases the tracker expires by
// its clock, as collectors/backends declares them.
func byClock(kinds map[string]audit.SourceKind) []string {
	var out []string
	for name, kind := range kinds {
		if kind == audit.KindKubernetes || kind == audit.KindRedis {
			out = append(out, name)
		}
	}
	return out
}

func (r *keeperRig) clock() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now
}

func (r *keeperRig) set(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = now
}

// firing returns the names of the firing alerts.
func (r *keeperRig) firing() []string {
	firing, _ := r.a.Alerts()
	var out []string
	for _, al := range firing {
		out = append(out, al.Name())
	}
	return out
}

// record records in through the recorder, at in's time.
func (r *keeperRig) record(t *testing.T, in audit.Input) {
	t.Helper()
	r.set(in.At)
	if err := r.rec.Record(context.Background(), in); err != nil {
		t.Fatal(err)
	}
}

// TestKeeperFollowsTheTracker: a Keeper starts from the lock rows a
// previous run left, then looks locks up in the tracker, so a renewal that
// the rows get only at the next sync clears a near-expiry alert at once;
// findings fire at the next evaluation, and every evaluation's result reaches
// the notifier.
func TestKeeperFollowsTheTracker(t *testing.T) {
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
	first := startKeeper(t, store, t0, kinds, nil)
	first.record(t, grant)
	first.rec.Close()

	var notified [][]Alert
	r := startKeeper(t, store, t0, kinds, func(as []Alert) { notified = append(notified, as) })
	r.a.evaluate(t0.Add(5 * time.Second))
	if got := r.firing(); len(got) != 0 {
		t.Fatalf("firing with half the lease left: %v", got)
	}
	r.a.evaluate(t0.Add(8 * time.Second)) // 20% left
	if got := r.firing(); len(got) != 1 || got[0] != LeaseNearExpiry {
		t.Fatalf("firing with 20%% of the lease left = %v, want LeaseNearExpiry", got)
	}
	// The renewal reaches the Keeper with its commit, before any sync.
	renewedAt := t0.Add(8500 * time.Millisecond)
	r.record(t, audit.Input{Source: orders.Source, Kind: audit.KindEtcd, At: renewedAt, Observations: []audit.Observation{{Lock: orders,
		Kind: audit.EventRenew, At: renewedAt, Holder: "worker-1", Token: audit.Int64(7), LeaseDuration: 10 * time.Second}}})
	if l, err := store.LockByKey(ctx, orders); err != nil || !l.RenewedAt.Equal(t0) {
		t.Fatalf("the lock row was renewed at %v (%v); the test needs it unsynced, renewed at %v", l.RenewedAt, err, t0)
	}
	r.a.evaluate(t0.Add(9 * time.Second))
	if got := r.firing(); len(got) != 0 {
		t.Fatalf("firing after the renewal = %v, want none", got)
	}
	if _, resolved := r.a.Alerts(); len(resolved) != 1 || resolved[0].Name() != LeaseNearExpiry || !resolved[0].EndsAt.Equal(t0.Add(9*time.Second)) {
		t.Fatalf("resolved = %+v, want the near-expiry alert, ended at the evaluation", resolved)
	}

	// The renewal scheduled the lease again: near expiry once more with 15%
	// of its new lease left.
	r.a.evaluate(t0.Add(17 * time.Second))
	if got := r.firing(); len(got) != 1 || got[0] != LeaseNearExpiry {
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
	if got := r.firing(); len(got) != 2 || !slices.Contains(got, FencingViolation) || !slices.Contains(got, LeaseNearExpiry) {
		t.Fatalf("firing after an unfenced write = %v, want FencingViolation and LeaseNearExpiry", got)
	}
	if len(notified) != 4 {
		t.Errorf("notified %d times, want once per evaluation with alerts (4)", len(notified))
	}
}

// keeperStore opens a SQLite store for a test of a Keeper, closed at its
// end, and returns the time its story starts at.
func keeperStore(t *testing.T) (*sqlite.Store, time.Time) {
	t.Helper()
	store, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "lw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
}

// TestKeeperJudgesLeasesAsOfTheirCollector checks that the leases of a
// source whose collector vouches for being live (Redis, Kubernetes) are
// judged as of the time it last did: not at all before its first word after
// a start (the stored rows are as old as the last run), and never past what
// it has delivered, so a collector that falls behind does not make every
// lease look late.
func TestKeeperJudgesLeasesAsOfTheirCollector(t *testing.T) {
	store, t0 := keeperStore(t)
	key := audit.LockKey{Source: "cache", Name: "lock:orders"}
	kinds := map[string]audit.SourceKind{key.Source: audit.KindRedis}
	live := func(r *keeperRig, at time.Time, obs ...audit.Observation) {
		r.record(t, audit.Input{Source: key.Source, Kind: audit.KindRedis, At: at, Observations: obs, ExpireByClock: true, Live: true})
	}
	first := startKeeper(t, store, t0, kinds, nil)
	live(first, t0, audit.Observation{Lock: key, Kind: audit.EventGrant, At: t0, Holder: "worker-1", LeaseDuration: 10 * time.Second})
	first.rec.Close()

	r := startKeeper(t, store, t0, kinds, nil)
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
	if got := r.firing(); len(got) != 1 || got[0] != LeaseNearExpiry {
		t.Fatalf("%v with the collector live to 8s of a 10s lease, want LeaseNearExpiry", got)
	}
}

// TestKeeperHandsSourcesOver is the Keepers of two replicas of one store
// (OwnSourcesOnly): a replica evaluates only the sources it owns, so its
// tracker's stale picture of the others raises nothing; the replica that
// gives a source up forgets its alerts without sending any resolved; the one
// that takes it over sends the same alerts (the same fingerprint and start),
// the findings' ones at once from the store, the locks' ones once its
// collector is up.
func TestKeeperHandsSourcesOver(t *testing.T) {
	store, t0 := keeperStore(t)
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
		*keeperRig
		sent []Alert
	}
	start := func() *replica {
		r := &replica{}
		r.keeperRig = startKeeperWith(t, store, t0, kinds, sources, func(as []Alert) { r.sent = append(r.sent, as...) }, true)
		return r
	}
	grant := func(k audit.LockKey, holder string, token int64, s int) audit.Observation {
		return audit.Observation{Lock: k, Kind: audit.EventGrant, At: t0.Add(time.Duration(s) * time.Second), Holder: holder,
			Token: audit.Int64(token), LeaseDuration: 10 * time.Second}
	}

	owner := start()
	owner.a.Gain(orders.Source)
	owner.record(t, audit.Input{Source: orders.Source, Kind: audit.KindEtcd, At: t0,
		Observations: []audit.Observation{grant(orders, "worker-1", 7, 0), grant(billing, "worker-2", 3, 0)}})
	// billing's lease expires while held: LeaseLost. orders is renewed
	// until 3s, so at 11s it is near expiry.
	renew := grant(orders, "worker-1", 7, 3)
	renew.Kind = audit.EventRenew
	expire := audit.Observation{Lock: billing, Kind: audit.EventExpire, At: t0.Add(10 * time.Second), Holder: "worker-2", Token: audit.Int64(3)}
	owner.record(t, audit.Input{Source: orders.Source, Kind: audit.KindEtcd, At: t0.Add(10 * time.Second), Observations: []audit.Observation{renew, expire}})
	// The standby starts now: its tracker has orders as the store has it,
	// and, as it runs no collector of the source, it will never see it
	// renewed.
	standby := start()
	owner.a.evaluate(t0.Add(11 * time.Second))
	standby.a.evaluate(t0.Add(11 * time.Second))
	firing := map[string]Alert{}
	for _, al := range owner.sent {
		firing[al.Name()] = al
	}
	if len(owner.sent) != 2 || firing[LeaseNearExpiry].Labels == nil || firing[LeaseLost].Labels == nil {
		t.Fatalf("the owner sent %v, want LeaseNearExpiry and LeaseLost", names(owner.sent))
	}
	if len(standby.sent) != 0 {
		t.Fatalf("the standby, which does not own %s, sent %v", orders.Source, names(standby.sent))
	}

	// A handover: the owner gives the source up (lose, then the recorder
	// forgets it), the standby is granted it.
	owner.a.Lose(orders.Source)
	if err := owner.rec.DropFence(context.Background(), orders.Source); err != nil {
		t.Fatal(err)
	}
	owner.sent = nil
	owner.a.evaluate(t0.Add(12 * time.Second))
	if f, _ := owner.a.Alerts(); len(owner.sent) != 0 || len(f) != 0 {
		t.Fatalf("the old owner sent %v and shows %v firing after giving the source up, want nothing", names(owner.sent), names(f))
	}

	stateMu.Lock()
	state = audit.SourceDown // its collector is starting
	stateMu.Unlock()
	standby.a.Gain(orders.Source)
	standby.a.evaluate(t0.Add(12 * time.Second))
	if got := names(standby.sent); !slices.Equal(got, []string{"LeaseLost"}) {
		t.Fatalf("the new owner, its collector not up yet, sent %v, want LeaseLost read back from the store", got)
	}
	stateMu.Lock()
	state = audit.SourceUp
	stateMu.Unlock()
	standby.a.evaluate(t0.Add(12500 * time.Millisecond))
	if got := names(standby.sent); !slices.Equal(got, []string{"LeaseLost", "LeaseNearExpiry"}) {
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

// names names alerts for failure messages.
func names(as []Alert) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Name()
		if !a.Firing() {
			out[i] += " (resolved)"
		}
	}
	return out
}

// TestKeeperSyntheticCommits hands a Keeper commits made by hand from a
// tracker's steps, as a recorder would after storing them, and moves the
// ownership of two sources: a source not owned raises nothing, whatever its
// commits say; one lost forgets its alerts without resolving them; one
// gained reads its alerts back from the store, the findings of commits made
// while another replica owned it.
func TestKeeperSyntheticCommits(t *testing.T) {
	ctx := context.Background()
	store, t0 := keeperStore(t)
	tr := audit.NewTracker(audit.TrackerConfig{})
	var sent []Alert
	k := NewKeeper(Config{Defaults: Thresholds{RenewMarginRatio: 0.25, LostHold: time.Minute, FencingHold: time.Minute, BlindAfter: time.Minute}},
		KeeperConfig{Notify: func(as []Alert) { sent = append(sent, as...) }, ResendEvery: time.Hour, Sources: func() []audit.Source {
			return []audit.Source{{Name: "a", Kind: audit.KindEtcd, State: audit.SourceUp}, {Name: "b", Kind: audit.KindEtcd, State: audit.SourceUp}}
		}})
	k.OwnSourcesOnly(slog.New(slog.DiscardHandler))
	if err := k.Follow(ctx, func(fn func(lock func(audit.LockKey) (audit.Lock, bool))) { fn(tr.Lock) }, audit.Settled(store)); err != nil {
		t.Fatal(err)
	}
	k.Gain("a")
	k.evaluate(t0) // takes a up: nothing stored to read back yet

	// commit steps the tracker, stores its batch and hands the Keeper the
	// commit, as the recorder does.
	commit := func(kind audit.EventKind, s int) {
		t.Helper()
		var b audit.Batch
		for _, source := range []string{"a", "b"} {
			ob := audit.Observation{Lock: audit.LockKey{Source: source, Name: "orders"}, Kind: kind, At: t0.Add(time.Duration(s) * time.Second),
				Holder: "worker-1", Token: audit.Int64(7), LeaseDuration: 10 * time.Second}
			b.Append(tr.Step(audit.Input{Source: source, Kind: audit.KindEtcd, Observations: []audit.Observation{ob}}))
		}
		if err := store.Apply(ctx, b); err != nil {
			t.Fatal(err)
		}
		k.Committed(audit.Commit{At: t0.Add(time.Duration(s) * time.Second), Batch: &b})
	}
	commit(audit.EventGrant, 0)
	commit(audit.EventExpire, 10) // both leases lost while held
	k.evaluate(t0.Add(11 * time.Second))
	if got := names(sent); !slices.Equal(got, []string{LeaseLost}) || sent[0].Labels[LabelSource] != "a" {
		t.Fatalf("sent %v of %v, want LeaseLost of the owned source a only", got, sent)
	}

	// a goes, b comes: a's alert is forgotten, not resolved; b's is read
	// back from the store.
	sent = nil
	k.Lose("a")
	if firing, _ := k.Alerts(); len(firing) != 0 {
		t.Fatalf("firing once a is lost = %v, want none", names(firing))
	}
	k.Gain("b")
	k.evaluate(t0.Add(12 * time.Second))
	if got := names(sent); !slices.Equal(got, []string{LeaseLost}) || sent[0].Labels[LabelSource] != "b" {
		t.Fatalf("sent %v after the handover, want LeaseLost of b, read back, and nothing of a", got)
	}
	if firing, _ := k.Alerts(); len(firing) != 1 || firing[0].Labels[LabelSource] != "b" {
		t.Fatalf("firing after the handover = %v, want b's LeaseLost only", names(firing))
	}
}
