package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx", for reading PostgreSQL behind the service's back

	"github.com/leasewatch/leasewatch/deploy/testproc"
)

// The crash and disk tests run `leasewatch serve` as a process of its own, to
// kill it with SIGKILL or starve it of disk. The process is this test binary
// run with runMainEnv set: init hands it to leasewatch's main before any test
// starts, so there is no second binary to build.
const runMainEnv = "LEASEWATCH_E2E_RUN_MAIN"

func init() {
	if os.Getenv(runMainEnv) == "1" {
		main() // exits
	}
}

// serveProcess is one `leasewatch serve` process.
type serveProcess struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	err    error // Wait's result, once done is closed
}

// startServeProcess starts `leasewatch serve --config configPath`. The test's
// cleanup kills it if it still runs and, when the test failed, logs the end
// of what it wrote to stderr: the process's side of the failure.
func startServeProcess(t *testing.T, configPath string) *serveProcess {
	t.Helper()
	p := &serveProcess{stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "serve", "--config", configPath)
	p.cmd.Env = append(os.Environ(), runMainEnv+"=1")
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start leasewatch serve: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("leasewatch serve --config %s (pid %d) wrote, ending:\n%s", configPath, p.cmd.Process.Pid, testproc.Tail(p.stderr.String(), failedLogLines))
		}
	})
	return p
}

// failedLogLines is how much of a process's log a failed test shows.
const failedLogLines = 150

var listeningURL = regexp.MustCompile(`msg="leasewatch listening" url=(http://\S+)`)

// waitListening returns the process's base URL once it listens. It fails the
// test if the process exits first.
func (p *serveProcess) waitListening(t *testing.T, timeout time.Duration) string {
	t.Helper()
	var base string
	eventually(t, timeout, "leasewatch serve to listen", func() bool {
		select {
		case <-p.done:
			t.Fatalf("leasewatch serve exited (%v) before listening:\n%s", p.err, p.stderr.String())
		default:
		}
		if m := listeningURL.FindStringSubmatch(p.stderr.String()); m != nil {
			base = m[1]
		}
		return base != ""
	})
	return base
}

// kill ends the process with SIGKILL, as a crash or the OOM killer would, and
// waits for it.
func (p *serveProcess) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// interrupt stops the process as Ctrl-C does and returns its exit error.
func (p *serveProcess) interrupt(t *testing.T) error {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
		return p.err
	case <-time.After(30 * time.Second):
		p.kill()
		t.Fatalf("leasewatch serve did not stop within 30s of SIGINT:\n%s", p.stderr.String())
		return nil
	}
}

