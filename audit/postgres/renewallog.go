package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/renewallog"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
)

// The renewal log (migration 0016): a batch's renewals that a run can hold
// are written as one row of renewal_log per bucket of locks and run window
// (putLog) instead of a row of renewals each. Sealing and pruning it
// (renewallog.SealStep and Prune) run the statements below, under the
// retention lock.

// logSQL is how PostgreSQL writes the log's statements.
var logSQL = renewallog.SQL{
	Dialect: dialect,
	IDs: func(n int, ids []int64) (string, any) {
		return `id = ANY(` + dialect.P(n) + `::bigint[])`, ids
	},
	SummaryUpsert: summaryUpsert,
}

// logTx is a transaction as the log's sealing and pruning use it.
type logTx struct {
	pgDB
	tx pgx.Tx
}

func (t logTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := t.tx.Exec(ctx, query, args...)
	return err
}

func (t logTx) InsertRuns(ctx context.Context, runs []runcodec.Run) error {
	rows := make([][]any, len(runs))
	for i, r := range runs {
		rows[i] = runRow(r)
	}
	return copyRuns(ctx, t.tx, rows)
}

// pruneLog prunes the log's renewals observed before before, up to limit
// rows (renewallog.Prune), and leaves res.Done only if none is left.
func pruneLog(ctx context.Context, tx pgx.Tx, before int64, limit int, res *audit.PruneResult) error {
	n, more, err := renewallog.Prune(ctx, logTx{pgDB: pgDB{tx}, tx: tx}, logSQL, before, limit)
	if err != nil {
		return fmt.Errorf("prune the renewal log: %w", err)
	}
	res.Deleted += n
	res.Done = !more
	return nil
}
