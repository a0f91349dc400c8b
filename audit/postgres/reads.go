package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
)

// reads are the store's reads that audit/sqlite shares (sqlread), on
// PostgreSQL.
type reads = sqlread.Reader

// dialect is how this engine writes the conditions the stores share.
var dialect = rowcodec.Dialect{Numbered: true, Like: "ILIKE", Wide: "::numeric", Text: "::text"}

// engine is what the shared reads need of PostgreSQL. It plans by
// statistics, so the reads name no indexes.
func engine(pool *pgxpool.Pool) sqlread.Engine {
	return sqlread.Engine{
		Dialect: dialect,
		Pool:    pgDB{pool},
		Begin: func(ctx context.Context) (sqlread.DB, func(), error) {
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
			if err != nil {
				return nil, nil, err
			}
			return pgDB{tx}, func() { tx.Rollback(context.WithoutCancel(ctx)) }, nil
		},
		NoRows:   pgx.ErrNoRows,
		Wrap:     storageError,
		Timeline: "timeline", // events and renewals (migration 0003)
		Runs:     true,       // renewal_runs (migration 0015)
		Log:      true,       // renewal_log (migration 0016)
		// A generic plan, costed for a lock of a few tenures, would pair
		// each of a busy lock's renewals with all its tenures (its 1,000
		// newest events: 130 ms); a lateral subquery with a LIMIT is
		// neither flattened nor materialized, so it is one index lookup per
		// event (4 ms).
		TenureJoin: ` LEFT JOIN LATERAL (SELECT t.holder, t.token FROM tenures t
			WHERE t.lock_id = e.lock_id AND t.seq = e.seq LIMIT 1) et ON e.seq IS NOT NULL`,
		SummaryColumns: `CASE WHEN rs.renewals IS NULL THEN NULL
			ELSE json_build_array(rs.renewals, rs.first_at, rs.last_at, rs.min_margin_permille)::text END`,
		// The detail is the JSON encoding/json wrote; json, not jsonb,
		// takes any string it holds.
		HighestToken: `CASE WHEN e.detail IS NOT NULL AND (e.detail::json->>'highest_token') ~ '^-?[0-9]{1,18}$'
			THEN (e.detail::json->>'highest_token')::bigint END`,
		// The tokens are the JSON array of integers the store wrote.
		FirstToken: `(tokens::json->>0)::bigint`,
		// A hash of at most bins groups; at - from never overflows: both lie
		// in the window, whose span fits.
		WriteBins: func(writes string) string {
			return `SELECT least((at - $4) / $5, $3 - 1), count(*) ` + writes + ` AND at >= $6 AND at <= $7 GROUP BY 1`
		},
	}
}

// querier is a transaction or a pool.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// pgDB is a pgx querier as the shared reads use it.
type pgDB struct{ q querier }

func (d pgDB) Query(ctx context.Context, query string, args ...any) (sqlread.Rows, error) {
	rows, err := d.q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (d pgDB) QueryRow(ctx context.Context, query string, args ...any) sqlread.Row {
	return d.q.QueryRow(ctx, query, args...)
}
