package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// mountTmpfs mounts a tmpfs of size bytes on a new directory, unmounted and
// removed when the test ends. Mounting needs root (or CAP_SYS_ADMIN):
// without it the test is skipped, except under CI=true, where it fails. The
// directory is one other users can reach (PostgreSQL runs as its own), where
// a test's own temporary directory is not.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "leasewatch-tmpfs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		reason := fmt.Sprintf("mount a %d-byte tmpfs on %s: %v (needs root or CAP_SYS_ADMIN)", size, dir, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a ballast file into dir until its file system is full.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			break
		}
	}
	// Single pages freed by the short last write are taken too.
	for {
		if _, err := f.Write(chunk[:512]); err != nil {
			break
		}
	}
	return path
}

// waitExit waits for the process to exit and returns its stderr and error.
func (p *serveProcess) waitExit(t *testing.T, timeout time.Duration) (string, error) {
	t.Helper()
	select {
	case <-p.done:
		return p.stderr.String(), p.err
	case <-time.After(timeout):
		p.kill()
		t.Fatalf("leasewatch serve still runs after %s:\n%s", timeout, p.stderr.String())
		return "", nil
	}
}

// get returns the status and body of GET base+path.
func get(t *testing.T, base, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// bigReports returns n write reports of about 2 KiB each, with request IDs
// prefix-0 ... prefix-(n-1): they fill a disk quickly.
func bigReports(source, lock, prefix string, n int) []writeReport {
	pad := strings.Repeat("x", 1000)
	out := make([]writeReport, n)
	for i := range out {
		out[i] = writeReport{Source: source, Lock: lock, Resource: "ledger-" + pad, Token: int64(i + 1),
			Outcome: "accepted", Holder: "writer-" + pad, RequestID: fmt.Sprintf("%s-%d", prefix, i)}
	}
	return out
}

// serveHandingOver starts serve recording an etcd source into database
// while two clients a lock hand two locks of the source back and forth, and
// returns serve, its URL, the locks and their clients.
func serveHandingOver(t *testing.T, database, source string) (*serveProcess, string, []string, *lockClients) {
	t.Helper()
	srv, cli := startEtcd(t)
	p := startServeProcess(t, writeServeConfig(t, t.TempDir(), "127.0.0.1:0", database, source, srv.Endpoint))
	base := p.waitListening(t, time.Minute)
	waitSourceUp(t, base)
	locks := []string{"/locks/" + source + "-0", "/locks/" + source + "-1"}
	return p, base, locks, startLockClients(cli, locks, 2)
}

// postUntilRefused posts batches of big reports until one is answered 503
// with an error containing cause, and returns the request IDs answered 202
// before it and the refused batch: what the disk took before it filled.
func postUntilRefused(t *testing.T, client *http.Client, base, source, lock, cause string) (acked []string, refused []writeReport) {
	t.Helper()
	for i := 0; refused == nil; i++ {
		if i == 500 {
			t.Fatalf("%d batches answered 202 on a full disk", i)
		}
		batch := bigReports(source, lock, fmt.Sprintf("full-%d", i), 50)
		status, body, err := postWrites(client, base, batch)
		switch {
		case err != nil:
			t.Fatalf("POST /api/v1/writes on a full disk: %v", err)
		case status == http.StatusAccepted:
			for _, r := range batch {
				acked = append(acked, r.RequestID)
			}
		case status == http.StatusServiceUnavailable:
			if !strings.Contains(body, cause) {
				t.Fatalf("POST /api/v1/writes on a full disk: 503 %s, want an error saying %q", body, cause)
			}
			refused = batch
		default:
			t.Fatalf("POST /api/v1/writes on a full disk: %d %s, want 202 or 503", status, body)
		}
	}
	return acked, refused
}

// takenOnRetry posts the refused batch until it is answered 202, as its
// resource would, and returns its request IDs; an answer other than 202 or
// 503 fails the test.
func takenOnRetry(t *testing.T, client *http.Client, base string, refused []writeReport, within time.Duration) []string {
	t.Helper()
	eventually(t, within, "the refused batch to be taken on retry", func() bool {
		status, body, err := postWrites(client, base, refused)
		if err != nil || (status != http.StatusAccepted && status != http.StatusServiceUnavailable) {
			t.Fatalf("POST /api/v1/writes once the store is back: %d %s %v", status, body, err)
		}
		return status == http.StatusAccepted
	})
	ids := make([]string, len(refused))
	for i, r := range refused {
		ids[i] = r.RequestID
	}
	return ids
}

// waitResumed waits until /readyz answers 200 and the collector is up
// again.
func waitResumed(t *testing.T, base string) {
	t.Helper()
	eventually(t, 30*time.Second, "/readyz to recover", func() bool {
		code, _ := get(t, base, "/readyz")
		return code == http.StatusOK
	})
	eventually(t, 30*time.Second, "the collector to resume", func() bool {
		state, _ := sourceState(t, base)
		return state == "up"
	})
}

// The database's file system fills up while locks change hands and reports
// arrive. Ingest answers 503 naming the cause, /readyz and the sources API
// report it, the collector pauses without moving its cursor past what was
// stored, and nothing of a refused request is stored. Once space returns,
// everything resumes by itself: the refused batch is taken on retry, and
// every grant and release made meanwhile is recorded exactly once.
func TestDiskFullPausesAndRecovers(t *testing.T) {
	mnt := mountTmpfs(t, 16<<20)
	dbPath := filepath.Join(mnt, "lw.db")
	const source = "disk"
	p, base, locks, lc := serveHandingOver(t, dbPath, source)
	client := &http.Client{Timeout: time.Minute}
	db := openReadOnly(t, dbPath)

	ballast := fillDisk(t, mnt)
	acked, refused := postUntilRefused(t, client, base, source, locks[0], "disk is full")
	stored := requestIDs(t, db)
	for _, r := range refused {
		if stored[r.RequestID] != 0 {
			t.Fatalf("report %s was answered 503 but is stored", r.RequestID)
		}
	}
	eventually(t, 30*time.Second, "/readyz to report the full disk", func() bool {
		code, body := get(t, base, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "disk is full")
	})
	// And it goes on doing so while the disk is full, though the recorder
	// ticks four times a second with nothing to write.
	for range 10 {
		time.Sleep(100 * time.Millisecond)
		if code, body := get(t, base, "/readyz"); code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz on a full disk: %d %s, want 503", code, body)
		}
	}
	eventually(t, 30*time.Second, "the sources API to report the paused collector", func() bool {
		state, lastErr := sourceState(t, base)
		return state == "down" && strings.Contains(lastErr, "disk is full")
	})
	eventually(t, 30*time.Second, "the log to say recording paused", func() bool {
		return strings.Contains(p.stderr.String(), `msg="recording paused: the store cannot take the collector's input`)
	})
	integrityCheck(t, db)

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	acked = append(acked, takenOnRetry(t, client, base, refused, 30*time.Second)...)
	waitResumed(t, base)

	acquired, released := lc.finish(t)
	db.Close()
	n := finalCheck(t, p, dbPath, source, locks, acquired, released, acked)
	t.Logf("%d reports answered 202 before the disk filled; %d grants and releases recorded once across the pause", len(acked)-len(refused), n)
}

