package main

import (
	"context"
	"crypto/sha256"
	"fmt"
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

// cancelOn is a writer that cancels a context when what is written to it
// first contains a string.
type cancelOn struct {
	syncBuffer
	what   string
	cancel context.CancelFunc
}

func (c *cancelOn) Write(p []byte) (int, error) {
	n, err := c.syncBuffer.Write(p)
	if strings.Contains(c.syncBuffer.String(), c.what) {
		c.cancel()
	}
	return n, err
}

// runDemoDatabase runs leasewatch demo until a lock has changed hands, stops
// it and returns its database file.
func runDemoDatabase(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"demo", "--listen", "127.0.0.1:0", "--keep"}, &stdout, &stderr) }()
	var base, dir string
	eventually(t, 30*time.Second, "the demo's banner", func() bool {
		out := stdout.String()
		i, j := strings.Index(out, "open http://"), strings.Index(out, "data:")
		if i < 0 || j < 0 || !strings.Contains(out[j:], "\n") {
			return false
		}
		base = strings.Fields(out[i+len("open "):])[0]
		dir = strings.Fields(out[j+len("data:"):])[0]
		return true
	})
	t.Cleanup(func() { os.RemoveAll(dir) })
	eventually(t, 30*time.Second, "a handover", func() bool {
		var locks struct{ Locks []apiLock }
		getJSON(t, base, "/api/v1/locks", &locks)
		for _, l := range locks.Locks {
			var tenures struct{ Tenures []apiTenure }
			getJSON(t, base, fmt.Sprintf("/api/v1/locks/%d/tenures", l.ID), &tenures)
			if len(tenures.Tenures) >= 2 {
				return true
			}
		}
		return false
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("demo exited %d: %s", code, stderr.String())
	}
	return filepath.Join(dir, "leasewatch.db")
}

// requestIDs returns the request ids of every write the store holds.
func storedRequestIDs(t *testing.T, s audit.Store) []string {
	t.Helper()
	ctx := context.Background()
	locks, err := s.Locks(ctx, audit.LockFilter{Limit: audit.MaxLockLimit})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range locks {
		events, err := s.Events(ctx, l.ID, audit.EventFilter{TimeFilter: audit.TimeFilter{Limit: audit.MaxListLimit}})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.RequestID != "" {
				ids = append(ids, e.RequestID)
			}
		}
	}
	return ids
}

