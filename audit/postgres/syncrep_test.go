package postgres

import (
	"context"
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
	defer s.Close()
	if err := s.Apply(ctx, grant("etcd", "before", 7, 0)); err != nil {
		t.Fatalf("Apply with the standby streaming: %v", err)
	}

	standby.Kill()
	b := grant("etcd", "orders", 8, 0)
	applied := make(chan error, 1)
	go func() { applied <- s.Apply(ctx, b) }()
	cancelSyncWait(t, ctx, url)
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

// cancelSyncWait waits until a backend of the database at url waits for its
// synchronous standby and cancels that wait, as pg_cancel_backend does.
func cancelSyncWait(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		var cancelled bool
		err := conn.QueryRow(ctx, `SELECT coalesce(bool_or(pg_cancel_backend(pid)), false)
			FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND datname = current_database()`).Scan(&cancelled)
		if err != nil {
			t.Fatal(err)
		}
		if cancelled {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no backend waited for the synchronous standby")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
