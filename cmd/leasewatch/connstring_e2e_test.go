package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// keywordValue is the URL of a pgtest database in libpq's keyword/value
// form, as pgx, libpq and many Secrets give it, and its password.
func keywordValue(t *testing.T, dbURL string) (string, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	password, _ := u.User.Password()
	return fmt.Sprintf("host=%s port=%s user=%s password='%s' dbname=%s sslmode=disable",
		u.Hostname(), u.Port(), u.User.Username(), password, strings.TrimPrefix(u.Path, "/")), password
}

// sqliteWithCursor makes a SQLite database at path holding a lock's grant
// and source's cursor at position.
func sqliteWithCursor(t *testing.T, path, source, position string) {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.Apply(t, s, audit.Batch{Cursors: []audit.Cursor{{Source: source, Position: position}},
		Events: []audit.Event{{Lock: audit.LockKey{Source: source, Name: "l"}, Kind: audit.EventGrant, At: storetest.T0}}})
}

// noFileNamed fails the test if a file named name (relative: where the
// commands ran) exists, and removes it.
func noFileNamed(t *testing.T, name string) {
	t.Helper()
	for _, n := range []string{name, name + "-wal", name + "-shm"} {
		if _, err := os.Stat(n); err == nil {
			os.Remove(n)
			t.Errorf("a file named after the connection string was created: %q", n)
		}
	}
}

// A libpq keyword/value connection string is PostgreSQL wherever leasewatch
// takes a database: check config accepts it and shows it without its
// password, copy --to copies into the PostgreSQL database it names, and
// serve stores there and logs it without the password. No file is named
// after it.
func TestKeywordValueConnectionString(t *testing.T) {
	dbURL := pg.Get(t).Database(t)
	dsn, password := keywordValue(t, dbURL)
	t.Cleanup(func() { noFileNamed(t, dsn) })
	dir := t.TempDir()

	from := filepath.Join(dir, "from.db")
	sqliteWithCursor(t, from, "kv", "41")
	var stdout, stderr syncBuffer
	if code := run(context.Background(), []string{"copy", "--from", from, "--to", dsn}, &stdout, &stderr); code != 0 {
		t.Fatalf("copy --to a keyword/value string exited %d: %s", code, stderr.String())
	}
	if out := stdout.String() + stderr.String(); strings.Contains(out, password) || !strings.Contains(out, "password=xxxxx") {
		t.Errorf("copy said %q: want the string with password=xxxxx", out)
	}
	st, err := postgres.Open(context.Background(), dbURL, postgres.Options{ExistingSchema: true})
	if err != nil {
		t.Fatalf("the copy left no leasewatch schema in PostgreSQL: %v", err)
	}
	cursors, err := st.Cursors(context.Background())
	st.Close()
	if err != nil || len(cursors) != 1 || cursors[0].Position != "41" {
		t.Fatalf("PostgreSQL's cursors after the copy = %+v, %v; want kv at 41", cursors, err)
	}

	srv, _ := startEtcd(t)
	cfgPath := writeServeConfig(t, dir, "127.0.0.1:0", dsn, "kv", srv.Endpoint)
	stdout, stderr = syncBuffer{}, syncBuffer{}
	if code := run(context.Background(), []string{"check", "config", cfgPath}, &stdout, &stderr); code != 0 {
		t.Fatalf("check config exited %d: %s", code, stderr.String())
	}
	if out := stdout.String(); strings.Contains(out, password) || !strings.Contains(out, "database host=") || !strings.Contains(out, "password=xxxxx") {
		t.Errorf("check config said %q: want the database with password=xxxxx", out)
	}
	p := startServeProcess(t, cfgPath)
	p.waitListening(t, time.Minute)
	// The cursor copied into PostgreSQL is ahead of this new etcd's
	// revisions: serve read it from there.
	eventually(t, 30*time.Second, "serve to read the cursor copied into PostgreSQL", func() bool {
		return strings.Contains(p.stderr.String(), "source=kv cursor=41")
	})
	if log := p.stderr.String(); strings.Contains(log, password) {
		t.Errorf("serve logged the password:\n%s", log)
	}
}

// A copy refused for its source, or for what its target holds, leaves the
// target as it was: no file created, no schema migrated into a database
// that holds another application's tables.
func TestRefusedCopyWritesNothing(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	sqliteWithCursor(t, good, "src", "1")
	other := pg.Get(t).Database(t)
	sqliteOther := filepath.Join(dir, "app.db")
	for driver, name := range map[string]string{"pgx": other, "sqlite": sqliteOther} {
		db, err := sql.Open(driver, name)
		if err == nil {
			_, err = db.Exec(`CREATE TABLE invoices (id bigint PRIMARY KEY)`)
			db.Close()
		}
		if err != nil {
			t.Fatalf("another application's table in %s: %v", driver, err)
		}
	}
	tables := func(t *testing.T, driver, name, query string) []string {
		t.Helper()
		db, err := sql.Open(driver, name)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var names []string
		rows, err := db.Query(query)
		for err == nil && rows.Next() {
			var n string
			err = rows.Scan(&n)
			names = append(names, n)
		}
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	onlyInvoices := func(t *testing.T, names []string) {
		if len(names) != 1 || names[0] != "invoices" {
			t.Errorf("the refused copy's target has the tables %v, want only its own invoices", names)
		}
	}

	for _, tt := range []struct {
		name, from, to, want string
		check                func(t *testing.T)
	}{
		{"SourceNotLeasewatch", sqliteOther, filepath.Join(dir, "new.db"), "the source's schema is not this version's", func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(dir, "new.db")); err == nil {
				t.Error("the refused copy created its target file")
			}
		}},
		{"SQLiteTargetOfAnotherApplication", good, sqliteOther, "its table invoices is not one of leasewatch's", func(t *testing.T) {
			onlyInvoices(t, tables(t, "sqlite", sqliteOther, `SELECT name FROM sqlite_schema WHERE type = 'table'`))
		}},
		{"PostgresTargetOfAnotherApplication", good, other, "its table invoices is not one of leasewatch's", func(t *testing.T) {
			onlyInvoices(t, tables(t, "pgx", other, `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr syncBuffer
			if code := run(context.Background(), []string{"copy", "--from", tt.from, "--to", tt.to}, &stdout, &stderr); code != 1 ||
				!strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("copy exited %d, want 1 with %q:\n%s", code, tt.want, stderr.String())
			}
			tt.check(t)
		})
	}
}
