package sqlite

import (
	"context"
	"database/sql"

	"github.com/leasewatch/leasewatch/audit/internal/renewallog"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
)

// Sealing and pruning the renewal log (renewallog.SealStep and Prune) on
// SQLite: the log's statements as this engine writes them, in a write
// transaction.

// logSQL is how SQLite writes the log's statements.
var logSQL = renewallog.SQL{
	Dialect: dialect,
	Hint:    " INDEXED BY renewal_log_bucket_last",
	IDs: func(n int, ids []int64) (string, any) {
		return `id IN (SELECT value FROM json_each(` + dialect.P(n) + `))`, jsonList(ids)
	},
	SummaryUpsert: summaryUpsert,
}

// logTx is a write transaction as the log's sealing, pruning and
// rebucketing use it.
type logTx struct {
	sqlDB
	tx *sql.Tx
}

func newLogTx(tx *sql.Tx) logTx { return logTx{sqlDB: sqlDB{tx}, tx: tx} }

func (t logTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := t.tx.ExecContext(ctx, query, args...)
	return err
}

func (t logTx) InsertRuns(ctx context.Context, runs []runcodec.Run) error {
	return insertRuns(ctx, t.tx, runs)
}

func (t logTx) InsertLog(ctx context.Context, rows []renewallog.Row) error {
	return insertLogRows(ctx, t.Exec, rows)
}
