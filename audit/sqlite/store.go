// Package sqlite stores leasewatch's audit log in SQLite (modernc.org/sqlite,
// no cgo). It implements audit.Journal, the recorder's write side, and
// audit.Store, the read side used by the web server and reports.
//
// One connection writes and a separate pool reads; WAL mode lets readers see
// the last committed batch while a write is in progress. The schema lives in
// the migrations package and is applied by Open.
//
// What a round trip changes: times come back in UTC (unix nanoseconds are
// stored); durations are stored in whole milliseconds; Event.Detail is stored
// as JSON, so it comes back as decoded JSON (numbers as json.Number, times as
// RFC 3339 strings); empty Finding.Tokens and Holders come back nil.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	sqlitedriver "modernc.org/sqlite" // also registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
	"github.com/leasewatch/leasewatch/migrations"
)

var (
	_ audit.Store   = (*Store)(nil)
	_ audit.Journal = (*Store)(nil)
)

// readConns is the size of the read pool.
const readConns = 4

// busyTimeout is how long a statement waits for another process's lock on
// the file before it fails with SQLITE_BUSY (see storageError).
const busyTimeout = 10 * time.Second

// pragmas are set on every connection. busy_timeout comes first so the others
// wait for a lock instead of failing with SQLITE_BUSY.
var pragmas = []string{
	fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()),
	"journal_mode(WAL)",
	"synchronous(FULL)",
	"foreign_keys(1)",
	"temp_store(MEMORY)",
}

// Store is the SQLite audit log. It is safe for concurrent use.
type Store struct {
	reads // Locks, Events, Findings... (sqlread)

	path   string
	writer *sql.DB   // one connection, BEGIN IMMEDIATE
	reader *readPool // query_only pool
	bgPool *readPool // Background's one connection
	bg     background

	mu       sync.Mutex              // serializes Apply and guards ids and prepared
	ids      map[audit.LockKey]int64 // lock key → locks.id, for committed rows only
	prepared map[string]*sql.Stmt    // the writer's statements, by query
	// syncMark is the newest event id as of the last committed
	// Batch.SyncMark; a restart forgets it, as the recorder forgets its
	// round.
	syncMark int64
	// syncLogMark is the newest renewal_log id as of that batch: the
	// log's part of the mark.
	syncLogMark int64
	// foldIdle is whether the last batch that looked for commit rows to
	// fold found none due, and no sync mark has moved since: only a mark
	// makes more of them due (rebucket).
	foldIdle bool
	runs     runsWalk // retention's walk of renewal runs
	ckpt     checkpointer
}

// Open opens (creating if needed) the database at path, verifies it is in WAL
// mode and applies the migrations it has not seen yet. Its errors do not name
// path (callers do), but say why the file cannot be used: read-only, locked by
// another process, disk full.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("open database: empty path")
	}
	if path == ":memory:" || strings.HasPrefix(path, "file:") || strings.Contains(path, "?") {
		// The driver splits the DSN at the first '?', and an in-memory
		// database would be a different one on every pooled connection.
		return nil, fmt.Errorf("open database %q: want a plain file path", path)
	}
	if err := checkWritable(path); err != nil {
		return nil, err
	}
	s := &Store{path: path, ids: make(map[audit.LockKey]int64), prepared: make(map[string]*sql.Stmt)}

	var err error
	// The writer leaves checkpoints to the checkpointer (checkpoint.go).
	s.writer, err = sql.Open("sqlite", dsn(path, "_txlock=immediate", "_pragma=wal_autocheckpoint(0)"))
	if err != nil {
		return nil, fmt.Errorf("open write pool: %w", err)
	}
	keepConns(s.writer, 1)

	if err := s.checkWAL(ctx); err != nil {
		s.writer.Close()
		return nil, storageError(err)
	}
	if err := s.migrate(ctx); err != nil {
		s.writer.Close()
		return nil, storageError(err)
	}

	// Readers map the file (no read syscall per page) and keep a bigger page
	// cache: dashboard pages walk index ranges of millions of events.
	rdb, err := sql.Open("sqlite", dsn(path, "_pragma=query_only(1)", fmt.Sprintf("_pragma=mmap_size(%d)", readMapSize), "_pragma=cache_size(-16384)"))
	if err != nil {
		s.writer.Close()
		return nil, fmt.Errorf("open read pool: %w", err)
	}
	keepConns(rdb, readConns)
	s.reader = newReadPool(rdb)
	s.reads = reads{Engine: engine(s.reader)}
	if err := s.openBackground(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.reader.PingContext(ctx); err != nil {
		s.Close()
		return nil, storageError(fmt.Errorf("open read pool: %w", err))
	}
	if err := s.startCheckpoints(ctx); err != nil {
		s.Close()
		return nil, storageError(fmt.Errorf("open checkpoint connection: %w", err))
	}
	return s, nil
}

// readMapSize is how much of the database file each read connection maps:
// SQLite's largest (SQLITE_MAX_MMAP_SIZE, just under 2 GiB). Pages read
// through the map are the kernel's file cache, which it can drop under
// pressure; past the map, every page a read touches is copied into the
// connection's own page cache, process memory that stays.
const readMapSize = 2147418112

