package storecopy_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasewatch/leasewatch/audit/postgres"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/audit/storecopy"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

var pg = pgtest.Shared{Options: pgtest.Options{NoFsync: true}}

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

func openSQLite(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openPostgres(t *testing.T, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatalf("open Postgres: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fileSums returns the SHA-256 of the database file and of its -wal if that
// holds anything: a reader of a WAL database creates an empty -wal (and the
// -shm index) when there is none, as every SQLite reader does, which
// changes nothing the database holds.
func fileSums(t *testing.T, path string) map[string][32]byte {
	t.Helper()
	sums := make(map[string][32]byte)
	for _, p := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 || p == path {
			sums[p] = sha256.Sum256(b)
		}
	}
	return sums
}

// copyInterrupted copies src into dst, interrupting every run after its
// first committed chunk of the events, until a run completes.
func copyInterrupted(t *testing.T, src storecopy.Source, dst storecopy.Target) int {
	t.Helper()
	for runs := 1; runs < 100; runs++ {
		ctx, cancel := context.WithCancel(context.Background())
		res, err := storecopy.Copy(ctx, src, dst, storecopy.Options{Chunk: 3, Progress: func(p storecopy.Progress) {
			if p.Table == "events" && p.Copied > 0 {
				cancel()
			}
		}})
		cancel()
		switch {
		case err == nil:
			if runs > 1 && !res.Resumed {
				t.Errorf("run %d completed the copy without resuming it", runs)
			}
			return runs
		case !errors.Is(err, context.Canceled):
			t.Fatalf("run %d: %v", runs, err)
		}
	}
	t.Fatal("the copy never completed")
	return 0
}

// A user outgrows SQLite: the file goes to Postgres, through an interrupted
// copy resumed until done, and comes back the same; and Postgres copies
// back into a new file.
func TestCopySQLiteToPostgresAndBack(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leasewatch.db")
	s := openSQLite(t, path)
	ids := storetest.CopyStory(t, s)
	if err := s.Close(); err != nil { // as serve leaves it when stopped
		t.Fatal(err)
	}
	before := fileSums(t, path)

	src, err := sqlite.OpenSource(ctx, path)
	if err != nil {
		t.Fatalf("OpenSource: %v", err)
	}
	url := pg.Get(t).Database(t)
	dst := openPostgres(t, url)
	if runs := copyInterrupted(t, src, dst); runs < 3 {
		t.Errorf("copy completed in %d runs; want several, interrupted in the events", runs)
	}
	src.Close()
	storetest.Equal(t, "source files after the copy", fileSums(t, path), before)
	storetest.SameHistory(t, openSQLite(t, path), dst, ids)

	// And back, from Postgres into a new file.
	pgSrc, err := postgres.OpenSource(ctx, url)
	if err != nil {
		t.Fatalf("OpenSource: %v", err)
	}
	defer pgSrc.Close()
	back := openSQLite(t, filepath.Join(t.TempDir(), "back.db"))
	copyInterrupted(t, pgSrc, back)
	storetest.SameHistory(t, dst, back, ids)
}

// A source whose schema is not this version's (here, a table this copy
// does not know) is refused, naming what differs, before anything is
// written; the copy never migrates a source.
func TestCopyRefusesASourceOfAnotherSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "other.db")
	s := openSQLite(t, path)
	storetest.CopyStory(t, s)
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE extra_rows (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before := fileSums(t, path)

	src, err := sqlite.OpenSource(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := openSQLite(t, filepath.Join(t.TempDir(), "new.db"))
	_, err = storecopy.Copy(ctx, src, dst, storecopy.Options{})
	if err == nil || !strings.Contains(err.Error(), "source's schema") || !strings.Contains(err.Error(), "table extra_rows is not one this version copies") {
		t.Errorf("Copy from a source with an unknown table = %v, want the table named", err)
	}
	if mark, err := dst.Mark(ctx); err != nil || mark != "" {
		t.Errorf("target's mark after the refused copy = %q, %v; want none", mark, err)
	}
	src.Close()
	storetest.Equal(t, "source files", fileSums(t, path), before)
}

// A missing source file is an error, not a new empty database.
func TestOpenSourceRefusesAMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.db")
	if _, err := sqlite.OpenSource(context.Background(), path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenSource(missing) = %v, want ErrNotExist", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenSource created %s", path)
	}
}
