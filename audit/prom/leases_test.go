package prom

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// leaseFixture records, through the real recorder into a SQLite file, locks
// of class lock in prod-etcd and heartbeats in cluster-a, and returns the
// metrics fed by its commits and its Fresh store.
func leaseFixture(t *testing.T, t0 time.Time) (*RecorderMetrics, audit.Reads, *prometheus.Registry) {
	t.Helper()
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg := prometheus.NewRegistry()
	m := NewRecorderMetrics(reg, maxResources)
	// Renewals reach the rows only at a sync, an hour away: the metrics must
	// read them through the Fresh store.
	rec := audit.NewRecorder(m.TimeCommits(store), audit.TrackerConfig{SourceKinds: map[string]audit.SourceKind{
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
		if err := rec.Record(ctx, audit.Input{Source: source, Kind: audit.SourceKind(map[string]string{"prod-etcd": "etcd", "cluster-a": "kubernetes"}[source]), Observations: []audit.Observation{ob}}); err != nil {
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
	m := NewRecorderMetrics(prometheus.NewRegistry(), maxResources)
	rec := audit.NewRecorder(store, audit.TrackerConfig{SourceKinds: map[string]audit.SourceKind{"cache": audit.KindRedis}},
		nil, audit.WithSubscribers(m))
	if err := rec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Close)
	for _, name := range []string{"lock:ok", "lock:\xff"} {
		if err := rec.Record(ctx, audit.Input{Source: "cache", Kind: audit.KindRedis, Observations: []audit.Observation{{
			Lock: audit.LockKey{Source: "cache", Name: name}, Kind: audit.EventGrant, At: t0, Holder: "w1", LeaseDuration: 10 * time.Second,
		}}}); err != nil {
			t.Fatal(err)
		}
	}
	// The handler serialises the scrape's writes; Gather has returned
	// before the test reads them.
	var logs bytes.Buffer
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
