package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/storetest"
	"github.com/leasewatch/leasewatch/migrations"
)

// openStore opens a new database in the test's directory, closed at the
// test's end.
func openStore(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leasewatch.db")
	return openAt(t, path), path
}

// openAt opens the database at path, closed at the test's end.
func openAt(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// TestContract runs the store contract suite on SQLite files.
func TestContract(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) storetest.Store {
			s, _ := openStore(t)
			return s
		},
		Reopen: func(t *testing.T, s storetest.Store) storetest.Store {
			path := s.(*Store).path
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return openAt(t, path)
		},
		Second:   func(t *testing.T, s storetest.Store) storetest.Store { return openAt(t, s.(*Store).path) },
		Log:      true,
		Rebucket: rebucketAll,
		// Rows inserted in SQL: Apply of thousands of locks is slow under -race.
		AddLocks: func(t *testing.T, s storetest.Store, n int) {
			if _, err := s.(*Store).writer.Exec(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ? - 1)
				INSERT INTO locks (source, name) SELECT 'bulk', printf('bulk-%05d', i) FROM n`, n); err != nil {
				t.Fatalf("insert locks: %v", err)
			}
		},
	})
}

func TestOpenAppliesMigrationsOnceAcrossReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leasewatch.db")
	want, err := migrations.Load(migrations.SQLite)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}

	type applied struct {
		Version   int
		Name      string
		AppliedAt int64
	}
	read := func() []applied {
		t.Helper()
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer s.Close()
		rows, err := s.reader.QueryContext(ctx, `SELECT version, name, applied_at FROM schema_migrations ORDER BY version`)
		if err != nil {
			t.Fatalf("read schema_migrations: %v", err)
		}
		defer rows.Close()
		var got []applied
		for rows.Next() {
			var a applied
			if err := rows.Scan(&a.Version, &a.Name, &a.AppliedAt); err != nil {
				t.Fatalf("scan schema_migrations: %v", err)
			}
			got = append(got, a)
		}
		var mode string
		if err := s.reader.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
			t.Fatalf("journal_mode: %v", err)
		}
		if mode != "wal" {
			t.Errorf("journal_mode = %q, want wal", mode)
		}
		return got
	}

	first := read()
	if len(first) != len(want) {
		t.Fatalf("applied %d migrations, want %d", len(first), len(want))
	}
	for i, m := range want {
		if first[i].Version != m.Version || first[i].Name != m.Name || first[i].AppliedAt == 0 {
			t.Errorf("migration %d recorded as %+v, want version %d name %s with a time", i, first[i], m.Version, m.Name)
		}
	}
	second := read()
	storetest.Equal(t, "schema_migrations after reopen", second, first)
}

func TestOpenRejectsPathsThatAreNotPlainFiles(t *testing.T) {
	for _, path := range []string{"", ":memory:", "file:x.db?mode=memory", filepath.Join(t.TempDir(), "a?b.db")} {
		if s, err := Open(context.Background(), path); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want an error", path)
		}
	}
}

func TestReadersDoNotWaitForAnOpenWrite(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	storetest.Apply(t, s, audit.Batch{Events: []audit.Event{{Lock: key, Kind: audit.EventGrant, At: storetest.At(0)}}})
	id := storetest.LockByKey(t, s, key).ID

	// Hold the write lock with an uncommitted event, as a slow Apply would.
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO events (lock_id, kind, at) VALUES (?, 'renew', ?)`, id, storetest.At(1).UnixNano()); err != nil {
		t.Fatalf("insert: %v", err)
	}

	readCtx, cancel := context.WithTimeout(ctx, 2*time.Second) // far below busy_timeout: a blocked read fails
	defer cancel()
	evs, err := s.Events(readCtx, id, audit.EventFilter{})
	if err != nil {
		t.Fatalf("Events during an open write: %v", err)
	}
	if len(evs) != 1 {
		t.Errorf("read %d events during an open write, want the 1 committed", len(evs))
	}
}

