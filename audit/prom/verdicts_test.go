package prom

import (
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
