package storecopy_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
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

// hour0 starts a run window: renewals observed on whole milliseconds, which
// runs keep exactly.
var hour0 = time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)

// stageNodeLeases stores locks node leases with n renewals each, every 10 s
// from hour0 with up to 4 % of jitter, their renewTime to the microsecond,
// synced or not: in the store's renewal log. An event of another lock
// comes last (with a sync), so that every renewal synced may be sealed.
func stageNodeLeases(t *testing.T, s storetest.Store, locks, n int, synced bool) {
	t.Helper()
	for l := range locks {
		key := audit.LockKey{Source: "cluster-a", Name: fmt.Sprintf("kube-node-lease/node-%d", l)}
		ten := audit.Tenure{Lock: key, Seq: 1, Holder: key.Name, Token: audit.Int64(int64(l)), GrantedAt: hour0, LeaseDuration: 40 * time.Second}
		events := []audit.Event{{Lock: key, Kind: audit.EventGrant, At: hour0, Holder: ten.Holder, Token: ten.Token, TTL: ten.LeaseDuration}}
		for i := 1; i <= n; i++ {
			renewed := hour0.Add(time.Duration(i)*10*time.Second + time.Duration((i*7919+l)%400_000)*time.Microsecond)
			events = append(events, audit.Event{Lock: key, Kind: audit.EventRenew, At: renewed.Add(time.Duration(2+i%4) * time.Millisecond).Truncate(time.Millisecond),
				Holder: ten.Holder, Token: ten.Token, Seq: 1, TTL: ten.LeaseDuration,
				Detail: map[string]any{"margin_ratio": float64(700+i%250) / 1000, "renewed_at": renewed.Format(time.RFC3339Nano)}})
		}
		storetest.Apply(t, s, audit.Batch{Tenures: []audit.Tenure{ten}, Events: events, Synced: synced})
	}
	storetest.Apply(t, s, audit.Batch{Events: []audit.Event{{Lock: audit.LockKey{Source: "clock", Name: "tick"},
		Kind: audit.EventObserved, At: hour0.Add(24 * time.Hour)}}, Synced: synced})
}

