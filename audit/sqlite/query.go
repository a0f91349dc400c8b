package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// List limits: the default when a filter's Limit is <= 0, and the most one
// call returns.
const (
	defaultLockLimit = 500
	maxLockLimit     = 5000
	defaultListLimit = 1000
	maxListLimit     = 10000
)

func limit(n, def, most int) int {
	if n <= 0 {
		return def
	}
	return min(n, most)
}

// where accumulates the conditions and arguments of a query.
type where struct {
	conds []string
	args  []any
}

func (w *where) add(cond string, args ...any) {
	w.conds = append(w.conds, cond)
	w.args = append(w.args, args...)
}

// window adds col's bounds from f; zero bounds stay open.
func (w *where) window(col string, f audit.TimeFilter) {
	if !f.From.IsZero() {
		w.add(col+" >= ?", f.From.UnixNano())
	}
	if !f.To.IsZero() {
		w.add(col+" <= ?", f.To.UnixNano())
	}
}

func (w *where) String() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

// likeEscaper makes a string match itself literally in LIKE ... ESCAPE '\'.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// Locks returns the locks that match f, ordered by source then name. Q matches
// a substring of the name or holder, ignoring case (ASCII letters only, as
// SQLite's LIKE does).
func (s *Store) Locks(ctx context.Context, f audit.LockFilter) ([]audit.Lock, error) {
	var w where
	if f.Source != "" {
		w.add("l.source = ?", f.Source)
	}
	if f.Name != "" {
		w.add("l.name = ?", f.Name)
	}
	if f.Q != "" {
		pat := "%" + likeEscaper.Replace(f.Q) + "%"
		w.add(`(l.name LIKE ? ESCAPE '\' OR l.holder LIKE ? ESCAPE '\')`, pat, pat)
	}
	if f.Class != "" {
		w.add("l.class = ?", string(f.Class))
	}
	if f.State != "" {
		w.add("l.state = ?", string(f.State))
	}
	args := append(w.args, limit(f.Limit, defaultLockLimit, maxLockLimit), max(f.Offset, 0))
	rows, err := s.reader.QueryContext(ctx, `SELECT `+lockColumns+` FROM locks l`+w.String()+
		` ORDER BY l.source, l.name LIMIT ? OFFSET ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
	}
	locks, err := collect(rows, lockDest)
	if err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
	}
	return locks, nil
}

// Lock returns one lock. Returns ENOTFOUND if it does not exist.
func (s *Store) Lock(ctx context.Context, id int64) (audit.Lock, error) {
	var l audit.Lock
	err := s.reader.QueryRowContext(ctx, `SELECT `+lockColumns+` FROM locks l WHERE l.id = ?`, id).Scan(lockDest(&l)...)
	if errors.Is(err, sql.ErrNoRows) {
		return audit.Lock{}, audit.Errorf(audit.ENOTFOUND, "lock %d not found", id)
	}
	if err != nil {
		return audit.Lock{}, fmt.Errorf("get lock %d: %w", id, err)
	}
	return l, nil
}

// LockByKey returns one lock by source and name. Returns ENOTFOUND if it does
// not exist.
func (s *Store) LockByKey(ctx context.Context, key audit.LockKey) (audit.Lock, error) {
	var l audit.Lock
	err := s.reader.QueryRowContext(ctx, `SELECT `+lockColumns+` FROM locks l WHERE l.source = ? AND l.name = ?`,
		key.Source, key.Name).Scan(lockDest(&l)...)
	if errors.Is(err, sql.ErrNoRows) {
		return audit.Lock{}, audit.Errorf(audit.ENOTFOUND, "lock %s not found", key)
	}
	if err != nil {
		return audit.Lock{}, fmt.Errorf("get lock %s: %w", key, err)
	}
	return l, nil
}

// Events returns the lock's events within f's window (inclusive), in time
// order; if more than f.Limit match, the newest f.Limit. Returns ENOTFOUND if
// the lock does not exist.
func (s *Store) Events(ctx context.Context, lockID int64, f audit.EventFilter) ([]audit.Event, error) {
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer tx.Rollback()
	key, err := lockKey(ctx, tx, lockID)
	if err != nil {
		return nil, err
	}
	var w where
	w.add("e.lock_id = ?", lockID)
	if f.Kind != "" {
		w.add("e.kind = ?", string(f.Kind))
	}
	w.window("e.at", f.TimeFilter)
	args := append(w.args, limit(f.Limit, defaultListLimit, maxListLimit))
	rows, err := tx.QueryContext(ctx, `SELECT `+eventColumns+` FROM events e`+w.String()+
		` ORDER BY e.at DESC, e.id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("list events of lock %d: %w", lockID, err)
	}
	events, err := collect(rows, eventDest)
	if err != nil {
		return nil, fmt.Errorf("list events of lock %d: %w", lockID, err)
	}
	slices.Reverse(events)
	for i := range events {
		events[i].Lock = key
	}
	return events, nil
}

