package sqlite

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// TestMigrationSealsPreviousRenewalRows upgrades a database the previous
// release wrote (migrated to 0024): 0025 only adds the runs' table, and
// sealing then folds the renewal rows in place, every one of them still
// read, and counted the same in the tables.
func TestMigrationSealsPreviousRenewalRows(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC).UnixNano()
	// Two node leases renewed every 10 s for 6 hours as compact rows, and
	// a lock whose renewals predate compact rows (no seq), which stay.
	s := upgradedFrom(t, 24, []string{
		`INSERT INTO locks (id, source, name, kind, class, state) VALUES
			(1, 'cluster-a', 'kube-node-lease/node-1', 'kubernetes', 'heartbeat', 'held'),
			(2, 'cluster-a', 'kube-node-lease/node-2', 'kubernetes', 'heartbeat', 'held'),
			(3, 'cluster-a', 'kube-node-lease/node-3', 'kubernetes', 'heartbeat', 'held')`,
		`INSERT INTO tenures (lock_id, seq, holder, token, granted_at) VALUES (1, 1, 'node-1', 1, 0), (2, 1, 'node-2', 2, 0)`,
		`WITH RECURSIVE i(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM i WHERE n < 2159)
			INSERT INTO events (lock_id, kind, at, ttl_ms, seq, margin_permille, renewed_at)
			SELECT l, 'renew', ` + strconv.FormatInt(start, 10) + ` + n * 10000000000 + l * 3000001, 40000, 1, 750 + n % 7, ` + strconv.FormatInt(start, 10) + ` + n * 10000000000 + l * 1000
			FROM i, (SELECT 1 AS l UNION ALL SELECT 2) ORDER BY n, l`,
		`INSERT INTO events (lock_id, kind, at, holder, token, ttl_ms, detail)
			SELECT 3, 'renew', at, 'node-3', 3, 40000, '{"margin_ratio":0.75}' FROM events WHERE lock_id = 1 LIMIT 100`,
		`INSERT INTO events (lock_id, kind, at) VALUES (3, 'observed', ` + strconv.FormatInt(start+7*int64(time.Hour), 10) + `)`,
		`UPDATE journal SET synced_event = (SELECT max(id) FROM events)`,
	})
	count := func() (rows, sealed int) {
		t.Helper()
		if err := s.reader.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM events WHERE kind = 'renew'),
			(SELECT coalesce(sum(renewals), 0) FROM renewal_runs)`).Scan(&rows, &sealed); err != nil {
			t.Fatal(err)
		}
		return rows, sealed
	}
	if rows, sealed := count(); rows != 2*2160+100 || sealed != 0 {
		t.Fatalf("after the upgrade: %d renewal rows and %d sealed, want %d and none", rows, sealed, 2*2160+100)
	}
	var read [3]int
	for i := range read {
		times, err := s.EventTimes(ctx, int64(i+1), audit.EventRenew, audit.TimeFilter{Limit: audit.MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		read[i] = len(times)
	}

	n := storetest.Seal(t, s, time.Unix(0, start).Add(7*time.Hour))
	if rows, sealed := count(); n != 2*2160 || rows != 100 || sealed != 2*2160 {
		t.Errorf("sealed %d: %d renewal rows and %d in runs, want %d sealed and the 100 without a tenure left", n, rows, sealed, 2*2160)
	}
	for i := range read {
		times, err := s.EventTimes(ctx, int64(i+1), audit.EventRenew, audit.TimeFilter{Limit: audit.MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		if len(times) != read[i] {
			t.Errorf("lock %d: %d renewals read after sealing, %d before", i+1, len(times), read[i])
		}
	}
	var runs int
	if err := s.reader.QueryRowContext(ctx, `SELECT count(*) FROM renewal_runs`).Scan(&runs); err != nil {
		t.Fatal(err)
	}
	if runs != 2*6 {
		t.Errorf("%d runs, want 12: an hour of a lease each", runs)
	}
}

// A lock's runs are read newest first through renewal_runs_lock_last, one
// range from the window's end, with no sort: a read of the newest
// renewals stops after a run or two however long the lock's history. The
// reads run in a transaction (runs and rows must be one snapshot), which
// keeps their statements prepared like the pool's.
func TestRunsReadNewestFirstThroughTheirIndex(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	w := renewalWorkloads[0]
	w.Leases, w.Hours = 1, 3
	w.run(t, s, nil)
	storetest.Apply(t, s, audit.Batch{Events: []audit.Event{{Lock: audit.LockKey{Source: "clock", Name: "tick"},
		Kind: audit.EventObserved, At: workloadStart.Add(5 * time.Hour)}}, Synced: true})
	storetest.Seal(t, s, workloadStart.Add(2*time.Hour))
	clear(s.reader.stmts)
	f := audit.EventFilter{TimeFilter: audit.TimeFilter{To: workloadStart.Add(90 * time.Minute), Limit: 10}}
	for range 2 {
		events, err := s.Events(ctx, 1, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != 10 || events[0].ID < 1<<52 {
			t.Fatalf("Events: %d, want the 10 newest of a run", len(events))
		}
	}
	checked := 0
	for query := range s.reader.stmts {
		if !strings.Contains(query, "FROM renewal_runs") {
			continue
		}
		checked++
		plan := queryPlan(t, s, query)
		if !strings.Contains(plan, "USING INDEX renewal_runs_lock_last (lock_id=? AND last_at>? AND last_at<?)") || strings.Contains(plan, "TEMP B-TREE") {
			t.Errorf("plan\n%s\nwant one range of renewal_runs_lock_last, unsorted, for\n%s", plan, query)
		}
	}
	if checked != 1 {
		t.Errorf("%d statements on renewal_runs kept, want the one", checked)
	}
}

// A lock's backlog (the first passes after an upgrade seal days of each
// lock's renewals) is sealed in steps of at most 16,384 renewals, each
// a short transaction, and every step ends on a window's end: an hour is
// one run however the steps fall.
func TestSealingABacklogTakesStepsOfWholeWindows(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	w := renewalWorkloads[1] // 2 s renewals: 1,800 an hour
	w.Leases, w.Hours = 1, 20
	n := w.run(t, s, nil)
	storetest.Apply(t, s, audit.Batch{Events: []audit.Event{{Lock: audit.LockKey{Source: "clock", Name: "tick"},
		Kind: audit.EventObserved, At: workloadStart.Add(24 * time.Hour)}}, Synced: true})
	sealed, steps := 0, 0
	for after := int64(0); ; steps++ {
		res, err := s.SealRenewals(ctx, audit.SealStep{Before: workloadStart.Add(23 * time.Hour), AfterLock: after, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if res.Sealed > 1<<14 {
			t.Errorf("step %d sealed %d renewals, more than %d", steps, res.Sealed, 1<<14)
		}
		sealed += res.Sealed
		if res.Done {
			break
		}
		if steps > n/sealBudget+2 {
			t.Fatalf("%d steps and not done", steps)
		}
		after = res.NextLock
	}
	if sealed != n || steps < n/sealBudget {
		t.Errorf("sealed %d of %d renewals in %d steps, want all in at least %d", sealed, n, steps+1, n/sealBudget+1)
	}
	// One run per window: no window's renewals were split between steps.
	var windows, split int
	if err := s.reader.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(n > 1), 0) FROM
		(SELECT first_at / 3600000000000 AS w, count(*) AS n FROM renewal_runs GROUP BY w)`).Scan(&windows, &split); err != nil {
		t.Fatal(err)
	}
	if windows < w.Hours || split != 0 {
		t.Errorf("runs of %d windows, %d of them in more than one run; want one run each of at least %d", windows, split, w.Hours)
	}
}

// A seal step that is not one (no locks, or a bound inside a window, which
// would cut the window's run in two) is refused, naming what is wrong, and
// seals nothing.
func TestSealRenewalsRefusesABadStep(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	w := renewalWorkloads[0]
	w.Leases, w.Hours = 1, 2
	w.run(t, s, nil)
	for _, step := range []audit.SealStep{
		{Before: workloadStart.Add(time.Hour), Limit: 0},
		{Before: workloadStart.Add(time.Hour + time.Minute), Limit: 10},
		{Limit: 10},
	} {
		res, err := s.SealRenewals(ctx, step)
		if audit.ErrorCode(err) != audit.EINVALID || res.Sealed != 0 {
			t.Errorf("SealRenewals(%+v) = %+v, %v; want EINVALID", step, res, err)
		}
	}
	var runs int
	if err := s.reader.QueryRowContext(ctx, `SELECT count(*) FROM renewal_runs`).Scan(&runs); err != nil || runs != 0 {
		t.Errorf("%d runs after refused steps (%v), want none", runs, err)
	}
}
