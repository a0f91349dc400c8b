package pgtest_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
)

// pg is the server the package's tests share, each in databases of its own.
var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// TestServerLifecycle takes a server of its own through a restart, a crash
// and a stop, checking after each that committed rows are where they were.
func TestServerLifecycle(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t, pgtest.Options{})
	url := srv.Database(t)

	t.Run("WritesARow", func(t *testing.T) {
		conn := connect(t, url)
		exec(t, conn, "CREATE TABLE leases (token bigint PRIMARY KEY, holder text NOT NULL)")
		exec(t, conn, "INSERT INTO leases VALUES (41, 'worker-1')")
		if got := show(t, conn, "fsync"); got != "on" {
			t.Errorf("fsync = %q, want on (the default the durability tests rely on)", got)
		}
		if got := show(t, conn, "listen_addresses"); got != "127.0.0.1" {
			t.Errorf("listen_addresses = %q, want 127.0.0.1", got)
		}
		if got, want := show(t, conn, "port"), strconv.Itoa(srv.Port); got != want {
			t.Errorf("port = %s, want %s", got, want)
		}
		if os.Geteuid() == 0 {
			pgUser, err := user.Lookup("postgres")
			if err != nil {
				t.Fatal(err)
			}
			if got := processUID(t, srv.Pid()); got != pgUser.Uid {
				t.Errorf("postmaster runs as uid %s, want the postgres user's %s", got, pgUser.Uid)
			}
		}
	})

	t.Run("RestartKeepsTheRow", func(t *testing.T) {
		before := srv.Pid()
		if err := srv.Restart(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if srv.Pid() == before || srv.Pid() == 0 {
			t.Errorf("pid after restart = %d, before %d: want a new process", srv.Pid(), before)
		}
		if alive(before) {
			t.Errorf("the stopped postmaster %d is still running", before)
		}
		conn := connect(t, url)
		if got := holders(t, conn); got != "41:worker-1" {
			t.Errorf("rows after restart = %q, want 41:worker-1", got)
		}
	})

	t.Run("KillThenRestartRecovers", func(t *testing.T) {
		conn := connect(t, url)
		exec(t, conn, "INSERT INTO leases VALUES (42, 'worker-2')")
		var backend int
		if err := conn.QueryRow(ctx(t), "SELECT pg_backend_pid()").Scan(&backend); err != nil {
			t.Fatal(err)
		}
		postmaster := srv.Pid()
		processes := serverProcesses(t, postmaster, backend)
		srv.Kill()
		if srv.Pid() != 0 {
			t.Errorf("Pid() after Kill = %d, want 0", srv.Pid())
		}
		for _, pid := range processes {
			if alive(pid) {
				t.Errorf("process %d still runs after Kill", pid)
			}
		}
		short, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if c, err := pgx.Connect(short, url); err == nil {
			c.Close(context.Background())
			t.Fatal("connected to a killed server")
		}

		if err := srv.Restart(ctx(t)); err != nil {
			t.Fatal(err)
		}
		conn = connect(t, url)
		if got := holders(t, conn); got != "41:worker-1 42:worker-2" {
			t.Errorf("rows after crash recovery = %q, want 41:worker-1 42:worker-2", got)
		}
		// PostgreSQL says so when it starts on a data directory that was not
		// shut down: proof that Kill was a crash, not a clean stop.
		log, err := os.ReadFile(srv.LogFile)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "automatic recovery in progress") {
			t.Errorf("the server log has no crash recovery after Kill:\n%s", log)
		}
	})

	t.Run("StopLeavesNothing", func(t *testing.T) {
		conn := connect(t, url)
		var backend int
		if err := conn.QueryRow(ctx(t), "SELECT pg_backend_pid()").Scan(&backend); err != nil {
			t.Fatal(err)
		}
		processes := serverProcesses(t, srv.Pid(), backend)
		// The connection stays open: Stop must not wait for clients.
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		for _, pid := range processes {
			if alive(pid) {
				t.Errorf("process %d still runs after Stop", pid)
			}
		}
		for _, dir := range []string{srv.DataDir, filepath.Dir(srv.DataDir)} {
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s after Stop: %v, want it removed", dir, err)
			}
		}
	})
}

// TestDatabasesIsolated: two databases of the shared server see nothing of
// each other.
func TestDatabasesIsolated(t *testing.T) {
	t.Parallel()
	srv := pg.Get(t)
	urlA, urlB := srv.Database(t), srv.Database(t)
	if urlA == urlB {
		t.Fatalf("two databases with one URL %s", urlA)
	}
	a, b := connect(t, urlA), connect(t, urlB)
	exec(t, a, "CREATE TABLE leases (token bigint PRIMARY KEY, holder text NOT NULL)")
	exec(t, a, "INSERT INTO leases VALUES (7, 'a')")
	var table *string
	if err := b.QueryRow(ctx(t), "SELECT to_regclass('leases')::text").Scan(&table); err != nil {
		t.Fatal(err)
	}
	if table != nil {
		t.Fatalf("database B sees table %s created in A", *table)
	}
	exec(t, b, "CREATE TABLE leases (token bigint PRIMARY KEY, holder text NOT NULL)")
	if got := holders(t, b); got != "" {
		t.Errorf("B's own leases = %q, want none", got)
	}
	if got := holders(t, a); got != "7:a" {
		t.Errorf("A's leases = %q, want 7:a", got)
	}
}

