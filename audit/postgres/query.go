package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
)

const (
	defaultListLimit = audit.DefaultListLimit
	maxListLimit     = audit.MaxListLimit
)

// Locks returns the locks that match f in f.Sort's order. Q matches a
// substring of the name or holder, ignoring the case of ASCII letters (ILIKE
// under the "C" collation, as SQLite's LIKE). After and Before continue from
// a lock's position in that order; a cursor lock that does not exist is
// EINVALID.
// where accumulates the conditions and arguments of a query.
type where = rowcodec.Where

// dialect is how this engine writes the conditions the stores share.
var dialect = rowcodec.Dialect{Numbered: true, Like: "ILIKE", Wide: "::numeric"}

func (s *Store) Locks(ctx context.Context, f audit.LockFilter) ([]audit.Lock, error) {
	if !f.Sort.Valid() {
		return nil, audit.Errorf(audit.EINVALID, "sort: unknown order %q", f.Sort)
	}
	tx, err := s.reader.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("list locks: %w", storageError(err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	w := rowcodec.LockWhere(f, dialect)
	// Each order is a unique key, so a keyset cursor never skips or repeats
	// a lock with the same sort value.
	var keyCols, fwdOrder, backOrder string
	switch f.Sort {
	case audit.SortChanged:
		keyCols, fwdOrder, backOrder = "l.changed_at, l.id", "l.changed_at DESC, l.id DESC", "l.changed_at, l.id"
	case audit.SortExpiry:
		keyCols, fwdOrder, backOrder = "l.expires_at, l.id", "l.expires_at, l.id", "l.expires_at DESC, l.id DESC"
	default:
		keyCols, fwdOrder, backOrder = "l.source, l.name", "l.source, l.name", "l.source DESC, l.name DESC"
	}
	fwd, back := ">", "<"
	if f.Sort == audit.SortChanged {
		fwd, back = "<", ">"
	}
	order, reverse := fwdOrder, false
	for _, c := range []struct {
		id  int64
		op  string
		rev bool
	}{{f.After, fwd, false}, {f.Before, back, true}} {
		if c.id == 0 {
			continue
		}
		var src, name string
		var changed, expires int64
		err := tx.QueryRow(ctx, `SELECT source, name, changed_at, expires_at FROM locks WHERE id = $1`, c.id).
			Scan(&src, &name, &changed, &expires)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, audit.Errorf(audit.EINVALID, "cursor: lock %d does not exist", c.id)
		}
		if err != nil {
			return nil, fmt.Errorf("list locks: cursor: %w", storageError(err))
		}
		switch f.Sort {
		case audit.SortChanged:
			w.Add("("+keyCols+") "+c.op+" (?, ?)", changed, c.id)
		case audit.SortExpiry:
			w.Add("("+keyCols+") "+c.op+" (?, ?)", expires, c.id)
		default:
			w.Add("("+keyCols+") "+c.op+" (?::text, ?::text)", src, name)
		}
		if c.rev {
			order, reverse = backOrder, true
		}
	}
	lim := w.Arg(rowcodec.Limit(f.Limit, audit.DefaultLockLimit, audit.MaxLockLimit))
	off := w.Arg(max(f.Offset, 0))
	rows, err := tx.Query(ctx, `SELECT `+lockColumns+` FROM locks l`+w.String()+
		` ORDER BY `+order+` LIMIT `+lim+` OFFSET `+off, w.Args...)
	if err != nil {
		return nil, fmt.Errorf("list locks: %w", storageError(err))
	}
	locks, err := collect(rows, rowcodec.LockDest)
	if err != nil {
		return nil, fmt.Errorf("list locks: %w", storageError(err))
	}
	if reverse {
		slices.Reverse(locks)
	}
	return locks, nil
}

// CountLocks returns how many locks match f's selection. With a Limit it
// stops counting there: a result equal to Limit means at least that many.
func (s *Store) CountLocks(ctx context.Context, f audit.LockFilter) (int, error) {
	w := rowcodec.LockWhere(f, dialect)
	q := `SELECT count(*) FROM locks l` + w.String()
	if f.Limit > 0 {
		q = `SELECT count(*) FROM (SELECT 1 FROM locks l` + w.String() + ` LIMIT ` + w.Arg(f.Limit) + `) n`
	}
	var n int
	if err := s.reader.QueryRow(ctx, q, w.Args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count locks: %w", storageError(err))
	}
	return n, nil
}

// Lock returns one lock. Returns ENOTFOUND if it does not exist.
func (s *Store) Lock(ctx context.Context, id int64) (audit.Lock, error) {
	var l audit.Lock
	err := s.reader.QueryRow(ctx, `SELECT `+lockColumns+` FROM locks l WHERE l.id = $1`, id).Scan(rowcodec.LockDest(&l)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return audit.Lock{}, audit.Errorf(audit.ENOTFOUND, "lock %d not found", id)
	}
	if err != nil {
		return audit.Lock{}, fmt.Errorf("get lock %d: %w", id, storageError(err))
	}
	return l, nil
}

// LockByKey returns one lock by source and name. Returns ENOTFOUND if it does
// not exist.
func (s *Store) LockByKey(ctx context.Context, key audit.LockKey) (audit.Lock, error) {
	var l audit.Lock
	err := s.reader.QueryRow(ctx, `SELECT `+lockColumns+` FROM locks l WHERE l.source = $1 AND l.name = $2`,
		key.Source, key.Name).Scan(rowcodec.LockDest(&l)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return audit.Lock{}, audit.Errorf(audit.ENOTFOUND, "lock %s not found", key)
	}
	if err != nil {
		return audit.Lock{}, fmt.Errorf("get lock %s: %w", key, storageError(err))
	}
	return l, nil
}

// Events returns the lock's events within f's window (inclusive), in time
// order; if more than f.Limit match, the newest f.Limit. Returns ENOTFOUND if
// the lock does not exist.
func (s *Store) Events(ctx context.Context, lockID int64, f audit.EventFilter) ([]audit.Event, error) {
	key, err := lockKey(ctx, s.reader, lockID)
	if err != nil {
		return nil, err
	}
	events, err := lockEvents(ctx, s, eventColumns, eventTables, lockID, f, rowcodec.EventDest)
	if err != nil {
		return nil, err
	}
	for i := range events {
		events[i].Lock = key
	}
	return events, nil
}

// lockEvents reads columns of the lock's events that f selects, from the
// tables from (events aliased e), newest first up to f's limit, and returns
// them scanned through dest in time order.
func lockEvents[T any](ctx context.Context, s *Store, columns, from string, lockID int64, f audit.EventFilter, dest func(*T) []any) ([]T, error) {
	w := dialect.Where()
	w.Add("e.lock_id = ?", lockID)
	if f.Kind != "" {
		w.Add("e.kind = ?", string(f.Kind))
		if f.Kind != audit.EventRenew {
			w.Add(notRenewal("e.kind")) // the partial index's condition
		}
	}
	w.Window("e.at", f.TimeFilter)
	if !f.Before.IsZero() {
		b := audit.Nanos(f.Before.At)
		w.Add("e.at <= ? AND (e.at < ? OR e.id < ?)", b, b, f.Before.ID)
	}
	lim := w.Arg(rowcodec.Limit(f.Limit, defaultListLimit, maxListLimit))
	rows, err := s.reader.Query(ctx, `SELECT `+columns+` FROM `+from+w.String()+
		` ORDER BY e.at DESC, e.id DESC LIMIT `+lim, w.Args...)
	if err != nil {
		return nil, fmt.Errorf("list events of lock %d: %w", lockID, storageError(err))
	}
	out, err := collect(rows, dest)
	if err != nil {
		return nil, fmt.Errorf("list events of lock %d: %w", lockID, storageError(err))
	}
	slices.Reverse(out)
	return out, nil
}

// notRenewal is the condition of the partial index events_lock_kind_at,
// which a query must repeat for the planner to use it.
func notRenewal(col string) string { return col + " <> 'renew'" }

// highestToken reads a write's detail highest_token as an integer, NULL
// when it is none. The detail is the JSON encoding/json wrote; json, not
// jsonb, takes any string it holds.
const highestToken = `CASE WHEN e.detail IS NOT NULL AND (e.detail::json->>'highest_token') ~ '^-?[0-9]{1,18}$'
	THEN (e.detail::json->>'highest_token')::bigint END`

// WriteEvents returns the lock's write events of one outcome within f's
// window (f.Kind is ignored), in time order; if more than f.Limit match, the
// newest f.Limit, with six columns of each. Returns ENOTFOUND if the lock
// does not exist.
func (s *Store) WriteEvents(ctx context.Context, lockID int64, outcome audit.WriteOutcome, f audit.EventFilter) ([]audit.WriteEvent, error) {
	if _, err := lockKey(ctx, s.reader, lockID); err != nil {
		return nil, err
	}
	f.Kind = audit.EventWriteAccepted
	if outcome == audit.WriteRejected {
		f.Kind = audit.EventWriteRejected
	}
	writes, err := lockEvents(ctx, s, `e.id, e.at, e.holder, e.token, e.resource, `+highestToken, `events e`, lockID, f,
		func(e *audit.WriteEvent) []any {
			return []any{&e.ID, rowcodec.TimeDest{P: &e.At}, rowcodec.TextDest[string]{P: &e.Holder},
				rowcodec.TokenDest{P: &e.Token}, rowcodec.TextDest[string]{P: &e.Resource}, rowcodec.TokenDest{P: &e.HighestToken}}
		})
	if err != nil {
		return nil, err
	}
	for i := range writes {
		writes[i].Outcome = outcome
	}
	return writes, nil
}

// Tenures returns the lock's tenures that overlap f's window (granted by its
// end, not ended before its start), in grant order; if more than f.Limit
// match, the newest f.Limit. Returns ENOTFOUND if the lock does not exist.
func (s *Store) Tenures(ctx context.Context, lockID int64, f audit.TimeFilter) ([]audit.Tenure, error) {
	key, err := lockKey(ctx, s.reader, lockID)
	if err != nil {
		return nil, err
	}
	lim := rowcodec.Limit(f.Limit, defaultListLimit, maxListLimit)
	var rows pgx.Rows
	if f.From.IsZero() {
		w := dialect.Where()
		w.Add("t.lock_id = ?", lockID)
		if !f.To.IsZero() {
			w.Add("t.granted_at <= ?", audit.Nanos(f.To))
		}
		rows, err = s.reader.Query(ctx, `SELECT `+tenureColumns+`, `+summaryColumns+` FROM `+tenureTables+w.String()+
			` ORDER BY t.seq DESC LIMIT `+w.Arg(lim), w.Args...)
	} else {
		to := int64(math.MaxInt64)
		if !f.To.IsZero() {
			to = audit.Nanos(f.To)
		}
		// As in audit/sqlite: those that ended inside the window, the few
		// granted last before its end that were still running at its end,
		// and the held one; each part is one index range.
		rows, err = s.reader.Query(ctx, `SELECT `+tenureColumns+`, `+summaryColumns+` FROM `+tenureTables+`
			WHERE t.lock_id = $1 AND t.granted_at <= $3 AND t.seq IN (
				SELECT seq FROM tenures WHERE lock_id = $1 AND ended_at BETWEEN $2 AND $3
				UNION
				SELECT seq FROM (SELECT seq, ended_at FROM tenures WHERE lock_id = $1 AND granted_at <= $3
					ORDER BY granted_at DESC LIMIT 64) last
				WHERE ended_at IS NULL OR ended_at > $3
				UNION
				SELECT seq FROM tenures WHERE lock_id = $1 AND ended_at IS NULL)
			ORDER BY t.seq DESC LIMIT $4`, lockID, audit.Nanos(f.From), to, lim)
	}
	if err != nil {
		return nil, fmt.Errorf("list tenures of lock %d: %w", lockID, storageError(err))
	}
	tenures, err := collect(rows, func(t *audit.Tenure) []any {
		return append(rowcodec.TenureDest(t), rowcodec.SummaryDest{P: &t.Pruned})
	})
	if err != nil {
		return nil, fmt.Errorf("list tenures of lock %d: %w", lockID, storageError(err))
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
	w := dialect.Where()
	switch {
	case f.LockID != 0:
		key, err := lockKey(ctx, s.reader, f.LockID)
		switch {
		case audit.ErrorCode(err) == audit.ENOTFOUND:
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("list findings: %w", err)
		case f.Source != "" && f.Source != key.Source:
			return nil, nil
		}
		w.Add("f.lock_id = ?", f.LockID)
	case f.Source != "":
		w.Add("l.source = ?", f.Source)
	}
	if f.Kind != "" {
		w.Add("f.kind = ?", string(f.Kind))
	}
	if f.Severity != "" {
		w.Add("f.severity = ?", string(f.Severity))
	}
	if f.Resource != "" {
		w.Add("f.resource = ?", f.Resource)
	}
	if f.Class != "" {
		w.Add("f.class = ?", string(f.Class))
	}
	if f.Overlapping {
		switch {
		case f.LockID != 0 && !f.From.IsZero():
			// Those that start in the window, and those that started
			// before it and last into it.
			to := int64(math.MaxInt64)
			if !f.To.IsZero() {
				to = audit.Nanos(f.To)
			}
			from := audit.Nanos(f.From)
			w.Add("f.at <= ? AND (f.at >= ? OR (f.until >= ? AND f.at < ?))", to, from, from, from)
		default:
			if !f.To.IsZero() {
				w.Add("f.at <= ?", audit.Nanos(f.To))
			}
			if !f.From.IsZero() {
				w.Add("coalesce(f.until, f.at) >= ?", audit.Nanos(f.From))
			}
		}
	} else {
		w.Window("f.at", f.TimeFilter)
	}
	if !f.Before.IsZero() {
		b := audit.Nanos(f.Before.At)
		w.Add("f.at <= ? AND (f.at < ? OR f.id < ?)", b, b, f.Before.ID)
	}
	lim := w.Arg(rowcodec.Limit(f.Limit, defaultListLimit, maxListLimit))
	rows, err := s.reader.Query(ctx, `SELECT `+findingColumns+` FROM findings f JOIN locks l ON l.id = f.lock_id`+
		w.String()+` ORDER BY f.at DESC, f.id DESC LIMIT `+lim, w.Args...)
	if err != nil {
		return nil, fmt.Errorf("list findings: %w", storageError(err))
	}
	findings, err := collect(rows, rowcodec.FindingDest)
	if err != nil {
		return nil, fmt.Errorf("list findings: %w", storageError(err))
	}
	slices.Reverse(findings)
	return findings, nil
}

// LastEventAt returns, per source name, the time of its newest event. Sources
// without events are absent. Apply keeps the per-source maximum up to date, so
// this reads one small table.
func (s *Store) LastEventAt(ctx context.Context) (map[string]time.Time, error) {
	rows, err := s.reader.Query(ctx, `SELECT source, last_event_at FROM source_events`)
	if err != nil {
		return nil, fmt.Errorf("last event per source: %w", storageError(err))
	}
	type last struct {
		source string
		at     time.Time
	}
	all, err := collect(rows, func(l *last) []any { return []any{&l.source, rowcodec.TimeDest{P: &l.at}} })
	if err != nil {
		return nil, fmt.Errorf("last event per source: %w", storageError(err))
	}
	out := make(map[string]time.Time, len(all))
	for _, l := range all {
		out[l.source] = l.at
	}
	return out, nil
}

// querier is a transaction or a pool.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// lockKey returns the key of lock id, or ENOTFOUND.
func lockKey(ctx context.Context, q querier, id int64) (audit.LockKey, error) {
	var key audit.LockKey
	err := q.QueryRow(ctx, `SELECT source, name FROM locks WHERE id = $1`, id).Scan(&key.Source, &key.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return key, audit.Errorf(audit.ENOTFOUND, "lock %d not found", id)
	}
	if err != nil {
		return key, fmt.Errorf("get lock %d: %w", id, storageError(err))
	}
	return key, nil
}

// collect scans every row into a new T through dest and closes rows.
func collect[T any](rows pgx.Rows, dest func(*T) []any) ([]T, error) {
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
