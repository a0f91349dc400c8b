package query

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// The SQL stores have the write-load reads.
var _ audit.WriteLoadStore = (*sqlite.Store)(nil)

// costsNow is the end of the known workload's windows: 30 minutes into an
// hour, so that the last hour starts inside the run window before.
var costsNow = time.Date(2026, 12, 1, 12, 30, 0, 0, time.UTC)

// minutes is costsNow less m minutes.
func minutes(m int) time.Time { return costsNow.Add(-time.Duration(m) * time.Minute) }

// costsWorkload records, through the real recorder into a SQLite store,
// writes whose counts per window are known (minutes before costsNow):
//
//	prod-etcd /locks/orders     w1 granted 90, renews 85 75 65 55 45, releases 40;
//	                            w2 granted 30, renews 25 20 15 10 5, holds
//	prod-etcd /locks/payments   w1 granted 120, renews 110 100 … 10 (11), holds
//	prod-etcd /locks/x          w3 granted 12, renews 10 8 6 4 2, holds
//	cluster-a kube-system/scheduler  node-1 granted 20, renews 15 10 5, releases 2
//	cluster-a kube-system/controller node-2 granted 50, renews 40, holds
//	cluster-a default/web       node-3 granted 180, renews 170, releases 160
//
// The recorder is returned open: its held tenures' last renewals are not
// synced to their rows yet.
func costsWorkload(t *testing.T) (*sqlite.Store, *audit.Recorder) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	kinds := map[string]audit.SourceKind{"prod-etcd": audit.KindEtcd, "cluster-a": audit.KindKubernetes}
	rec := audit.NewRecorder(st, audit.TrackerConfig{SourceKinds: kinds}, nil,
		audit.WithClock(func() time.Time { return costsNow }), audit.WithTickInterval(time.Hour), audit.WithSyncInterval(time.Hour))
	if err := rec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	type step struct {
		at   int
		kind audit.EventKind
	}
	// lock records one tenure: a grant, renewals, and a release when last
	// is one.
	tenure := func(source, name, holder string, token int64, steps ...step) {
		t.Helper()
		for _, s := range steps {
			in := audit.Input{Source: source, Kind: kinds[source], Observations: []audit.Observation{{
				Lock: audit.LockKey{Source: source, Name: name}, Kind: s.kind, At: minutes(s.at),
				Holder: holder, Token: audit.Int64(token), LeaseDuration: time.Hour}}}
			if err := rec.Record(ctx, in); err != nil {
				t.Fatalf("%s %s at -%dm: %v", s.kind, name, s.at, err)
			}
		}
	}
	renews := func(ats ...int) []step {
		out := make([]step, len(ats))
		for i, at := range ats {
			out[i] = step{at, audit.EventRenew}
		}
		return out
	}
	grant := func(at int, then ...step) []step { return append([]step{{at, audit.EventGrant}}, then...) }
	release := func(at int) step { return step{at, audit.EventRelease} }

	tenure("prod-etcd", "/locks/payments", "w1", 7, grant(120, renews(110, 100, 90, 80, 70, 60, 50, 40, 30, 20, 10)...)...)
	tenure("cluster-a", "default/web", "node-3", 1, append(grant(180, renews(170)...), release(160))...)
	tenure("prod-etcd", "/locks/orders", "w1", 1, append(grant(90, renews(85, 75, 65, 55, 45)...), release(40))...)
	tenure("cluster-a", "kube-system/controller", "node-2", 4, grant(50, renews(40)...)...)
	tenure("prod-etcd", "/locks/orders", "w2", 2, grant(30, renews(25, 20, 15, 10, 5)...)...)
	tenure("cluster-a", "kube-system/scheduler", "node-1", 9, append(grant(20, renews(15, 10, 5)...), release(2))...)
	tenure("prod-etcd", "/locks/x", "w3", 3, grant(12, renews(10, 8, 6, 4, 2)...)...)
	return st, rec
}

// costRows says a Costs' rows in short: source|key grants/renewals/releases.
func costRows(c Costs) string {
	var b strings.Builder
	for _, r := range c.Rows {
		fmt.Fprintf(&b, "%s|%s %d/%d/%d; ", r.Source, r.Key, r.Grants, r.Renewals, r.Releases)
	}
	return b.String()
}

