package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// These direct tests of the journal and reads stand until the contract suite
// (audit/storetest) covers them.

func TestApplyRestoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, url := open(t)
	b := grant("etcd", "orders", 7, 0)
	key := b.Locks[0].Lock.Key()
	b.Findings = []audit.Finding{{Lock: key, Kind: audit.FindingOverlap, At: at(1), Until: at(2),
		Summary: "x", Tokens: []int64{7, 8}, Holders: []string{"a", "b"}}}
	b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventRenew, At: at(3), Seq: 1,
		Detail: map[string]any{"margin_ratio": 0.5, "renewed_at": at(3).Format(time.RFC3339Nano)}})
	b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventWriteAccepted, At: at(4),
		Holder: "worker-1", Token: audit.Int64(7), Resource: "db", RequestID: "req-1", Detail: map[string]any{"highest_token": 7}})
	if err := s.Apply(ctx, b); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	s.Close()
	s = openURL(t, url)

	states, cursors, err := s.Restore(ctx)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if len(states) != 1 || states[0].Lock.Key() != key || len(states[0].Recent) != 1 || states[0].Recent[0].Holder != "worker-1" ||
		states[0].Lock.ExpiresAt != at(10) || states[0].NextSeq != 1 {
		t.Errorf("Restore states = %+v", states)
	}
	if len(cursors) != 1 || cursors[0].Position != "rev-orders" || !cursors[0].At.Equal(at(0)) {
		t.Errorf("Restore cursors = %+v", cursors)
	}
	un, err := s.Unsynced(ctx)
	if err != nil || len(un) != 1 || un[0].Holder != "worker-1" || *un[0].Token != 7 || un[0].Lock != key ||
		un[0].Detail["renewed_at"] != at(3).Format(time.RFC3339Nano) {
		t.Errorf("Unsynced = %+v, %v; want the renewal with its tenure's holder and token", un, err)
	}
	w, err := s.StoredWrites(ctx, []string{"req-1", "req-1", "other"})
	if err != nil || len(w) != 1 || w[0].Resource != "db" || w[0].Lock != key {
		t.Errorf("StoredWrites = %+v, %v", w, err)
	}
	lock, err := s.LockByKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.Events(ctx, lock.ID, audit.EventFilter{})
	if err != nil || len(evs) != 3 || evs[0].Kind != audit.EventGrant || evs[0].Detail["why"] != "test" {
		t.Errorf("Events = %+v, %v", evs, err)
	}
	writes, err := s.WriteEvents(ctx, lock.ID, audit.WriteAccepted, audit.EventFilter{})
	if err != nil || len(writes) != 1 || writes[0].HighestToken == nil || *writes[0].HighestToken != 7 {
		t.Errorf("WriteEvents = %+v, %v", writes, err)
	}
	fs, err := s.Findings(ctx, audit.FindingFilter{LockID: lock.ID, Overlapping: true, TimeFilter: audit.TimeFilter{From: at(2)}})
	if err != nil || len(fs) != 1 || fs[0].Severity != audit.SeverityCritical || len(fs[0].Tokens) != 2 || fs[0].Lock != key {
		t.Errorf("Findings = %+v, %v", fs, err)
	}
	counts, err := s.LockCounts(ctx)
	if err != nil || len(counts) != 1 || counts[0].N != 1 || counts[0].State != audit.StateHeld {
		t.Errorf("LockCounts = %+v, %v", counts, err)
	}
	if _, err := s.Lock(ctx, lock.ID+100); audit.ErrorCode(err) != audit.ENOTFOUND {
		t.Errorf("Lock of a missing id: %v, want ENOTFOUND", err)
	}
	if n, err := s.Size(ctx); err != nil || n <= 0 {
		t.Errorf("Size = %d, %v", n, err)
	}
}

func TestSyncedBatchEndsUnsynced(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	b := grant("etcd", "orders", 7, 0)
	key := b.Locks[0].Lock.Key()
	renew := audit.Batch{Events: []audit.Event{{Lock: key, Kind: audit.EventRenew, At: at(3), Seq: 1}}}
	if err := s.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, renew); err != nil {
		t.Fatal(err)
	}
	sync := audit.Batch{Renewed: []audit.Renewal{{Lock: key, Seq: 1, Renewals: 1, RenewedAt: at(3), ExpiresAt: at(13),
		LeaseDuration: 10 * time.Second}}, Synced: true}
	if err := s.Apply(ctx, sync); err != nil {
		t.Fatal(err)
	}
	if un, err := s.Unsynced(ctx); err != nil || len(un) != 0 {
		t.Errorf("Unsynced after a sync = %d, %v; want none", len(un), err)
	}
	l, err := s.LockByKey(ctx, key)
	if err != nil || !l.ExpiresAt.Equal(at(13)) || !l.RenewedAt.Equal(at(3)) {
		t.Errorf("lock after its renewal sync = %+v, %v", l, err)
	}
	ts, err := s.Tenures(ctx, l.ID, audit.TimeFilter{})
	if err != nil || len(ts) != 1 || ts[0].Renewals != 1 || !ts[0].ExpiresAt.Equal(at(13)) {
		t.Errorf("tenures after the sync = %+v, %v", ts, err)
	}
}