// Tenures returns the lock's tenures that overlap f's window (granted by its
// end, not ended before its start), in grant order; if more than f.Limit
// match, the newest f.Limit. Returns ENOTFOUND if the lock does not exist.
func (s *Store) Tenures(ctx context.Context, lockID int64, f audit.TimeFilter) ([]audit.Tenure, error) {
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("list tenures: %w", err)
	}
	defer tx.Rollback()
	key, err := lockKey(ctx, tx, lockID)
	if err != nil {
		return nil, err
	}
	var w where
	w.add("t.lock_id = ?", lockID)
	if !f.To.IsZero() {
		w.add("t.granted_at <= ?", f.To.UnixNano())
	}
	if !f.From.IsZero() {
		w.add("(t.ended_at IS NULL OR t.ended_at = 0 OR t.ended_at >= ?)", f.From.UnixNano())
	}
	args := append(w.args, limit(f.Limit, defaultListLimit, maxListLimit))
	rows, err := tx.QueryContext(ctx, `SELECT `+tenureColumns+` FROM tenures t`+w.String()+
		` ORDER BY t.seq DESC LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("list tenures of lock %d: %w", lockID, err)
	}
	tenures, err := collect(rows, tenureDest)
	if err != nil {
		return nil, fmt.Errorf("list tenures of lock %d: %w", lockID, err)
	}
	slices.Reverse(tenures)
	for i := range tenures {
		tenures[i].Lock = key
	}
	return tenures, nil
}

// Findings returns the findings that match f within its window (inclusive, on
// the finding's start), in time order; if more than f.Limit match, the newest
// f.Limit. A LockID that does not exist matches nothing.
func (s *Store) Findings(ctx context.Context, f audit.FindingFilter) ([]audit.Finding, error) {
	var w where
	if f.LockID != 0 {
		w.add("f.lock_id = ?", f.LockID)
	}
	if f.Kind != "" {
		w.add("f.kind = ?", string(f.Kind))
	}
	if f.Severity != "" {
		w.add("f.severity = ?", string(f.Severity))
	}
	if f.Resource != "" {
		w.add("f.resource = ?", f.Resource)
	}
	w.window("f.at", f.TimeFilter)
	args := append(w.args, limit(f.Limit, defaultListLimit, maxListLimit))
	rows, err := s.reader.QueryContext(ctx, `SELECT `+findingColumns+` FROM findings f JOIN locks l ON l.id = f.lock_id`+
		w.String()+` ORDER BY f.at DESC, f.id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("list findings: %w", err)
	}
	findings, err := collect(rows, findingDest)
	if err != nil {
		return nil, fmt.Errorf("list findings: %w", err)
	}
	slices.Reverse(findings)
	return findings, nil
}

// LastEventAt returns, per source name, the time of its newest event. Sources
// without events are absent.
func (s *Store) LastEventAt(ctx context.Context) (map[string]time.Time, error) {
	// The correlated max per lock is one seek on events_lock_at, so this
	// costs one index probe per lock instead of a scan of every event.
	rows, err := s.reader.QueryContext(ctx, `SELECT l.source, max((SELECT max(e.at) FROM events e WHERE e.lock_id = l.id))
		FROM locks l GROUP BY l.source`)
	if err != nil {
		return nil, fmt.Errorf("last event per source: %w", err)
	}
	defer rows.Close()
	last := make(map[string]time.Time)
	for rows.Next() {
		var (
			source string
			at     sql.NullInt64
		)
		if err := rows.Scan(&source, &at); err != nil {
			return nil, fmt.Errorf("last event per source: %w", err)
		}
		if at.Valid { // NULL: no events
			last[source] = time.Unix(0, at.Int64).UTC()
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("last event per source: %w", err)
	}
	return last, nil
}

// lockKey returns the key of lock id, or ENOTFOUND.
func lockKey(ctx context.Context, tx *sql.Tx, id int64) (audit.LockKey, error) {
	var key audit.LockKey
	err := tx.QueryRowContext(ctx, `SELECT source, name FROM locks WHERE id = ?`, id).Scan(&key.Source, &key.Name)
	if errors.Is(err, sql.ErrNoRows) {
		return key, audit.Errorf(audit.ENOTFOUND, "lock %d not found", id)
	}
	if err != nil {
		return key, fmt.Errorf("get lock %d: %w", id, err)
	}
	return key, nil
}

// collect scans every row into a new T through dest and closes rows.
func collect[T any](rows *sql.Rows, dest func(*T) []any) ([]T, error) {
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
