package main

import (
	"context"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
)

func TestRecorderMetricsKeepEachSourcesLatestLag(t *testing.T) {
	m := newRecorderMetrics(prometheus.NewRegistry(), config.DefaultMaxResourceSeries)
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	commit := func(at time.Time, inputs ...*audit.Input) {
		m.Committed(audit.Commit{At: at, Inputs: inputs, Batch: &audit.Batch{}})
	}
	obs := func(source string, ats ...time.Time) *audit.Input {
		in := &audit.Input{Source: source}
		for _, at := range ats {
			in.Observations = append(in.Observations, audit.Observation{At: at})
		}
		return in
	}

	// The slowest observation of a commit sets its source's lag; a renewal
	// time the backend reports counts from then; a holder's clock ahead of
	// ours is no lag at all.
	renewed := &audit.Input{Source: "cluster-a", Observations: []audit.Observation{
		{At: t0.Add(-10 * time.Millisecond), RenewedAt: t0.Add(-400 * time.Millisecond)},
		{At: t0.Add(-10 * time.Millisecond), RenewedAt: t0.Add(time.Second)},
	}}
	commit(t0, obs("prod-etcd", t0.Add(-5*time.Millisecond), t0.Add(-30*time.Millisecond)), renewed)
	// A later commit replaces it, even when faster.
	commit(t0.Add(time.Second), obs("prod-etcd", t0.Add(time.Second-2*time.Millisecond)))
	// An input without observations (a Live vouch) measures nothing.
	commit(t0.Add(2*time.Second), &audit.Input{Source: "prod-etcd", Live: true})
	// Notifications that waited before the collector received them (a
	// Redis PING round trip) count from before their receipt.
	behind := obs("cache", t0.Add(-20*time.Millisecond))
	behind.Behind = 300 * time.Millisecond
	commit(t0, behind)
	// An etcd renewal time is estimated from whole-second TTLs: the lag
	// counts from the read that showed it (At), and a grant's from the
	// watch response, whatever keepalive time it carries.
	etcd := &audit.Input{Source: "etcd-b", Kind: audit.KindEtcd, CoarseRenewals: true, Observations: []audit.Observation{
		{Kind: audit.EventRenew, At: t0.Add(-15 * time.Millisecond), RenewedAt: t0.Add(-900 * time.Millisecond)},
		{Kind: audit.EventGrant, At: t0.Add(-5 * time.Millisecond), RenewedAt: t0.Add(-1500 * time.Millisecond)},
	}}
	commit(t0, etcd)

	got := m.withLag([]audit.Source{{Name: "prod-etcd"}, {Name: "cluster-a"}, {Name: "cache"}, {Name: "etcd-b"}, {Name: "idle"}})
	for _, want := range []audit.Source{
		{Name: "prod-etcd", Lag: 2 * time.Millisecond, LagAt: t0.Add(time.Second)},
		{Name: "cluster-a", Lag: 400 * time.Millisecond, LagAt: t0},
		{Name: "cache", Lag: 320 * time.Millisecond, LagAt: t0},
		{Name: "etcd-b", Lag: 15 * time.Millisecond, LagAt: t0},
		{Name: "idle"},
	} {
		var src audit.Source
		for _, s := range got {
			if s.Name == want.Name {
				src = s
			}
		}
		if src.Lag != want.Lag || !src.LagAt.Equal(want.LagAt) {
			t.Errorf("%s: lag %v at %v, want %v at %v", want.Name, src.Lag, src.LagAt, want.Lag, want.LagAt)
		}
	}
}

