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
	"strings"
	"sync"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/migrations"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

var (
	_ audit.Store   = (*Store)(nil)
	_ audit.Journal = (*Store)(nil)
)

// readConns is the size of the read pool.
const readConns = 4

// pragmas are set on every connection. busy_timeout comes first so the others
// wait for a lock instead of failing with SQLITE_BUSY.
var pragmas = []string{
	"busy_timeout(10000)",
	"journal_mode(WAL)",
	"synchronous(FULL)",
	"foreign_keys(1)",
	"temp_store(MEMORY)",
}

// Store is the SQLite audit log. It is safe for concurrent use.
type Store struct {
	path   string
	writer *sql.DB   // one connection, BEGIN IMMEDIATE
	reader *readPool // query_only pool

	mu       sync.Mutex              // serializes Apply and guards ids and prepared
	ids      map[audit.LockKey]int64 // lock key → locks.id, for committed rows only
	prepared map[string]*sql.Stmt    // the writer's statements, by query
	// syncMark is the newest event id as of the last committed
	// Batch.SyncMark; a restart forgets it, as the recorder forgets its
	// round.
	syncMark int64
}

// Open opens (creating if needed) the database at path, verifies it is in WAL
// mode and applies the migrations it has not seen yet.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("open database: empty path")
	}
	if path == ":memory:" || strings.HasPrefix(path, "file:") || strings.Contains(path, "?") {
		// The driver splits the DSN at the first '?', and an in-memory
		// database would be a different one on every pooled connection.
		return nil, fmt.Errorf("open database %q: want a plain file path", path)
	}
	s := &Store{path: path, ids: make(map[audit.LockKey]int64), prepared: make(map[string]*sql.Stmt)}

	var err error
	s.writer, err = sql.Open("sqlite", dsn(path, "_txlock=immediate"))
	if err != nil {
		return nil, fmt.Errorf("open write pool: %w", err)
	}
	s.writer.SetMaxOpenConns(1)
	s.writer.SetMaxIdleConns(1)
	s.writer.SetConnMaxLifetime(0)
	s.writer.SetConnMaxIdleTime(0)

	if err := s.checkWAL(ctx); err != nil {
		s.writer.Close()
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		s.writer.Close()
		return nil, err
	}

	// Readers map the file (no read syscall per page) and keep a bigger page
	// cache: dashboard pages walk index ranges of millions of events.
	rdb, err := sql.Open("sqlite", dsn(path, "_pragma=query_only(1)", "_pragma=mmap_size(268435456)", "_pragma=cache_size(-16384)"))
	if err != nil {
		s.writer.Close()
		return nil, fmt.Errorf("open read pool: %w", err)
	}
	s.reader = newReadPool(rdb)
	s.reader.SetMaxOpenConns(readConns)
	s.reader.SetMaxIdleConns(readConns)
	s.reader.SetConnMaxLifetime(0)
	s.reader.SetConnMaxIdleTime(0)
	if err := s.reader.PingContext(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("open read pool: %w", err)
	}
	return s, nil
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
		return fmt.Errorf("open database %s: read journal mode: %w", s.path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("open database %s: journal mode is %q, want \"wal\" (is the file on a filesystem without shared memory support?)", s.path, mode)
	}
	return nil
}

// migrate applies every migration not yet recorded in schema_migrations, each
// in its own transaction together with its record.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations.Load(migrations.FS)
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

// Times are stored as unix nanoseconds; 0 is the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// nullNanos stores the zero time as NULL, for columns where NULL means "not
// yet" (a tenure's end, a finding's until).
func nullNanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func nullToken(t *int64) any {
	if t == nil {
		return nil
	}
	return *t
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

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
