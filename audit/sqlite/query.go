package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
)

// List limits: the default when a filter's Limit is <= 0, and the most one
// call returns.
const (
	defaultLockLimit = audit.DefaultLockLimit
	maxLockLimit     = audit.MaxLockLimit
	defaultListLimit = audit.DefaultListLimit
	maxListLimit     = audit.MaxListLimit
)

// Locks returns the locks that match f in f.Sort's order. Q matches a
// substring of the name or holder, ignoring case (ASCII letters only, as
// SQLite's LIKE does). After and Before continue from a lock's position in
// that order; a cursor lock that does not exist is EINVALID.
// where accumulates the conditions and arguments of a query.
type where = rowcodec.Where

// dialect is how this engine writes the conditions the stores share.
var dialect = rowcodec.Dialect{Like: "LIKE"}

func (s *Store) Locks(ctx context.Context, f audit.LockFilter) ([]audit.Lock, error) {
	if !f.Sort.Valid() {
		return nil, audit.Errorf(audit.EINVALID, "sort: unknown order %q", f.Sort)
	}
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
	}
	defer tx.Rollback()

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
	// "Forward" is the list's own order; changed sorts newest first, so its
	// forward comparison is "less than".
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
		err := tx.QueryRowContext(ctx, `SELECT source, name, changed_at, expires_at FROM locks WHERE id = ?`, c.id).
			Scan(&src, &name, &changed, &expires)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, audit.Errorf(audit.EINVALID, "cursor: lock %d does not exist", c.id)
		}
		if err != nil {
			return nil, fmt.Errorf("list locks: cursor: %w", err)
		}
		switch f.Sort {
		case audit.SortChanged:
			w.Add("("+keyCols+") "+c.op+" (?, ?)", changed, c.id)
		case audit.SortExpiry:
			w.Add("("+keyCols+") "+c.op+" (?, ?)", expires, c.id)
		default:
			w.Add("("+keyCols+") "+c.op+" (?, ?)", src, name)
		}
		if c.rev {
			order, reverse = backOrder, true
		}
	}
	args := append(w.Args, rowcodec.Limit(f.Limit, defaultLockLimit, maxLockLimit), max(f.Offset, 0))
	// The page's ids come from an index alone (every filter and order has a
	// covering one); only the page's rows are then read, so filters never
	// drag whole lock rows, tracker state included, through the scan.
	rows, err := tx.QueryContext(ctx, `SELECT `+lockColumns+` FROM locks l WHERE l.id IN (
		SELECT l.id FROM locks l`+w.String()+` ORDER BY `+order+` LIMIT ? OFFSET ?)
		ORDER BY `+order, args...)
	if err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
	}
	locks, err := collect(rows, rowcodec.LockDest)
	if err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
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
	args := w.Args
	if f.Limit > 0 {
		q = `SELECT count(*) FROM (SELECT 1 FROM locks l` + w.String() + ` LIMIT ?)`
		args = append(args, f.Limit)
	}
	var n int
	if err := s.reader.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count locks: %w", err)
	}
	return n, nil
}

