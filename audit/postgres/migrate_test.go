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
