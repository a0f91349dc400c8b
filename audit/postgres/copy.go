package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasewatch/leasewatch/audit/internal/renewallog"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
	"github.com/leasewatch/leasewatch/audit/storecopy"
)

// The store's side of storecopy: a read-only Source over a database, a
// snapshot of an open store, and the Target methods of Store, whose bulk
// inserts go through COPY.

var (
	_ storecopy.Source = (*Source)(nil)
	_ storecopy.Source = (*Store)(nil)
	_ storecopy.Target = (*Store)(nil)
)

// Source reads a database for a copy without writing to it: its sessions
// are read-only and it applies no migrations (a database of an older schema
// is refused by the copy, naming what differs). A service may write to the
// database meanwhile: each snapshot is one REPEATABLE READ transaction,
// which sees what was committed before it began and nothing after.
// It reads as the store does too (its Reader methods), for tools that
// check what a running service stored.
type Source struct {
	pool *pgxpool.Pool
	reads
}

// OpenSource connects to the database at url, as Open accepts it.
func OpenSource(ctx context.Context, url string) (*Source, error) {
	return OpenSourceWith(ctx, url, Options{})
}

// OpenSourceWith is OpenSource with the Password and TLS of opts, as Open
// takes them: leasewatch copy reads its target through it before it writes
// anything there.
func OpenSourceWith(ctx context.Context, url string, opts Options) (*Source, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if opts.Password != nil || opts.TLS != nil {
		cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error { return opts.configure(&cc.Config) }
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open database: %w", storageError(err))
	}
	return &Source{pool: pool, reads: reads{Engine: engine(pool)}}, nil
}

// Snapshot begins a read-only REPEATABLE READ transaction.
func (s *Source) Snapshot(ctx context.Context) (storecopy.Snapshot, error) {
	return beginSnapshot(ctx, s.pool)
}

// Close closes the connection.
func (s *Source) Close() error {
	s.pool.Close()
	return nil
}

// Snapshot begins a read of the store as of its last committed batch, on a
// connection of the read pool, which it holds until closed.
func (s *Store) Snapshot(ctx context.Context) (storecopy.Snapshot, error) {
	return beginSnapshot(ctx, s.reader)
}

// snapshot is one read transaction.
type snapshot struct {
	copyReader
	tx  pgx.Tx
	log *renewallog.Copy // the renewal log as rows
}

