package postgres

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
)

// A commit waiting for its synchronous standby, its wait cancelled as an
// operator's pg_cancel_backend does when the standby is gone, is reported
// done by PostgreSQL with nothing but a warning: committed on the primary
// only. Apply answers it as unavailable, never as stored, so no 202 rests on
// it; what it committed is kept (the next batch takes its ids after it), and
// once the standby is back batches are taken again.
func TestCancelledSynchronousCommitIsNotTaken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, url, standby := openSynchronous(t, ctx)
	if err := s.Apply(ctx, grant("etcd", "before", 7, 0)); err != nil {
		t.Fatalf("Apply with the standby streaming: %v", err)
	}

	standby.Kill()
	b := grant("etcd", "orders", 8, 0)
	applied := make(chan error, 1)
	go func() { applied <- s.Apply(ctx, b) }()
	endSyncWait(t, ctx, url, "pg_cancel_backend")
	if err := <-applied; audit.ErrorCode(err) != audit.EUNAVAILABLE {
		t.Fatalf("Apply whose wait for the standby was cancelled = %v, want EUNAVAILABLE", err)
	}
	if _, err := s.LockByKey(ctx, b.Locks[0].Lock.Key()); err != nil {
		t.Fatalf("the batch committed on the primary: LockByKey = %v", err)
	}

	if err := standby.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	after := grant("etcd", "after", 9, 0)
	if err := s.Apply(ctx, after); err != nil {
		t.Fatalf("Apply with the standby back: %v", err)
	}
	for _, name := range []string{"before", "orders", "after"} {
		l, err := s.LockByKey(ctx, audit.LockKey{Source: "etcd", Name: name})
		if err != nil {
			t.Fatalf("lock %s: %v", name, err)
		}
		if events, err := s.Events(ctx, l.ID, audit.EventFilter{}); err != nil || len(events) != 1 {
			t.Errorf("lock %s: events %+v, %v; want its grant once", name, events, err)
		}
	}
}

// A commit whose outcome serve cannot know (its connection ended while
// PostgreSQL waited for the synchronous standby, which kept the commit) used
// renewal log ids the store had reserved: the next batch takes new ones,
// not those.
func TestUnknownCommitOutcomeReusesNoLogIDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, url, standby := openSynchronous(t, ctx)
	key := audit.LockKey{Source: "kube", Name: "kube-node-lease/node-1"}
	ten := audit.Tenure{Lock: key, Seq: 1, Holder: "node-1", Token: audit.Int64(1), GrantedAt: at(0), LeaseDuration: 40 * time.Second}
	renewal := func(sec int) audit.Batch {
		return audit.Batch{Events: []audit.Event{{Lock: key, Kind: audit.EventRenew, At: at(sec), Holder: ten.Holder,
			Token: ten.Token, TTL: ten.LeaseDuration, Seq: 1, Position: strconv.Itoa(sec),
			Detail: map[string]any{"margin_ratio": 0.75, "renewed_at": at(sec).Add(-time.Millisecond).Format(time.RFC3339Nano)}}}}
	}
	if err := s.Apply(ctx, audit.Batch{Tenures: []audit.Tenure{ten}, Synced: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, renewal(10)); err != nil {
		t.Fatal(err)
	}

	standby.Kill()
	applied := make(chan error, 1)
	go func() { applied <- s.Apply(ctx, renewal(20)) }()
	endSyncWait(t, ctx, url, "pg_terminate_backend")
	if err := <-applied; audit.ErrorCode(err) != audit.EUNAVAILABLE {
		t.Fatalf("Apply whose connection ended in the wait for the standby = %v, want EUNAVAILABLE", err)
	}
	if err := standby.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, renewal(30)); err != nil {
		t.Fatalf("Apply after a commit of unknown outcome: %v", err)
	}
	l, err := s.LockByKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	events, err := s.Events(ctx, l.ID, audit.EventFilter{})
	if err != nil || len(events) != 3 {
		t.Errorf("renewals stored: %d, %v; want the 3, the one of unknown outcome included", len(events), err)
	}
}

// openSynchronous opens a store on a server of the test's own whose
// commits wait for its synchronous standby, and returns it with its URL and
// the standby.
func openSynchronous(t *testing.T, ctx context.Context) (*Store, string, *pgtest.Server) {
	t.Helper()
	primary := pgtest.New(t, pgtest.Options{NoFsync: true})
	url := primary.Database(t)
	standby := pgtest.NewStandby(t, primary, pgtest.Options{NoFsync: true})
	if err := primary.RequireSynchronousStandby(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, url, standby
}

// endSyncWait waits until a backend of the database at url waits for its
// synchronous standby and ends that wait with how: pg_cancel_backend or
// pg_terminate_backend, as an operator does when commits hang.
func endSyncWait(t *testing.T, ctx context.Context, url, how string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		var ended bool
		err := conn.QueryRow(ctx, `SELECT coalesce(bool_or(`+how+`(pid)), false)
			FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND datname = current_database()`).Scan(&ended)
		if err != nil {
			t.Fatal(err)
		}
		if ended {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no backend waited for the synchronous standby")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