// renewalCounts returns how many renewals each lock of s has, read through
// Events page by page (locks without any left out), and how many of them
// come from runs.
func renewalCounts(t *testing.T, s storetest.Store) (map[string]int, int) {
	t.Helper()
	ctx := context.Background()
	locks, err := s.Locks(ctx, audit.LockFilter{Limit: audit.MaxLockLimit})
	if err != nil {
		t.Fatal(err)
	}
	counts, fromRuns := make(map[string]int), 0
	for _, l := range locks {
		f := audit.EventFilter{Kind: audit.EventRenew, TimeFilter: audit.TimeFilter{Limit: 700}}
		for {
			page, err := s.Events(ctx, l.ID, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > 0 {
				counts[l.Name] += len(page)
			}
			for _, e := range page {
				if _, _, ok := runcodec.Split(e.ID); ok {
					fromRuns++
				}
			}
			if len(page) < f.Limit {
				break
			}
			f.Before = audit.EventCursor{At: page[0].At, ID: page[0].ID}
		}
	}
	return counts, fromRuns
}

// Renewals in either store's renewal log, which a copy does not carry as
// it is, and sealed into runs are copied both ways, SQLite to PostgreSQL
// and back, and each target reads every renewal once: none lost, none
// doubled. The log's synced renewals arrive as runs; its unsynced ones,
// which a restore must replay, as rows, which the target then seals
// itself.
func TestCopyRenewalRowsAndRunsBothWays(t *testing.T) {
	const locks, each = 3, 1000 // 2.8 hours of each lock
	dir := t.TempDir()
	logged := openSQLite(t, filepath.Join(dir, "logged.db"))
	stageNodeLeases(t, logged, locks, each, true)
	want, _ := renewalCounts(t, logged)
	if len(want) != locks || want["kube-node-lease/node-0"] != each {
		t.Fatalf("renewals stored: %v, want %d of each of %d locks", want, each, locks)
	}
	check := func(what string, s storetest.Store, sealed bool) {
		t.Helper()
		got, fromRuns := renewalCounts(t, s)
		storetest.Equal(t, what+": renewals per lock", got, want)
		if sealed != (fromRuns == locks*each) || (!sealed && fromRuns != 0) {
			t.Errorf("%s: %d of %d renewals read from runs, want all: %v", what, fromRuns, locks*each, sealed)
		}
	}
	copyInto := func(what string, src storetest.Store, dst storetest.Store, sealed bool) {
		t.Helper()
		if _, err := storecopy.Copy(context.Background(), src, dst, storecopy.Options{Chunk: 400}); err != nil {
			t.Fatalf("%s: Copy: %v", what, err)
		}
		check(what, dst, sealed)
		storetest.SameHistory(t, src, dst, nil)
	}

	// The log's synced renewals: runs in PostgreSQL, and back.
	pgLogged := openPostgres(t, pg.Get(t).Database(t))
	copyInto("the log into PostgreSQL", logged, pgLogged, true)
	copyInto("the log's runs back into SQLite", pgLogged, openSQLite(t, filepath.Join(dir, "logged-back.db")), true)

	// Runs sealed in SQLite: to PostgreSQL and back.
	if n := storetest.Seal(t, logged, hour0.Add(3*time.Hour)); n != locks*each {
		t.Fatalf("sealed %d renewals in SQLite, want %d", n, locks*each)
	}
	check("sealed in SQLite", logged, true)
	pgRuns := openPostgres(t, pg.Get(t).Database(t))
	copyInto("runs into PostgreSQL", logged, pgRuns, true)
	copyInto("runs back into SQLite", pgRuns, openSQLite(t, filepath.Join(dir, "runs-back.db")), true)

	// The log's unsynced renewals: rows in PostgreSQL, and back; once
	// synced there, PostgreSQL seals them, and its runs go into SQLite.
	unsynced := openSQLite(t, filepath.Join(dir, "unsynced.db"))
	stageNodeLeases(t, unsynced, locks, each, false)
	pgRows := openPostgres(t, pg.Get(t).Database(t))
	copyInto("unsynced renewals into PostgreSQL", unsynced, pgRows, false)
	copyInto("rows back into SQLite", pgRows, openSQLite(t, filepath.Join(dir, "rows-back.db")), false)
	storetest.Apply(t, pgRows, audit.Batch{Events: []audit.Event{{Lock: audit.LockKey{Source: "clock", Name: "tick"},
		Kind: audit.EventObserved, At: hour0.Add(25 * time.Hour)}}, Synced: true})
	if n := storetest.Seal(t, pgRows, hour0.Add(3*time.Hour)); n != locks*each {
		t.Fatalf("sealed %d renewals in PostgreSQL, want %d", n, locks*each)
	}
	check("sealed in PostgreSQL", pgRows, true)
	copyInto("PostgreSQL's runs into SQLite", pgRows, openSQLite(t, filepath.Join(dir, "pg-runs.db")), true)

	// PostgreSQL's own log, synced (runs) and not (rows): into SQLite,
	// and back.
	for _, synced := range []bool{true, false} {
		what := fmt.Sprintf("PostgreSQL's log (synced: %v)", synced)
		pgLog := openPostgres(t, pg.Get(t).Database(t))
		stageNodeLeases(t, pgLog, locks, each, synced)
		check(what, pgLog, false)
		back := openSQLite(t, filepath.Join(dir, fmt.Sprintf("pg-log-%v.db", synced)))
		copyInto(what+" into SQLite", pgLog, back, synced)
		copyInto(what+" back into PostgreSQL", back, openPostgres(t, pg.Get(t).Database(t)), synced)
	}
}