func beginSnapshot(ctx context.Context, pool *pgxpool.Pool) (*snapshot, error) {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, storageError(err)
	}
	log := &renewallog.Copy{DB: pgDB{tx}, Dialect: dialect, Wrap: storageError,
		Newest: func(ctx context.Context) (event, run int64, err error) {
			if event, err = highestEventID(ctx, tx); err == nil {
				err = tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM renewal_runs`).Scan(&run)
			}
			return event, run, err
		}}
	return &snapshot{copyReader: copyReads(tx), tx: tx, log: log}, nil
}

func (s *snapshot) Close() error { return s.tx.Rollback(context.Background()) }

// Stat counts t's rows, the renewal log's among them (renewallog.Copy),
// and reads the last key.
func (s *snapshot) Stat(ctx context.Context, t storecopy.Table) (int64, []any, error) {
	n, last, err := s.copyReader.Stat(ctx, t)
	return s.log.Stat(ctx, t, n, last, err)
}

// Rows returns t's rows after after, then the renewal log's, whose keys
// come after every row's.
func (s *snapshot) Rows(ctx context.Context, t storecopy.Table, after []any, limit int) ([][]any, error) {
	rows, err := s.copyReader.Rows(ctx, t, after, limit)
	return s.log.Rows(ctx, t, after, limit, rows, err)
}

// copyReader is the reads of a copy source on one querier: the shared
// ones, but for events, which are read from timeline, events and renewals
// together (migration 0003), as the logical schema has them.
type copyReader struct {
	sqlread.CopyReads
	q querier
}

// copyReads are the reads of a copy source on q. The catalog leaves out the
// renewals table and its partitions, which hold events.
func copyReads(q querier) copyReader {
	return copyReader{q: q, CopyReads: sqlread.CopyReads{DB: pgDB{q}, Numbered: true, Wrap: storageError,
		Catalog: `SELECT c.table_name::text, c.column_name::text
			FROM information_schema.columns c JOIN information_schema.tables t
				ON t.table_schema = c.table_schema AND t.table_name = c.table_name
			WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
				AND c.table_name !~ '^renewals(_[0-9]+)?$'`}}
}

// Stat counts t's rows and reads its last key; the events' in one pass,
// since renewals have no B-tree on id to find the last one by.
func (c copyReader) Stat(ctx context.Context, t storecopy.Table) (int64, []any, error) {
	if t.Name != "events" {
		return c.CopyReads.Stat(ctx, t)
	}
	var n, last int64
	if err := c.q.QueryRow(ctx, `SELECT count(*), coalesce(max(id), 0) FROM timeline`).Scan(&n, &last); err != nil || n == 0 {
		return 0, nil, storageError(err)
	}
	return n, []any{last}, nil
}

// Rows returns up to limit rows of t after the key after, in key order; the
// events by ranges of ids, each one BRIN lookup in a partition of renewals,
// up to the newest id given out.
func (c copyReader) Rows(ctx context.Context, t storecopy.Table, after []any, limit int) ([][]any, error) {
	if t.Name != "events" || limit <= 0 {
		return c.CopyReads.Rows(ctx, t, after, limit)
	}
	var lo int64
	if after != nil {
		lo = after[0].(int64)
	}
	highest, err := highestEventID(ctx, c.q)
	if err != nil {
		return nil, storageError(err)
	}
	var out [][]any
	for len(out) < limit && lo < highest {
		hi := min(lo+int64(limit-len(out)), highest)
		rows, err := c.q.Query(ctx, `SELECT `+t.Names()+` FROM timeline WHERE id > $1 AND id <= $2 ORDER BY id`, lo, hi)
		if err != nil {
			return nil, storageError(err)
		}
		for rows.Next() {
			row, err := rows.Values()
			if err == nil {
				err = t.Normalize(row)
			}
			if err != nil {
				rows.Close()
				return nil, err
			}
			out = append(out, row)
		}
		if err := rows.Err(); err != nil {
			return nil, storageError(err)
		}
		lo = hi
	}
	return out, nil
}

// Schema returns the store's tables and their columns.
func (s *Store) Schema(ctx context.Context) (map[string][]string, error) {
	return copyReads(s.reader).Schema(ctx)
}

// Stat counts t's committed rows and reads the last key.
func (s *Store) Stat(ctx context.Context, t storecopy.Table) (int64, []any, error) {
	return copyReads(s.reader).Stat(ctx, t)
}

// Mark returns the copy mark the database holds, "" if none.
func (s *Store) Mark(ctx context.Context) (string, error) {
	var exists bool
	if err := s.reader.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, storecopy.MarkTable).Scan(&exists); err != nil || !exists {
		return "", storageError(err)
	}
	var mark string
	err := s.reader.QueryRow(ctx, `SELECT mark FROM `+storecopy.MarkTable+` WHERE id = 1`).Scan(&mark)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return mark, storageError(err)
}

// SetMark records the copy the database holds, in a table of its own that
// the service never reads.
func (s *Store) SetMark(ctx context.Context, mark string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return storageError(pgx.BeginFunc(ctx, s.writer, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+storecopy.MarkTable+` (
			id        INTEGER PRIMARY KEY CHECK (id = 1),
			mark      TEXT    NOT NULL,
			copied_at BIGINT  NOT NULL
		)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+storecopy.MarkTable+` (id, mark, copied_at) VALUES (1, $1, $2)
			ON CONFLICT (id) DO UPDATE SET mark = excluded.mark, copied_at = excluded.copied_at`, mark, time.Now().UnixNano())
		return err
	}))
}

// Import writes rows of t in one transaction, by COPY, which writes the
// given ids of identity columns as they are; the id's sequence is then moved
// to the last, so the service's next row gets the one after.
func (s *Store) Import(ctx context.Context, t storecopy.Table, rows [][]any) error {
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = c.Name
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	parts := s.parts
	err := pgx.BeginFunc(ctx, s.writer, func(tx pgx.Tx) error {
		if t.Whole {
			if _, err := tx.Exec(ctx, `DELETE FROM `+t.Name); err != nil {
				return err
			}
		}
		if t.Name == "events" {
			// Into events and renewals, as the writer splits them.
			var err error
			parts, err = copyEvents(ctx, tx, parts, rows)
			if err != nil {
				return err
			}
		} else if _, err := tx.CopyFrom(ctx, pgx.Identifier{t.Name}, names, pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		if t.Identity && len(rows) > 0 {
			last := rows[len(rows)-1][0]
			if _, err := tx.Exec(ctx, `SELECT setval(pg_get_serial_sequence($1, $2), $3)`, t.Name, names[0], last); err != nil {
				return fmt.Errorf("move the %s id sequence: %w", t.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return storageError(err)
	}
	s.parts = parts
	if t.Name == "events" && len(rows) > 0 {
		s.highest = max(s.highest, rows[len(rows)-1][0].(int64))
	}
	return nil
}