// TestDatabaseDroppedAfterTest: a test's database is gone once it ends,
// even with a connection left open.
func TestDatabaseDroppedAfterTest(t *testing.T) {
	t.Parallel()
	srv := pg.Get(t)
	var name string
	t.Run("Inner", func(t *testing.T) {
		u, err := url.Parse(srv.Database(t))
		if err != nil {
			t.Fatal(err)
		}
		name = strings.TrimPrefix(u.Path, "/")
		if !strings.HasPrefix(name, "testdatabasedroppedaftertest_inner_") {
			t.Errorf("database name %q does not say which test it is for", name)
		}
		c, err := pgx.Connect(ctx(t), srv.URL(name))
		if err != nil {
			t.Fatal(err)
		}
		_ = c // left open on purpose
	})
	conn := connect(t, srv.URL("postgres"))
	var n int
	if err := conn.QueryRow(ctx(t), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if name == "" || n != 0 {
		t.Errorf("database %q: %d left after its test, want 0", name, n)
	}
}

// TestOptions: NoFsync and Settings reach the server.
func TestOptions(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t, pgtest.Options{NoFsync: true, Settings: map[string]string{"max_connections": "20"}})
	conn := connect(t, srv.URL("postgres"))
	if got := show(t, conn, "fsync"); got != "off" {
		t.Errorf("fsync = %q, want off", got)
	}
	if got := show(t, conn, "max_connections"); got != "20" {
		t.Errorf("max_connections = %q, want 20", got)
	}
}

// TestMissingPostgres: without PostgreSQL a test is skipped with how to
// install it, but under CI=true it fails.
func TestMissingPostgres(t *testing.T) {
	for _, tc := range []struct {
		name, ci  string
		wantFatal bool
	}{
		{"SkippedOutsideCI", "", false},
		{"FailsInCI", "true", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			var fake fakeTB
			missing := pgtest.Shared{Options: pgtest.Options{BinDir: t.TempDir()}}
			if srv := missing.Get(&fake); srv != nil {
				t.Fatal("a server from an empty BinDir")
			}
			if got := fake.fatal != ""; got != tc.wantFatal {
				t.Errorf("failed = %v (%q), want %v", got, fake.fatal, tc.wantFatal)
			}
			if got := fake.skip != ""; got == tc.wantFatal {
				t.Errorf("skipped = %v (%q), want %v", got, fake.skip, !tc.wantFatal)
			}
			if msg := fake.fatal + fake.skip; !strings.Contains(msg, "make deps") {
				t.Errorf("message %q does not say how to install PostgreSQL", msg)
			}
		})
	}
}

// fakeTB records what Get did instead of ending the test.
type fakeTB struct{ fatal, skip string }

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Name() string                   { return "Fake" }
func (f *fakeTB) Cleanup(func())                 {}
func (f *fakeTB) Errorf(format string, a ...any) { f.fatal = fmt.Sprintf(format, a...) }
func (f *fakeTB) Fatalf(format string, a ...any) { f.fatal = fmt.Sprintf(format, a...) }
func (f *fakeTB) Skipf(format string, a ...any)  { f.skip = fmt.Sprintf(format, a...) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx(t), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(ctx(t), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func show(t *testing.T, conn *pgx.Conn, setting string) string {
	t.Helper()
	var v string
	if err := conn.QueryRow(ctx(t), "SELECT current_setting($1)", setting).Scan(&v); err != nil {
		t.Fatalf("current_setting(%s): %v", setting, err)
	}
	return v
}

// holders lists the leases table as "token:holder" in token order.
func holders(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	rows, err := conn.Query(ctx(t), "SELECT token, holder FROM leases ORDER BY token")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var token int64
		var holder string
		if err := rows.Scan(&token, &holder); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d:%s", token, holder))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, " ")
}

// serverProcesses lists the postmaster and its children (backends and the
// checkpointer, WAL writer and the like), and checks that backend is one.
func serverProcesses(t *testing.T, postmaster, backend int) []int {
	t.Helper()
	pids := []int{postmaster}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(postmaster) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			pids = append(pids, pid)
		}
	}
	if !slices.Contains(pids, backend) || len(pids) < 4 {
		t.Fatalf("processes of postmaster %d: %v, want it, backend %d and the auxiliary processes", postmaster, pids, backend)
	}
	return pids
}

// alive reports whether pid is a running process (a zombie has exited).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// processUID is the real uid of pid, from /proc.
func processUID(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			return f[1]
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return ""
}

// TestKeptDirRunsTheClusterAgain starts a server in a directory of the
// test's choosing, stops it, and starts another in the same directory: the
// second runs the first's cluster, its rows and password included, and
// neither Stop removes the directory.
func TestKeptDirRunsTheClusterAgain(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	// The postgres user, which the server runs as under root, must reach
	// it: testing makes the directory and its parent private.
	for _, d := range []string{filepath.Dir(parent), parent} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(parent, "kept")
	first, err := pgtest.Start(ctx(t), pgtest.Options{Dir: dir, NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	name, err := first.CreateDatabase(ctx(t), "kept")
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, first.URL(name))
	exec(t, conn, "CREATE TABLE leases (token bigint PRIMARY KEY)")
	exec(t, conn, "INSERT INTO leases VALUES (41)")
	conn.Close(context.Background())
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION")); err != nil {
		t.Fatalf("Stop removed the kept cluster: %v", err)
	}

	second, err := pgtest.Start(ctx(t), pgtest.Options{Dir: dir, NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	var token int64
	if err := connect(t, second.URL(name)).QueryRow(ctx(t), "SELECT token FROM leases").Scan(&token); err != nil || token != 41 {
		t.Fatalf("the row written before the restart: %d, %v", token, err)
	}
}