// Counters come from the commits, each event once: findings, write reports,
// heartbeat expiries (never per lease), blind time and the per-lock counts.
func TestRecorderMetricsCountCommits(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newRecorderMetrics(reg, config.DefaultMaxResourceSeries)
	m.startSources(map[string]audit.SourceKind{"prod-etcd": audit.KindEtcd, "cluster-a": audit.KindKubernetes})
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	orders := audit.LockKey{Source: "prod-etcd", Name: "/locks/orders"}
	node := audit.LockKey{Source: "cluster-a", Name: "kube-node-lease/node-1"}
	heartbeat := audit.TrackState{Lock: audit.Lock{Source: node.Source, Name: node.Name, Class: audit.ClassHeartbeat}}

	m.Committed(audit.Commit{At: t0, Batch: &audit.Batch{
		Locks: []audit.TrackState{heartbeat},
		Events: []audit.Event{
			{Lock: orders, Kind: audit.EventGrant, At: t0, Holder: "w1"},
			{Lock: node, Kind: audit.EventGrant, At: t0, Holder: "node-1"},
			{Lock: orders, Kind: audit.EventWriteAccepted, At: t0, Resource: "ledger"},
		},
	}})
	m.Committed(audit.Commit{At: t0.Add(3 * time.Second),
		Inputs: []*audit.Input{{Source: "prod-etcd", Blind: &audit.Blind{From: t0, To: t0.Add(2500 * time.Millisecond)}}},
		Batch: &audit.Batch{
			Events: []audit.Event{
				{Lock: orders, Kind: audit.EventExpire, At: t0.Add(3 * time.Second), Holder: "w1"},
				{Lock: orders, Kind: audit.EventGrant, At: t0.Add(3 * time.Second), Holder: "w2", Previous: audit.PreviousHolder{Holder: "w1", Known: true}},
				{Lock: orders, Kind: audit.EventWriteRejected, At: t0.Add(3 * time.Second), Resource: "ledger"},
				{Lock: orders, Kind: audit.EventWriteAccepted, At: t0.Add(3 * time.Second), Resource: "ledger"},
				{Lock: node, Kind: audit.EventExpire, At: t0.Add(3 * time.Second), Holder: "node-1"},
			},
			Findings: []audit.Finding{
				{Lock: orders, Kind: audit.FindingLeaseExpired, Severity: audit.FindingLeaseExpired.Severity()},
				{Lock: orders, Kind: audit.FindingStaleWrite, Severity: audit.FindingStaleWrite.Severity()},
			},
		}})

	want := `
# HELP leasewatch_collector_blind_seconds_total Time the source's collector could not see its backend, summed over the blind windows it recorded; a window counts once it has ended.
# TYPE leasewatch_collector_blind_seconds_total counter
leasewatch_collector_blind_seconds_total{source="cluster-a"} 0
leasewatch_collector_blind_seconds_total{source="prod-etcd"} 2.5
# HELP leasewatch_findings_total Findings (fencing gaps, late renewals, expiries, blind windows) recorded, by source, finding kind and severity.
# TYPE leasewatch_findings_total counter
leasewatch_findings_total{kind="lease_expired",severity="` + string(audit.FindingLeaseExpired.Severity()) + `",source="prod-etcd"} 1
leasewatch_findings_total{kind="stale_write",severity="` + string(audit.FindingStaleWrite.Severity()) + `",source="prod-etcd"} 1
# HELP leasewatch_heartbeat_lease_expiries_total Heartbeat-class leases that expired while held, by source.
# TYPE leasewatch_heartbeat_lease_expiries_total counter
leasewatch_heartbeat_lease_expiries_total{source="cluster-a"} 1
leasewatch_heartbeat_lease_expiries_total{source="prod-etcd"} 0
# HELP leasewatch_write_reports_total Write reports from protected resources recorded (duplicates by request ID not counted), by source, resource and outcome (accepted or rejected); resource is empty for the reports of resources beyond metrics.max_resource_series.
# TYPE leasewatch_write_reports_total counter
leasewatch_write_reports_total{outcome="accepted",resource="ledger",source="prod-etcd"} 2
leasewatch_write_reports_total{outcome="rejected",resource="ledger",source="prod-etcd"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"leasewatch_collector_blind_seconds_total", "leasewatch_findings_total",
		"leasewatch_heartbeat_lease_expiries_total", "leasewatch_write_reports_total"); err != nil {
		t.Error(err)
	}
	if ls, ok := m.locks[orders]; !ok || ls.changes != 2 || ls.expiries != 1 {
		t.Errorf("orders counts = %+v, want 2 holder changes and 1 expiry", ls)
	}
	if _, ok := m.locks[node]; ok {
		t.Errorf("heartbeat %s has per-lock counts; want it summarised only", node.Name)
	}
}

// leaseFixture records, through the real recorder into a SQLite file, locks
// of class lock in prod-etcd and heartbeats in cluster-a, and returns the
// metrics fed by its commits and its Fresh store.
func leaseFixture(t *testing.T, t0 time.Time) (*recorderMetrics, audit.Reads, *prometheus.Registry) {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg := prometheus.NewRegistry()
	m := newRecorderMetrics(reg, config.DefaultMaxResourceSeries)
	// Renewals reach the rows only at a sync, an hour away: the metrics must
	// read them through the Fresh store.
	rec := audit.NewRecorder(m.timeCommits(store), audit.TrackerConfig{SourceKinds: map[string]audit.SourceKind{
		"prod-etcd": audit.KindEtcd, "cluster-a": audit.KindKubernetes,
	}}, nil, audit.WithSubscribers(m), audit.WithSyncInterval(time.Hour))
	if err := rec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Close)

	observe := func(source string, kind audit.EventKind, name string, s float64, holder string, ttl time.Duration) {
		t.Helper()
		ob := audit.Observation{Lock: audit.LockKey{Source: source, Name: name}, Kind: kind,
			At: t0.Add(time.Duration(s * float64(time.Second))), Holder: holder, LeaseDuration: ttl}
		if source == "cluster-a" {
			ob.Class = audit.ClassHeartbeat
		}
		if err := rec.Observe(ctx, audit.Input{Source: source, Kind: audit.SourceKind(map[string]string{"prod-etcd": "etcd", "cluster-a": "kubernetes"}[source]), Observations: []audit.Observation{ob}}); err != nil {
			t.Fatal(err)
		}
	}
	etcd := func(kind audit.EventKind, name string, s float64, holder string, ttl time.Duration) {
		observe("prod-etcd", kind, name, s, holder, ttl)
	}
	// a: renewed with 30% of its lease left, expires at 17s.
	etcd(audit.EventGrant, "/locks/a", 0, "w1", 10*time.Second)
	etcd(audit.EventRenew, "/locks/a", 7, "w1", 10*time.Second)
	// b: past its expiry at 6s; etcd has not said it expired.
	etcd(audit.EventGrant, "/locks/b", 1, "w1", 5*time.Second)
	// c: re-acquired by its holder (no change), expired, then granted to y.
	etcd(audit.EventGrant, "/locks/c", 0, "x", 10*time.Second)
	etcd(audit.EventRelease, "/locks/c", 2, "x", 0)
	etcd(audit.EventGrant, "/locks/c", 3, "x", 10*time.Second)
	etcd(audit.EventExpire, "/locks/c", 4, "x", 0)
	etcd(audit.EventGrant, "/locks/c", 5, "y", 10*time.Second)
	// d: expired, no longer held.
	etcd(audit.EventGrant, "/locks/d", 0, "z", 4*time.Second)
	etcd(audit.EventExpire, "/locks/d", 4, "z", 0)
	// Heartbeats: one held, one expired, both renewed.
	observe("cluster-a", audit.EventGrant, "kube-node-lease/node-1", 0, "node-1", 40*time.Second)
	observe("cluster-a", audit.EventRenew, "kube-node-lease/node-1", 10, "node-1", 40*time.Second)
	observe("cluster-a", audit.EventGrant, "kube-node-lease/node-2", 0, "node-2", 40*time.Second)
	observe("cluster-a", audit.EventRenew, "kube-node-lease/node-2", 10, "node-2", 40*time.Second)
	observe("cluster-a", audit.EventExpire, "kube-node-lease/node-2", 50, "node-2", 0)
	return m, rec.Fresh(store), reg
}

const leaseHelp = `
# HELP leasewatch_collector_blind 1 while the source's collector cannot see its backend, else 0.
# TYPE leasewatch_collector_blind gauge
leasewatch_collector_blind{source="cluster-a"} 0
leasewatch_collector_blind{source="prod-etcd"} 1
# HELP leasewatch_heartbeat_leases Heartbeat-class leases (liveness leases such as kube-node-lease) by source and state (held, expired, free).
# TYPE leasewatch_heartbeat_leases gauge
leasewatch_heartbeat_leases{source="cluster-a",state="expired"} 1
leasewatch_heartbeat_leases{source="cluster-a",state="free"} 0
leasewatch_heartbeat_leases{source="cluster-a",state="held"} 1
# HELP leasewatch_heartbeat_lease_expiries_total Heartbeat-class leases that expired while held, by source.
# TYPE leasewatch_heartbeat_lease_expiries_total counter
leasewatch_heartbeat_lease_expiries_total{source="cluster-a"} 1
# HELP leasewatch_lease_duration_seconds Lease duration (TTL) of a held lock of class lock.
# TYPE leasewatch_lease_duration_seconds gauge
# HELP leasewatch_lease_expiries_total Leases of a lock of class lock that expired while held (the holder stopped renewing), since this process started.
# TYPE leasewatch_lease_expiries_total counter
# HELP leasewatch_lease_expiry_seconds Seconds until the held lease of a lock of class lock expires (last renewal + lease duration), negative once past; absent when the expiry is unknown.
# TYPE leasewatch_lease_expiry_seconds gauge
# HELP leasewatch_lease_renewal_margin_ratio Fraction of the lease that was left when the held lease's last renewal arrived (0.25: a quarter); absent until the holder renews.
# TYPE leasewatch_lease_renewal_margin_ratio gauge
# HELP leasewatch_lock_holder_changes_total Grants of a lock of class lock that changed its holder (a lock's first grant included), since this process started.
# TYPE leasewatch_lock_holder_changes_total counter
# HELP leasewatch_lock_series_limit_exceeded Locks of the source left out of the per-lock series because of metrics.max_lock_series.
# TYPE leasewatch_lock_series_limit_exceeded gauge
`

var leaseFamilies = []string{
	"leasewatch_collector_blind", "leasewatch_heartbeat_leases", "leasewatch_heartbeat_lease_expiries_total",
	"leasewatch_lease_duration_seconds", "leasewatch_lease_expiries_total", "leasewatch_lease_expiry_seconds",
	"leasewatch_lease_renewal_margin_ratio", "leasewatch_lock_holder_changes_total", "leasewatch_lock_series_limit_exceeded",
}

// withSeries adds series lines to the families of leaseHelp they belong to.
func withSeries(series ...string) string {
	lines := strings.Split(strings.TrimSpace(leaseHelp), "\n")
	var out []string
	for i, line := range lines {
		out = append(out, line)
		if !strings.HasPrefix(line, "# TYPE ") {
			continue
		}
		family := strings.Fields(line)[2]
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], family) {
			continue // leaseHelp lists this family's series itself
		}
		for _, s := range series {
			if strings.HasPrefix(s, family+"{") {
				out = append(out, s)
			}
		}
	}
	return strings.Join(out, "\n") + "\n"
}

func TestLeaseMetrics(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	m, store, reg := leaseFixture(t, t0)
	sources := func() []audit.Source {
		return []audit.Source{{Name: "prod-etcd", BlindSince: t0}, {Name: "cluster-a"}}
	}
	scrape := func(max int) prometheus.Gatherer {
		r := prometheus.NewRegistry()
		c := m.newLeaseCollector(store, sources, max, nil)
		c.now = func() time.Time { return t0.Add(8 * time.Second) }
		r.MustRegister(c)
		// The per-source counters are the recorder's registry's.
		return prometheus.Gatherers{reg, r}
	}

	t.Run("EveryHeldLockAndCount", func(t *testing.T) {
		want := withSeries(
			`leasewatch_lease_duration_seconds{lock="/locks/a",source="prod-etcd"} 10`,
			`leasewatch_lease_duration_seconds{lock="/locks/b",source="prod-etcd"} 5`,
			`leasewatch_lease_duration_seconds{lock="/locks/c",source="prod-etcd"} 10`,
			`leasewatch_lease_expiries_total{lock="/locks/a",source="prod-etcd"} 0`,
			`leasewatch_lease_expiries_total{lock="/locks/b",source="prod-etcd"} 0`,
			`leasewatch_lease_expiries_total{lock="/locks/c",source="prod-etcd"} 1`,
			`leasewatch_lease_expiries_total{lock="/locks/d",source="prod-etcd"} 1`,
			`leasewatch_lease_expiry_seconds{holder="w1",lock="/locks/a",source="prod-etcd"} 9`,
			`leasewatch_lease_expiry_seconds{holder="w1",lock="/locks/b",source="prod-etcd"} -2`,
			`leasewatch_lease_expiry_seconds{holder="y",lock="/locks/c",source="prod-etcd"} 7`,
			`leasewatch_lease_renewal_margin_ratio{lock="/locks/a",source="prod-etcd"} 0.3`,
			`leasewatch_lock_holder_changes_total{lock="/locks/a",source="prod-etcd"} 1`,
			`leasewatch_lock_holder_changes_total{lock="/locks/b",source="prod-etcd"} 1`,
			`leasewatch_lock_holder_changes_total{lock="/locks/c",source="prod-etcd"} 2`,
			`leasewatch_lock_holder_changes_total{lock="/locks/d",source="prod-etcd"} 1`,
			`leasewatch_lock_series_limit_exceeded{source="cluster-a"} 0`,
			`leasewatch_lock_series_limit_exceeded{source="prod-etcd"} 0`,
		)
		if err := testutil.GatherAndCompare(scrape(1000), strings.NewReader(want), leaseFamilies...); err != nil {
			t.Error(err)
		}
	})
	// With room for two locks, the two soonest to expire keep their series
	// (b, past expiry, then c); a, and d that is no longer held, are
	// counted as left out.
	t.Run("CapKeepsSoonestExpiry", func(t *testing.T) {
		want := withSeries(
			`leasewatch_lease_duration_seconds{lock="/locks/b",source="prod-etcd"} 5`,
			`leasewatch_lease_duration_seconds{lock="/locks/c",source="prod-etcd"} 10`,
			`leasewatch_lease_expiries_total{lock="/locks/b",source="prod-etcd"} 0`,
			`leasewatch_lease_expiries_total{lock="/locks/c",source="prod-etcd"} 1`,
			`leasewatch_lease_expiry_seconds{holder="w1",lock="/locks/b",source="prod-etcd"} -2`,
			`leasewatch_lease_expiry_seconds{holder="y",lock="/locks/c",source="prod-etcd"} 7`,
			`leasewatch_lock_holder_changes_total{lock="/locks/b",source="prod-etcd"} 1`,
			`leasewatch_lock_holder_changes_total{lock="/locks/c",source="prod-etcd"} 2`,
			`leasewatch_lock_series_limit_exceeded{source="cluster-a"} 0`,
			`leasewatch_lock_series_limit_exceeded{source="prod-etcd"} 2`,
		)
		if err := testutil.GatherAndCompare(scrape(2), strings.NewReader(want), leaseFamilies...); err != nil {
			t.Error(err)
		}
	})
	t.Run("CommitsTimed", func(t *testing.T) {
		if n := testutil.CollectAndCount(m.commits); n != 1 {
			t.Fatalf("leasewatch_commit_duration_seconds: %d series, want 1", n)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "leasewatch_commit_duration_seconds" {
				if got := mf.GetMetric()[0].GetHistogram().GetSampleCount(); got < 15 {
					t.Errorf("leasewatch_commit_duration_seconds count = %d, want one per commit (at least 15)", got)
				}
			}
		}
	})
}

// The leadership health histograms: w1 holds orders for 3 s and lets it
// expire; w2 takes it 2 s later and is superseded by w3 after 10 s; w3's
// renewals had 80% and 30% of the lease left. A tenure first seen at start
// (observed) has no known length, and a heartbeat counts in none.
func TestHealthHistograms(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newRecorderMetrics(reg, config.DefaultMaxResourceSeries)
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	orders := audit.LockKey{Source: "prod-etcd", Name: "/locks/orders"}
	jobs := audit.LockKey{Source: "prod-etcd", Name: "/locks/jobs"}
	node := audit.LockKey{Source: "prod-etcd", Name: "node-1"}
	heartbeat := audit.TrackState{Lock: audit.Lock{Source: node.Source, Name: node.Name, Class: audit.ClassHeartbeat}}
	m.Committed(audit.Commit{At: at(30), Batch: &audit.Batch{
		Locks: []audit.TrackState{heartbeat},
		Events: []audit.Event{
			{Lock: jobs, Kind: audit.EventObserved, At: at(0), Holder: "j1"},
			{Lock: node, Kind: audit.EventGrant, At: at(0), Holder: "node-1"},
			{Lock: orders, Kind: audit.EventGrant, At: at(0), Holder: "w1"},
			{Lock: orders, Kind: audit.EventExpire, At: at(3), Holder: "w1"},
			{Lock: jobs, Kind: audit.EventRelease, At: at(4), Holder: "j1"},
			{Lock: orders, Kind: audit.EventGrant, At: at(5), Holder: "w2"},
			{Lock: node, Kind: audit.EventRelease, At: at(9), Holder: "node-1"},
			{Lock: orders, Kind: audit.EventGrant, At: at(15), Holder: "w3", Detail: map[string]any{"superseded": "w2"}},
			{Lock: orders, Kind: audit.EventRenew, At: at(17), Holder: "w3", Detail: map[string]any{"margin_ratio": 0.8}},
			{Lock: orders, Kind: audit.EventRenew, At: at(24), Holder: "w3", Detail: map[string]any{"margin_ratio": 0.3}},
			{Lock: orders, Kind: audit.EventRenew, At: at(25), Holder: "w3"}, // read after a blind window: no margin
		},
	}})
	count := func(h *prometheus.HistogramVec) (uint64, float64) {
		t.Helper()
		var out dto.Metric
		if err := h.WithLabelValues("prod-etcd").(prometheus.Metric).Write(&out); err != nil {
			t.Fatal(err)
		}
		return out.GetHistogram().GetSampleCount(), out.GetHistogram().GetSampleSum()
	}
	for _, tt := range []struct {
		name  string
		h     *prometheus.HistogramVec
		count uint64
		sum   float64
	}{
		{"tenure", m.health.tenure, 2, 3 + 10},
		{"takeover", m.health.takeover, 2, 2 + 0},
		{"margin", m.health.margin, 2, 0.8 + 0.3},
	} {
		if n, sum := count(tt.h); n != tt.count || math.Abs(sum-tt.sum) > 1e-9 {
			t.Errorf("%s: %d samples summing to %v, want %d summing to %v", tt.name, n, sum, tt.count, tt.sum)
		}
	}
}

// A grant counts as a holder change unless the tracker says the lock's
// previous tenure was the same holder's: after a restart too, where this
// process has seen none of the lock's earlier events.
func TestHolderChangesAfterRestart(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	key := audit.LockKey{Source: "prod-etcd", Name: "/locks/orders"}
	grant := func(previous audit.PreviousHolder, holder string) float64 {
		m := newRecorderMetrics(prometheus.NewRegistry(), config.DefaultMaxResourceSeries)
		m.Committed(audit.Commit{At: t0.Add(time.Minute), Batch: &audit.Batch{
			Events: []audit.Event{{Lock: key, Kind: audit.EventGrant, At: t0.Add(time.Minute), Holder: holder, Previous: previous}},
		}})
		return m.locks[key].changes
	}
	if got := grant(audit.PreviousHolder{Holder: "w1", Known: true}, "w1"); got != 0 {
		t.Errorf("w1 re-acquiring after w1: %v holder changes, want 0", got)
	}
	if got := grant(audit.PreviousHolder{Holder: "w1", Known: true}, "w2"); got != 1 {
		t.Errorf("w2 acquiring after w1: %v holder changes, want 1", got)
	}
	if got := grant(audit.PreviousHolder{}, "w1"); got != 1 {
		t.Errorf("w1 taking the lock first: %v holder changes, want 1", got)
	}
}

// Retention's counters follow the Retainer's Pruned and Sealed hooks, and
// the database size is read from the store at scrape time.
func TestRetentionMetrics(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg := prometheus.NewRegistry()
	pruned, sealed := newRetentionMetrics(reg, store)
	pruned("events", 1500)
	pruned("events", 500)
	pruned("findings", 3)
	sealed(360)
	sealed(40)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP leasewatch_retention_pruned_total Rows retention deleted, by table (events or findings).
# TYPE leasewatch_retention_pruned_total counter
leasewatch_retention_pruned_total{table="events"} 2000
leasewatch_retention_pruned_total{table="findings"} 3
# HELP leasewatch_renewals_sealed_total Renewals sealed from rows into runs (docs/design/renewal-runs.md).
# TYPE leasewatch_renewals_sealed_total counter
leasewatch_renewals_sealed_total 400
`), "leasewatch_retention_pruned_total", "leasewatch_renewals_sealed_total"); err != nil {
		t.Error(err)
	}
	want, err := store.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "leasewatch_database_bytes" {
			if got := mf.GetMetric()[0].GetGauge().GetValue(); got != float64(want) || got <= 0 {
				t.Errorf("leasewatch_database_bytes = %v, want the store's size %d", got, want)
			}
			return
		}
	}
	t.Error("leasewatch_database_bytes not exported")
}

