package sqlread

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
)

// LockCounts returns how many locks there are per source, class and state,
// from the lock_counts table that the schema's triggers on locks keep up to
// date.
func (r *Reader) LockCounts(ctx context.Context) ([]audit.LockCount, error) {
	return query(ctx, r, r.Pool, "count locks", func(c *audit.LockCount) []any {
		return []any{&c.Source, rowcodec.TextDest[audit.Class]{P: &c.Class}, rowcodec.TextDest[audit.LockState]{P: &c.State}, &c.N}
	}, `SELECT source, class, state, n FROM lock_counts WHERE n > 0 ORDER BY source, class, state`)
}

// severities are the severities FindingCounts counts, as SQL literals of
// the constants.
var severities = []audit.Severity{audit.SeverityCritical, audit.SeverityWarning, audit.SeverityInfo}

// FindingCounts returns how many findings of locks of f.Class started within
// f's window, per severity; severities without findings are absent. The
// minutes whole inside the window are read from their counts
// (finding_minutes, kept by the schema's triggers), the partial ones at
// either end counted in the index: of findings_class_severity_at for a
// class, else of findings_severity_at. So a day of findings costs a row per
// minute however many there are.
func (r *Reader) FindingCounts(ctx context.Context, f audit.FindingCountFilter) (map[audit.Severity]int, error) {
	from, to := audit.Nanos(audit.EarliestTime), audit.Nanos(audit.LatestTime)
	if !f.From.IsZero() {
		from = audit.Nanos(f.From)
	}
	if !f.To.IsZero() {
		to = audit.Nanos(f.To)
	}
	lo, hi := wholeBins(from, to)
	// Each part repeats the arguments, so they are numbered.
	p := r.Dialect.P
	args := []any{from, to, lo, hi}
	class, minuteClass := "", ""
	if f.Class != "" {
		class = `class = ` + p(5) + ` AND `
		minuteClass = ` AND class = ` + p(5)
		args = append(args, string(f.Class))
	}
	var parts []string
	for _, sev := range severities {
		// The severities are constants of this package's own, safe as literals.
		findings := `SELECT '` + string(sev) + `' AS severity, count(*) AS n FROM findings WHERE ` + class + `severity = '` + string(sev) + `' AND `
		parts = append(parts,
			findings+`at >= `+p(1)+` AND at < `+p(3),
			findings+`at >= `+p(4)+` AND at <= `+p(2),
			`SELECT '`+string(sev)+`', CAST(coalesce(sum(n), 0) AS BIGINT) FROM finding_minutes WHERE severity = '`+string(sev)+
				`' AND minute >= `+p(3)+` AND minute < `+p(4)+minuteClass)
	}
	type count struct {
		sev audit.Severity
		n   int
	}
	all, err := query(ctx, r, r.Pool, "count findings", func(c *count) []any {
		return []any{rowcodec.TextDest[audit.Severity]{P: &c.sev}, &c.n}
	}, strings.Join(parts, " UNION ALL "), args...)
	if err != nil {
		return nil, err
	}
	counts := make(map[audit.Severity]int)
	for _, c := range all {
		if c.n > 0 {
			counts[c.sev] += c.n
		}
	}
	return counts, nil
}

