package fence_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/leasewatch/leasewatch/audit/fence"
	_ "modernc.org/sqlite"
)

// A bank account fenced by a column beside the data. Holder A writes with
// token 41, holder B takes the lock over with token 42, and A's delayed write
// arrives last.
func ExampleExec() {
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "bank.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `
		CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, fence INTEGER NOT NULL DEFAULT 0);
		INSERT INTO accounts (id, balance) VALUES (1, 100);`); err != nil {
		log.Fatal(err)
	}

	for _, w := range []struct {
		holder         string
		token, balance int64
	}{
		{"A", 41, 110},
		{"A", 41, 120}, // the same holder writes again
		{"B", 42, 200},
		{"A", 41, 130}, // A paused past its lease; its write must not land
	} {
		outcome, err := fence.Exec(ctx, db,
			`UPDATE accounts SET balance = ?, fence = ? WHERE id = ? AND fence <= ?`,
			w.balance, w.token, 1, w.token)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s token %d: %s\n", w.holder, w.token, outcome)
	}
	var balance, fnc int64
	if err := db.QueryRowContext(ctx, `SELECT balance, fence FROM accounts WHERE id = 1`).Scan(&balance, &fnc); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("balance %d, fence %d\n", balance, fnc)
	// Output:
	// A token 41: accepted
	// A token 41: accepted
	// B token 42: accepted
	// A token 41: rejected
	// balance 200, fence 42
}

// A per-lock fence table advanced in the same transaction as the data write:
// the data changes only if the fence accepted the token.
func ExampleExec_fenceTable() {
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `
		CREATE TABLE fences (lock TEXT PRIMARY KEY, token INTEGER NOT NULL);
		CREATE TABLE orders (id INTEGER PRIMARY KEY, state TEXT NOT NULL);
		INSERT INTO orders (id, state) VALUES (7, 'new');`); err != nil {
		log.Fatal(err)
	}

	setState := func(token int64, state string) (fence.Outcome, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return "", err
		}
		defer tx.Rollback() // a no-op after Commit
		outcome, err := fence.Exec(ctx, tx, `
			INSERT INTO fences (lock, token) VALUES (?, ?)
			ON CONFLICT (lock) DO UPDATE SET token = excluded.token
			WHERE fences.token <= excluded.token`,
			"/locks/orders", token)
		if err != nil || outcome == fence.Rejected {
			return outcome, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE orders SET state = ? WHERE id = 7`, state); err != nil {
			return "", err
		}
		return outcome, tx.Commit()
	}

	for _, w := range []struct {
		token int64
		state string
	}{{5, "paid"}, {6, "shipped"}, {5, "cancelled"}} {
		outcome, err := setState(w.token, w.state)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("token %d %s: %s\n", w.token, w.state, outcome)
	}
	var state string
	if err := db.QueryRowContext(ctx, `SELECT state FROM orders WHERE id = 7`).Scan(&state); err != nil {
		log.Fatal(err)
	}
	fmt.Println("order 7:", state)
	// Output:
	// token 5 paid: accepted
	// token 6 shipped: accepted
	// token 5 cancelled: rejected
	// order 7: shipped
}

func ExampleGuard() {
	var g fence.Guard
	for _, token := range []int64{41, 42, 41} {
		outcome, highest := g.Check("prod-etcd//locks/orders", token)
		fmt.Printf("token %d: %s (highest %d)\n", token, outcome, highest)
	}
	// Output:
	// token 41: accepted (highest 41)
	// token 42: accepted (highest 42)
	// token 41: rejected (highest 42)
}

func ExampleReporter() {
	// Stands in for leasewatch.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"accepted":1}`)
	}))
	defer srv.Close()

	r, err := fence.NewReporter(fence.Config{
		URL:      srv.URL,
		Token:    "change-me",
		Source:   "prod-etcd",
		Resource: "orders-db",
	})
	if err != nil {
		log.Fatal(err)
	}

	var g fence.Guard
	token := int64(42)
	outcome, highest := g.Check("/locks/orders", token)
	r.Report(fence.Write{
		Lock:         "/locks/orders",
		Token:        &token,
		Outcome:      outcome,
		HighestToken: &highest,
		Holder:       "worker-1",
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v\n", r.Stats())
	// Output:
	// {Sent:1 Dropped:0 Refused:0 Retries:0 Pending:0}
}
