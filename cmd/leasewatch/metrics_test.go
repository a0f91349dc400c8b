package main

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasewatch/leasewatch/audit"
)

func TestRecorderMetricsKeepEachSourcesLatestLag(t *testing.T) {
	m := newRecorderMetrics(prometheus.NewRegistry())
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	commit := func(at time.Time, inputs ...*audit.Input) {
		m.observe(audit.Commit{At: at, Inputs: inputs, Batch: &audit.Batch{}})
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

	got := m.withLag([]audit.Source{{Name: "prod-etcd"}, {Name: "cluster-a"}, {Name: "cache"}, {Name: "idle"}})
	for _, want := range []audit.Source{
		{Name: "prod-etcd", Lag: 2 * time.Millisecond, LagAt: t0.Add(time.Second)},
		{Name: "cluster-a", Lag: 400 * time.Millisecond, LagAt: t0},
		{Name: "cache", Lag: 320 * time.Millisecond, LagAt: t0},
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
