package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// testWriteLoad: the write-load reads (audit.WriteLoadStore) that what
// leases cost is counted from. TenuresIn selects every lock's tenures that
// overlap a window, with their locks' kinds and classes; RenewalCounts
// counts what Events reads of a lock's renewals in a window, wherever they
// are kept: rows, the renewal log and sealed runs, a window's ends inside
// a run.
func testWriteLoad(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	w, ok := s.(audit.WriteLoadStore)
	if !ok {
		t.Fatalf("%T has no write-load reads (audit.WriteLoadStore)", s)
	}
	node, other := logStory(t, s, runHour(0), true)
	node2, other2 := logStory(t, s, runHour(1).Add(-2*time.Minute), true)
	if Seal(t, s, runHour(1)) == 0 {
		t.Fatal("nothing sealed")
	}
	// Released tenures of a third lock, granted at 10n and ended at 10n+5.
	key := audit.LockKey{Source: "src", Name: "orders"}
	var b audit.Batch
	for n := int64(1); n <= 3; n++ {
		b.Tenures = append(b.Tenures, audit.Tenure{Lock: key, Seq: n, Holder: fmt.Sprint(n), GrantedAt: At(int(10 * n)),
			EndedAt: At(int(10*n + 5)), End: audit.EndReleased})
	}
	Apply(t, s, b)

	got, err := w.TenuresIn(ctx, audit.TimeFilter{From: At(25), To: At(30)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Seq != 2 || got[1].Seq != 3 || got[0].Lock != key || got[0].LockID != LockByKey(t, s, key).ID {
		t.Errorf("tenures overlapping 25-30 s: %+v, want orders' 2 and 3", got)
	}
	got, err = w.TenuresIn(ctx, audit.TimeFilter{From: runHour(0), To: runHour(2)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Lock != node[0].Lock || got[1].Lock != other[0].Lock {
		t.Errorf("tenures overlapping the story's hours: %+v, want the node lease's and the other's", got)
	}

	keys := []audit.LockKey{node[0].Lock, other[0].Lock, key}
	ids := make([]int64, len(keys))
	for i, lk := range keys {
		ids[i] = LockByKey(t, s, lk).ID
	}
	for _, f := range []audit.TimeFilter{
		{},
		{From: runHour(0).Add(47 * time.Second), To: runHour(1).Add(33 * time.Second)},
		{From: runHour(1).Add(-90 * time.Second)},
		{To: runHour(0).Add(100 * time.Second)},
		{From: other2[20].At, To: node2[20].At}, // ends on logged renewals
	} {
		counts, err := w.RenewalCounts(ctx, ids, f)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			want := len(allEvents(t, s, id, audit.EventFilter{Kind: audit.EventRenew, TimeFilter: f}))
			if counts[id] != int64(want) {
				t.Errorf("%s: %d renewals within %v to %v, want %d as Events reads", keys[i], counts[id], f.From, f.To, want)
			}
		}
	}
}
