package postgres

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	migratedb "github.com/golang-migrate/migrate/v4/database"
	"github.com/pressly/goose/v3/lock"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// TestGolangMigrateLock: two golang-migrate processes (v4.20.1, pgx/v5
// driver) migrate one database at once. The second blocks in
// pg_advisory_lock, a waiter, until the first is done; each grant and
// release is recorded, under the key golang-migrate derives from the URL's
// database path (with its leading "/"), the schema and the migrations table.
func TestGolangMigrateLock(t *testing.T) {
	testMigrationLock(t, "migrate", func(db string) int64 {
		id, err := migratedb.GenerateAdvisoryLockId("/"+db, "public", "schema_migrations")
		if err != nil {
			t.Fatal(err)
		}
		key, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return key
	})
}

// TestGooseLock: two goose processes (its Postgres session locker) migrate
// one database at once. The second retries pg_try_advisory_lock each
// second, so the server never shows it waiting: no waiter is recorded.
func TestGooseLock(t *testing.T) {
	testMigrationLock(t, "goose", func(string) int64 { return lock.DefaultLockID })
}

// testMigrationLock runs tool's first deployment (one migration, which
// waits for the test's gate 777 while the tool holds its lock) and, once
// the collector has seen it hold the lock, its second (that migration and
// another, which waits for gate 778), then opens the gates in turn.
func testMigrationLock(t *testing.T, tool string, key func(db string) int64) {
	srv := shared(t)
	var waiters atomic.Int64 // the most waiters any poll saw for the tool's lock
	var lockName atomic.Value
	db, sk, last := watchedWith(t, srv, func(st *state) {
		if name, ok := lockName.Load().(string); ok {
			waiters.Store(max(waiters.Load(), int64(len(st.waiters[name]))))
		}
	})
	lk := db + "/" + strconv.FormatInt(key(db), 10)
	lockName.Store(lk)
	gates := connectHolder(t, srv, db, "gates")
	gates.exec(t, `SELECT pg_advisory_lock(777), pg_advisory_lock(778)`)

	bin := filepath.Join(t.TempDir(), "lockclient")
	if out, err := exec.Command("go", "build", "-o", bin, "./internal/lockclient").CombinedOutput(); err != nil {
		t.Fatalf("build lockclient: %v\n%s", err, out)
	}
	heldBy := func(app string) {
		collectortest.Eventually(t, wait, lk+" held by "+app, func() bool {
			h := last.Load().holdOf(lk)
			return h != nil && h.s.app == app
		})
	}
	first := runClient(t, bin, tool, srv.URL(db)+"&application_name="+tool+"-1", "testdata/"+tool+"/first")
	heldBy(tool + "-1")
	second := runClient(t, bin, tool, srv.URL(db)+"&application_name="+tool+"-2", "testdata/"+tool+"/second")
	if tool == "migrate" {
		collectortest.Eventually(t, wait, "the second process waiting for "+lk, func() bool { return waiters.Load() == 1 })
	}
	gates.exec(t, `SELECT pg_advisory_unlock(777)`)
	first(t)
	heldBy(tool + "-2")
	gates.exec(t, `SELECT pg_advisory_unlock(778)`)
	second(t)

	sk.WaitEvents(t, wait, lk, 2, audit.EventRelease)
	grants := sk.Obs(lk, audit.EventGrant)
	if len(grants) != 2 || !strings.HasPrefix(grants[0].Holder, tool+"-1 pid=") || !strings.HasPrefix(grants[1].Holder, tool+"-2 pid=") {
		t.Fatalf("grants of %s: %v, want %s-1's then %s-2's", lk, collectortest.Holders(sk.Events(t, lk, audit.EventGrant)), tool, tool)
	}
	// Both tools unlock and close their session at once: a poll sees both
	// gone, and the database's statistics that no session ended abnormally.
	if n := len(sk.Obs(lk, audit.EventExpire)); n != 0 {
		t.Errorf("%d expiries of %s, want the two tenures released", n, lk)
	}
	_, waited := grants[1].Detail["waited_ms_max"]
	switch {
	case tool == "migrate" && !waited:
		t.Errorf("golang-migrate's second grant %v says nothing of its wait", grants[1].Detail)
	case tool == "goose" && (waited || waiters.Load() != 0):
		t.Errorf("goose's second process seen waiting (%d waiters, grant detail %v); it polls pg_try_advisory_lock", waiters.Load(), grants[1].Detail)
	}
}

// runClient starts lockclient and returns what waits for it to succeed.
func runClient(t *testing.T, bin, tool, url, dir string) func(*testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, tool, url, dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cancel(); <-done })
	return func(t *testing.T) {
		t.Helper()
		select {
		case err := <-done:
			done <- err // for the cleanup
			if err != nil {
				t.Fatalf("%s %s: %v\n%s", tool, dir, err, out.String())
			}
		case <-ctx.Done():
			t.Fatalf("%s %s did not finish", tool, dir)
		}
	}
}