// Lock returns one lock. Returns ENOTFOUND if it does not exist.
func (s *Store) Lock(ctx context.Context, id int64) (audit.Lock, error) {
	var l audit.Lock
	err := s.reader.QueryRowContext(ctx, `SELECT `+lockColumns+` FROM locks l WHERE l.id = ?`, id).Scan(rowcodec.LockDest(&l)...)
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
		key.Source, key.Name).Scan(rowcodec.LockDest(&l)...)
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
	// No transaction: a lock's key never changes and the events come from
	// one query, so the two reads need no common snapshot; outside a
	// transaction both statements stay prepared (readPool).
	key, err := lockKey(ctx, s.reader, lockID)
	if err != nil {
		return nil, err
	}
	events, err := lockEvents(ctx, s, eventColumns, eventTables(eventIndex(f.Kind)), lockID, f, rowcodec.EventDest)
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
	w, args := eventQuery(lockID, f)
	rows, err := s.reader.QueryContext(ctx, `SELECT `+columns+` FROM `+from+w.String()+
		` ORDER BY e.at DESC, e.id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("list events of lock %d: %w", lockID, err)
	}
	out, err := collect(rows, dest)
	if err != nil {
		return nil, fmt.Errorf("list events of lock %d: %w", lockID, err)
	}
	slices.Reverse(out)
	return out, nil
}

// eventQuery returns the conditions of a lock's events that f selects, and
// their arguments with the limit last.
func eventQuery(lockID int64, f audit.EventFilter) (where, []any) {
	w := dialect.Where()
	w.Add("e.lock_id = ?", lockID)
	if f.Kind != "" {
		w.Add("e.kind = ?", string(f.Kind))
		if f.Kind != audit.EventRenew {
			w.Add(notRenewal("e.kind"))
		}
	}
	w.Window("e.at", f.TimeFilter)
	if !f.Before.IsZero() {
		// The plain bound lets the index range stop at the cursor.
		b := nanos(f.Before.At)
		w.Add("e.at <= ? AND (e.at < ? OR e.id < ?)", b, b, f.Before.ID)
	}
	return w, append(w.Args, rowcodec.Limit(f.Limit, defaultListLimit, maxListLimit))
}

// WriteEvents returns the lock's write events of one outcome within f's
// window (f.Kind is ignored), in time order; if more than f.Limit match, the
// newest f.Limit. It reads six columns of each, where Events reads fifteen
// and joins the tenures: a third of the time a row. Returns ENOTFOUND if the
// lock does not exist.
func (s *Store) WriteEvents(ctx context.Context, lockID int64, outcome audit.WriteOutcome, f audit.EventFilter) ([]audit.WriteEvent, error) {
	if _, err := lockKey(ctx, s.reader, lockID); err != nil {
		return nil, err
	}
	f.Kind = audit.EventWriteAccepted
	if outcome == audit.WriteRejected {
		f.Kind = audit.EventWriteRejected
	}
	writes, err := lockEvents(ctx, s, `e.id, e.at, e.holder, e.token, e.resource, CAST(json_extract(e.detail, '$.highest_token') AS INTEGER)`,
		`events e INDEXED BY `+eventIndex(f.Kind), lockID, f, func(e *audit.WriteEvent) []any {
			return []any{&e.ID, rowcodec.TimeDest{P: &e.At}, rowcodec.TextDest[string]{P: &e.Holder}, rowcodec.TokenDest{P: &e.Token}, rowcodec.TextDest[string]{P: &e.Resource}, rowcodec.TokenDest{P: &e.HighestToken}}
		})
	if err != nil {
		return nil, err
	}
	for i := range writes {
		writes[i].Outcome = outcome
	}
	return writes, nil
}

// The indexes of a lock's events: its timeline, and the partial index of
// every kind but renewals, whose condition (notRenewal) a query must repeat.
const (
	timelineIndex = "events_lock_at"
	rareKindIndex = "events_lock_kind_at"
)

// eventIndex names the index for a lock's events of kind ("" for every
// kind). Without statistics the planner may walk a lock's whole timeline and
// test each row's kind; a rare kind among millions of renewals must be one
// range of the partial index.
func eventIndex(kind audit.EventKind) string {
	if kind == "" || kind == audit.EventRenew {
		return timelineIndex
	}
	return rareKindIndex
}

// notRenewal is the condition of the partial index events_lock_kind_at.
func notRenewal(col string) string { return col + " <> 'renew'" }

// Tenures returns the lock's tenures that overlap f's window (granted by its
// end, not ended before its start), in grant order; if more than f.Limit
// match, the newest f.Limit. Returns ENOTFOUND if the lock does not exist.
func (s *Store) Tenures(ctx context.Context, lockID int64, f audit.TimeFilter) ([]audit.Tenure, error) {
	// No transaction, as in Events.
	key, err := lockKey(ctx, s.reader, lockID)
	if err != nil {
		return nil, err
	}
	lim := rowcodec.Limit(f.Limit, defaultListLimit, maxListLimit)
	var rows *sql.Rows
	if f.From.IsZero() {
		w := dialect.Where()
		w.Add("t.lock_id = ?", lockID)
		if !f.To.IsZero() {
			w.Add("t.granted_at <= ?", nanos(f.To))
		}
		rows, err = s.reader.QueryContext(ctx, `SELECT `+tenureColumns+`, `+summaryColumns+` FROM `+tenureTables+w.String()+
			` ORDER BY t.seq DESC LIMIT ?`, append(w.Args, lim)...)
	} else {
		to := int64(math.MaxInt64)
		if !f.To.IsZero() {
			to = nanos(f.To)
		}
		// A lock's tenures follow one another, so those overlapping a window
		// are the ones that ended inside it, plus the few granted last before
		// its end that were still running at its end (or are still held).
		// Each part is one index range, however long the lock's history.
		rows, err = s.reader.QueryContext(ctx, `SELECT `+tenureColumns+`, `+summaryColumns+` FROM `+tenureTables+`
			WHERE t.lock_id = ?1 AND t.granted_at <= ?3 AND t.seq IN (
				SELECT seq FROM tenures WHERE lock_id = ?1 AND ended_at BETWEEN ?2 AND ?3
				UNION
				SELECT seq FROM (SELECT seq, ended_at FROM tenures WHERE lock_id = ?1 AND granted_at <= ?3
					ORDER BY granted_at DESC LIMIT 64)
				WHERE ended_at IS NULL OR ended_at > ?3
				UNION
				SELECT seq FROM tenures WHERE lock_id = ?1 AND ended_at IS NULL)
			ORDER BY t.seq DESC LIMIT ?4`, lockID, nanos(f.From), to, lim)
	}
	if err != nil {
		return nil, fmt.Errorf("list tenures of lock %d: %w", lockID, err)
	}
	tenures, err := collect(rows, func(t *audit.Tenure) []any {
		return append(rowcodec.TenureDest(t), rowcodec.SummaryDest{P: &t.Pruned})
	})
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
	w := dialect.Where()
	columns, from := findingColumns, ` FROM findings f JOIN locks l ON l.id = f.lock_id`
	var head []any // the arguments of columns
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
		// One lock's findings need no join with their lock: its key comes
		// with the query.
		columns, from, head = findingColumnsOf, ` FROM findings f`, []any{key.Source, key.Name}
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
		// The unary + keeps the planner off findings_class_severity_at, made
		// for counts: most findings share a class, so walking them newest
		// first (or a kind's, or a severity's) stops after a page, where a
		// range of the class would sort all of its findings.
		w.Add("+f.class = ?", string(f.Class))
	}
	if f.Overlapping {
		switch {
		case f.LockID != 0 && !f.From.IsZero():
			// Those that start in the window, and those that started
			// before it and last into it.
			to := int64(math.MaxInt64)
			if !f.To.IsZero() {
				to = nanos(f.To)
			}
			// One walk of the lock's findings newest first, which stops at
			// the limit: from the window's end down to the earliest start
			// among those lasting into it (both ranges read from the
			// covering index on until alone).
			from := nanos(f.From)
			w.Add(`f.at BETWEEN coalesce((SELECT min(at) FROM findings INDEXED BY findings_lock_until_at
				WHERE lock_id = ? AND until >= ? AND at < ?), ?) AND ?`, f.LockID, from, from, from, to)
			w.Add(`(f.at >= ? OR f.id IN (SELECT id FROM findings INDEXED BY findings_lock_until_at
				WHERE lock_id = ? AND until >= ? AND at < ?))`, from, f.LockID, from, from)
		default:
			if !f.To.IsZero() {
				w.Add("f.at <= ?", nanos(f.To))
			}
			if !f.From.IsZero() {
				w.Add("coalesce(f.until, f.at) >= ?", nanos(f.From))
			}
		}
	} else {
		w.Window("f.at", f.TimeFilter)
	}
	if !f.Before.IsZero() {
		b := nanos(f.Before.At)
		w.Add("f.at <= ? AND (f.at < ? OR f.id < ?)", b, b, f.Before.ID)
	}
	args := append(append(head, w.Args...), rowcodec.Limit(f.Limit, defaultListLimit, maxListLimit))
	rows, err := s.reader.QueryContext(ctx, `SELECT `+columns+from+
		w.String()+` ORDER BY f.at DESC, f.id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("list findings: %w", err)
	}
	findings, err := collect(rows, rowcodec.FindingDest)
	if err != nil {
		return nil, fmt.Errorf("list findings: %w", err)
	}
	slices.Reverse(findings)
	return findings, nil
}

// LastEventAt returns, per source name, the time of its newest event. Sources
// without events are absent. Apply keeps the per-source maximum up to date, so
// this reads one small table.
func (s *Store) LastEventAt(ctx context.Context) (map[string]time.Time, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT source, last_event_at FROM source_events`)
	if err != nil {
		return nil, fmt.Errorf("last event per source: %w", err)
	}
	defer rows.Close()
	last := make(map[string]time.Time)
	for rows.Next() {
		var (
			source string
			at     int64
		)
		if err := rows.Scan(&source, &at); err != nil {
			return nil, fmt.Errorf("last event per source: %w", err)
		}
		last[source] = audit.TimeOf(at)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("last event per source: %w", err)
	}
	return last, nil
}

// rowQuerier is a *sql.Tx or the read pool.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// lockKey returns the key of lock id, or ENOTFOUND.
func lockKey(ctx context.Context, q rowQuerier, id int64) (audit.LockKey, error) {
	var key audit.LockKey
	err := q.QueryRowContext(ctx, `SELECT source, name FROM locks WHERE id = ?`, id).Scan(&key.Source, &key.Name)
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