// keepConns sizes db's pool to n connections that stay open for good: each
// keeps its pragmas, page cache and compiled statements.
func keepConns(db *sql.DB, n int) {
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
}

// checkWritable fails with the operating system's reason when the database
// file, or the directory where SQLite creates its -wal and -shm files, cannot
// be written: SQLite itself says only "unable to open database file".
func checkWritable(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644) // SQLite's own mode for a new file
	if err != nil {
		return fmt.Errorf("cannot write the database file: %w", err)
	}
	f.Close()
	probe, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".probe-*")
	if err != nil {
		return fmt.Errorf("cannot create files beside the database (SQLite keeps its -wal and -shm files there): %w", err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return nil
}

// storageError adds to an SQLite failure that the operator can act on an
// *audit.Error (EUNAVAILABLE) saying what is wrong, so the recorder answers
// the request with 503 and that message; other errors come back unchanged.
func storageError(err error) error {
	var se *sqlitedriver.Error
	if err == nil || !errors.As(err, &se) {
		return err
	}
	var msg string
	switch se.Code() & 0xff { // the primary result code
	case sqlite3.SQLITE_FULL:
		msg = "the database's disk is full"
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		msg = fmt.Sprintf("the database is locked by another process (waited %s)", busyTimeout)
	case sqlite3.SQLITE_READONLY:
		msg = "the database is read-only"
	case sqlite3.SQLITE_CANTOPEN:
		msg = "the database file cannot be opened"
	case sqlite3.SQLITE_IOERR:
		msg = "the database could not be read or written (I/O error)"
	default:
		return err
	}
	return audit.Caused(audit.Errorf(audit.EUNAVAILABLE, "%s", msg), err)
}

func dsn(path string, extra ...string) string {
	params := make([]string, 0, len(pragmas)+len(extra))
	for _, p := range pragmas {
		params = append(params, "_pragma="+p)
	}
	params = append(params, extra...)
	return path + "?" + strings.Join(params, "&")
}

// checkWAL fails unless the database really is in WAL mode: journal_mode(WAL)
// silently leaves some files (on filesystems without shared memory) in their
// old mode, and the one-writer, many-readers design depends on it.
func (s *Store) checkWAL(ctx context.Context) error {
	var mode string
	if err := s.writer.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, want \"wal\" (is the file on a filesystem without shared memory support?)", mode)
	}
	return nil
}

// migrate applies every migration not yet recorded in schema_migrations, each
// in its own transaction together with its record.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations.Load(migrations.SQLite)
	if err != nil {
		return err
	}
	if _, err := s.writer.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	for _, m := range ms {
		if err := s.applyMigration(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) applyMigration(ctx context.Context, m migrations.Migration) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %s: %w", m.Name, err)
	}
	defer tx.Rollback()
	// Checked inside the (immediate) transaction, so two processes opening
	// the same file cannot both apply it.
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, m.Version).Scan(&n); err != nil {
		return fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		m.Version, m.Name, time.Now().UnixNano()); err != nil {
		return fmt.Errorf("migration %s: record: %w", m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %s: commit: %w", m.Name, err)
	}
	return nil
}

// Close closes both pools. The store must not be used afterwards.
func (s *Store) Close() error {
	var errs []error
	if s.reader != nil {
		if err := s.reader.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close read pool: %w", err))
		}
	}
	if s.bgPool != nil {
		if err := s.bgPool.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close background read pool: %w", err))
		}
	}
	if err := s.ckpt.close(); err != nil {
		errs = append(errs, fmt.Errorf("close checkpoint connection: %w", err))
	}
	s.mu.Lock()
	for _, ps := range s.prepared {
		ps.Close()
	}
	clear(s.prepared)
	s.mu.Unlock()
	if err := s.writer.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close write pool: %w", err))
	}
	return errors.Join(errs...)
}

// Times are stored as audit.Nanos encodes them: unix nanoseconds, clamped to
// what an int64 holds, and audit.NoNanos for the zero time in the NOT NULL
// columns (migration 0011), so 0 is 1970-01-01T00:00:00Z like any other
// instant. The bounds of a query window go through it too, so a window that
// reaches past 2262 is clamped rather than wrapped.
func nanos(t time.Time) int64 { return audit.Nanos(t) }

// Size returns the bytes the database's pages take (indexes included, free
// pages not), as of the last committed batch.
func (s *Store) Size(ctx context.Context) (int64, error) {
	var pages, free, size int64
	err := s.reader.QueryRowContext(ctx, `SELECT (SELECT page_count FROM pragma_page_count()),
		(SELECT freelist_count FROM pragma_freelist_count()), (SELECT page_size FROM pragma_page_size())`).Scan(&pages, &free, &size)
	if err != nil {
		return 0, fmt.Errorf("database size: %w", err)
	}
	return (pages - free) * size, nil
}

// PutVerdicts keeps each lock's verdict (audit.Database).
func (s *Store) PutVerdicts(ctx context.Context, verdicts []audit.LockVerdict) error {
	for chunk := range slices.Chunk(verdicts, sqlread.MaxPutVerdicts) {
		q, args := sqlread.PutVerdicts(dialect, chunk)
		err := s.writeTx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		}, nil)
		if err != nil {
			return fmt.Errorf("keep verdicts: %w", storageError(err))
		}
	}
	return nil
}
