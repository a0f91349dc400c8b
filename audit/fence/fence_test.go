package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/leasewatch/leasewatch/audit/fence"
	_ "modernc.org/sqlite"
)

// openDB opens a SQLite database in a file of its own, with the pragmas in
// the DSN so that every pooled connection gets them.
func openDB(t *testing.T) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "resource.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, db fence.Execer, query string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

const updateAccount = `UPDATE accounts SET balance = ?, fence = ? WHERE id = ? AND fence <= ?`

func TestExecFencedUpdate(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	mustExec(t, db, `CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, fence INTEGER NOT NULL DEFAULT 0)`)
	mustExec(t, db, `INSERT INTO accounts (id, balance) VALUES (1, 100)`)

	write := func(token, balance int64) fence.Outcome {
		t.Helper()
		got, err := fence.Exec(ctx, db, updateAccount, balance, token, 1, token)
		if err != nil {
			t.Fatalf("Exec(token %d): %v", token, err)
		}
		return got
	}
	check := func(wantBalance, wantFence int64) {
		t.Helper()
		var balance, fnc int64
		if err := db.QueryRowContext(ctx, `SELECT balance, fence FROM accounts WHERE id = 1`).Scan(&balance, &fnc); err != nil {
			t.Fatalf("read account: %v", err)
		}
		if balance != wantBalance || fnc != wantFence {
			t.Fatalf("balance, fence = %d, %d; want %d, %d", balance, fnc, wantBalance, wantFence)
		}
	}

	// One story, in order: holder A gets token 41, holder B takes over with 42,
	// then A's delayed write arrives.
	t.Run("FirstTokenAccepted", func(t *testing.T) {
		if got := write(41, 110); got != fence.Accepted {
			t.Fatalf("outcome = %q, want %q", got, fence.Accepted)
		}
		check(110, 41)
	})
	t.Run("SameHolderWritesAgain", func(t *testing.T) {
		if got := write(41, 120); got != fence.Accepted {
			t.Fatalf("outcome = %q, want %q (equal token)", got, fence.Accepted)
		}
		check(120, 41)
	})
	t.Run("NewerTokenAccepted", func(t *testing.T) {
		if got := write(42, 200); got != fence.Accepted {
			t.Fatalf("outcome = %q, want %q", got, fence.Accepted)
		}
		check(200, 42)
	})
	t.Run("PausedHolderWriteRejected", func(t *testing.T) {
		if got := write(41, 130); got != fence.Rejected {
			t.Fatalf("outcome = %q, want %q", got, fence.Rejected)
		}
		check(200, 42) // neither the data nor the fence moved
	})
	t.Run("MissingRowRejected", func(t *testing.T) {
		got, err := fence.Exec(ctx, db, updateAccount, 1, 50, 2, 50)
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		if got != fence.Rejected {
			t.Fatalf("outcome = %q, want %q", got, fence.Rejected)
		}
	})
}

const advanceFence = `INSERT INTO fences (lock, token) VALUES (?, ?)
	ON CONFLICT (lock) DO UPDATE SET token = excluded.token
	WHERE fences.token <= excluded.token`

func TestExecFenceTable(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	mustExec(t, db, `CREATE TABLE fences (lock TEXT PRIMARY KEY, token INTEGER NOT NULL)`)
	mustExec(t, db, `CREATE TABLE orders (id INTEGER PRIMARY KEY, state TEXT NOT NULL)`)
	mustExec(t, db, `INSERT INTO orders (id, state) VALUES (1, 'new')`)

	// write advances the lock's fence and updates the order in one
	// transaction, committing only when the fence accepted the token.
	write := func(lock string, token int64, state string) fence.Outcome {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		defer tx.Rollback()
		got, err := fence.Exec(ctx, tx, advanceFence, lock, token)
		if err != nil {
			t.Fatalf("Exec(%s, %d): %v", lock, token, err)
		}
		if got != fence.Accepted {
			return got
		}
		mustExec(t, tx, `UPDATE orders SET state = ? WHERE id = 1`, state)
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit: %v", err)
		}
		return got
	}
	state := func() string {
		t.Helper()
		var s string
		if err := db.QueryRowContext(ctx, `SELECT state FROM orders WHERE id = 1`).Scan(&s); err != nil {
			t.Fatalf("read order: %v", err)
		}
		return s
	}
	fenceOf := func(lock string) int64 {
		t.Helper()
		var tok int64
		if err := db.QueryRowContext(ctx, `SELECT token FROM fences WHERE lock = ?`, lock).Scan(&tok); err != nil {
			t.Fatalf("read fence %s: %v", lock, err)
		}
		return tok
	}

	steps := []struct {
		name      string
		lock      string
		token     int64
		state     string
		want      fence.Outcome
		wantState string
		wantFence int64
	}{
		{"FirstGrantCreatesFence", "orders", 7, "paid", fence.Accepted, "paid", 7},
		{"SameTokenAccepted", "orders", 7, "packed", fence.Accepted, "packed", 7},
		{"NewerTokenAccepted", "orders", 9, "shipped", fence.Accepted, "shipped", 9},
		{"OlderTokenRejectedAndRolledBack", "orders", 8, "cancelled", fence.Rejected, "shipped", 9},
		{"OtherLockHasItsOwnFence", "invoices", 1, "invoiced", fence.Accepted, "invoiced", 1},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if got := write(s.lock, s.token, s.state); got != s.want {
				t.Fatalf("outcome = %q, want %q", got, s.want)
			}
			if got := state(); got != s.wantState {
				t.Fatalf("order state = %q, want %q", got, s.wantState)
			}
			if got := fenceOf(s.lock); got != s.wantFence {
				t.Fatalf("fence(%s) = %d, want %d", s.lock, got, s.wantFence)
			}
		})
	}
	if got := fenceOf("orders"); got != 9 {
		t.Fatalf("fence(orders) = %d after another lock's write, want 9", got)
	}
}

func TestExecWorksOnConn(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	mustExec(t, db, `CREATE TABLE fences (lock TEXT PRIMARY KEY, token INTEGER NOT NULL)`)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("conn: %v", err)
	}
	defer conn.Close()
	for _, tc := range []struct {
		token int64
		want  fence.Outcome
	}{{3, fence.Accepted}, {2, fence.Rejected}, {3, fence.Accepted}} {
		got, err := fence.Exec(ctx, conn, advanceFence, "l", tc.token)
		if err != nil {
			t.Fatalf("Exec(%d): %v", tc.token, err)
		}
		if got != tc.want {
			t.Fatalf("Exec(%d) = %q, want %q", tc.token, got, tc.want)
		}
	}
}

func TestExecError(t *testing.T) {
	db := openDB(t)
	got, err := fence.Exec(context.Background(), db, `UPDATE missing SET fence = ? WHERE fence <= ?`, 1, 1)
	if err == nil {
		t.Fatalf("Exec on a missing table = %q, nil; want an error", got)
	}
	if got != "" {
		t.Errorf("outcome = %q with an error, want empty", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := fence.Exec(ctx, db, `SELECT 1`); !errors.Is(err, context.Canceled) {
		t.Errorf("Exec with a canceled context: err = %v, want context.Canceled", err)
	}
}