// PostgreSQL's data directory, on a file system of its own, fills up while
// locks change hands and reports arrive. Ingest answers 503 naming the
// database server (its disk is full; or, once PostgreSQL stops because it
// cannot write its log, that it cannot be reached), /readyz says so, and
// what it stored is all it answered 202. Once space returns, and the
// server is started again if it stopped, everything resumes by itself: the
// refused batch is taken on retry, every index checks out (amcheck), and
// every report answered 202 and every grant and release is stored once.
func TestPostgresDiskFullPausesAndRecovers(t *testing.T) {
	mnt := mountTmpfs(t, 160<<20)
	pgSrv := pgtest.New(t, pgtest.Options{Dir: filepath.Join(mnt, "postgres")})
	database := pgSrv.Database(t)
	const source = "pgdisk"
	p, base, locks, lc := serveHandingOver(t, database, source)
	client := &http.Client{Timeout: time.Minute}

	ballast := fillDisk(t, mnt)
	acked, refused := postUntilRefused(t, client, base, source, locks[0], "database server")
	eventually(t, 30*time.Second, "/readyz to report the database server", func() bool {
		code, body := get(t, base, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "database server")
	})
	eventually(t, 30*time.Second, "the log to say recording paused", func() bool {
		return strings.Contains(p.stderr.String(), `msg="recording paused: the store cannot take the collector's input`)
	})

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	stopped := pgSrv.Exited()
	if stopped {
		// As systemd would: PostgreSQL does not start again by itself.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pgSrv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
	}
	acked = append(acked, takenOnRetry(t, client, base, refused, 60*time.Second)...)
	waitResumed(t, base)
	acquired, released := lc.finish(t)
	n := finalCheck(t, p, database, source, locks, acquired, released, acked)
	t.Logf("%d reports answered 202 before the disk filled (PostgreSQL stopped: %v); %d grants and releases recorded once across the pause", len(acked)-len(refused), stopped, n)
}