// The known workload's writes, per window and grouping.
var costsWant = []struct {
	window time.Duration
	by     CostBy
	limit  int
	rows   string
	groups int
	total  Writes
}{
	{time.Hour, CostByLock, 0, "prod-etcd|/locks/orders 1/7/1; prod-etcd|/locks/payments 0/6/0; prod-etcd|/locks/x 1/5/0; " +
		"cluster-a|kube-system/scheduler 1/3/1; cluster-a|kube-system/controller 1/1/0; ", 5, Writes{4, 22, 2}},
	// The two ties of six, in order of key; the limit keeps the first two.
	{time.Hour, CostByLock, 2, "prod-etcd|/locks/orders 1/7/1; prod-etcd|/locks/payments 0/6/0; ", 5, Writes{4, 22, 2}},
	{time.Hour, CostByHolder, 0, "|w1 0/8/1; |w2 1/5/0; |w3 1/5/0; |node-1 1/3/1; |node-2 1/1/0; ", 5, Writes{4, 22, 2}},
	{time.Hour, CostByNamespace, 0, "prod-etcd|locks 2/18/1; cluster-a|kube-system 2/4/1; ", 2, Writes{4, 22, 2}},
	{time.Hour, CostBySource, 0, "prod-etcd|prod-etcd 2/18/1; cluster-a|cluster-a 2/4/1; ", 2, Writes{4, 22, 2}},
	{24 * time.Hour, CostByLock, 0, "prod-etcd|/locks/orders 2/10/1; prod-etcd|/locks/payments 1/11/0; prod-etcd|/locks/x 1/5/0; " +
		"cluster-a|kube-system/scheduler 1/3/1; cluster-a|default/web 1/1/1; cluster-a|kube-system/controller 1/1/0; ", 6, Writes{7, 31, 3}},
	{24 * time.Hour, CostByNamespace, 0, "prod-etcd|locks 4/26/1; cluster-a|kube-system 2/4/1; cluster-a|default 1/1/1; ", 3, Writes{7, 31, 3}},
}

// checkCostsWant checks every costsWant reading of r at costsNow.
func checkCostsWant(t *testing.T, r *Reader) {
	t.Helper()
	for _, w := range costsWant {
		c, err := r.Costs(context.Background(), costsNow, w.window, w.by, w.limit)
		if err != nil {
			t.Fatalf("%v by %s: %v", w.window, w.by, err)
		}
		if got := costRows(c); got != w.rows || c.Groups != w.groups || c.Total != w.total {
			t.Errorf("%v by %s limit %d:\n got %s(%d groups, %+v)\nwant %s(%d groups, %+v)",
				w.window, w.by, w.limit, got, c.Groups, c.Total, w.rows, w.groups, w.total)
		}
	}
}

