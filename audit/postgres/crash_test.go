package postgres

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
)

// requireEmpty fails unless s holds nothing of a batch that failed.
func requireEmpty(t *testing.T, s *Store, key audit.LockKey) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.LockByKey(ctx, key); audit.ErrorCode(err) != audit.ENOTFOUND {
		t.Errorf("lock %s after the failed batch: %v, want ENOTFOUND", key, err)
	}
	states, cursors, err := s.Restore(ctx)
	if err != nil || len(states) != 0 || len(cursors) != 0 {
		t.Errorf("Restore after the failed batch = %d locks, %d cursors, %v; want nothing", len(states), len(cursors), err)
	}
	if w, err := s.StoredWrites(ctx, []string{"req-1", "req-2"}); err != nil || len(w) != 0 {
		t.Errorf("StoredWrites after the failed batch = %+v, %v; want none", w, err)
	}
	if last, err := s.LastEventAt(ctx); err != nil || len(last) != 0 {
		t.Errorf("LastEventAt after the failed batch = %v, %v; want none", last, err)
	}
	if f, err := s.Findings(ctx, audit.FindingFilter{}); err != nil || len(f) != 0 {
		t.Errorf("Findings after the failed batch = %+v, %v; want none", f, err)
	}
}

// TestFailedBatchLeavesNothing makes Apply fail on a late row of a batch, in
// each of its stages, and checks that nothing of the batch is stored, and
// that the same lock is then stored by the next batch: the failed
// transaction's lock ids are not remembered.
func TestFailedBatchLeavesNothing(t *testing.T) {
	ctx := context.Background()
	for name, spoil := range map[string]func(b *audit.Batch){
		// The last of many events repeats a write's request id under
		// the same lock and resource: a unique violation inside COPY.
		"event": func(b *audit.Batch) {
			key := b.Locks[0].Lock.Key()
			for i := range 100 {
				b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventRenew, At: at(i + 1), Seq: 1})
			}
			w := audit.Event{Lock: key, Kind: audit.EventWriteAccepted, At: at(200), Holder: "worker-1",
				Token: audit.Int64(7), Resource: "db", RequestID: "req-1"}
			b.Events = append(b.Events, w, w)
		},
		// The events are in; a cursor after them is text PostgreSQL
		// refuses (not UTF-8).
		"cursor": func(b *audit.Batch) {
			b.Events = append(b.Events, audit.Event{Lock: b.Locks[0].Lock.Key(), Kind: audit.EventWriteAccepted,
				At: at(200), Resource: "db", RequestID: "req-2"})
			b.Findings = append(b.Findings, audit.Finding{Lock: b.Locks[0].Lock.Key(), Kind: audit.FindingOverlap, At: at(1)})
			b.Cursors = append(b.Cursors, audit.Cursor{Source: "other", Position: "\xff\xfe", At: at(1)})
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := open(t)
			b := grant("etcd", "orders", 7, 0)
			spoil(&b)
			if err := s.Apply(ctx, b); err == nil {
				t.Fatal("Apply of the spoiled batch succeeded")
			}
			requireEmpty(t, s, b.Locks[0].Lock.Key())

			// Only an event names the lock, so its id is looked up, not
			// upserted: an id kept from the rolled back batch would name
			// no row.
			good := audit.Batch{Events: grant("etcd", "orders", 7, 0).Events}
			if err := s.Apply(ctx, good); err != nil {
				t.Fatalf("Apply after the failed batch: %v", err)
			}
			l, err := s.LockByKey(ctx, good.Events[0].Lock)
			if err != nil {
				t.Fatal(err)
			}
			if evs, err := s.Events(ctx, l.ID, audit.EventFilter{}); err != nil || len(evs) != 1 {
				t.Errorf("events after the good batch = %d, %v; want its one", len(evs), err)
			}
		})
	}
}

