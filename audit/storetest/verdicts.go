package storetest

import (
	"context"
	"testing"

	"github.com/leasewatch/leasewatch/audit"
)

// testVerdicts keeps verdicts of three locks, replaces one, skips a lock
// that does not exist, and reads them back by id, by count per verdict
// (class by class) and through the locks list's filter.
func testVerdicts(t *testing.T, harness Harness) {
	s := harness.Open(t)
	ctx := context.Background()
	lock := func(name string, class audit.Class) audit.TrackState {
		return audit.TrackState{Lock: audit.Lock{Source: "src", Name: name, Class: class, State: audit.StateFree, ChangedAt: At(0)}}
	}
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{lock("orders", audit.ClassLock), lock("billing", audit.ClassLock), lock("node-1", audit.ClassHeartbeat)}})
	orders := LockByKey(t, s, audit.LockKey{Source: "src", Name: "orders"}).ID
	billing := LockByKey(t, s, audit.LockKey{Source: "src", Name: "billing"}).ID
	node := LockByKey(t, s, audit.LockKey{Source: "src", Name: "node-1"}).ID

	if got, err := s.Verdicts(ctx, []int64{orders}); err != nil || len(got) != 0 {
		t.Fatalf("verdicts before any is kept = %v, %v; want none", got, err)
	}
	put := func(vs ...audit.LockVerdict) {
		t.Helper()
		if err := s.PutVerdicts(ctx, vs); err != nil {
			t.Fatal(err)
		}
	}
	put(audit.LockVerdict{LockID: orders, Verdict: "fenced", JudgedAt: At(1)},
		audit.LockVerdict{LockID: billing, Verdict: "unverified", JudgedAt: At(1)},
		audit.LockVerdict{LockID: node, Verdict: "unverified", JudgedAt: At(1)},
		audit.LockVerdict{LockID: orders + billing + node + 100, Verdict: "unsafe", JudgedAt: At(1)}) // no such lock
	put(audit.LockVerdict{LockID: orders, Verdict: "unsafe", JudgedAt: At(2)})

	got, err := s.Verdicts(ctx, []int64{orders, billing, orders + billing + node + 100})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "verdicts by id", got, map[int64]audit.LockVerdict{
		orders:  {LockID: orders, Verdict: "unsafe", JudgedAt: At(2)},
		billing: {LockID: billing, Verdict: "unverified", JudgedAt: At(1)},
	})
	for _, c := range []struct {
		class audit.Class
		want  map[string]int
	}{
		{audit.ClassLock, map[string]int{"unsafe": 1, "unverified": 1}},
		{audit.ClassHeartbeat, map[string]int{"unverified": 1}},
		{"", map[string]int{"unsafe": 1, "unverified": 2}},
	} {
		counts, err := s.VerdictCounts(ctx, c.class)
		if err != nil {
			t.Fatal(err)
		}
		Equal(t, "verdict counts of class "+string(c.class), counts, c.want)
	}
	locks, err := s.Locks(ctx, audit.LockFilter{Class: audit.ClassLock, Verdict: "unverified"})
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) != 1 || locks[0].ID != billing {
		t.Fatalf("locks of verdict unverified = %+v, want only billing", locks)
	}
	if n, err := s.CountLocks(ctx, audit.LockFilter{Verdict: "unverified"}); err != nil || n != 2 {
		t.Fatalf("count of verdict unverified = %d, %v; want 2", n, err)
	}
}
