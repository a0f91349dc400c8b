package sqlite

import (
	"context"
	"database/sql"

	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
)

// reads are the store's reads that audit/postgres shares (sqlread), on
// SQLite.
type reads = sqlread.Reader

// dialect is how this engine writes the conditions the stores share.
var dialect = rowcodec.Dialect{Like: "LIKE"}

// engine is what the shared reads need of SQLite, reading through pool.
// It plans without statistics, so the reads name their indexes (INDEXED
// BY), and a unary + keeps it off an index.
func engine(pool *readPool) sqlread.Engine {
	return sqlread.Engine{
		Dialect: dialect,
		Pool:    sqlDB{pool},
		Begin: func(ctx context.Context) (sqlread.DB, func(), error) {
			tx, err := pool.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
			if err != nil {
				return nil, nil, err
			}
			rt := &readTx{tx: tx, pool: pool}
			return sqlDB{rt}, func() { rt.end(context.WithoutCancel(ctx)) }, nil
		},
		NoRows:    sql.ErrNoRows,
		Runs:      true,
		Log:       true,
		Wrap:      storageError,
		Hint:      func(index string) string { return " INDEXED BY " + index },
		Unindexed: func(col string) string { return "+" + col },
		SummaryColumns: `CASE WHEN rs.renewals IS NULL THEN NULL
			ELSE json_array(rs.renewals, rs.first_at, rs.last_at, rs.min_margin_permille) END`,
		HighestToken: `CAST(json_extract(e.detail, '$.highest_token') AS INTEGER)`,
		FirstToken:   `CAST(json_extract(tokens, '$[0]') AS INTEGER)`,
		// One index range count per bin, the last one up to its end:
		// grouping the rows instead would sort them all in memory first.
		WriteBins: func(writes string) string {
			return `WITH RECURSIVE bin(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM bin WHERE i + 1 < ?3)
				SELECT i, (SELECT count(*) ` + writes + ` AND at >= max(?4 + i * ?5, ?6)
					AND at <= CASE WHEN i + 1 < ?3 THEN min(?4 + (i + 1) * ?5 - 1, ?7) ELSE ?7 END) FROM bin`
		},
	}
}

// queryer is a *sql.Tx or the read pool.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// sqlDB is a database/sql queryer as the shared reads use it.
type sqlDB struct{ q queryer }

func (d sqlDB) Query(ctx context.Context, query string, args ...any) (sqlread.Rows, error) {
	rows, err := d.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (d sqlDB) QueryRow(ctx context.Context, query string, args ...any) sqlread.Row {
	return d.q.QueryRowContext(ctx, query, args...)
}

// sqlRows are *sql.Rows with a Close that returns nothing: the error of a
// close after the last row is that of Err.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }
