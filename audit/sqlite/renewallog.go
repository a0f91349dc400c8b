package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/renewallog"
)

// The renewal log (migration 0026): a batch's renewals that a run can
// hold are written as one commit row of renewal_log per run window
// instead of a row of events each; the writer folds synced commit rows
// into a row per bucket of locks and run window (rebucket).

// logRowsPerInsert is how many log rows one INSERT carries: a fold of
// commit rows writes a row for most of the 256 buckets.
const logRowsPerInsert = 32

var logInsertMany = logInsert + strings.Repeat(", (?, ?, ?, ?, ?)", logRowsPerInsert-1)

const (
	// OR FAIL: a failed statement fails the whole transaction, so a
	// statement of many rows needs no statement journal to undo its own
	// rows (with ABORT, SQLite copied every page it touched first).
	logInsert = `INSERT OR FAIL INTO renewal_log (bucket, first_at, last_at, renewals, data) VALUES (?, ?, ?, ?, ?)`
	// A sync of the whole store raises every source's log mark with its own.
	logMarksSyncedTo   = `UPDATE renewal_log_marks SET synced_log = max(synced_log, ?)`
	logSourcesSyncedTo = `INSERT INTO renewal_log_marks (source, synced_log) SELECT value, ?2 FROM json_each(?1) WHERE true
		ON CONFLICT (source) DO UPDATE SET synced_log = max(synced_log, excluded.synced_log)`
	// A source's first fence starts its log mark at the store's, as
	// fenceUpsert starts its event mark.
	logFenceMark = `INSERT INTO renewal_log_marks (source, synced_log)
		SELECT ?, synced_log FROM renewal_log_marks WHERE source = '' ON CONFLICT (source) DO NOTHING`
)

// putLog writes the events that the log keeps into it, as commit rows
// (renewallog.Split), and returns the others, in order, for rows.
func (w *batchWriter) putLog(ctx context.Context, events []audit.Event) ([]audit.Event, error) {
	rows, rest, err := renewallog.Split(events, func(key audit.LockKey) (int64, error) { return w.lockID(ctx, key) })
	if err != nil || len(rows) == 0 {
		return rest, err
	}
	if err := insertLogRows(ctx, w.exec, rows); err != nil {
		return nil, err
	}
	return rest, nil
}

// rebucket folds the synced commit rows into bucket rows when they are due
// (renewallog.WriterFold), in the batch's transaction. It does not look
// while the store's fold is idle: between a look that found none due and
// the next sync mark.
func (w *batchWriter) rebucket(ctx context.Context) error {
	if w.s.foldIdle {
		return nil
	}
	n, _, err := renewallog.Rebucket(ctx, newLogTx(w.tx), logSQL, renewallog.WriterFold)
	if err != nil {
		return fmt.Errorf("renewal log: %w", err)
	}
	w.looked, w.folded = true, n
	return nil
}

// insertLogRows inserts log rows through exec, logRowsPerInsert a
// statement.
func insertLogRows(ctx context.Context, exec func(context.Context, string, ...any) error, rows []renewallog.Row) error {
	args := make([]any, 0, 5*len(rows))
	for _, row := range rows {
		args = append(args, row.Bucket, row.FirstAt, row.LastAt, row.Renewals, row.Data)
	}
	for len(args) > 0 {
		q, n := logInsert, 5
		if len(args) >= 5*logRowsPerInsert {
			q, n = logInsertMany, 5*logRowsPerInsert
		}
		if err := exec(ctx, q, args[:n]...); err != nil {
			return fmt.Errorf("log renewals of bucket %d: %w", args[0], err)
		}
		args = args[n:]
	}
	return nil
}