// TestKillLosesNothingAcknowledged applies batches while the server is
// killed (SIGKILL, fsync on): after crash recovery, every batch Apply
// returned nil for is stored, each event once, and every batch stored is
// whole.
func TestKillLosesNothingAcknowledged(t *testing.T) {
	srv := pgtest.New(t, pgtest.Options{})
	url := srv.Database(t)
	s := openURL(t, url)
	ctx := context.Background()

	const perBatch = 50
	batch := func(i int) audit.Batch {
		b := grant("etcd", fmt.Sprintf("lock-%05d", i), int64(i+1), i)
		key := b.Locks[0].Lock.Key()
		for j := range perBatch - 1 {
			b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventWriteAccepted, At: at(i),
				Holder: "worker-1", Token: audit.Int64(int64(i + 1)), Resource: "db", RequestID: fmt.Sprintf("req-%d-%d", i, j)})
		}
		return b
	}
	acked := make(chan int, 100000)
	done := make(chan error, 1)
	go func() {
		defer close(acked)
		for i := 0; ; i++ {
			if err := s.Apply(ctx, batch(i)); err != nil {
				done <- err
				return
			}
			acked <- i
		}
	}()
	// Kill once a good number of batches are in, while more are on the way.
	var got []int
	deadline := time.After(2 * time.Minute)
	for len(got) < 30 {
		select {
		case i := <-acked:
			got = append(got, i)
		case <-deadline:
			t.Fatalf("only %d batches acknowledged before the deadline", len(got))
		}
	}
	srv.Kill()
	for i := range acked {
		got = append(got, i)
	}
	if err := <-done; audit.ErrorCode(err) != audit.EUNAVAILABLE {
		t.Errorf("Apply while the server is down: %v, want %s", err, audit.EUNAVAILABLE)
	}
	s.Close()

	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := srv.Restart(rctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	s = openURL(t, url)
	states, cursors, err := s.Restore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) < len(got) || len(cursors) != 1 {
		t.Errorf("after the crash: %d locks, %d cursors; want at least the %d acknowledged, one cursor", len(states), len(cursors), len(got))
	}
	stored := make(map[string]bool)
	for _, st := range states {
		stored[st.Lock.Name] = true
		evs, err := s.Events(ctx, st.Lock.ID, audit.EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != perBatch {
			t.Errorf("lock %s has %d events, want its batch's %d: half a batch survived", st.Lock.Name, len(evs), perBatch)
		}
	}
	for _, i := range got {
		if name := fmt.Sprintf("lock-%05d", i); !stored[name] {
			t.Errorf("acknowledged batch %d (%s) lost in the crash", i, name)
		}
	}
	t.Logf("%d batches acknowledged, %d stored", len(got), len(states))
}

// TestFailedPipelineLeavesNothing fails a batch that is its pipeline alone
// (renewals of a known lock, into the renewal log, and a cursor PostgreSQL
// refuses): the server's implicit transaction keeps none of it, and the
// next batch is stored whole, its log rows numbered after nothing of the
// failed one.
func TestFailedPipelineLeavesNothing(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	b := grant("etcd", "orders", 7, 0)
	if err := s.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	key := b.Locks[0].Lock.Key()
	renewals := func(from int) audit.Batch {
		var out audit.Batch
		for i := range 10 {
			out.Events = append(out.Events, audit.Event{Lock: key, Kind: audit.EventRenew, At: at(from + i), Seq: 1,
				TTL: 10 * time.Second, Position: "7"})
		}
		out.Cursors = []audit.Cursor{{Source: "etcd", Position: "rev-" + strconv.Itoa(from), At: at(from)}}
		return out
	}
	spoiled := renewals(1)
	spoiled.Cursors = append(spoiled.Cursors, audit.Cursor{Source: "other", Position: "\xff\xfe", At: at(1)})
	if err := s.Apply(ctx, spoiled); err == nil {
		t.Fatal("Apply of the spoiled batch succeeded")
	}
	l, err := s.LockByKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, `SELECT count(*) FROM renewal_log`); n != 0 {
		t.Errorf("log rows after the failed batch = %d, want none", n)
	}
	if err := s.Apply(ctx, renewals(20)); err != nil {
		t.Fatalf("Apply after the failed batch: %v", err)
	}
	evs, err := s.Events(ctx, l.ID, audit.EventFilter{})
	if err != nil || len(evs) != 11 {
		t.Fatalf("events after the good batch = %d, %v; want the grant and its 10 renewals", len(evs), err)
	}
	if !evs[1].At.Equal(at(20)) {
		t.Errorf("first renewal at %s, want the good batch's, at %s", evs[1].At, at(20))
	}
}