// A lock whose name is not valid UTF-8 (stored before collectors escaped
// backend bytes) costs its own series, logged, and not the other locks'.
func TestLeaseMetricsLeaveOutANameNotUTF8(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	m := newRecorderMetrics(prometheus.NewRegistry(), config.DefaultMaxResourceSeries)
	rec := audit.NewRecorder(store, audit.TrackerConfig{SourceKinds: map[string]audit.SourceKind{"cache": audit.KindRedis}},
		nil, audit.WithSubscribers(m))
	if err := rec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Close)
	for _, name := range []string{"lock:ok", "lock:\xff"} {
		if err := rec.Observe(ctx, audit.Input{Source: "cache", Kind: audit.KindRedis, Observations: []audit.Observation{{
			Lock: audit.LockKey{Source: "cache", Name: name}, Kind: audit.EventGrant, At: t0, Holder: "w1", LeaseDuration: 10 * time.Second,
		}}}); err != nil {
			t.Fatal(err)
		}
	}
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	c := m.newLeaseCollector(rec.Fresh(store), nil, 100, slog.New(slog.NewTextHandler(&logs, nil)))
	c.now = func() time.Time { return t0 }
	reg.MustRegister(c)
	want := `
# HELP leasewatch_lease_duration_seconds Lease duration (TTL) of a held lock of class lock.
# TYPE leasewatch_lease_duration_seconds gauge
leasewatch_lease_duration_seconds{lock="lock:ok",source="cache"} 10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "leasewatch_lease_duration_seconds"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "series left out") {
		t.Errorf("the series left out was not logged; log:\n%s", logs.String())
	}
}

// leasewatch_locks_by_verdict counts the kept verdicts of locks of class
// lock, one series per verdict, zeros included; heartbeats are left out.
func TestLocksByVerdictMetric(t *testing.T) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "leasewatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	var states []audit.TrackState
	for _, l := range []struct {
		name  string
		class audit.Class
	}{{"orders", audit.ClassLock}, {"billing", audit.ClassLock}, {"cache", audit.ClassLock}, {"node-1", audit.ClassHeartbeat}} {
		states = append(states, audit.TrackState{Lock: audit.Lock{Source: "prod", Name: l.name, Class: l.class, State: audit.StateFree, ChangedAt: t0}})
	}
	if err := store.Apply(ctx, audit.Batch{Locks: states}); err != nil {
		t.Fatal(err)
	}
	var kept []audit.LockVerdict
	for name, v := range map[string]string{"orders": "unsafe", "billing": "fenced", "cache": "fenced", "node-1": "unverified"} {
		l, err := store.LockByKey(ctx, audit.LockKey{Source: "prod", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, audit.LockVerdict{LockID: l.ID, Verdict: v, JudgedAt: t0})
	}
	if err := store.PutVerdicts(ctx, kept); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(verdictCollector{store: store, log: slog.New(slog.DiscardHandler)})
	want := `
# HELP leasewatch_locks_by_verdict Locks of class lock by their safety verdict over the last 24 hours, as last judged (every 10 s for locks that changed, every 10 min for all); locks not judged yet are not counted.
# TYPE leasewatch_locks_by_verdict gauge
leasewatch_locks_by_verdict{verdict="efficiency"} 0
leasewatch_locks_by_verdict{verdict="fenced"} 2
leasewatch_locks_by_verdict{verdict="unsafe"} 1
leasewatch_locks_by_verdict{verdict="unverified"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "leasewatch_locks_by_verdict"); err != nil {
		t.Error(err)
	}
}