// WriteCounts counts the lock's writes of one outcome within f's window per
// stretch of it, in SQL: however many writes there are, it holds only the
// counts. With a Limit, one read past the newest Limit says where they
// start.
func (r *Reader) WriteCounts(ctx context.Context, lockID int64, outcome audit.WriteOutcome, f audit.BinFilter) (audit.Histogram, error) {
	kind, h, err := histogram(outcome, f)
	if err != nil {
		return audit.Histogram{}, err
	}
	// One snapshot for the limit's cut and the counts.
	tx, end, err := r.Begin(ctx)
	if err != nil {
		return audit.Histogram{}, fmt.Errorf("count writes: %w", r.wrap(err))
	}
	defer end()
	if _, err := r.LockKey(ctx, tx, lockID); err != nil {
		return audit.Histogram{}, err
	}
	what := fmt.Sprintf("count writes of lock %d", lockID)
	p := r.Dialect.P
	from, to, width := audit.Nanos(f.From), audit.Nanos(f.To), int64(h.Width)
	writes := `FROM events` + r.hint(RareKindIndex) + ` WHERE lock_id = ` + p(1) + ` AND kind = ` + p(2) + ` AND ` + NotRenewal("kind")
	if tick := int64(audit.WriteTick); f.Ticks && width >= tick/2 && from >= 0 && to <= math.MaxInt64-tick {
		return r.tickCounts(ctx, tx, what, writes, lockID, kind, from, to, max(1, (width+tick/2)/tick)*tick)
	}
	// With a limit, the newest Limit writes are those after the time of
	// the one past them, and some of those at that time.
	lo, cut := from, int64(0)
	if f.Limit > 0 {
		err := tx.QueryRow(ctx, `SELECT at `+writes+` AND at >= `+p(3)+` AND at <= `+p(4)+` ORDER BY at DESC LIMIT 1 OFFSET `+p(5),
			lockID, string(kind), from, to, f.Limit).Scan(&cut)
		switch {
		case err == nil:
			h.AtLeast, lo = true, cut+1
		case !r.noRows(err):
			return audit.Histogram{}, fmt.Errorf("%s: %w", what, r.wrap(err))
		}
	}
	type bin struct{ i, n int }
	bins, err := query(ctx, r, tx, what, func(b *bin) []any { return []any{&b.i, &b.n} },
		r.WriteBins(writes), lockID, string(kind), f.Bins, from, width, lo, to)
	if err != nil {
		return audit.Histogram{}, err
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

// tickCounts counts the lock's writes of kind from from to to (from >= 0)
// in stretches of width (whole ticks) from the tick that holds from: the
// ticks whole inside the window from their counts (write_ticks), a row per
// tick however many writes, and the part ticks at either end from the
// writes (writes, as WriteCounts selects them).
func (r *Reader) tickCounts(ctx context.Context, tx DB, what, writes string, lockID int64, kind audit.EventKind, from, to, width int64) (audit.Histogram, error) {
	tick := int64(audit.WriteTick)
	first, last := from-from%tick, to-to%tick
	h := audit.Histogram{From: time.Unix(0, first).UTC(), Width: time.Duration(width), Counts: make([]int, (last-first)/width+1)}
	p := r.Dialect.P
	type bin struct{ i, n int }
	bins, err := query(ctx, r, tx, what, func(b *bin) []any { return []any{&b.i, &b.n} },
		`SELECT (t - `+p(3)+`) / `+p(4)+`, CAST(sum(n) AS BIGINT) FROM (
			SELECT tick AS t, n FROM write_ticks WHERE lock_id = `+p(1)+` AND kind = `+p(2)+` AND tick > `+p(3)+` AND tick < `+p(5)+`
			UNION ALL SELECT at AS t, 1 AS n `+writes+` AND at >= `+p(6)+` AND at < `+p(7)+` AND at <= `+p(8)+`
			UNION ALL SELECT at AS t, 1 AS n `+writes+` AND at >= `+p(9)+` AND at <= `+p(8)+`
		) w GROUP BY 1`,
		lockID, string(kind), first, width, last, from, first+tick, to, max(last, first+tick))
	if err != nil {
		return audit.Histogram{}, err
	}
	for _, b := range bins {
		h.Counts[b.i] = b.n
	}
	return h, nil
}

// WriteTicks reads the lock's counts per tick (write_ticks) of the ticks
// that start within f's window: one row per tick.
func (r *Reader) WriteTicks(ctx context.Context, lockID int64, outcome audit.WriteOutcome, f audit.TimeFilter) ([]audit.TickCount, error) {
	kind, err := writeKind(outcome)
	if err != nil {
		return nil, err
	}
	if _, err := r.LockKey(ctx, r.Pool, lockID); err != nil {
		return nil, err
	}
	w := r.Dialect.Where()
	w.Add("lock_id = ?", lockID)
	w.Add("kind = ?", string(kind))
	w.Window("tick", f)
	return query(ctx, r, r.Pool, fmt.Sprintf("count writes of lock %d per tick", lockID), func(t *audit.TickCount) []any {
		return []any{rowcodec.TimeDest{P: &t.Start}, &t.N}
	}, `SELECT tick, n FROM write_ticks`+w.String()+` ORDER BY tick`, w.Args...)
}

// writeKind is the kind of event of a write's outcome; EINVALID for
// another outcome.
func writeKind(outcome audit.WriteOutcome) (audit.EventKind, error) {
	switch outcome {
	case audit.WriteAccepted:
		return audit.EventWriteAccepted, nil
	case audit.WriteRejected:
		return audit.EventWriteRejected, nil
	}
	return "", audit.Errorf(audit.EINVALID, "outcome: want accepted or rejected, not %q", outcome)
}

// histogram checks a request for write counts and returns the kind of
// event to count and the empty histogram of f's bins.
func histogram(outcome audit.WriteOutcome, f audit.BinFilter) (audit.EventKind, audit.Histogram, error) {
	kind, err := writeKind(outcome)
	if err != nil {
		return "", audit.Histogram{}, err
	}
	span := f.To.Sub(f.From)
	switch {
	case f.From.IsZero() || f.To.IsZero():
		return "", audit.Histogram{}, audit.Errorf(audit.EINVALID, "from, to: a histogram needs both ends of its window")
	case span < 0:
		return "", audit.Histogram{}, audit.Errorf(audit.EINVALID, "to: before from")
	case span == math.MaxInt64:
		return "", audit.Histogram{}, audit.Errorf(audit.EINVALID, "from, to: window too long")
	case f.Bins < 1 || f.Bins > audit.MaxListLimit:
		return "", audit.Histogram{}, audit.Errorf(audit.EINVALID, "bins: want 1 to %d, not %d", audit.MaxListLimit, f.Bins)
	}
	return kind, audit.Histogram{From: f.From, Width: max(1, (span+time.Duration(f.Bins)-1)/time.Duration(f.Bins)),
		Counts: make([]int, f.Bins)}, nil
}

// BlindWindows returns the blind intervals that overlap f's window, in time
// order of their end; if more than f.Limit match, the newest f.Limit.
func (r *Reader) BlindWindows(ctx context.Context, f audit.BlindFilter) ([]audit.BlindWindow, error) {
	w := r.Dialect.Where()
	if f.Source != "" {
		w.Add("source = ?", f.Source)
	}
	if !f.From.IsZero() {
		w.Add("to_at >= ?", audit.Nanos(f.From))
	}
	if !f.To.IsZero() {
		w.Add("from_at <= ?", audit.Nanos(f.To))
	}
	lim := w.Arg(rowcodec.Limit(f.Limit, audit.DefaultListLimit, audit.MaxListLimit))
	out, err := query(ctx, r, r.Pool, "blind windows", func(b *audit.BlindWindow) []any {
		return []any{&b.Source, rowcodec.TimeDest{P: &b.From}, rowcodec.TimeDest{P: &b.To}, &b.Reason, &b.Locks}
	}, `SELECT source, from_at, to_at, reason, locks FROM source_blinds`+w.String()+` ORDER BY to_at DESC, source DESC LIMIT `+lim, w.Args...)
	if err != nil {
		return nil, err
	}
	slices.Reverse(out)
	return out, nil
}

// Cursors returns every source's stored resume cursor, ordered by source.
func (r *Reader) Cursors(ctx context.Context) ([]audit.Cursor, error) {
	return r.cursorsIn(ctx, r.Pool, "")
}

// cursorsIn is Cursors read through db, a journal's restore reads them in
// its snapshot, with where (a WHERE clause on source, argument 1, or "").
func (r *Reader) cursorsIn(ctx context.Context, db DB, where string, args ...any) ([]audit.Cursor, error) {
	return query(ctx, r, db, "cursors", func(c *audit.Cursor) []any {
		return []any{&c.Source, &c.Position, rowcodec.TimeDest{P: &c.At}}
	}, `SELECT source, position, at FROM cursors`+where+` ORDER BY source`, args...)
}
