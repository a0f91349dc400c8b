package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit/internal/renewallog"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
	"github.com/leasewatch/leasewatch/audit/storecopy"
)

// The store's side of storecopy: a read-only Source over a database file, a
// snapshot of an open store, and the Target methods of Store.

var (
	_ storecopy.Source = (*Source)(nil)
	_ storecopy.Source = (*Store)(nil)
	_ storecopy.Target = (*Store)(nil)
)

// Source reads a database for a copy without writing to it: it opens the
// file read-only and applies no migrations (a file of an older schema is
// refused by the copy, naming what differs). A service may have the file
// open meanwhile: each snapshot is one SQLite read transaction, which in
// WAL mode sees the last batch committed before it began and nothing after,
// and holds up no writer (only checkpoints, so the -wal file grows while a
// copy reads). It reads as the store does too (its Reader methods), for
// tools that check what a running service stored.
type Source struct {
	db *sql.DB
	reads
}

// OpenSource opens the database file at path for reading. It fails if the
// file does not exist, rather than create one.
func OpenSource(ctx context.Context, path string) (*Source, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	// A URI, so that mode=ro applies; its path is escaped so a file name
	// with ? or # in it stays one.
	u := url.URL{Scheme: "file", Path: abs}
	params := []string{"mode=ro", "_pragma=query_only(1)", fmt.Sprintf("_pragma=busy_timeout(%d)", busyTimeout.Milliseconds())}
	db, err := sql.Open("sqlite", u.String()+"?"+strings.Join(params, "&"))
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	keepConns(db, 1)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open database: %w", storageError(err))
	}
	return &Source{db: db, reads: reads{Engine: engine(newReadPool(db))}}, nil
}

// Snapshot begins a read transaction on the file.
func (s *Source) Snapshot(ctx context.Context) (storecopy.Snapshot, error) {
	return beginSnapshot(ctx, s.db)
}

// Close closes the file.
func (s *Source) Close() error { return s.db.Close() }

// Snapshot begins a read of the store as of its last committed batch, on a
// connection of the read pool, which it holds until closed.
func (s *Store) Snapshot(ctx context.Context) (storecopy.Snapshot, error) {
	return beginSnapshot(ctx, s.reader.DB)
}

// snapshot is one read transaction.
type snapshot struct {
	sqlread.CopyReads
	tx  *sql.Tx
	log *renewallog.Copy // the renewal log as rows (copylog.go)
}

func beginSnapshot(ctx context.Context, db *sql.DB) (*snapshot, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, storageError(err)
	}
	// A deferred transaction takes its snapshot at its first read: take it
	// now, so that every later call reads the same one.
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&n); err != nil {
		tx.Rollback()
		return nil, storageError(err)
	}
	return &snapshot{CopyReads: copyReads(tx), tx: tx, log: copyLog(tx)}, nil
}

func (s *snapshot) Close() error { return s.tx.Rollback() }

// copyReads are the reads of a copy source on q.
func copyReads(q queryer) sqlread.CopyReads {
	return sqlread.CopyReads{DB: sqlDB{q}, Wrap: storageError,
		Catalog: `SELECT m.name, p.name FROM sqlite_schema m, pragma_table_info(m.name) p
			WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\_%' ESCAPE '\'`}
}

// Schema returns the store's tables and their columns.
func (s *Store) Schema(ctx context.Context) (map[string][]string, error) {
	return copyReads(s.reader.DB).Schema(ctx)
}

// Stat counts t's committed rows and reads the last key.
func (s *Store) Stat(ctx context.Context, t storecopy.Table) (int64, []any, error) {
	return copyReads(s.reader.DB).Stat(ctx, t)
}

// Mark returns the copy mark the database holds, "" if none.
func (s *Store) Mark(ctx context.Context) (string, error) {
	var tables int
	if err := s.reader.DB.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`,
		storecopy.MarkTable).Scan(&tables); err != nil || tables == 0 {
		return "", storageError(err)
	}
	var mark string
	err := s.reader.DB.QueryRowContext(ctx, `SELECT mark FROM `+storecopy.MarkTable+` WHERE id = 1`).Scan(&mark)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return mark, storageError(err)
}

// SetMark records the copy the database holds, in a table of its own that
// the service never reads.
func (s *Store) SetMark(ctx context.Context, mark string) error {
	return storageError(s.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+storecopy.MarkTable+` (
			id        INTEGER PRIMARY KEY CHECK (id = 1),
			mark      TEXT    NOT NULL,
			copied_at INTEGER NOT NULL
		)`); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO `+storecopy.MarkTable+` (id, mark, copied_at) VALUES (1, ?, ?)`,
			mark, time.Now().UnixNano())
		return err
	}, nil))
}

// Import writes rows of t in one transaction. SQLite gives a new row the
// next id after the largest, so the copied ids need nothing more.
func (s *Store) Import(ctx context.Context, t storecopy.Table, rows [][]any) error {
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(t.Columns)), ", ")
	insert := fmt.Sprintf(`INSERT INTO %s (%s) VALUES (%s)`, t.Name, t.Names(), marks)
	return storageError(s.writeTx(ctx, func(tx *sql.Tx) error {
		if t.Whole {
			if _, err := tx.ExecContext(ctx, `DELETE FROM `+t.Name); err != nil {
				return err
			}
		}
		st, err := tx.PrepareContext(ctx, insert)
		if err != nil {
			return err
		}
		defer st.Close()
		args := make([]any, len(t.Columns))
		for _, row := range rows {
			for i, v := range row {
				if b, ok := v.(bool); ok {
					v = int64(0)
					if b {
						v = int64(1)
					}
				}
				args[i] = v
			}
			if _, err := st.ExecContext(ctx, args...); err != nil {
				return err
			}
		}
		return nil
	}, nil))
}