// createDatabase creates a migrated leasewatch database at path.
func createDatabase(t *testing.T, path string) {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// A database on a read-only file system stops `leasewatch serve` at start,
// with an error naming the file and the cause.
func TestServeRefusesReadOnlyDatabase(t *testing.T) {
	mnt := mountTmpfs(t, 8<<20)
	dbPath := filepath.Join(mnt, "lw.db")
	createDatabase(t, dbPath)
	if err := syscall.Mount("", mnt, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount %s read-only: %v", mnt, err)
	}
	p := startServeProcess(t, writeServeConfig(t, t.TempDir(), "127.0.0.1:0", dbPath, "ro", "127.0.0.1:1"))
	stderr, err := p.waitExit(t, 30*time.Second)
	if err == nil || !strings.Contains(stderr, "open database "+dbPath) || !strings.Contains(stderr, "read-only file system") {
		t.Fatalf("leasewatch serve on a read-only database exited with %v:\n%s\nwant an error naming %s and the read-only file system", err, stderr, dbPath)
	}
}

// holdWriteLock takes the database's write lock from this process, as
// another program writing to the file would, until the returned func is
// called.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	ctx := context.Background()
	w, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := w.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatalf("BEGIN EXCLUSIVE on %s: %v", path, err)
	}
	return func() {
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Errorf("ROLLBACK: %v", err)
		}
		conn.Close()
		w.Close()
	}
}

// Another process holding the database's write lock stops `leasewatch serve`
// at start with an error naming the file and the lock, after the busy
// timeout; while leasewatch runs, ingest answers 503 once the busy timeout
// passes (for its commit and any queued ahead of it), rather than waiting for
// the lock, and 202 again when it is gone.
func TestDatabaseLockedByAnotherProcess(t *testing.T) {
	srv, _ := startEtcd(t)
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "lw.db")
	const source = "locked"
	config := writeServeConfig(t, dir, "127.0.0.1:0", dbPath, source, srv.Endpoint)
	createDatabase(t, dbPath)

	t.Run("AtStart", func(t *testing.T) {
		release := holdWriteLock(t, dbPath)
		defer release()
		p := startServeProcess(t, config)
		stderr, err := p.waitExit(t, time.Minute)
		if err == nil || !strings.Contains(stderr, "open database "+dbPath) || !strings.Contains(stderr, "locked by another process") {
			t.Fatalf("leasewatch serve on a locked database exited with %v:\n%s\nwant an error naming %s and the lock", err, stderr, dbPath)
		}
	})

	t.Run("WhileRunning", func(t *testing.T) {
		p := startServeProcess(t, config)
		base := p.waitListening(t, time.Minute)
		client := &http.Client{Timeout: time.Minute}
		report := bigReports(source, "/locks/held", "locked", 1)
		release := holdWriteLock(t, dbPath)
		start := time.Now()
		status, body, err := postWrites(client, base, report)
		waited := time.Since(start)
		release()
		if err != nil || status != http.StatusServiceUnavailable || !strings.Contains(body, "locked by another process") {
			t.Fatalf("POST /api/v1/writes while another process holds the lock: %d %s %v, want 503 naming the lock", status, body, err)
		}
		t.Logf("answered 503 after %s", waited.Round(time.Millisecond))
		eventually(t, 30*time.Second, "ingest to answer 202 once the lock is gone", func() bool {
			status, body, err := postWrites(client, base, report)
			if err != nil || (status != http.StatusAccepted && status != http.StatusServiceUnavailable) {
				t.Fatalf("POST /api/v1/writes after the lock was released: %d %s %v", status, body, err)
			}
			return status == http.StatusAccepted
		})
		eventually(t, 30*time.Second, "/readyz to recover once the lock is gone", func() bool {
			code, _ := get(t, base, "/readyz")
			return code == http.StatusOK
		})
		if err := p.interrupt(t); err != nil {
			t.Fatalf("leasewatch serve exited with %v after SIGINT:\n%s", err, p.stderr.String())
		}
	})
}
