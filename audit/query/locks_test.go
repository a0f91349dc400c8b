package query_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// TestLocksPages: the locks list reads DefaultLockLimit locks when no limit
// is given, says whether more follow, and counts the whole list only when
// asked; the next page, by keyset, holds the rest.
func TestLocksPages(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "leasewatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	const n = audit.DefaultLockLimit + 3
	var b audit.Batch
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		b.Locks = append(b.Locks, audit.TrackState{Lock: audit.Lock{Source: "prod-etcd", Name: fmt.Sprintf("/locks/%04d", i),
			Kind: audit.KindEtcd, Class: audit.ClassLock, State: audit.StateFree, ChangedAt: at}})
	}
	if err := st.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	r := query.New(query.Config{Store: audit.Settled(st)})

	first, err := r.Locks(ctx, query.LocksQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Locks) != audit.DefaultLockLimit || !first.HasNext || first.HasPrev || first.Total != 0 {
		t.Fatalf("first page: %d locks, next %v, prev %v, total %d; want %d, true, false, 0 (not asked to count)",
			len(first.Locks), first.HasNext, first.HasPrev, first.Total, audit.DefaultLockLimit)
	}
	counted, err := r.Locks(ctx, query.LocksQuery{Limit: 10, Count: true})
	if err != nil {
		t.Fatal(err)
	}
	if counted.Total != n || counted.AtLeast {
		t.Errorf("counted: total %d (at least %v), want %d", counted.Total, counted.AtLeast, n)
	}
	last := first.Locks[len(first.Locks)-1].ID
	rest, err := r.Locks(ctx, query.LocksQuery{Filter: audit.LockFilter{After: last}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rest.Locks) != n-audit.DefaultLockLimit || rest.HasNext || !rest.HasPrev {
		t.Fatalf("second page: %d locks, next %v, prev %v; want %d, false, true", len(rest.Locks), rest.HasNext, rest.HasPrev, n-audit.DefaultLockLimit)
	}
	if rest.Locks[0].Name != fmt.Sprintf("/locks/%04d", audit.DefaultLockLimit) {
		t.Errorf("second page starts at %s, want the lock after the first page's last", rest.Locks[0].Name)
	}
}
