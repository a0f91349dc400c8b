package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/renewallog"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// hour0 is the start of a run window: the renewals of these tests are
// observed on whole milliseconds, which runs keep exactly.
var hour0 = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)

// stageRenewals stores a lock granted at hour0 and n renewals of it every
// 40 s from there, their positions decimal, with margins and backend times,
// synced: staged renewals that sealing takes (rows, in a store opened by
// openRows).
func stageRenewals(t *testing.T, s *Store, key audit.LockKey, n int) {
	t.Helper()
	ten := audit.Tenure{Lock: key, Seq: 1, Holder: "a", Token: audit.Int64(1), GrantedAt: hour0}
	events := []audit.Event{{Lock: key, Kind: audit.EventGrant, At: hour0, Holder: "a", Token: audit.Int64(1)}}
	for i := 1; i <= n; i++ {
		at := hour0.Add(time.Duration(i) * 40 * time.Second)
		events = append(events, audit.Event{Lock: key, Kind: audit.EventRenew, At: at.Add(3 * time.Millisecond), Holder: "a",
			Token: audit.Int64(1), Seq: 1, TTL: 60 * time.Second, Position: strconv.Itoa(1000 + 7*i),
			Detail: map[string]any{"margin_ratio": 0.25, "renewed_at": at.Format(time.RFC3339Nano)}})
	}
	storetest.Apply(t, s, audit.Batch{Tenures: []audit.Tenure{ten}, Events: events, Synced: true})
}

