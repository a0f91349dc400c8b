package sqlite

import (
	"context"
	"database/sql"

	"github.com/leasewatch/leasewatch/audit/internal/renewallog"
	"github.com/leasewatch/leasewatch/audit/storecopy"
)

// A copy reads the renewal log (migration 0026), which the stores' logical
// schema does not have, as runs and rows of events (renewallog.Copy).

// copyLog is the renewal log of the snapshot tx, as a copy reads it.
func copyLog(tx *sql.Tx) *renewallog.Copy {
	return &renewallog.Copy{DB: sqlDB{tx}, Dialect: dialect, Wrap: storageError,
		Newest: func(ctx context.Context) (event, run int64, err error) {
			err = tx.QueryRowContext(ctx, `SELECT coalesce((SELECT max(id) FROM events), 0), coalesce((SELECT max(id) FROM renewal_runs), 0)`).
				Scan(&event, &run)
			return event, run, err
		}}
}

// Stat counts t's rows, the log's among them, and reads the last key.
func (s *snapshot) Stat(ctx context.Context, t storecopy.Table) (int64, []any, error) {
	n, last, err := s.CopyReads.Stat(ctx, t)
	return s.log.Stat(ctx, t, n, last, err)
}

// Rows returns t's rows after after, then the log's, whose keys come
// after every row's.
func (s *snapshot) Rows(ctx context.Context, t storecopy.Table, after []any, limit int) ([][]any, error) {
	rows, err := s.CopyReads.Rows(ctx, t, after, limit)
	return s.log.Rows(ctx, t, after, limit, rows, err)
}
