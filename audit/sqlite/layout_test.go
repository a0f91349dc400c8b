package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/migrations"
)

// TestExistingDatabaseOpensUnchanged opens a database as a release before
// the engine-per-directory layout left it: every migration applied and
// recorded by version and name. Open must recognise each one and apply
// nothing again, so the records keep their original applied_at.
func TestExistingDatabaseOpensUnchanged(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leasewatch.db")
	ms, err := migrations.Load(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if _, err := db.Exec(m.SQL); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if _, err := db.Exec(`INSERT INTO schema_migrations VALUES (?, ?, 7)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`INSERT INTO locks (source, name) VALUES ('etcd', 'orders')`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	rows, err := s.reader.QueryContext(ctx, `SELECT version, name, applied_at FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for ; rows.Next(); i++ {
		var (
			v, at int64
			name  string
		)
		if err := rows.Scan(&v, &name, &at); err != nil {
			t.Fatal(err)
		}
		if i >= len(ms) || v != int64(ms[i].Version) || name != ms[i].Name || at != 7 {
			t.Errorf("schema_migrations row %d = %d %s applied %d, want the record as it was", i, v, name, at)
		}
	}
	if i != len(ms) {
		t.Errorf("schema_migrations has %d rows, want %d", i, len(ms))
	}
	if _, err := s.LockByKey(ctx, audit.LockKey{Source: "etcd", Name: "orders"}); err != nil {
		t.Errorf("the lock stored before reopening: %v", err)
	}
}