// The background reads see what the store committed, through their own
// connection: they neither wait for the read pool nor hold it.
func TestBackgroundReadsApartFromTheReadPool(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	storetest.Apply(t, s, audit.Batch{Events: []audit.Event{
		{Lock: key, Kind: audit.EventGrant, At: storetest.At(0), Holder: "a"},
		{Lock: key, Kind: audit.EventRenew, At: storetest.At(1), Holder: "a"},
	}})
	id := storetest.LockByKey(t, s, key).ID

	// Hold every connection of the read pool, as slow pages would.
	var held []*sql.Conn
	for range readConns {
		c, err := s.reader.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	readCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	bg := s.Background()
	l, err := bg.Lock(readCtx, id)
	if err != nil {
		t.Fatalf("Background().Lock with the read pool busy: %v", err)
	}
	if l.Key() != key {
		t.Errorf("Background().Lock = %+v, want %v", l, key)
	}
	evs, err := bg.Events(readCtx, id, audit.EventFilter{Kind: audit.EventGrant})
	if err != nil || len(evs) != 1 || evs[0].Holder != "a" {
		t.Errorf("Background().Events = %+v, %v; want the grant to a", evs, err)
	}
	times, err := bg.EventTimes(readCtx, id, audit.EventRenew, audit.TimeFilter{})
	if err != nil || len(times) != 1 || !times[0].Equal(storetest.At(1)) {
		t.Errorf("Background().EventTimes = %v, %v; want the renewal at %v", times, err, storetest.At(1))
	}
}

func TestConnectionsCarryPragmas(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	pragma := func(db *sql.DB, name string) int64 {
		t.Helper()
		var v int64
		if err := db.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v); err != nil {
			t.Fatalf("PRAGMA %s: %v", name, err)
		}
		return v
	}
	for _, tc := range []struct {
		pool string
		db   *sql.DB
	}{{"writer", s.writer}, {"reader", s.reader.DB}, {"background", s.bgPool.DB}} {
		for name, want := range map[string]int64{"busy_timeout": 10000, "synchronous": 2, "foreign_keys": 1} {
			if got := pragma(tc.db, name); got != want {
				t.Errorf("%s: %s = %d, want %d", tc.pool, name, got, want)
			}
		}
	}
	if got := pragma(s.reader.DB, "query_only"); got != 1 {
		t.Errorf("reader: query_only = %d, want 1", got)
	}
	// A database larger than the map is read through the connections' own
	// page caches, memory the process keeps: the map must be SQLite's largest.
	if got := pragma(s.reader.DB, "mmap_size"); got != readMapSize {
		t.Errorf("reader: mmap_size = %d, want %d", got, readMapSize)
	}
	// Background work reads without the map, so that a sweep of every
	// lock's history is not counted in the process's memory.
	if got := pragma(s.bgPool.DB, "mmap_size"); got != 0 {
		t.Errorf("background: mmap_size = %d, want 0", got)
	}
	if got := pragma(s.bgPool.DB, "query_only"); got != 1 {
		t.Errorf("background: query_only = %d, want 1", got)
	}
	if got := pragma(s.writer, "query_only"); got != 0 {
		t.Errorf("writer: query_only = %d, want 0", got)
	}
	if _, err := s.reader.ExecContext(ctx, `INSERT INTO cursors (source, position) VALUES ('x', 'y')`); err == nil {
		t.Error("insert through the read pool succeeded, want it refused")
	}
}

// TestMigrationMovesTrackStateOutOfLockRows upgrades a database written
// before 0005, whose lock rows carried the tracker's memory as JSON with its
// recent tenures inside: Restore must give the same memory back.
func TestMigrationMovesTrackStateOutOfLockRows(t *testing.T) {
	ctx := context.Background()
	// Written as 0004's code wrote it: two recent tenures in the JSON.
	s := upgradedFrom(t, 4, []string{
		`INSERT INTO locks (id, source, kind, name, state, holder, token, renewed_at, expires_at, lease_duration_ms, changed_at, track_state)
			VALUES (7, 'src', 'kubernetes', 'orders', 'held', 'b', 3, 5000, 15000, 10000, 5000,
			'{"recent":[{"Seq":2},{"Seq":3}],"next_seq":3,"last_grant_token":3,"sequential_tokens":true,"resources":{"db":{"highest":2}}}')`,
		`INSERT INTO locks (id, source, name) VALUES (8, 'src', 'bare')`,
		`INSERT INTO tenures (lock_id, seq, holder, token, granted_at, ended_at, end_reason) VALUES (7, 1, 'a', 1, 1000, 2000, 'released')`,
		`INSERT INTO tenures (lock_id, seq, holder, token, granted_at, ended_at, end_reason) VALUES (7, 2, 'a', 2, 3000, 4000, 'expired')`,
		`INSERT INTO tenures (lock_id, seq, holder, token, granted_at, renewals, last_renewed_at, lease_duration_ms, expires_at) VALUES (7, 3, 'b', 3, 4000, 1, 5000, 10000, 15000)`,
		`INSERT INTO events (lock_id, kind, at) VALUES (7, 'grant', 4000), (7, 'renew', 5000)`,
	})
	states, _, err := s.Restore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 2 {
		t.Fatalf("restored %d locks, want 2", len(states))
	}
	st := states[0]
	var seqs []int64
	for _, ten := range st.Recent {
		seqs = append(seqs, ten.Seq)
	}
	if !slices.Equal(seqs, []int64{2, 3}) || st.Recent[1].Renewals != 1 || st.NextSeq != 3 || !st.SequentialTokens ||
		st.LastGrantToken == nil || *st.LastGrantToken != 3 || st.Resources["db"] == nil || *st.Resources["db"].Highest != 2 {
		t.Errorf("restored state = %s with recent tenures %v, want 0004's memory with tenures 2 and 3", storetest.Show(st), seqs)
	}
	if bare := states[1]; bare.NextSeq != 0 || bare.Recent != nil {
		t.Errorf("bare lock restored as %s, want nothing remembered", storetest.Show(bare))
	}
	// The rows held every event before the upgrade: nothing to replay.
	if evs, err := s.Unsynced(ctx); err != nil || len(evs) != 0 {
		t.Errorf("Unsynced after the upgrade = %d events, %v; want none", len(evs), err)
	}
}

