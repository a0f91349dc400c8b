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
// are written as one commit row of renewal_log per run window (putLog)
// instead of a row of renewals each, which the writer folds into a row per
// bucket of locks and run window once synced (rebucket). Sealing and pruning it
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

// InsertLog inserts rows with ids from blocks it reserves, a block per
// logIDBlock rows (a fold's rows need one or two).
func (t logTx) InsertLog(ctx context.Context, rows []renewallog.Row) error {
	if len(rows) == 0 {
		return nil
	}
	read, err := t.tx.Query(ctx, `SELECT nextval('renewal_log_id_seq') FROM generate_series(1, $1)`, (len(rows)+logIDBlock-1)/logIDBlock)
	if err != nil {
		return fmt.Errorf("renewal log ids: %w", err)
	}
	blocks, err := pgx.CollectRows(read, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("renewal log ids: %w", err)
	}
	ids := make([]int64, len(rows))
	for i := range ids {
		ids[i] = blocks[i/logIDBlock] + int64(i%logIDBlock)
	}
	return t.Exec(ctx, logRowsInsert, logRowsArgs(rows, ids)...)
}

// rebucket folds the synced commit rows into bucket rows
// (renewallog.Rebucket) in the batch's transaction, once the writer has
// renewallog.WriterFold's worth of commit rows not folded and a sync mark
// has moved since it last looked: a batch that looks needs its
// transaction (a round trip more for renewals of known locks). It folds
// only with the retention lock, which sealing and pruning, which delete
// log rows too, hold: not at all while they run.
func (w *batchWriter) rebucket(ctx context.Context) error {
	if w.s.commitRows < renewallog.WriterFold.Rows || !w.s.marked {
		return nil
	}
	tx, err := w.begin(ctx)
	if err != nil {
		return err
	}
	w.folded, w.looked, err = foldLog(ctx, tx, renewallog.WriterFold)
	return err
}

// foldLog folds synced commit rows as f says, in tx, if it gets the
// retention lock at once. It returns the commit rows folded and whether it
// got the lock.
func foldLog(ctx context.Context, tx pgx.Tx, f renewallog.Fold) (int, bool, error) {
	var locked bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(`+pruneLock+`)`).Scan(&locked); err != nil || !locked {
		return 0, false, err
	}
	n, _, err := renewallog.Rebucket(ctx, logTx{pgDB: pgDB{tx}, tx: tx}, logSQL, f)
	if err != nil {
		return 0, true, fmt.Errorf("renewal log: %w", err)
	}
	return n, true, nil
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
