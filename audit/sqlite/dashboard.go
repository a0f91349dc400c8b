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

// LockCounts returns how many locks there are per source, class and state,
// from the lock_counts table that triggers on locks keep up to date.
func (s *Store) LockCounts(ctx context.Context) ([]audit.LockCount, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT source, class, state, n FROM lock_counts
		WHERE n > 0 ORDER BY source, class, state`)
	if err != nil {
		return nil, fmt.Errorf("count locks: %w", err)
	}
	counts, err := collect(rows, func(c *audit.LockCount) []any {
		return []any{&c.Source, rowcodec.TextDest[audit.Class]{P: &c.Class}, rowcodec.TextDest[audit.LockState]{P: &c.State}, &c.N}
	})
	if err != nil {
		return nil, fmt.Errorf("count locks: %w", err)
	}
	return counts, nil
}

// FindingCounts returns how many findings of locks of f.Class started within
// f's window, per severity; severities without findings are absent.
func (s *Store) FindingCounts(ctx context.Context, f audit.FindingCountFilter) (map[audit.Severity]int, error) {
	from, to := nanos(audit.EarliestTime), nanos(audit.LatestTime)
	if !f.From.IsZero() {
		from = nanos(f.From)
	}
	if !f.To.IsZero() {
		to = nanos(f.To)
	}
	// One index range per severity, counted in the index: of
	// findings_class_severity_at for a class, else of findings_severity_at.
	var q string
	var args []any
	for i, sev := range []audit.Severity{audit.SeverityCritical, audit.SeverityWarning, audit.SeverityInfo} {
		if i > 0 {
			q += " UNION ALL "
		}
		if f.Class == "" {
			q += `SELECT ?, count(*) FROM findings WHERE severity = ? AND at BETWEEN ? AND ?`
			args = append(args, string(sev), string(sev), from, to)
			continue
		}
		q += `SELECT ?, count(*) FROM findings WHERE class = ? AND severity = ? AND at BETWEEN ? AND ?`
		args = append(args, string(sev), string(f.Class), string(sev), from, to)
	}
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("count findings: %w", err)
	}
	defer rows.Close()
	counts := make(map[audit.Severity]int)
	for rows.Next() {
		var (
			sev string
			n   int
		)
		if err := rows.Scan(&sev, &n); err != nil {
			return nil, fmt.Errorf("count findings: %w", err)
		}
		if n > 0 {
			counts[audit.Severity(sev)] = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count findings: %w", err)
	}
	return counts, nil
}

// EventTimes returns the times of the lock's events of one kind within f's
// window, in time order; if more than f.Limit match, the newest f.Limit. It
// reads only indexes: renewals, which the per-kind index leaves out, are the
// lock's event times less those of every other kind.
func (s *Store) EventTimes(ctx context.Context, lockID int64, kind audit.EventKind, f audit.TimeFilter) ([]time.Time, error) {
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("event times: %w", err)
	}
	defer tx.Rollback()
	if _, err := lockKey(ctx, tx, lockID); err != nil {
		return nil, err
	}
	lim := rowcodec.Limit(f.Limit, defaultListLimit, maxListLimit)
	times := func(cond string, args ...any) (*sql.Rows, error) {
		w := dialect.Where()
		w.Add("lock_id = ?", lockID)
		if cond != "" {
			w.Add(cond, args...)
		}
		w.Window("at", f)
		index := timelineIndex
		if cond != "" {
			index = rareKindIndex // every cond here excludes renewals
		}
		return tx.QueryContext(ctx, `SELECT at FROM events INDEXED BY `+index+w.String()+` ORDER BY at DESC`, w.Args...)
	}
	var out []time.Time
	if kind != audit.EventRenew {
		rows, err := times("kind = ? AND "+notRenewal("kind"), string(kind))
		if err != nil {
			return nil, fmt.Errorf("event times of lock %d: %w", lockID, err)
		}
		defer rows.Close()
		for len(out) < lim && rows.Next() {
			var t int64
			if err := rows.Scan(&t); err != nil {
				return nil, fmt.Errorf("event times of lock %d: %w", lockID, err)
			}
			out = append(out, time.Unix(0, t).UTC())
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("event times of lock %d: %w", lockID, err)
		}
		slices.Reverse(out)
		return out, nil
	}

	// Both newest first: each time of another kind cancels one equal time
	// of the whole timeline.
	all, err := times("")
	if err != nil {
		return nil, fmt.Errorf("renewal times of lock %d: %w", lockID, err)
	}
	defer all.Close()
	others, err := times(notRenewal("kind"))
	if err != nil {
		return nil, fmt.Errorf("renewal times of lock %d: %w", lockID, err)
	}
	defer others.Close()
	next := func(rows *sql.Rows) (int64, bool, error) {
		if !rows.Next() {
			return 0, false, rows.Err()
		}
		var t int64
		err := rows.Scan(&t)
		return t, err == nil, err
	}
	other, more, err := next(others)
	for err == nil && len(out) < lim {
		var t int64
		var ok bool
		if t, ok, err = next(all); !ok || err != nil {
			break
		}
		for more && other > t {
			other, more, err = next(others)
		}
		if more && other == t {
			other, more, err = next(others)
			continue
		}
		out = append(out, time.Unix(0, t).UTC())
	}
	if err != nil {
		return nil, fmt.Errorf("renewal times of lock %d: %w", lockID, err)
	}
	slices.Reverse(out)
	return out, nil
}

// WriteCounts counts the lock's writes of one outcome within f's window per
// stretch of it, in SQL: however many writes there are, it holds only the
// counts. It reads only the kind index: one range count per stretch, and
// with a Limit, one read past the newest Limit for where they start.
func (s *Store) WriteCounts(ctx context.Context, lockID int64, outcome audit.WriteOutcome, f audit.BinFilter) (audit.Histogram, error) {
	kind := audit.EventWriteAccepted
	switch outcome {
	case audit.WriteAccepted:
	case audit.WriteRejected:
		kind = audit.EventWriteRejected
	default:
		return audit.Histogram{}, audit.Errorf(audit.EINVALID, "outcome: want accepted or rejected, not %q", outcome)
	}
	span := f.To.Sub(f.From)
	switch {
	case f.From.IsZero() || f.To.IsZero():
		return audit.Histogram{}, audit.Errorf(audit.EINVALID, "from, to: a histogram needs both ends of its window")
	case span < 0:
		return audit.Histogram{}, audit.Errorf(audit.EINVALID, "to: before from")
	case span == math.MaxInt64:
		return audit.Histogram{}, audit.Errorf(audit.EINVALID, "from, to: window too long")
	case f.Bins < 1 || f.Bins > maxListLimit:
		return audit.Histogram{}, audit.Errorf(audit.EINVALID, "bins: want 1 to %d, not %d", maxListLimit, f.Bins)
	}
	h := audit.Histogram{From: f.From, Width: max(1, (span+time.Duration(f.Bins)-1)/time.Duration(f.Bins)),
		Counts: make([]int, f.Bins)}
	// One snapshot for the limit's cut and the counts.
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return audit.Histogram{}, fmt.Errorf("count writes: %w", err)
	}
	defer tx.Rollback()
	if _, err := lockKey(ctx, tx, lockID); err != nil {
		return audit.Histogram{}, err
	}
	from, to, width := nanos(f.From), nanos(f.To), int64(h.Width)
	writes := `FROM events INDEXED BY ` + rareKindIndex + ` WHERE lock_id = ?1 AND kind = ?2 AND ` + notRenewal("kind")
	// With a limit, the newest Limit writes are those after the time of
	// the one past them, and some of those at that time.
	lo, cut := from, int64(0)
	if f.Limit > 0 {
		err := tx.QueryRowContext(ctx, `SELECT at `+writes+` AND at >= ?3 AND at <= ?4 ORDER BY at DESC LIMIT 1 OFFSET ?5`,
			lockID, string(kind), from, to, f.Limit).Scan(&cut)
		switch {
		case err == nil:
			h.AtLeast, lo = true, cut+1
		case !errors.Is(err, sql.ErrNoRows):
			return audit.Histogram{}, fmt.Errorf("count writes of lock %d: %w", lockID, err)
		}
	}
	// One index range count per bin, the last one up to To: grouping the
	// rows instead would sort them all in memory first.
	rows, err := tx.QueryContext(ctx, `WITH RECURSIVE bin(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM bin WHERE i + 1 < ?3)
		SELECT i, (SELECT count(*) `+writes+` AND at >= max(?4 + i * ?5, ?6)
			AND at <= CASE WHEN i + 1 < ?3 THEN min(?4 + (i + 1) * ?5 - 1, ?7) ELSE ?7 END) FROM bin`,
		lockID, string(kind), f.Bins, from, width, lo, to)
	if err != nil {
		return audit.Histogram{}, fmt.Errorf("count writes of lock %d: %w", lockID, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var bin, c int
		if err := rows.Scan(&bin, &c); err != nil {
			return audit.Histogram{}, fmt.Errorf("count writes of lock %d: %w", lockID, err)
		}
		h.Counts[bin] = c
		n += c
	}
	if err := rows.Err(); err != nil {
		return audit.Histogram{}, fmt.Errorf("count writes of lock %d: %w", lockID, err)
	}
	if h.AtLeast {
		h.Counts[min(f.Bins-1, int((cut-from)/width))] += f.Limit - n
	}
	return h, nil
}

// BlindWindows returns the blind intervals that overlap f's window, in time
// order of their end; if more than f.Limit match, the newest f.Limit.
func (s *Store) BlindWindows(ctx context.Context, f audit.BlindFilter) ([]audit.BlindWindow, error) {
	w := dialect.Where()
	if f.Source != "" {
		w.Add("source = ?", f.Source)
	}
	if !f.From.IsZero() {
		w.Add("to_at >= ?", nanos(f.From))
	}
	if !f.To.IsZero() {
		w.Add("from_at <= ?", nanos(f.To))
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT source, from_at, to_at, reason, locks FROM source_blinds`+
		w.String()+` ORDER BY to_at DESC, source DESC LIMIT ?`, append(w.Args, rowcodec.Limit(f.Limit, defaultListLimit, maxListLimit))...)
	if err != nil {
		return nil, fmt.Errorf("blind windows: %w", err)
	}
	out, err := collect(rows, func(b *audit.BlindWindow) []any {
		return []any{&b.Source, rowcodec.TimeDest{P: &b.From}, rowcodec.TimeDest{P: &b.To}, &b.Reason, &b.Locks}
	})
	if err != nil {
		return nil, fmt.Errorf("blind windows: %w", err)
	}
	slices.Reverse(out)
	return out, nil
}

// Cursors returns every source's stored resume cursor, ordered by source.
func (s *Store) Cursors(ctx context.Context) ([]audit.Cursor, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT source, position, at FROM cursors ORDER BY source`)
	if err != nil {
		return nil, fmt.Errorf("cursors: %w", err)
	}
	out, err := collect(rows, func(c *audit.Cursor) []any { return []any{&c.Source, &c.Position, rowcodec.TimeDest{P: &c.At}} })
	if err != nil {
		return nil, fmt.Errorf("cursors: %w", err)
	}
	return out, nil
}
