package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// The per-source sync cases: when replicas share a store, each syncs the
// lock and tenure rows of the sources it owns on its own schedule, and a
// replica that takes a source over restores that source alone, with the
// renewals its rows lack (Journal.RestoreSource, Batch.SyncSources).

// sourceSyncStory has two replicas, a and b (b a second store on the same
// database where the store can be opened twice), each own a source of the
// same name and record a grant of lock "l" at 1 and a renewal of it at 2;
// a then syncs its source's rows. It returns both stores.
func sourceSyncStory(t *testing.T, h Harness) (a, b Store) {
	a = h.Open(t)
	b = a
	if h.Second != nil {
		b = h.Second(t, a)
	}
	for _, side := range []struct {
		s   Store
		src string
	}{{a, "a"}, {b, "b"}} {
		Apply(t, side.s, fenced(side.src, "l", 1, 1, ""))
		Apply(t, side.s, renewalOf(side.src, 2, false))
	}
	sync := renewalOf("a", 2, true)
	sync.Events, sync.Synced, sync.SyncSources = nil, true, []string{"a"}
	Apply(t, a, sync)
	return a, b
}

// renewalOf is a batch of source src's lock "l" renewed at sec, under the
// fence of sourceSyncStory: the renew event, or with rows its renewal
// columns too.
func renewalOf(src string, sec int, rows bool) audit.Batch {
	key := audit.LockKey{Source: src, Name: "l"}
	b := audit.Batch{
		Events: []audit.Event{{Lock: key, Kind: audit.EventRenew, At: At(sec), Holder: "h", Token: audit.Int64(1), Seq: 1,
			TTL: 10 * time.Second}},
		Fences: []audit.Fence{{Source: src, Token: 1}},
	}
	if rows {
		b.Renewed = []audit.Renewal{{Lock: key, Seq: 1, Renewals: int64(sec - 1), RenewedAt: At(sec),
			ExpiresAt: At(sec + 10), LeaseDuration: 10 * time.Second}}
	}
	return b
}

// restoreSource returns RestoreSource(source) of s, failing the test on an
// error, with the renewals as their times.
func restoreSource(t *testing.T, s Store, source string) ([]audit.TrackState, []audit.Cursor, []int) {
	t.Helper()
	states, cursors, renewals, err := s.RestoreSource(context.Background(), source)
	if err != nil {
		t.Fatalf("RestoreSource(%q): %v", source, err)
	}
	var at []int
	for _, e := range renewals {
		if e.Lock.Source != source || e.Kind != audit.EventRenew {
			t.Errorf("RestoreSource(%q) replays %s of %s", source, e.Kind, e.Lock)
		}
		at = append(at, int(e.At.Sub(T0)/time.Second))
	}
	return states, cursors, at
}

// A replica's sync claims its own sources' rows only: the other replica's
// renewals, which its rows lack, are still replayed when their source is
// restored, and restoring a source loads nothing of another.
func testSyncOfOneSourceLeavesTheOthers(t *testing.T, h Harness) {
	a, _ := sourceSyncStory(t, h)
	states, cursors, renewals := restoreSource(t, a, "b")
	if len(states) != 1 || states[0].Lock.Key() != (audit.LockKey{Source: "b", Name: "l"}) {
		t.Errorf("RestoreSource(b) locks = %v, want b/l alone", states)
	}
	if len(cursors) != 1 || cursors[0].Source != "b" {
		t.Errorf("RestoreSource(b) cursors = %v, want b's alone", cursors)
	}
	Equal(t, "b's renewals to replay", renewals, []int{2})

	states, cursors, renewals = restoreSource(t, a, "a")
	if len(states) != 1 || !states[0].Lock.RenewedAt.Equal(At(2)) {
		t.Errorf("RestoreSource(a) locks = %v, want a/l renewed at 2 in its row", states)
	}
	if len(cursors) != 1 || cursors[0].Source != "a" {
		t.Errorf("RestoreSource(a) cursors = %v, want a's alone", cursors)
	}
	Equal(t, "a's renewals to replay", renewals, []int(nil))

	states, _, renewals = restoreSource(t, a, "c")
	if len(states) != 0 || len(renewals) != 0 {
		t.Errorf("RestoreSource of a source never recorded = %d locks, renewals %v; want none", len(states), renewals)
	}
}

// A sync round of one source claims the rows up to its mark, not the
// renewals stored after it.
func testSyncRoundOfOneSource(t *testing.T, h Harness) {
	_, b := sourceSyncStory(t, h)
	start := renewalOf("b", 2, true)
	start.Events, start.SyncMark, start.SyncSources = nil, true, []string{"b"}
	Apply(t, b, start)
	Apply(t, b, renewalOf("b", 4, false))
	end := audit.Batch{SyncedToMark: true, SyncSources: []string{"b"}, Fences: []audit.Fence{{Source: "b", Token: 1}}}
	Apply(t, b, end)
	_, _, renewals := restoreSource(t, b, "b")
	Equal(t, "b's renewals after its round", renewals, []int{4})

	// The whole store's Unsynced goes by each source's mark too.
	unsynced, err := b.Unsynced(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range unsynced {
		got = append(got, e.Lock.String()+"@"+e.At.Sub(T0).String())
	}
	Equal(t, "Unsynced", got, []string{"b/l@4s"})
}

// A sync of the whole store (one recorder writes every source) raises each
// source's own mark with the store's, and retention keeps the renewals
// after the oldest mark of any source.
func testSyncOfTheStoreRaisesSourceMarks(t *testing.T, h Harness) {
	a, b := sourceSyncStory(t, h)
	ctx := context.Background()
	// Nothing of b is pruned: its renewal at 2 is after its mark.
	r := &audit.Retainer{Store: a, Retention: audit.Retention{Kinds: map[audit.EventKind]time.Duration{audit.EventRenew: time.Second}},
		Now: func() time.Time { return At(1000) }}
	if err := r.Pass(ctx); err != nil {
		t.Fatalf("Pass: %v", err)
	}
	_, _, renewals := restoreSource(t, a, "b")
	Equal(t, "b's renewals after retention", renewals, []int{2})

	whole := renewalOf("b", 2, true)
	whole.Events, whole.Fences, whole.Synced = nil, nil, true
	Apply(t, b, whole) // the store that wrote last: the one writer, as a store synced whole has
	_, _, renewals = restoreSource(t, a, "b")
	Equal(t, "b's renewals after a sync of the store", renewals, []int(nil))
	unsynced, err := a.Unsynced(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(unsynced) != 0 {
		t.Errorf("Unsynced after a sync of the store = %d renewals, want none", len(unsynced))
	}
}
