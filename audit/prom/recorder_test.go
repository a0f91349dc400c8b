package prom

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/leasewatch/leasewatch/audit"
)

// maxResources is leasewatch's default metrics.max_resource_series.
const maxResources = 1000

func TestRecorderMetricsKeepEachSourcesLatestLag(t *testing.T) {
	m := NewRecorderMetrics(prometheus.NewRegistry(), maxResources)
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

	got := m.WithLag([]audit.Source{{Name: "prod-etcd"}, {Name: "cluster-a"}, {Name: "cache"}, {Name: "etcd-b"}, {Name: "idle"}})
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
	m := NewRecorderMetrics(reg, maxResources)
	m.StartSources(map[string]audit.SourceKind{"prod-etcd": audit.KindEtcd, "cluster-a": audit.KindKubernetes})
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

// The leadership health histograms: w1 holds orders for 3 s and lets it
// expire; w2 takes it 2 s later and is superseded by w3 after 10 s; w3's
// renewals had 80% and 30% of the lease left. A tenure first seen at start
// (observed) has no known length, and a heartbeat counts in none.
func TestHealthHistograms(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewRecorderMetrics(reg, maxResources)
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
		m := NewRecorderMetrics(prometheus.NewRegistry(), maxResources)
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
