package fence

import (
	"context"
	"database/sql"
	"fmt"
)

// Outcome is what a protected resource did with a fenced write. The values
// are the "outcome" strings of POST /api/v1/writes.
type Outcome string

// Write outcomes (contract).
const (
	// Accepted: the write's token was at least the highest the resource had seen.
	Accepted Outcome = "accepted"
	// Rejected: the resource had already seen a newer token, so the write was
	// refused; the writer holds a lock it has lost.
	Rejected Outcome = "rejected"
)

// Valid reports whether o is Accepted or Rejected.
func (o Outcome) Valid() bool { return o == Accepted || o == Rejected }

// Execer runs a statement. It is satisfied by *sql.DB, *sql.Tx and *sql.Conn.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

var (
	_ Execer = (*sql.DB)(nil)
	_ Execer = (*sql.Tx)(nil)
	_ Execer = (*sql.Conn)(nil)
)

// Exec runs a fenced statement: one whose WHERE clause compares the stored
// fence with the caller's token and that sets the fence to the token, such as
//
//	UPDATE accounts SET balance = ?, fence = ? WHERE id = ? AND fence <= ?
//
// or the fence-table upsert described in the package documentation. It returns
// Accepted when the statement affected at least one row and Rejected when it
// affected none: the resource has seen a newer token (or the row is missing).
// An error means the outcome is unknown.
func Exec(ctx context.Context, db Execer, query string, args ...any) (Outcome, error) {
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return "", fmt.Errorf("fenced exec: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return "", fmt.Errorf("fenced exec: rows affected: %w", err)
	}
	if n == 0 {
		return Rejected, nil
	}
	return Accepted, nil
}
