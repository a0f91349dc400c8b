package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
)

// riverLeaderDDL is River's leader table, from riverpgxv5's migrations 002
// and 004.
const riverLeaderDDL = `CREATE UNLOGGED TABLE river_leader(elected_at timestamptz NOT NULL, expires_at timestamptz NOT NULL,
	leader_id text NOT NULL, name text PRIMARY KEY DEFAULT 'default' CHECK (name = 'default'))`

// TestStream follows lease tables through a slot on a server with
// wal_level = logical.
func TestStream(t *testing.T) {
	srv := pgtest.New(t, pgtest.Options{NoFsync: true, Settings: map[string]string{"wal_level": "logical"}})
	url := srv.Database(t)
	ctx := t.Context()
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	exec := func(t *testing.T, sql string, args ...any) int64 {
		t.Helper()
		tag, err := db.Exec(ctx, sql, args...)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return tag.RowsAffected()
	}
	exec(t, ShedLockTable)
	exec(t, riverLeaderDDL)

	t.Run("ShedLockRestartFromStoredCursor", func(t *testing.T) { testStreamShedLock(t, url, exec) })
	t.Run("DbSchedulerVersionToken", func(t *testing.T) { testStreamDbScheduler(t, url, exec) })
	t.Run("TableWithoutIdentityRefused", func(t *testing.T) {
		exec(t, "CREATE TABLE locks (name text NOT NULL, owner text, until timestamptz)")
		m := TableMapping{Table: "locks", Names: []string{"name"}, Holder: "owner", Expires: "until"}
		s, err := NewStream(StreamConfig{URL: url, Source: "bare", Tables: []TableMapping{m}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Start(ctx, ""); err == nil || !strings.Contains(err.Error(), "no primary key or replica identity") {
			s.Close(ctx)
			t.Fatalf("Start on a table without a key: %v; want it refused", err)
		}
		// Nothing published: the application can still update its table.
		exec(t, "INSERT INTO locks VALUES ('a', 'x', now())")
		exec(t, "UPDATE locks SET owner = 'y'")
		exec(t, "ALTER TABLE locks ADD PRIMARY KEY (name, owner)")
		_, err = s.Start(ctx, "")
		if err == nil || !strings.Contains(err.Error(), "key: locks's replica identity is (name, owner), not (name)") {
			s.Close(ctx)
			t.Fatalf("Start with a key other than the primary key: %v; want it refused", err)
		}
	})
	t.Run("UnloggedTableRefused", func(t *testing.T) {
		river, _ := LookupPreset("river_leader")
		s, err := NewStream(StreamConfig{URL: url, Source: "jobs", Tables: []TableMapping{river.Mapping}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Start(ctx, "")
		if err == nil {
			s.Close(ctx)
			t.Fatal("Start on an UNLOGGED table succeeded")
		}
		for _, want := range []string{`cannot add relation "river_leader" to publication`, "This operation is not supported for unlogged tables."} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Start: %v; want the server's %q", err, want)
			}
		}
	})
}

// testStreamShedLock follows ShedLock's table through a crash, two
// restarts, a TRUNCATE and the slot's loss.
func testStreamShedLock(t *testing.T, url string, exec execFunc) {
	shedlock, _ := LookupPreset("shedlock")
	cfg := StreamConfig{URL: url, Source: "Orders DB", Tables: []TableMapping{shedlock.Mapping}}
	grant, renew, token := streamUntilCrash(t, url, cfg, exec)
	restartAfterCrash(t, cfg, exec, renew, token)
	replayFromGrant(t, cfg, exec, grant)
	dropSource(t, url, cfg, exec, grant)
}

// execFunc runs a statement and returns the rows it affected.
type execFunc func(t *testing.T, sql string, args ...any) int64

// streamUntilCrash: a lock held before the start is observed in the
// slot's snapshot; a grant, confirmed, and an extension, stored but not
// confirmed when the stream stops.
func streamUntilCrash(t *testing.T, url string, cfg StreamConfig, exec execFunc) (grant, renew streamed, token int64) {
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	exec(t, ShedLockAcquire, "nightly", now.Add(10*time.Minute), now, "node-0")

	s1 := startStream(t, cfg, "")
	first := s1.first
	if first == nil || !first.Snapshot || len(first.Observations) != 1 {
		t.Fatalf("initial read: %+v; want a snapshot of one held lock", first)
	}
	if ob := first.Observations[0]; ob.Kind != audit.EventObserved || ob.Lock.Name != "shedlock/nightly" || ob.Holder != "node-0" ||
		ob.Token == nil || *ob.Token != int64(first.Position) {
		t.Fatalf("initial read: %s; want nightly observed, held by node-0, token the slot's consistent point %d", describe(ob), first.Position)
	}

	acquired := time.Now().UTC().Truncate(time.Millisecond)
	if exec(t, ShedLockAcquire, "report", acquired.Add(time.Minute), acquired, "node-a") != 1 {
		t.Fatal("node-a could not acquire report")
	}
	grant = s1.next(t, first.Position)
	token = *only(t, grant, audit.EventGrant, "node-a").Token
	if token <= int64(first.Position) || token >= int64(grant.Position) {
		t.Fatalf("grant token %d, want the commit LSN: after the slot's start %d, before the transaction's end %d", token, first.Position, grant.Position)
	}
	if err := s1.Confirm(ctx, grant.Position); err != nil {
		t.Fatal(err)
	}
	extended := time.Now().UTC()
	if exec(t, ShedLockExtend, "report", "node-a", extended.Add(2*time.Minute), extended) != 1 {
		t.Fatal("node-a could not extend report")
	}
	renew = s1.next(t, grant.Position)
	if r := only(t, renew, audit.EventRenew, "node-a"); *r.Token != token {
		t.Fatalf("renewal token %d, want the grant's %d", *r.Token, token)
	}
	// Stored with the renewal, but the process dies before confirming it:
	// the slot holds the WAL from the grant on.
	s1.Close(ctx)
	if n := retained(t, url, cfg.Source); n <= 0 {
		t.Fatalf("retained WAL = %d bytes, want some: the renewal is not confirmed", n)
	}
	return grant, renew, token
}

// restartAfterCrash: an unlock while down; a start from the cursor stored
// with the extension gets the unlock once, with the grant's token, and not
// the extension again.
func restartAfterCrash(t *testing.T, cfg StreamConfig, exec execFunc, renew streamed, token int64) {
	ctx := t.Context()
	exec(t, ShedLockUnlock, "report", time.Now().UTC())
	s2 := startStream(t, cfg, renew.Cursor)
	if s2.first != nil {
		t.Fatalf("a start from a cursor gave an initial read: %+v", s2.first)
	}
	release := s2.next(t, renew.Position)
	if r := only(t, release, audit.EventRelease, "node-a"); *r.Token != token {
		t.Fatalf("release token %d, want the grant's %d (restored from the cursor)", *r.Token, token)
	}
	if exec(t, ShedLockAcquire, "report", time.Now().UTC().Add(time.Minute), time.Now().UTC(), "node-b") != 1 {
		t.Fatal("node-b could not acquire report")
	}
	if b := only(t, s2.next(t, release.Position), audit.EventGrant, "node-b"); *b.Token <= token {
		t.Fatalf("node-b's token %d, want more than node-a's %d", *b.Token, token)
	}
	s2.Close(ctx)
}

// replayFromGrant: a start from the grant's cursor, the last confirmed,
// gets every change since, once each; then a TRUNCATE.
func replayFromGrant(t *testing.T, cfg StreamConfig, exec execFunc, grant streamed) {
	ctx := t.Context()
	// A start from the grant's cursor, confirmed, gets every change since,
	// once each.
	s3 := startStream(t, cfg, grant.Cursor)
	from := grant.Position
	for _, want := range []struct {
		kind   audit.EventKind
		holder string
	}{{audit.EventRenew, "node-a"}, {audit.EventRelease, "node-a"}, {audit.EventGrant, "node-b"}} {
		b := s3.next(t, from)
		only(t, b, want.kind, want.holder)
		from = b.Position
	}
	// The table emptied: every held lock ends.
	exec(t, "TRUNCATE shedlock")
	var ended []string
	for _, ob := range s3.next(t, from).Observations {
		ended = append(ended, describe(ob))
	}
	if len(ended) != 2 || !strings.HasPrefix(ended[0], "release shedlock/nightly node-0 ") || !strings.HasPrefix(ended[1], "release shedlock/report node-b ") {
		t.Fatalf("after TRUNCATE:\n%s\nwant the releases of nightly and report", strings.Join(ended, "\n"))
	}
	s3.Close(ctx)
}

// dropSource: a slot dropped behind the stream's back, then the source
// removed.
func dropSource(t *testing.T, url string, cfg StreamConfig, exec execFunc, grant streamed) {
	ctx := t.Context()
	// The slot dropped behind the stream's back: a start from the cursor
	// says the changes since are lost.
	if err := Drop(ctx, url, cfg.Source); err != nil {
		t.Fatal(err)
	}
	lost, err := NewStream(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lost.Start(ctx, grant.Cursor); !errors.Is(err, ErrSlotLost) {
		lost.Close(ctx)
		t.Fatalf("start from a cursor of a dropped slot: %v, want ErrSlotLost", err)
	}

	// The source removed: no slot or publication left behind.
	if err := Drop(ctx, url, cfg.Source); err != nil {
		t.Fatal(err)
	}
	if n := exec(t, "SELECT FROM pg_replication_slots UNION ALL SELECT FROM pg_publication"); n != 0 {
		t.Fatalf("%d slots and publications left after Drop", n)
	}
	if n := retained(t, url, cfg.Source); n != -1 {
		t.Fatalf("retained WAL of a dropped slot = %d, want none", n)
	}
}

// retained is RetainedWAL of source's slot, -1 when it has none.
func retained(t *testing.T, url, source string) int64 {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	n, ok, err := RetainedWAL(t.Context(), conn, source)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return -1
	}
	return n
}

// db-scheduler's table (kagkarlsson/db-scheduler postgresql_tables.sql)
// and its statements (JdbcTaskRepository: pick, heartbeat, reschedule),
// run from Go with the scheduler's time.
const (
	dbSchedulerDDL = `CREATE TABLE scheduled_tasks (task_name text NOT NULL, task_instance text NOT NULL, task_data bytea,
		execution_time timestamptz NOT NULL, picked BOOLEAN NOT NULL, picked_by text, last_success timestamptz,
		last_failure timestamptz, consecutive_failures INT, last_heartbeat timestamptz, version BIGINT NOT NULL,
		priority SMALLINT, PRIMARY KEY (task_name, task_instance))`
	dbSchedulerPick = `UPDATE scheduled_tasks SET picked = true, picked_by = $1, last_heartbeat = $2, version = version + 1
		WHERE picked = false AND task_name = $3 AND task_instance = $4 AND version = $5`
	dbSchedulerHeartbeat  = `UPDATE scheduled_tasks SET last_heartbeat = $1 WHERE task_name = $2 AND task_instance = $3 AND version = $4`
	dbSchedulerReschedule = `UPDATE scheduled_tasks SET picked = false, picked_by = NULL, last_heartbeat = NULL, last_success = $1,
		execution_time = $2, version = version + 1 WHERE task_name = $3 AND task_instance = $4 AND version = $5`
)

// testStreamDbScheduler: a pick, a heartbeat and a reschedule, read from
// the stream with the version as the token, and a bool as HeldIf.
func testStreamDbScheduler(t *testing.T, url string, exec execFunc) {
	exec(t, dbSchedulerDDL)
	now := time.Now().UTC()
	exec(t, "INSERT INTO scheduled_tasks (task_name, task_instance, execution_time, picked, version) VALUES ('mail', '1', $1, false, 1)", now)
	preset, _ := LookupPreset("scheduled_tasks")
	s := startStream(t, StreamConfig{URL: url, Source: "tasks", Tables: []TableMapping{preset.Mapping}}, "")
	if len(s.first.Observations) != 0 {
		t.Fatalf("initial read of a task not picked: %v", s.first.Observations)
	}
	var got []string
	pos := s.first.Position
	for _, step := range []struct {
		sql  string
		args []any
	}{
		{dbSchedulerPick, []any{"node-a", now, "mail", "1", 1}},
		{dbSchedulerHeartbeat, []any{now.Add(5 * time.Minute), "mail", "1", 2}},
		{dbSchedulerReschedule, []any{now.Add(6 * time.Minute), now.Add(time.Hour), "mail", "1", 2}},
	} {
		if exec(t, step.sql, step.args...) != 1 {
			t.Fatalf("%s %v changed no row", step.sql, step.args)
		}
		b := s.next(t, pos)
		pos = b.Position
		for _, ob := range b.Observations {
			got = append(got, strings.Join(strings.Fields(describe(ob))[:4], " "))
		}
	}
	want := []string{"grant scheduled_tasks/mail/1 node-a token=2", "renew scheduled_tasks/mail/1 node-a token=2", "release scheduled_tasks/mail/1 node-a token=2"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("observed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	s.Close(t.Context())
	if err := Drop(t.Context(), url, "tasks"); err != nil {
		t.Fatal(err)
	}
}

// testStream is a started stream and its initial read.
type testStream struct {
	*Stream
	first *StreamBatch
}

// startStream starts a stream from stored, and closes it when the test
// ends.
func startStream(t *testing.T, cfg StreamConfig, stored string) testStream {
	t.Helper()
	s, err := NewStream(cfg)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Start(t.Context(), stored)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return testStream{s, first}
}

// streamed is a batch with the stream's cursor as of it.
type streamed struct {
	StreamBatch
	Cursor string
}

// cursorOf is b, which s returned last, with s's cursor.
func (s testStream) cursorOf(t *testing.T, b StreamBatch) streamed {
	t.Helper()
	cur, err := s.Cursor()
	if err != nil {
		t.Fatal(err)
	}
	return streamed{b, cur}
}

// next returns the next batch with observations, within 10 s. Every batch
// on the way must be past after, the position of the batch before: a
// batch at or before it is a change delivered twice.
func (s testStream) next(t *testing.T, after LSN) streamed {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		b, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		if b.Position <= after {
			t.Fatalf("a batch at %s, not past %s: delivered again", b.Position, after)
		}
		if len(b.Observations) > 0 {
			return s.cursorOf(t, b)
		}
		after = b.Position
	}
}

// only returns b's one observation, which must be of kind by holder on
// shedlock/report, with a token.
func only(t *testing.T, b streamed, kind audit.EventKind, holder string) audit.Observation {
	t.Helper()
	if len(b.Observations) != 1 {
		var got []string
		for _, ob := range b.Observations {
			got = append(got, describe(ob))
		}
		t.Fatalf("batch of %d observations, want one %s by %s:\n%s", len(b.Observations), kind, holder, strings.Join(got, "\n"))
	}
	ob := b.Observations[0]
	if ob.Kind != kind || ob.Holder != holder || ob.Lock.Name != "shedlock/report" || ob.Token == nil || ob.Position == "" {
		t.Fatalf("%s, want a %s of shedlock/report by %s with a token and a position", describe(ob), kind, holder)
	}
	return ob
}
