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

// LockCounts returns how many locks there are per source, class and state,
// from the lock_counts table that a trigger on locks keeps up to date.
func (s *Store) LockCounts(ctx context.Context) ([]audit.LockCount, error) {
	rows, err := s.reader.Query(ctx, `SELECT source, class, state, n FROM lock_counts
		WHERE n > 0 ORDER BY source, class, state`)
	if err != nil {
		return nil, fmt.Errorf("count locks: %w", storageError(err))
	}
	counts, err := collect(rows, func(c *audit.LockCount) []any {
		return []any{&c.Source, rowcodec.TextDest[audit.Class]{P: &c.Class}, rowcodec.TextDest[audit.LockState]{P: &c.State}, &c.N}
	})
	if err != nil {
		return nil, fmt.Errorf("count locks: %w", storageError(err))
	}
	return counts, nil
}

// FindingCounts returns how many findings of locks of f.Class started within
// f's window, per severity; severities without findings are absent. Each
// count is one range of findings_class_severity_at, or of
// findings_severity_at for every class.
func (s *Store) FindingCounts(ctx context.Context, f audit.FindingCountFilter) (map[audit.Severity]int, error) {
	from, to := audit.Nanos(audit.EarliestTime), audit.Nanos(audit.LatestTime)
	if !f.From.IsZero() {
		from = audit.Nanos(f.From)
	}
	if !f.To.IsZero() {
		to = audit.Nanos(f.To)
	}
	q := `SELECT sev, (SELECT count(*) FROM findings WHERE severity = sev AND at BETWEEN $2 AND $3)
		FROM unnest($1::text[]) AS sev`
	args := []any{nil, from, to}
	if f.Class != "" {
		q = `SELECT sev, (SELECT count(*) FROM findings WHERE class = $4 AND severity = sev AND at BETWEEN $2 AND $3)
			FROM unnest($1::text[]) AS sev`
		args = append(args, string(f.Class))
	}
	args[0] = []string{string(audit.SeverityCritical), string(audit.SeverityWarning), string(audit.SeverityInfo)}
	rows, err := s.reader.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("count findings: %w", storageError(err))
	}
	type count struct {
		sev string
		n   int
	}
	all, err := collect(rows, func(c *count) []any { return []any{&c.sev, &c.n} })
	if err != nil {
		return nil, fmt.Errorf("count findings: %w", storageError(err))
	}
	counts := make(map[audit.Severity]int)
	for _, c := range all {
		if c.n > 0 {
			counts[audit.Severity(c.sev)] = c.n
		}
	}
	return counts, nil
}

