// Package sqlread is the read side of the SQL stores (audit.Store), written
// once for audit/sqlite and audit/postgres. The queries are the same logical
// SQL on the same logical schema; what the engines write differently
// (placeholders, planner hints, JSON functions) is the store's Engine. The
// algorithms that differ between engines (EventTimes) stay in each store.
package sqlread

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
)

// Row is one result row: *sql.Row and pgx.Row.
type Row interface {
	Scan(dest ...any) error
}

// Rows is a result set: *sql.Rows and pgx.Rows, through the store's adapter
// (their Close methods differ).
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// DB runs queries: a store's read pool or one of its transactions.
type DB interface {
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, query string, args ...any) Row
}

// Engine is what a store gives the shared reads.
type Engine struct {
	Dialect rowcodec.Dialect
	// Pool runs the reads that need no common snapshot.
	Pool DB
	// Begin begins a read-only transaction, for reads of several
	// statements that must see one state; end rolls it back.
	Begin func(ctx context.Context) (tx DB, end func(), err error)
	// NoRows is the error QueryRow's Scan returns for no row.
	NoRows error
	// Wrap turns an engine's error into the one callers see (EUNAVAILABLE
	// for a database that cannot be reached).
	Wrap func(error) error
	// Hint is written after a table to read it through index: SQLite's
	// INDEXED BY, which it needs where it plans without statistics; ""
	// for an engine that plans by them.
	Hint func(index string) string
	// Unindexed writes col so that the planner uses no index on it
	// (SQLite's unary +).
	Unindexed func(col string) string
	// SummaryColumns are the columns rowcodec.SummaryDest scans, from
	// renewal_summaries aliased rs, as one JSON array in text.
	SummaryColumns string
	// WriteBins is the query of WriteCounts' bins: from writes (the FROM
	// and WHERE of a lock's writes of one kind, arguments 1 and 2), the
	// bin index and count of each non-empty bin of the writes at or after
	// argument 6 and at or before argument 7, in bins (argument 3) of
	// argument 5 nanoseconds from argument 4, the last one up to 7.
	WriteBins func(writes string) string
	// HighestToken reads the highest_token of a write's detail (events
	// aliased e) as an integer, NULL when it has none.
	HighestToken string
	// FirstToken reads the first of a finding's tokens (findings, not
	// aliased) as an integer, NULL when it has none.
	FirstToken string
	// Timeline is the relation that holds every event, with the events
	// table's columns: "" for that table itself, or an engine's view over
	// it and the tables that hold some kinds apart (PostgreSQL's renewals).
	// Events of the rare kinds are always in the events table.
	Timeline string
	// Runs says the engine keeps sealed renewals in renewal_runs (SQLite
	// migration 0025), which the reads of renewals merge with the rows.
	Runs bool
	// Log says the engine writes renewals into renewal_log (SQLite
	// migration 0026, PostgreSQL 0016), which the reads of renewals and the journal's
	// replay merge with the runs and the rows.
	Log bool
	// TenureJoin replaces the plain TenureJoin where the engine's planner
	// needs another form; it must give et the columns holder and token.
	TenureJoin string
}

// timeline is the relation of every event.
func (e Engine) timeline() string {
	if e.Timeline == "" {
		return "events"
	}
	return e.Timeline
}

// Reader implements audit.Store's reads, but EventTimes, on an Engine. A
// store embeds it.
type Reader struct {
	Engine
	keys keyCache
}

// keyCache remembers the keys of locks that exist. A lock's key never
// changes and a lock row is never deleted, so a key once read stays true;
// a lock not found is never remembered. Most reads of one lock's history
// check that the lock exists first, and an incident review makes dozens of
// them per lock: each is a round trip to a database server.
type keyCache struct {
	mu   sync.Mutex
	keys map[int64]audit.LockKey
}

// maxCachedKeys bounds the cache; past it the cache starts again empty.
const maxCachedKeys = 1 << 16

func (c *keyCache) get(id int64) (audit.LockKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key, ok := c.keys[id]
	return key, ok
}

func (c *keyCache) put(id int64, key audit.LockKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil || len(c.keys) >= maxCachedKeys {
		c.keys = make(map[int64]audit.LockKey)
	}
	c.keys[id] = key
}

// wrap is e.Wrap, or err as it is.
func (e *Engine) wrap(err error) error {
	if e.Wrap == nil || err == nil {
		return err
	}
	return e.Wrap(err)
}

// noRows reports whether err says that QueryRow found no row.
func (e *Engine) noRows(err error) bool { return errors.Is(err, e.NoRows) }

// hint is e.Hint(index), or "" without a Hint.
func (e *Engine) hint(index string) string {
	if e.Hint == nil || index == "" {
		return ""
	}
	return e.Hint(index)
}

// unindexed is e.Unindexed(col), or col without one.
func (e *Engine) unindexed(col string) string {
	if e.Unindexed == nil {
		return col
	}
	return e.Unindexed(col)
}

// LockKey returns the key of lock id, or ENOTFOUND.
func (r *Reader) LockKey(ctx context.Context, db DB, id int64) (audit.LockKey, error) {
	key, ok := r.keys.get(id)
	if ok {
		return key, nil
	}
	err := db.QueryRow(ctx, `SELECT source, name FROM locks WHERE id = `+r.Dialect.P(1), id).Scan(&key.Source, &key.Name)
	if r.noRows(err) {
		return key, audit.Errorf(audit.ENOTFOUND, "lock %d not found", id)
	}
	if err != nil {
		return key, fmt.Errorf("get lock %d: %w", id, r.wrap(err))
	}
	r.keys.put(id, key)
	return key, nil
}

// Collect scans every row into a new T through dest and closes rows.
func Collect[T any](rows Rows, dest func(*T) []any) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(dest(&v)...); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// query runs q on db and collects its rows through dest; errors say what
// was read (what).
func query[T any](ctx context.Context, r *Reader, db DB, what string, dest func(*T) []any, q string, args ...any) ([]T, error) {
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, r.wrap(err))
	}
	out, err := Collect(rows, dest)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, r.wrap(err))
	}
	return out, nil
}