// sealAll walks every lock with steps of limit locks until done, and
// returns the renewals sealed.
func sealAll(t *testing.T, s *Store, before time.Time, limit int) int {
	t.Helper()
	n, err := sealWalk(s, before, limit)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// sealWalk is sealAll's walk.
func sealWalk(s *Store, before time.Time, limit int) (int, error) {
	sealed := 0
	for after, steps := int64(0), 0; steps < 10000; steps++ {
		res, err := s.SealRenewals(context.Background(), audit.SealStep{Before: before, AfterLock: after, Limit: limit})
		if err != nil {
			return sealed, fmt.Errorf("SealRenewals after lock %d: %w", after, err)
		}
		sealed += res.Sealed
		if res.Done {
			return sealed, nil
		}
		after = res.NextLock
	}
	return sealed, errors.New("sealing never ends")
}

// count returns the single integer query q reads.
func count(t testing.TB, s *Store, q string) int64 {
	t.Helper()
	var n int64
	if err := s.reader.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestSealEmptiesAndDropsPartitions seals renewals spread over partitions
// of renewals eight ids wide: the runs hold every renewal but the one whose
// position no run can keep, which stays a row (in events), every
// partition whose ids the sync mark covers is dropped once emptied, and
// the lock's events read the same, but for the ids of the sealed ones.
func TestSealEmptiesAndDropsPartitions(t *testing.T) {
	ctx := context.Background()
	s := openRows(t, pg.Get(t).Database(t), Options{RenewalSpan: 8})
	key := audit.LockKey{Source: "cluster", Name: "kube-node-lease/node-1"}
	stageRenewals(t, s, key, 120) // 80 minutes: two windows
	odd := audit.Event{Lock: key, Kind: audit.EventRenew, At: hour0.Add(30 * time.Minute), Holder: "a", Token: audit.Int64(1),
		Seq: 1, TTL: 60 * time.Second, Position: "rv-31"}
	storetest.Apply(t, s, audit.Batch{Events: []audit.Event{odd}, Synced: true})
	l, err := s.LockByKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	before, err := s.Events(ctx, l.ID, audit.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if got := partitionCount(t, s); got < 10 {
		t.Fatalf("partitions before sealing = %d, want one per 8 of 121 renewals", got)
	}

	if n := sealAll(t, s, hour0.Add(2*time.Hour), 5); n != 120 {
		t.Errorf("sealed %d renewals, want 120", n)
	}
	if n := count(t, s, `SELECT count(*) FROM renewals`); n != 0 {
		t.Errorf("renewal rows after sealing = %d, want 0", n)
	}
	if n := count(t, s, `SELECT count(*) FROM events WHERE kind = 'renew'`); n != 1 {
		t.Errorf("renewals kept as rows of events = %d, want the one no run holds", n)
	}
	if n := count(t, s, `SELECT count(*) FROM renewal_runs`); n != 2 {
		t.Errorf("runs = %d, want one per hour window", n)
	}
	// Every id but the newest is at or below the mark: only the partition
	// still being filled is left, empty.
	if got := partitionCount(t, s); got != 1 {
		t.Errorf("partitions after sealing = %d, want 1", got)
	}
	after, err := s.Events(ctx, l.ID, audit.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range after {
		if after[i].Position != odd.Position && after[i].Kind == audit.EventRenew && after[i].ID == before[i].ID {
			t.Errorf("event %d kept its row id %d once sealed", i, after[i].ID)
		}
		after[i].ID = before[i].ID
	}
	storetest.Equal(t, "events after sealing", after, before)

	// The renewals after the mark are not sealed, whatever their time.
	storetest.Apply(t, s, audit.Batch{Events: []audit.Event{{Lock: key, Kind: audit.EventRenew, At: hour0.Add(81 * time.Minute),
		Holder: "a", Token: audit.Int64(1), Seq: 1, TTL: 60 * time.Second, Position: "2000"}}})
	if n := sealAll(t, s, hour0.Add(2*time.Hour), 5); n != 0 {
		t.Errorf("sealed %d renewals after the sync mark, want 0", n)
	}
}

// TestConcurrentSealsSealEachRenewalOnce runs two replicas' sealing walks
// over the same store at once: every renewal ends in exactly one run, and
// neither walk fails.
func TestConcurrentSealsSealEachRenewalOnce(t *testing.T) {
	url := pg.Get(t).Database(t)
	a, b := openRows(t, url, Options{}), openRows(t, url, Options{})
	const locks, each = 40, 200
	for i := range locks {
		stageRenewals(t, a, audit.LockKey{Source: "cluster", Name: "node-" + strconv.Itoa(i)}, each)
	}
	var wg sync.WaitGroup
	sealed := make([]int, 2)
	for i, s := range []*Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if sealed[i], err = sealWalk(s, hour0.Add(3*time.Hour), 4); err != nil {
				t.Errorf("replica %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if sealed[0]+sealed[1] != locks*each {
		t.Errorf("the walks sealed %d and %d renewals, want %d in all", sealed[0], sealed[1], locks*each)
	}
	if n := count(t, a, `SELECT coalesce(sum(renewals), 0) FROM renewal_runs`); n != locks*each {
		t.Errorf("renewals in runs = %d, want %d", n, locks*each)
	}
	if n := count(t, a, `SELECT count(*) FROM timeline WHERE kind = 'renew'`); n != 0 {
		t.Errorf("renewal rows left = %d, want 0", n)
	}
}

// TestSealReadsABacklogInChunks seals locks with more staged renewals
// than a step reads of each at once, as the previous release leaves them:
// four leader leases of 25,000 renewals every 2 s (14 hour windows each),
// and a node lease. A step of every lock stops at its budget after the
// third leader lease and the next one goes on from there; every renewal is
// sealed once, and each window is one run, though the chunks end inside
// windows.
func TestSealReadsABacklogInChunks(t *testing.T) {
	s := openRows(t, pg.Get(t).Database(t), Options{})
	const leaders, each = 4, 25_000
	for l := range leaders {
		key := audit.LockKey{Source: "cluster", Name: "leader-" + strconv.Itoa(l)}
		ten := audit.Tenure{Lock: key, Seq: 1, Holder: "a", Token: audit.Int64(1), GrantedAt: hour0}
		events := make([]audit.Event, each)
		for i := range events {
			events[i] = audit.Event{Lock: key, Kind: audit.EventRenew, At: hour0.Add(time.Duration(i)*2*time.Second + time.Millisecond),
				Holder: "a", Token: audit.Int64(1), Seq: 1, TTL: 10 * time.Second, Detail: map[string]any{"margin_ratio": 0.8}}
		}
		storetest.Apply(t, s, audit.Batch{Tenures: []audit.Tenure{ten}, Events: events, Synced: true})
	}
	stageRenewals(t, s, audit.LockKey{Source: "cluster", Name: "node"}, 10)
	ctx := context.Background()
	var steps []audit.SealResult
	for after := int64(0); len(steps) < 10; {
		res, err := s.SealRenewals(ctx, audit.SealStep{Before: hour0.Add(24 * time.Hour), AfterLock: after, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		steps = append(steps, res)
		if res.Done {
			break
		}
		if res.NextLock <= after {
			t.Fatalf("a step after lock %d goes on after %d", after, res.NextLock)
		}
		after = res.NextLock
	}
	// The first step seals the first chunk of every lock (of the fourth
	// leader lease, its first two windows) and the rest of the first
	// three; the second the rest of the fourth; the third finds the
	// renewal log empty.
	storetest.Equal(t, "steps", steps, []audit.SealResult{{NextLock: 3, Sealed: 3*each + 2*1800 + 10},
		{NextLock: renewallog.Phase, Sealed: each - 2*1800}, {NextLock: renewallog.Phase + runcodec.LogBuckets, Done: true}})
	if n := count(t, s, `SELECT count(*) FROM renewal_runs r JOIN locks l ON l.id = r.lock_id WHERE l.name LIKE 'leader-%'`); n != leaders*14 {
		t.Errorf("runs of the leader leases = %d, want one per hour window, %d", n, leaders*14)
	}
	if n := count(t, s, `SELECT coalesce(sum(renewals), 0) FROM renewal_runs`); n != leaders*each+10 {
		t.Errorf("renewals in runs = %d, want %d", n, leaders*each+10)
	}
}