// The demo's database moves to Postgres with leasewatch copy, interrupted
// and run again, and Postgres then holds what a service resumes from (the
// collectors' cursors, the tracker's memory, unsynced renewals) and reads
// back the same history.
func TestCopyDemoDatabaseToPostgres(t *testing.T) {
	dbPath := runDemoDatabase(t)
	before, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	url := pg.Get(t).Database(t)

	// Interrupted as Ctrl-C would, after the first chunk of the events.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout syncBuffer
	stderr := &cancelOn{what: "copy: events", cancel: cancel}
	if code := run(ctx, []string{"copy", "--from", dbPath, "--to", url, "--chunk", "3"}, &stdout, stderr); code != 1 ||
		!strings.Contains(stderr.String(), "interrupted") || !strings.Contains(stderr.String(), "run the same command again") {
		t.Fatalf("interrupted copy exited %d, stderr:\n%s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "copy: events") && strings.Contains(stderr.String(), "rows/s, done\nleasewatch copy: interrupted") {
		t.Fatalf("the copy was interrupted between tables, not within the events:\n%s", stderr.String())
	}
	var out, errs syncBuffer
	if code := run(context.Background(), []string{"copy", "--from", dbPath, "--to", url, "--chunk", "3"}, &out, &errs); code != 0 {
		t.Fatalf("copy exited %d: %s", code, errs.String())
	}
	t.Logf("interrupted copy:\n%sresumed copy:\n%s%s", stderr.String(), errs.String(), out.String())
	if !strings.Contains(out.String(), "resumed") || !strings.Contains(out.String(), "every count verified") {
		t.Errorf("copy said %q, want a resumed and verified copy", out.String())
	}
	for _, table := range []string{"locks", "events", "cursors", "lock_counts"} {
		if !strings.Contains(errs.String(), "copy: "+table) {
			t.Errorf("no progress of %s on stderr:\n%s", table, errs.String())
		}
	}
	after, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(after) != sha256.Sum256(before) {
		t.Error("the copy changed the source database file")
	}

	ctxOpen := context.Background()
	sq, err := sqlite.Open(ctxOpen, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	pg, err := postgres.Open(ctxOpen, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	cursors, err := pg.Cursors(ctxOpen)
	if err != nil {
		t.Fatal(err)
	}
	if len(cursors) == 0 || cursors[0].Source != demoSource || cursors[0].Position == "" {
		t.Errorf("Postgres cursors = %+v, want the demo's etcd cursor", cursors)
	}
	storetest.SameHistory(t, sq, pg, storedRequestIDs(t, sq))
}

// serve runs on SQLite while locks change hands, stops, its database moves
// to PostgreSQL with leasewatch copy, and serve starts again on the copy:
// the collector resumes from exactly the cursor the old database stored,
// and every acquisition and release, those made while nothing watched
// included, is recorded exactly once across the move.
func TestServeResumesOnTheCopiedDatabase(t *testing.T) {
	srv, cli := startEtcd(t)
	const source = "moved"
	dir := t.TempDir()
	file := filepath.Join(dir, "leasewatch.db")
	p := startServeProcess(t, writeServeConfig(t, dir, "127.0.0.1:0", file, source, srv.Endpoint))
	base := p.waitListening(t, time.Minute)
	waitSourceUp(t, base)
	locks := []string{"/locks/moved-0", "/locks/moved-1"}
	lc := startLockClients(cli, locks, 2)
	db := openReadOnly(t, file)
	eventually(t, 30*time.Second, "handovers recorded on SQLite", func() bool {
		grants, _ := transitions(t, db, source)
		return len(grants[locks[0]]) >= 2 && len(grants[locks[1]]) >= 2
	})
	db.Close()
	if err := p.interrupt(t); err != nil {
		t.Fatalf("serve on SQLite exited with %v:\n%s", err, p.stderr.String())
	}
	db = openReadOnly(t, file)
	stored := cursor(t, db, source)
	db.Close()

	url := pg.Get(t).Database(t)
	var stdout, stderr syncBuffer
	if code := run(context.Background(), []string{"copy", "--from", file, "--to", url}, &stdout, &stderr); code != 0 {
		t.Fatalf("copy exited %d: %s", code, stderr.String())
	}
	p = startServeProcess(t, writeServeConfig(t, t.TempDir(), "127.0.0.1:0", url, source, srv.Endpoint))
	p.waitListening(t, time.Minute)
	eventually(t, 30*time.Second, "serve on the copy to resume its collector", func() bool {
		return resumedAt.MatchString(p.stderr.String())
	})
	if m := resumedAt.FindStringSubmatch(p.stderr.String()); m[1] != stored {
		t.Fatalf("serve on the copy resumed from revision %s, want %s, the cursor SQLite stored", m[1], stored)
	}
	acquired, released := lc.finish(t)
	n := finalCheck(t, p, url, source, locks, acquired, released, nil)
	t.Logf("resumed from revision %s on PostgreSQL; %d acquisitions and their releases recorded once across the move", stored, n)
}

func TestCopyCommandLine(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full.db")
	other := filepath.Join(dir, "other.db")
	for _, p := range []string{full, other} {
		s, err := sqlite.Open(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		storetest.Apply(t, s, audit.Batch{Cursors: []audit.Cursor{{Source: p, Position: "1"}},
			Events: []audit.Event{{Lock: audit.LockKey{Source: p, Name: "l"}, Kind: audit.EventGrant, At: storetest.T0}}})
		s.Close()
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{"BothMissing", []string{"copy"}, 2, []string{"--from: the database to copy is required", "--to: the database to copy into is required"}},
		{"SameDatabase", []string{"copy", "--from", full, "--to", full}, 2, []string{"--to: must not be the --from database"}},
		{"ToAndConfig", []string{"copy", "--from", full, "--to", other, "--config", filepath.Join(dir, "lw.yaml")}, 2,
			[]string{"--to: give --config or --to, not both"}},
		{"ConfigMissing", []string{"copy", "--from", full, "--config", filepath.Join(dir, "none.yaml")}, 1, []string{"--config: ", "none.yaml"}},
		{"BadChunk", []string{"copy", "--from", full, "--to", filepath.Join(dir, "x.db"), "--chunk", "0"}, 2, []string{"--chunk"}},
		{"MissingSource", []string{"copy", "--from", filepath.Join(dir, "none.db"), "--to", filepath.Join(dir, "y.db")}, 1,
			[]string{"--from " + filepath.Join(dir, "none.db"), "no such file"}},
		{"TargetWithOtherData", []string{"copy", "--from", full, "--to", other}, 1,
			[]string{"already holds data that is not a copy of this source", "table locks"}},
		{"PasswordNotShown", []string{"copy", "--from", "postgres://u:secret@127.0.0.1:1/db?connect_timeout=1", "--to", filepath.Join(dir, "z.db")}, 1,
			[]string{"--from postgres://u:xxxxx@127.0.0.1:1/db"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr syncBuffer
			code := run(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.code {
				t.Fatalf("exit code = %d, want %d; stderr: %s", code, tt.code, stderr.String())
			}
			for _, want := range tt.stderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr = %q, want %q in it", stderr.String(), want)
				}
			}
			if strings.Contains(stderr.String(), "secret") {
				t.Errorf("stderr shows the password: %s", stderr.String())
			}
		})
	}
}

// TestCopyIntoTheConfiguredDatabase: --config copies into the database that
// serve with the same file will open.
func TestCopyIntoTheConfiguredDatabase(t *testing.T) {
	dir := t.TempDir()
	from, into := filepath.Join(dir, "from.db"), filepath.Join(dir, "into.db")
	s, err := sqlite.Open(context.Background(), from)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Apply(t, s, audit.Batch{Cursors: []audit.Cursor{{Source: "src", Position: "41"}},
		Events: []audit.Event{{Lock: audit.LockKey{Source: "src", Name: "l"}, Kind: audit.EventGrant, At: storetest.T0}}})
	s.Close()
	cfgPath := filepath.Join(dir, "lw.yaml")
	if err := os.WriteFile(cfgPath, []byte("database: "+into+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	if code := run(context.Background(), []string{"copy", "--from", from, "--config", cfgPath}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit code = %d; stderr: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "into "+into) {
		t.Errorf("stdout = %q, want it to name %s", stdout.String(), into)
	}
	dst, err := sqlite.Open(context.Background(), into)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	cursors, err := dst.Cursors(context.Background())
	if err != nil || len(cursors) != 1 || cursors[0].Position != "41" {
		t.Fatalf("cursors of the configured database = %+v, %v; want src at 41", cursors, err)
	}
}
