package postgres

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/storetest"
	"github.com/leasewatch/leasewatch/migrations"
)

// TestEventMigrationsKeepRowsAndIds opens a database that has only
// migration 0001 and events in it: 0002 rebuilds the events table without
// alignment padding and 0003 moves the compact renewal into the renewals
// table, every event reads back as before, and the next event's id follows
// the old ones, even past ids that a rolled-back batch took.
func TestEventMigrationsKeepRowsAndIds(t *testing.T) {
	ctx := context.Background()
	url := pg.Get(t).Database(t)
	conn := migratedTo(t, url, 1)
	for _, sql := range []string{
		`INSERT INTO locks (source, name) VALUES ('src', 'a')`,
		`INSERT INTO tenures (lock_id, seq, holder, token) VALUES (1, 1, 'w', 7)`,
		`INSERT INTO events (lock_id, kind, at, holder, token, ttl_ms, detail) VALUES (1, 'grant', 1000, 'w', 7, 10000, '{"why":"x"}')`,
		`INSERT INTO events (lock_id, kind, at, ttl_ms, seq, margin_permille, renewed_at) VALUES (1, 'renew', 2000, 10000, 1, 900, 1900)`,
		`SELECT nextval('events_id_seq')`, // a batch that rolled back
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%.60s: %v", sql, err)
		}
	}
	s := openURL(t, url)
	l, err := s.LockByKey(ctx, audit.LockKey{Source: "src", Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.Events(ctx, l.ID, audit.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Fatalf("events after the migration: %d, want 2", len(evs))
	}
	byKind := map[audit.EventKind]audit.Event{evs[0].Kind: evs[0], evs[1].Kind: evs[1]}
	g, r := byKind[audit.EventGrant], byKind[audit.EventRenew]
	if g.ID != 1 || g.Holder != "w" || g.Token == nil || *g.Token != 7 || g.TTL != 10*time.Second || g.Detail["why"] != "x" {
		t.Errorf("grant after the migration: %+v", g)
	}
	if r.ID != 2 || r.Holder != "w" || r.Seq != 1 || r.Detail["margin_ratio"] != json.Number("0.9") {
		t.Errorf("renewal after the migration: %+v", r)
	}
	if err := s.Apply(ctx, audit.Batch{Events: []audit.Event{{Lock: l.Key(), Kind: audit.EventRelease, At: time.Unix(3, 0)}}}); err != nil {
		t.Fatal(err)
	}
	// The point of the move: a renewal's row with neither alignment
	// padding nor a null bitmap.
	var rowBytes int
	if err := conn.QueryRow(ctx, `SELECT pg_column_size(r.*) FROM renewals r`).Scan(&rowBytes); err != nil {
		t.Fatal(err)
	}
	// 0001's order took 112 bytes for this row, 0002's 98, 0003's 70.
	if rowBytes > 72 {
		t.Errorf("a renewal's row takes %d bytes, want at most 72", rowBytes)
	}
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM events WHERE kind = 'renew'`).Scan(&left); err != nil || left != 0 {
		t.Errorf("renewals left in events = %d, %v; want 0", left, err)
	}
	var id int64
	if err := conn.QueryRow(ctx, `SELECT max(id) FROM timeline`).Scan(&id); err != nil || id != 4 {
		t.Errorf("the next event's id = %d, %v; want 4, after the rolled-back 3", id, err)
	}
}

// 0010 counts the writes stored before it per minute, as its triggers
// count those stored after: a window's totals are the same either way.
func TestMigrationCountsTheWritesAlreadyStored(t *testing.T) {
	ctx := context.Background()
	url := pg.Get(t).Database(t)
	conn := migratedTo(t, url, 9)
	for _, q := range storetest.WritesBeforeBins {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s := openURL(t, url)
	var bins int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM write_bins`).Scan(&bins); err != nil {
		t.Fatal(err)
	}
	storetest.CheckWritesBeforeBins(t, s, bins)
}

// migratedTo connects to the empty database at url and applies the
// migrations up to version, as a leasewatch of that schema would have.
func migratedTo(t *testing.T, url string, version int) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	ms, err := migrations.Load(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version > version {
			break
		}
		if _, err := conn.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations VALUES ($1, $2, 0)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	return conn
}

// 0014 moves each lock's resources out of its track state's JSON into rows
// of their own.
func TestMigrationMovesResourcesIntoRows(t *testing.T) {
	ctx := context.Background()
	url := pg.Get(t).Database(t)
	conn := migratedTo(t, url, 13)
	for _, q := range storetest.ResourcesInTrackState {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	storetest.CheckResourcesMoved(t, openURL(t, url))
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM lock_tracks WHERE state::jsonb -> 'resources' IS NOT NULL`).Scan(&left); err != nil || left != 0 {
		t.Errorf("track states still holding resources = %d, %v; want 0", left, err)
	}
}

// The renewals the previous release stored as rows of renewals (migration
// 0014's schema) stay where they are through migration 0015, and the first
// seal folds them into runs in place: every one read before and after.
func TestPreviousReleaseRenewalsAreSealedInPlace(t *testing.T) {
	ctx := context.Background()
	url := pg.Get(t).Database(t)
	conn := migratedTo(t, url, 14)
	const n = 1000 // 10 s apart from 08:00:00.004, 2.8 hours
	for _, sql := range []string{
		`INSERT INTO locks (source, name) VALUES ('cluster', 'kube-node-lease/node-1')`,
		`INSERT INTO tenures (lock_id, seq, holder, token, granted_at) VALUES (1, 1, 'node-1', 3, 0)`,
		`CREATE TABLE renewals_0 (LIKE renewals)`,
		`ALTER TABLE renewals ATTACH PARTITION renewals_0 FOR VALUES FROM (0) TO (4194304)`,
		`INSERT INTO renewals (id, lock_id, at, renewed_at, seq, ttl_ms, margin_permille, position, detail)
			SELECT nextval('events_id_seq'), 1, 1767772800004000000 + i * 10000000000, 1767772800001000000 + i * 10000000000,
				1, 40000, 750, '', '' FROM generate_series(0, 999) AS i`,
		`UPDATE journal SET synced_event = (SELECT last_value FROM events_id_seq)`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%.60s: %v", sql, err)
		}
	}
	s := openURL(t, url)
	times := func() []time.Time {
		t.Helper()
		got, err := s.EventTimes(ctx, 1, audit.EventRenew, audit.TimeFilter{Limit: audit.MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	before := times()
	if len(before) != n {
		t.Fatalf("%d renewals after the migration, want %d", len(before), n)
	}
	sealed := 0
	if err := audit.SealThrough(ctx, s, time.Unix(0, 1767772800000000000).Add(4*time.Hour), func(res audit.SealResult, _ time.Duration) error {
		sealed += res.Sealed
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if sealed != n {
		t.Errorf("sealed %d renewals, want %d", sealed, n)
	}
	storetest.Equal(t, "renewal times after sealing", times(), before)
	if rows := count(t, s, `SELECT count(*) FROM renewals`); rows != 0 {
		t.Errorf("%d renewal rows left, want 0", rows)
	}
	evs, err := s.Events(ctx, 1, audit.EventFilter{Kind: audit.EventRenew, TimeFilter: audit.TimeFilter{Limit: 1}})
	if err != nil || len(evs) != 1 || evs[0].Holder != "node-1" || evs[0].Detail["margin_ratio"] == nil {
		t.Errorf("newest renewal after sealing: %+v, %v; want the tenure's holder and the margin", evs, err)
	}
}