// writeServeConfig writes a configuration for `leasewatch serve` with one
// etcd source named source, and returns its path.
func writeServeConfig(t *testing.T, dir, listen, database, source, endpoint string) string {
	t.Helper()
	path := filepath.Join(dir, "leasewatch.yaml")
	config := fmt.Sprintf(`listen: %s
database: %q
ingest_tokens: [%q]
sources:
  - name: %s
    kind: etcd
    endpoints: [%q]
    prefixes: ["/locks/"]
`, listen, database, testIngestToken, source, endpoint)
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// storeDB is a leasewatch database that a test reads behind the service's
// back, SQLite or PostgreSQL. The checks below run the same SQL on both
// ($1 parameters, which SQLite takes too).
type storeDB struct {
	*sql.DB
	postgres bool
}

// openReadOnly opens the database (a SQLite path or a postgres:// URL)
// without writing to it: for SQLite no checkpoint, no recovery written back,
// so what the next leasewatch finds is what the last one left.
func openReadOnly(t *testing.T, database string) *storeDB {
	t.Helper()
	db := &storeDB{postgres: strings.HasPrefix(database, "postgres://")}
	var err error
	if db.postgres {
		db.DB, err = sql.Open("pgx", database+"&default_transaction_read_only=on")
	} else {
		db.DB, err = sql.Open("sqlite", "file:"+database+"?mode=ro&_pragma=busy_timeout(5000)")
	}
	if err != nil {
		t.Fatalf("open %s read-only: %v", database, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// querier is a database or a transaction: the checks below read either.
type querier interface {
	Query(query string, args ...any) (*sql.Rows, error)
	QueryRow(query string, args ...any) *sql.Row
}

// integrityCheck fails the test unless the database is intact: SQLite's
// PRAGMA integrity_check is ok, or PostgreSQL's amcheck finds every B-tree
// index of leasewatch's tables consistent with itself and its table.
func integrityCheck(t *testing.T, db *storeDB) {
	t.Helper()
	query := `PRAGMA integrity_check`
	if db.postgres {
		// amcheck ships with the server (Debian's postgresql package). The
		// extension lives in the catalog, never in leasewatch's tables.
		ctx := context.Background()
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatalf("amcheck: %v", err)
		}
		for _, stmt := range []string{`SET default_transaction_read_only = off`, `CREATE EXTENSION IF NOT EXISTS amcheck`, `RESET default_transaction_read_only`} {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("amcheck: %v", err)
			}
		}
		conn.Close()
		// bt_index_check raises an error on the first inconsistency. A
		// partitioned index (relkind I) has no storage of its own: its
		// partitions' indexes are checked.
		query = `SELECT c.relname || ': ' || coalesce(bt_index_check(c.oid, true)::text, '') || 'ok'
			FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE am.amname = 'btree' AND c.relkind = 'i' AND n.nspname = current_schema()`
	}
	rows, err := db.Query(query)
	if err != nil {
		t.Fatalf("integrity check: %v", err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatalf("integrity check: %v", err)
		}
		problems = append(problems, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("integrity check: %v", err)
	}
	ok := len(problems) > 0
	for _, p := range problems {
		ok = ok && (p == "ok" || db.postgres && strings.HasSuffix(p, ": ok"))
	}
	if !ok || !db.postgres && len(problems) != 1 {
		t.Fatalf("integrity check = %q, want ok", problems)
	}
}

// transitions reads every grant and release the store holds for source, per
// lock in store order, and fails the test on any event that says the
// collector lost its place: observed (a fresh start), blind, an inferred grant.
func transitions(t *testing.T, db querier, source string) (grants, releases map[string][]int64) {
	t.Helper()
	rows, err := db.Query(`SELECT l.name, e.kind, coalesce(e.token, -1), e.inferred FROM events e JOIN locks l ON l.id = e.lock_id
		WHERE l.source = $1 AND e.kind IN ('grant', 'release', 'expire', 'observed', 'blind') ORDER BY e.id`, source)
	if err != nil {
		t.Fatalf("read transitions: %v", err)
	}
	defer rows.Close()
	grants, releases = make(map[string][]int64), make(map[string][]int64)
	for rows.Next() {
		var (
			lock, kind string
			token      int64
			inferred   bool
		)
		if err := rows.Scan(&lock, &kind, &token, &inferred); err != nil {
			t.Fatalf("read transitions: %v", err)
		}
		switch {
		case kind == "grant" && !inferred:
			grants[lock] = append(grants[lock], token)
		case kind == "release":
			releases[lock] = append(releases[lock], token)
		default:
			t.Errorf("lock %s: %s event (inferred %v, token %d): the collector did not resume from its cursor", lock, kind, inferred, token)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read transitions: %v", err)
	}
	return grants, releases
}

// requestIDs returns how many times each write report request_id is stored.
func requestIDs(t *testing.T, db querier) map[string]int {
	t.Helper()
	rows, err := db.Query(`SELECT request_id, count(*) FROM events WHERE request_id IS NOT NULL GROUP BY request_id`)
	if err != nil {
		t.Fatalf("read request ids: %v", err)
	}
	defer rows.Close()
	stored := make(map[string]int)
	for rows.Next() {
		var (
			id string
			n  int
		)
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatalf("read request ids: %v", err)
		}
		stored[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read request ids: %v", err)
	}
	return stored
}

// cursor returns source's stored resume cursor, "" if none.
func cursor(t *testing.T, db querier, source string) string {
	t.Helper()
	var pos string
	err := db.QueryRow(`SELECT position FROM cursors WHERE source = $1`, source).Scan(&pos)
	if err != nil && err != sql.ErrNoRows {
		t.Fatalf("read cursor: %v", err)
	}
	return pos
}

// finalCheck waits for the collector of source to record every acquisition
// and release the lock clients logged, stops p, and checks the database at
// dbPath: its integrity, every report in acked stored exactly once and
// nothing else, and each acquisition and release of locks recorded exactly
// once. It returns how many acquisitions there were.
func finalCheck(t *testing.T, p *serveProcess, dbPath, source string, locks []string, acquired, released map[string][]int64, acked []string) int {
	t.Helper()
	db := openReadOnly(t, dbPath)
	eventually(t, 30*time.Second, "the collector to record every acquisition and release", func() bool {
		grants, releases := transitions(t, db, source)
		for _, lock := range locks {
			if len(grants[lock]) < len(acquired[lock]) || len(releases[lock]) < len(released[lock]) {
				return false
			}
		}
		return true
	})
	db.Close()
	if err := p.interrupt(t); err != nil {
		t.Fatalf("leasewatch serve exited with %v after SIGINT:\n%s", err, p.stderr.String())
	}
	db = openReadOnly(t, dbPath)
	defer db.Close()
	integrityCheck(t, db)
	stored := requestIDs(t, db)
	for _, id := range acked {
		if stored[id] != 1 {
			t.Errorf("report %s: stored %d times, want once", id, stored[id])
		}
	}
	if len(stored) != len(acked) {
		t.Errorf("%d reports stored, want the %d answered 202", len(stored), len(acked))
	}
	grants, releases := transitions(t, db, source)
	var n int
	for _, lock := range locks {
		if !slices.Equal(grants[lock], acquired[lock]) {
			t.Errorf("lock %s: recorded grants %v, want each acquisition %v exactly once", lock, grants[lock], acquired[lock])
		}
		if !slices.Equal(releases[lock], released[lock]) {
			t.Errorf("lock %s: recorded releases %v, want each release %v exactly once", lock, releases[lock], released[lock])
		}
		n += len(acquired[lock])
	}
	return n
}

// startServe runs `leasewatch serve --config` in-process with the given file
// contents and returns the service's base URL on 127.0.0.1 once it listens,
// and its log. The command must exit cleanly when the test ends.
func startServe(t *testing.T, config string) (base string, log *syncBuffer) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leasewatch.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve", "--config", path}, &syncBuffer{}, stderr) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d: %s", code, stderr.String())
		}
	})
	listening := regexp.MustCompile(`msg="leasewatch listening" url=(https?)://\S+:(\d+)`)
	eventually(t, 30*time.Second, "serve to listen", func() bool {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("serve exited %d: %s", code, stderr.String())
		default:
		}
		if m := listening.FindStringSubmatch(stderr.String()); m != nil {
			base = m[1] + "://127.0.0.1:" + m[2]
		}
		return base != ""
	})
	return base, stderr
}

// sourceState returns the state and last error of the one source of the
// service at base, as the sources API says them.
func sourceState(t *testing.T, base string) (state, lastErr string) {
	t.Helper()
	var resp struct {
		Sources []struct{ State, Error string }
	}
	getJSON(t, base, "/api/v1/sources", &resp)
	if len(resp.Sources) != 1 {
		t.Fatalf("sources = %+v, want one", resp.Sources)
	}
	return resp.Sources[0].State, resp.Sources[0].Error
}

// waitSourceUp waits for the one source of the service at base to be up:
// its collector has read its first snapshot.
func waitSourceUp(t *testing.T, base string) {
	t.Helper()
	eventually(t, 30*time.Second, "the collector's first snapshot", func() bool {
		state, _ := sourceState(t, base)
		return state == "up"
	})
}