// EventTimes returns the times of the lock's events of one kind within f's
// window, in time order; if more than f.Limit match, the newest f.Limit.
func (s *Store) EventTimes(ctx context.Context, lockID int64, kind audit.EventKind, f audit.TimeFilter) ([]time.Time, error) {
	tx, err := s.reader.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("event times: %w", storageError(err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := lockKey(ctx, tx, lockID); err != nil {
		return nil, err
	}
	w := dialect.Where()
	w.Add("lock_id = ?", lockID)
	w.Add("kind = ?", string(kind))
	if kind != audit.EventRenew {
		w.Add(notRenewal("kind"))
	}
	w.Window("at", f)
	lim := w.Arg(rowcodec.Limit(f.Limit, defaultListLimit, maxListLimit))
	rows, err := tx.Query(ctx, `SELECT at FROM events`+w.String()+` ORDER BY at DESC LIMIT `+lim, w.Args...)
	if err != nil {
		return nil, fmt.Errorf("event times of lock %d: %w", lockID, storageError(err))
	}
	out, err := collect(rows, func(t *time.Time) []any { return []any{rowcodec.TimeDest{P: t}} })
	if err != nil {
		return nil, fmt.Errorf("event times of lock %d: %w", lockID, storageError(err))
	}
	slices.Reverse(out)
	return out, nil
}

// WriteCounts counts the lock's writes of one outcome within f's window per
// stretch of it, in SQL: however many writes there are, it holds only the
// counts (a hash of at most f.Bins groups). With a Limit, one read past the
// newest Limit says where they start.
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
	tx, err := s.reader.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return audit.Histogram{}, fmt.Errorf("count writes: %w", storageError(err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := lockKey(ctx, tx, lockID); err != nil {
		return audit.Histogram{}, err
	}
	from, to, width := audit.Nanos(f.From), audit.Nanos(f.To), int64(h.Width)
	writes := `FROM events WHERE lock_id = $1 AND kind = $2 AND ` + notRenewal("kind")
	lo, cut := from, int64(0)
	if f.Limit > 0 {
		err := tx.QueryRow(ctx, `SELECT at `+writes+` AND at >= $3 AND at <= $4 ORDER BY at DESC LIMIT 1 OFFSET $5`,
			lockID, string(kind), from, to, f.Limit).Scan(&cut)
		switch {
		case err == nil:
			h.AtLeast, lo = true, cut+1
		case !errors.Is(err, pgx.ErrNoRows):
			return audit.Histogram{}, fmt.Errorf("count writes of lock %d: %w", lockID, storageError(err))
		}
	}
	// at - from never overflows: both lie in the window, whose span fits.
	rows, err := tx.Query(ctx, `SELECT least((at - $3) / $4, $5 - 1), count(*) `+writes+` AND at >= $6 AND at <= $7 GROUP BY 1`,
		lockID, string(kind), from, width, f.Bins, lo, to)
	if err != nil {
		return audit.Histogram{}, fmt.Errorf("count writes of lock %d: %w", lockID, storageError(err))
	}
	type bin struct{ i, n int }
	bins, err := collect(rows, func(b *bin) []any { return []any{&b.i, &b.n} })
	if err != nil {
		return audit.Histogram{}, fmt.Errorf("count writes of lock %d: %w", lockID, storageError(err))
	}
	n := 0
	for _, b := range bins {
		h.Counts[b.i] = b.n
		n += b.n
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
		w.Add("to_at >= ?", audit.Nanos(f.From))
	}
	if !f.To.IsZero() {
		w.Add("from_at <= ?", audit.Nanos(f.To))
	}
	lim := w.Arg(rowcodec.Limit(f.Limit, defaultListLimit, maxListLimit))
	rows, err := s.reader.Query(ctx, `SELECT source, from_at, to_at, reason, locks FROM source_blinds`+
		w.String()+` ORDER BY to_at DESC, source DESC LIMIT `+lim, w.Args...)
	if err != nil {
		return nil, fmt.Errorf("blind windows: %w", storageError(err))
	}
	out, err := collect(rows, func(b *audit.BlindWindow) []any {
		return []any{&b.Source, rowcodec.TimeDest{P: &b.From}, rowcodec.TimeDest{P: &b.To}, &b.Reason, &b.Locks}
	})
	if err != nil {
		return nil, fmt.Errorf("blind windows: %w", storageError(err))
	}
	slices.Reverse(out)
	return out, nil
}

// Cursors returns every source's stored resume cursor, ordered by source.
func (s *Store) Cursors(ctx context.Context) ([]audit.Cursor, error) {
	out, err := s.cursors(ctx, s.reader)
	if err != nil {
		return nil, fmt.Errorf("cursors: %w", err)
	}
	return out, nil
}

func (s *Store) cursors(ctx context.Context, q querier) ([]audit.Cursor, error) {
	rows, err := q.Query(ctx, `SELECT source, position, at FROM cursors ORDER BY source`)
	if err != nil {
		return nil, storageError(err)
	}
	out, err := collect(rows, func(c *audit.Cursor) []any { return []any{&c.Source, &c.Position, rowcodec.TimeDest{P: &c.At}} })
	if err != nil {
		return nil, storageError(err)
	}
	return out, nil
}