// TestCostsOfAKnownWorkload: every grant, renewal and release of the
// windows is counted once, with the held tenures' renewals not yet synced
// (the recorder's overlay), and again once the renewals before the hour
// are sealed into runs, the hour's start falling inside one.
func TestCostsOfAKnownWorkload(t *testing.T) {
	ctx := context.Background()
	st, rec := costsWorkload(t)
	t.Run("Unsynced", func(t *testing.T) {
		checkCostsWant(t, New(Config{Store: rec.Fresh(st)}))
	})
	rec.Close()
	t.Run("Sealed", func(t *testing.T) {
		sealed, after := 0, int64(0)
		for {
			res, err := st.SealRenewals(ctx, audit.SealStep{Before: costsNow.Truncate(audit.RunWindow), AfterLock: after, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			sealed += res.Sealed
			if after = res.NextLock; res.Done {
				break
			}
		}
		// Those observed before 12:00: 11 of payments' but 30, 20 and 10,
		// orders' 85 to 45, web's and the controller's.
		if sealed != 8+5+1+1 {
			t.Fatalf("sealed %d renewals, want 15", sealed)
		}
		checkCostsWant(t, New(Config{Store: audit.Settled(st)}))
	})
}

// TestCostsPerSecond: a group's rate is its writes over the window's length;
// it carries its source's kind, read from the lock rows.
func TestCostsPerSecond(t *testing.T) {
	st, rec := costsWorkload(t)
	defer rec.Close()
	c, err := New(Config{Store: rec.Fresh(st)}).Costs(context.Background(), costsNow, time.Hour, CostBySource, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := 21.0 / 3600; len(c.Rows) != 1 || c.Rows[0].PerSecond != want || c.Rows[0].Kind != audit.KindEtcd {
		t.Fatalf("rows = %+v, want prod-etcd (etcd) at %v/s", c.Rows, want)
	}
}

// TestCostsBadParameters: each parameter out of its values is refused,
// named with the values it takes.
func TestCostsBadParameters(t *testing.T) {
	r := New(Config{Store: audit.Settled(nil)})
	for _, tc := range []struct {
		window time.Duration
		by     CostBy
		limit  int
		want   string
	}{
		{2 * time.Hour, CostByLock, 0, "window: 2h0m0s is not one of 1h, 24h"},
		{time.Hour, "resource", 0, `by: "resource" is not one of lock, namespace, holder, source`},
		{time.Hour, CostByLock, -1, "limit: -1 is not between 1 and 1000"},
		{time.Hour, CostByLock, MaxCostLimit + 1, "limit: 1001 is not between 1 and 1000"},
	} {
		_, err := r.Costs(context.Background(), costsNow, tc.window, tc.by, tc.limit)
		if audit.ErrorCode(err) != audit.EINVALID || audit.ErrorMessage(err) != tc.want {
			t.Errorf("Costs(%v, %q, %d) = %v, want %s: %s", tc.window, tc.by, tc.limit, err, audit.EINVALID, tc.want)
		}
	}
}

// TestNamespace: Kubernetes names are namespace/name; other backends' are
// in their first path segment, a name without one in its own.
func TestNamespace(t *testing.T) {
	for _, tc := range []struct {
		kind       audit.SourceKind
		name, want string
	}{
		{audit.KindKubernetes, "kube-node-lease/node-1", "kube-node-lease"},
		{audit.KindEtcd, "/locks/orders", "locks"},
		{audit.SourceKind("zookeeper"), "/app/locks/orders", "app"},
		{audit.SourceKind("postgres"), "shop/42", "shop"},
		{audit.KindRedis, "lock:orders", "lock:orders"},
	} {
		if got := Namespace(tc.kind, tc.name); got != tc.want {
			t.Errorf("Namespace(%s, %q) = %q, want %q", tc.kind, tc.name, got, tc.want)
		}
	}
}

// TestCostsReadingIsKept: a window's reading answers the requests within
// CostsFresh of it; one up to CostsKept later is answered from it while a
// newer one is read, which the next request gets; one later still waits
// for a reading of its own.
func TestCostsReadingIsKept(t *testing.T) {
	ctx := context.Background()
	st, rec := costsWorkload(t)
	defer rec.Close()
	r := New(Config{Store: rec.Fresh(st)})
	// renewals counts /locks/x's, which the windows below all hold.
	renewals := func(now time.Time) int64 {
		t.Helper()
		c, err := r.Costs(ctx, now, time.Hour, CostByLock, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range c.Rows {
			if row.Key == "/locks/x" {
				return row.Renewals
			}
		}
		return 0
	}
	if n := renewals(costsNow); n != 5 {
		t.Fatalf("renewals = %d, want 5", n)
	}
	renew := audit.Input{Source: "prod-etcd", Kind: audit.KindEtcd, Observations: []audit.Observation{{
		Lock: audit.LockKey{Source: "prod-etcd", Name: "/locks/x"}, Kind: audit.EventRenew, At: costsNow,
		Holder: "w3", Token: audit.Int64(3), LeaseDuration: time.Hour}}}
	if err := rec.Record(ctx, renew); err != nil {
		t.Fatal(err)
	}
	if n := renewals(costsNow.Add(CostsFresh)); n != 5 {
		t.Errorf("renewals within CostsFresh = %d, want the kept 5", n)
	}
	later := costsNow.Add(CostsFresh + time.Second)
	if n := renewals(later); n != 5 {
		t.Errorf("renewals after CostsFresh = %d, want the kept 5 while the next is read", n)
	}
	waitFor(t, func() bool { return renewals(later) == 6 })
	if n := renewals(later.Add(CostsKept + time.Second)); n != 6 {
		t.Errorf("renewals after CostsKept = %d, want 6 read afresh", n)
	}
}

// TestOverviewTopWriters: the overview never waits for the write counts:
// its first reading starts one and shows none, the next shows the last
// hour's top locks.
func TestOverviewTopWriters(t *testing.T) {
	ctx := context.Background()
	st, rec := costsWorkload(t)
	defer rec.Close()
	r := New(Config{Store: rec.Fresh(st)})
	o, err := r.Overview(ctx, costsNow)
	if err != nil {
		t.Fatal(err)
	}
	if o.TopWriters != nil {
		t.Fatalf("first overview's top writers = %+v, want none yet", o.TopWriters)
	}
	waitFor(t, func() bool {
		o, err = r.Overview(ctx, costsNow)
		return err != nil || o.TopWriters != nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "prod-etcd|/locks/orders 1/7/1; prod-etcd|/locks/payments 0/6/0; prod-etcd|/locks/x 1/5/0; " +
		"cluster-a|kube-system/scheduler 1/3/1; cluster-a|kube-system/controller 1/1/0; "
	if got := costRows(*o.TopWriters); got != want || o.TopWriters.Window.To != costsNow {
		t.Errorf("top writers = %s to %v, want %s to %v", got, o.TopWriters.Window.To, want, costsNow)
	}
}