// migratedTo creates a database at path with the migrations up to version
// applied and recorded, as an older leasewatch left it, and returns it open.
func migratedTo(t *testing.T, path string, version int) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := migrations.Load(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version > version {
			break
		}
		if _, err := db.Exec(m.SQL); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if _, err := db.Exec(`INSERT INTO schema_migrations VALUES (?, ?, 0)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// upgradedFrom makes a database migrated to version, runs rows in it as the
// code of that version wrote them, and opens it, which migrates it the rest
// of the way.
func upgradedFrom(t *testing.T, version int, rows []string) *Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leasewatch.db")
	db := migratedTo(t, path, version)
	for _, q := range rows {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open (migrating): %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestMigrationGivesFindingsTheirLockClass upgrades a database written
// before 0007: the findings it holds take their locks' classes, so a
// heartbeat's finding leaves the default counts at once.
func TestMigrationGivesFindingsTheirLockClass(t *testing.T) {
	ctx := context.Background()
	s := upgradedFrom(t, 6, []string{
		`INSERT INTO locks (id, source, name, class) VALUES (1, 'k8s', 'ns/orders', 'lock'), (2, 'k8s', 'kube-node-lease/node-1', 'heartbeat')`,
		`INSERT INTO findings (lock_id, kind, severity, at) VALUES (1, 'late_renewal', 'warning', 1000), (2, 'lease_expired', 'warning', 2000), (2, 'overlap', 'critical', 3000)`,
	})
	for class, want := range map[audit.Class]map[audit.Severity]int{
		audit.ClassLock:      {audit.SeverityWarning: 1},
		audit.ClassHeartbeat: {audit.SeverityWarning: 1, audit.SeverityCritical: 1},
	} {
		got, err := s.FindingCounts(ctx, audit.FindingCountFilter{Class: class})
		if err != nil {
			t.Fatal(err)
		}
		storetest.Equal(t, "counts of class "+string(class)+" after the upgrade", got, want)
	}
}

// 0018 counts the writes stored before it per minute, as its triggers
// count those stored after: a window's totals are the same either way.
func TestMigrationCountsTheWritesAlreadyStored(t *testing.T) {
	ctx := context.Background()
	s := upgradedFrom(t, 17, storetest.WritesBeforeBins)
	var bins int
	if err := s.reader.QueryRowContext(ctx, `SELECT count(*) FROM write_bins`).Scan(&bins); err != nil {
		t.Fatal(err)
	}
	storetest.CheckWritesBeforeBins(t, s, bins)
}

// 0024 moves each lock's resources out of its track state's JSON into rows
// of their own.
func TestMigrationMovesResourcesIntoRows(t *testing.T) {
	ctx := context.Background()
	s := upgradedFrom(t, 23, storetest.ResourcesInTrackState)
	storetest.CheckResourcesMoved(t, s)
	var left int
	if err := s.reader.QueryRowContext(ctx, `SELECT count(*) FROM lock_tracks WHERE json_type(state, '$.resources') IS NOT NULL`).Scan(&left); err != nil || left != 0 {
		t.Errorf("track states still holding resources = %d, %v; want 0", left, err)
	}
}
