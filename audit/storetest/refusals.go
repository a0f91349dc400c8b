package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// The refusal cases: a commit the fence refused is kept in the store until
// the owner of leasewatch's own source records it as a rejected write on
// the refused source's ownership lock (audit.WithOwnLocks).

// The log keeps refusals, unfenced, in order, until a batch records them.
func testRefusalsAreKeptUntilRecorded(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	logged := []audit.LoggedRefusal{
		{FenceRefusal: audit.FenceRefusal{Source: "src", Token: 7, Highest: 8, At: At(3), Inputs: 1, Writes: 2, Events: 3}, Replica: "r-0"},
		{FenceRefusal: audit.FenceRefusal{Source: "other", Token: 1, Highest: 4, At: At(5)}, Replica: "r-1"},
	}
	// A fence of the source, higher than the refused token, does not stop it.
	Apply(t, s, audit.Batch{Fences: []audit.Fence{{Source: "src", Token: 8}}})
	Apply(t, s, audit.Batch{Refusals: logged[:1]})
	Apply(t, s, audit.Batch{Refusals: logged[1:]})
	got, err := s.Refusals(ctx, 10)
	if err != nil {
		t.Fatalf("Refusals: %v", err)
	}
	if len(got) != 2 || got[0].ID == 0 || got[1].ID <= got[0].ID {
		t.Fatalf("Refusals = %+v, want both, with rising ids", got)
	}
	for i := range got {
		want := logged[i]
		want.ID = got[i].ID
		Equal(t, "refusal", got[i], want)
	}
	if one, _ := s.Refusals(ctx, 1); len(one) != 1 || one[0].ID != got[0].ID {
		t.Errorf("Refusals(limit 1) = %+v, want the oldest", one)
	}
	Apply(t, s, audit.Batch{RefusalsRecorded: []int64{got[0].ID}})
	left, _ := s.Refusals(ctx, 10)
	if len(left) != 1 || left[0].ID != got[1].ID {
		t.Errorf("after recording the first: %+v, want the second alone", left)
	}
}

// A deposed replica's refused commit becomes a rejected write, with
// resource "store", on the refused source's ownership lock in leasewatch's
// own source, recorded once by the replica that owns that source, and the
// tracker judges it a stale write.
func testRecorderRecordsRefusalsOnItsOwnLock(t *testing.T, h Harness) {
	if h.Second == nil {
		t.Skip("the store cannot be opened twice on one database")
	}
	ctx := context.Background()
	s := h.Open(t)
	own := func(replica string) audit.RecorderOption {
		return audit.WithOwnLocks(audit.OwnLocks{Source: "lw", Lock: func(string) string { return "orders" }, Replica: replica})
	}
	tick := audit.WithTickInterval(20 * time.Millisecond)
	old := StartRecorder(t, s, audit.WithOwnership(), own("r-old"), tick)
	next := StartRecorder(t, h.Second(t, s), audit.WithOwnership(), own("r-next"), tick)
	if err := old.SetFence(ctx, "src", 7); err != nil {
		t.Fatalf("SetFence(src, 7): %v", err)
	}
	if err := old.Record(ctx, sourceGrant("src", "A", 41, 0, "100")); err != nil {
		t.Fatal(err)
	}
	// leasewatch's own source: the ownership lease of src, granted to the
	// old replica under 7, then to the next one under 8.
	if err := next.SetFence(ctx, "lw", 1); err != nil {
		t.Fatalf("SetFence(lw, 1): %v", err)
	}
	for i, in := range []audit.Input{sourceGrant("lw", "r-old", 7, 0, "1"), sourceGrant("lw", "r-next", 8, 2, "2")} {
		if err := next.Record(ctx, in); err != nil {
			t.Fatalf("own source's input %d: %v", i, err)
		}
	}
	if err := next.SetFence(ctx, "src", 8); err != nil {
		t.Fatalf("SetFence(src, 8): %v", err)
	}
	// The old owner wakes up and writes.
	CheckFenced(t, old.Record(ctx, sourceRenewal("src", "A", 41, 3, "101")), "src", 7, 8)

	ownLock := audit.LockKey{Source: "lw", Name: "orders"}
	var rejected []audit.Event
	waitUntil(t, "the refusal recorded as a rejected write", func() bool {
		evs, _ := lockEvents(t, s, ownLock)
		rejected = rejected[:0]
		for _, e := range evs {
			if e.Kind == audit.EventWriteRejected {
				rejected = append(rejected, e)
			}
		}
		return len(rejected) > 0
	})
	if e := rejected[0]; len(rejected) != 1 || e.Resource != "store" || e.Token == nil || *e.Token != 7 || e.Holder != "r-old" {
		t.Errorf("rejected writes = %+v, want one to resource store under 7 by r-old", rejected)
	}
	findings, err := s.Findings(ctx, audit.FindingFilter{Source: "lw", Kind: audit.FindingStaleWrite})
	if err != nil {
		t.Fatal(err)
	}
	if len(findings) != 1 || findings[0].Resource != "store" {
		t.Errorf("stale_write findings on lw = %+v, want one, resource store", findings)
	}
	if left, _ := s.Refusals(ctx, 10); len(left) != 0 {
		t.Errorf("refusals left after recording = %+v, want none", left)
	}
}
