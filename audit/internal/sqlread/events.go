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

// Events returns the lock's events within f's window (inclusive), in time
// order; if more than f.Limit match, the newest f.Limit. Returns ENOTFOUND if
// the lock does not exist.
func (r *Reader) Events(ctx context.Context, lockID int64, f audit.EventFilter) ([]audit.Event, error) {
	// No transaction: a lock's key never changes and the events come from
	// one query, so the two reads need no common snapshot (and on SQLite,
	// outside a transaction both statements stay prepared).
	key, err := r.LockKey(ctx, r.Pool, lockID)
	if err != nil {
		return nil, err
	}
	var events []audit.Event
	if _, rare := Kinds(f); rare || !(r.Runs || r.Log) {
		events, err = lockEvents(ctx, r, r.Pool, EventColumns, r.eventTablesOf(rare, r.hint(EventIndex(rare))), lockID, f, rowcodec.EventDest)
	} else {
		events, err = r.eventsWithRuns(ctx, lockID, f)
	}
	if err != nil {
		return nil, err
	}
	for i := range events {
		events[i].Lock = key
	}
	return events, nil
}

// eventsWithRuns is Events of renewals among other kinds, from the rows
// and the runs, read in one snapshot: a seal between two reads would show
// its renewals twice, or not at all.
func (r *Reader) eventsWithRuns(ctx context.Context, lockID int64, f audit.EventFilter) ([]audit.Event, error) {
	tx, end, err := r.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("list events of lock %d: %w", lockID, r.wrap(err))
	}
	defer end()
	rows, err := lockEvents(ctx, r, tx, EventColumns, r.eventTablesOf(false, r.hint(EventIndex(false))), lockID, f, rowcodec.EventDest)
	if err != nil {
		return nil, err
	}
	lim := rowcodec.Limit(f.Limit, audit.DefaultListLimit, audit.MaxListLimit)
	pos := func(e audit.Event) position { return position{audit.Nanos(e.At), e.ID} }
	rr := newRunRange(lockID, f.TimeFilter, f.Before, lim)
	if len(rows) >= lim {
		// Most reads want a lock's newest events, which are rows yet.
		floor := pos(rows[0])
		rr.floor = &floor
	}
	var runs []audit.Event
	if r.Runs {
		if runs, err = r.runEvents(ctx, tx, rr); err != nil {
			return nil, err
		}
		rows = mergeNewest(rows, runs, lim, pos)
	}
	if !r.Log {
		return rows, nil
	}
	rr.floor = nil
	if len(rows) >= lim {
		floor := pos(rows[0])
		rr.floor = &floor
	}
	logged, err := r.logEvents(ctx, tx, rr)
	if err != nil {
		return nil, err
	}
	return mergeNewest(rows, logged, lim, pos), nil
}

// lockEvents reads columns of the lock's events that f selects, from the
// tables from (events aliased e) through db, newest first up to f's limit,
// and returns them scanned through dest in time order.
func lockEvents[T any](ctx context.Context, r *Reader, db DB, columns, from string, lockID int64, f audit.EventFilter, dest func(*T) []any) ([]T, error) {
	w := r.Dialect.Where()
	w.Add("e.lock_id = ?", lockID)
	if kinds, rare := Kinds(f); len(kinds) > 0 {
		kindIn(&w, "e.kind", kinds)
		if rare {
			w.Add(NotRenewal("e.kind"))
		}
	}
	w.Window("e.at", f.TimeFilter)
	if !f.Before.IsZero() {
		// The plain bound lets the index range stop at the cursor.
		b := audit.Nanos(f.Before.At)
		w.Add("e.at <= ? AND (e.at < ? OR e.id < ?)", b, b, f.Before.ID)
	}
	lim := w.Arg(rowcodec.Limit(f.Limit, audit.DefaultListLimit, audit.MaxListLimit))
	out, err := query(ctx, r, db, fmt.Sprintf("list events of lock %d", lockID), dest,
		`SELECT `+columns+` FROM `+from+w.String()+` ORDER BY e.at DESC, e.id DESC LIMIT `+lim, w.Args...)
	if err != nil {
		return nil, err
	}
	slices.Reverse(out)
	return out, nil
}

// WriteEvents returns the lock's write events of one outcome within f's
// window (f.Kind is ignored), in time order; if more than f.Limit match, the
// newest f.Limit. It reads six columns of each, where Events reads fifteen
// and joins the tenures: a third of the time a row. Returns ENOTFOUND if the
// lock does not exist.
func (r *Reader) WriteEvents(ctx context.Context, lockID int64, outcome audit.WriteOutcome, f audit.EventFilter) ([]audit.WriteEvent, error) {
	if _, err := r.LockKey(ctx, r.Pool, lockID); err != nil {
		return nil, err
	}
	f.Kind, f.Kinds = audit.EventWriteAccepted, nil
	if outcome == audit.WriteRejected {
		f.Kind = audit.EventWriteRejected
	}
	writes, err := lockEvents(ctx, r, r.Pool, `e.id, e.at, e.holder, e.token, e.resource, `+r.HighestToken,
		`events e`+r.hint(WriteIndex), lockID, f, func(e *audit.WriteEvent) []any {
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
func (r *Reader) Tenures(ctx context.Context, lockID int64, f audit.TimeFilter) ([]audit.Tenure, error) {
	// No transaction, as in Events.
	key, err := r.LockKey(ctx, r.Pool, lockID)
	if err != nil {
		return nil, err
	}
	lim := rowcodec.Limit(f.Limit, audit.DefaultListLimit, audit.MaxListLimit)
	what := fmt.Sprintf("list tenures of lock %d", lockID)
	dest := tenureSummaryDest
	columns := `SELECT ` + TenureColumns + `, ` + r.SummaryColumns + ` FROM ` + TenureTables
	var tenures []audit.Tenure
	if f.From.IsZero() {
		w := r.Dialect.Where()
		w.Add("t.lock_id = ?", lockID)
		if !f.To.IsZero() {
			w.Add("t.granted_at <= ?", audit.Nanos(f.To))
		}
		tenures, err = query(ctx, r, r.Pool, what, dest, columns+w.String()+` ORDER BY t.seq DESC LIMIT `+w.Arg(lim), w.Args...)
	} else {
		to := int64(math.MaxInt64)
		if !f.To.IsZero() {
			to = audit.Nanos(f.To)
		}
		// A lock's tenures follow one another, so those overlapping a window
		// are the ones that ended inside it, plus the few granted last before
		// its end that were still running at its end (or are still held).
		// Each part is one index range, however long the lock's history.
		p1, p2, p3, p4 := r.Dialect.P(1), r.Dialect.P(2), r.Dialect.P(3), r.Dialect.P(4)
		tenures, err = query(ctx, r, r.Pool, what, dest, columns+`
			WHERE t.lock_id = `+p1+` AND t.granted_at <= `+p3+` AND t.seq IN (
				SELECT seq FROM tenures WHERE lock_id = `+p1+` AND ended_at BETWEEN `+p2+` AND `+p3+`
				UNION
				SELECT seq FROM (SELECT seq, ended_at FROM tenures WHERE lock_id = `+p1+` AND granted_at <= `+p3+`
					ORDER BY granted_at DESC LIMIT 64) last
				WHERE ended_at IS NULL OR ended_at > `+p3+`
				UNION
				SELECT seq FROM tenures WHERE lock_id = `+p1+` AND ended_at IS NULL)
			ORDER BY t.seq DESC LIMIT `+p4, lockID, audit.Nanos(f.From), to, lim)
	}
	if err != nil {
		return nil, err
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
func (r *Reader) Findings(ctx context.Context, f audit.FindingFilter) ([]audit.Finding, error) {
	w := r.Dialect.Where()
	columns := `f.id, f.lock_id, l.source, l.name, ` + findingFields
	from := ` FROM findings f JOIN locks l ON l.id = f.lock_id`
	switch {
	case f.LockID != 0:
		key, err := r.LockKey(ctx, r.Pool, f.LockID)
		switch {
		case audit.ErrorCode(err) == audit.ENOTFOUND:
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("list findings: %w", err)
		case f.Source != "" && f.Source != key.Source:
			return nil, nil
		}
		// One lock's findings need no join with their lock: its key comes
		// with the query (its arguments first, as the columns come first).
		text := r.Dialect.Text
		columns = `f.id, f.lock_id, ` + w.Arg(key.Source) + text + `, ` + w.Arg(key.Name) + text + `, ` + findingFields
		from = ` FROM findings f` + r.hint(lockFindingIndex(f))
		w.Add("f.lock_id = ?", f.LockID)
	case f.Source != "":
		w.Add("l.source = ?", f.Source)
	}
	switch {
	case f.Kind != "":
		w.Add("f.kind = ?", string(f.Kind))
	case len(f.Kinds) > 0:
		kindIn(&w, "f.kind", f.Kinds)
	}
	if f.Severity != "" {
		w.Add("f.severity = ?", string(f.Severity))
	}
	if f.Resource != "" {
		w.Add("f.resource = ?", f.Resource)
	}
	if f.Class != "" {
		// Unindexed keeps the planner off findings_class_severity_at, made
		// for counts: most findings share a class, so walking them newest
		// first (or a kind's, or a severity's) stops after a page, where a
		// range of the class would sort all of its findings.
		w.Add(r.unindexed("f.class")+" = ?", string(f.Class))
	}
	if f.Overlapping {
		r.overlapping(&w, f)
	} else {
		w.Window("f.at", f.TimeFilter)
	}
	if !f.Before.IsZero() {
		b := audit.Nanos(f.Before.At)
		w.Add("f.at <= ? AND (f.at < ? OR f.id < ?)", b, b, f.Before.ID)
	}
	lim := w.Arg(rowcodec.Limit(f.Limit, audit.DefaultListLimit, audit.MaxListLimit))
	findings, err := query(ctx, r, r.Pool, "list findings", rowcodec.FindingDest,
		`SELECT `+columns+from+w.String()+` ORDER BY f.at DESC, f.id DESC LIMIT `+lim, w.Args...)
	if err != nil {
		return nil, err
	}
	slices.Reverse(findings)
	return findings, nil
}

// kindIn adds the condition that col is one of kinds (at least one).
func kindIn[K ~string](w *rowcodec.Where, col string, kinds []K) {
	args := make([]any, len(kinds))
	for i, k := range kinds {
		args[i] = string(k)
	}
	w.Add(col+" IN (?"+strings.Repeat(", ?", len(kinds)-1)+")", args...)
}

// lockFindingIndex names the index for one lock's findings of a severity
// or a kind in a window, "" for the planner's choice. An engine that plans
// without statistics reads them by the lock and time alone, walking every
// finding of the window, most of them a busy lock's info findings, to keep
// a page of its warnings.
func lockFindingIndex(f audit.FindingFilter) string {
	kind := f.Kind != "" || len(f.Kinds) > 0
	switch {
	case f.Overlapping && kind:
		// A verdict's read of one kind: without the hint the planner takes
		// the lock's time index and reads every finding of the window to
		// test its kind, most of them a busy lock's stale writes.
		return LockKindIndex
	case f.Overlapping:
		return "" // its conditions pick their own ranges
	case f.Severity != "":
		return "findings_lock_severity_at"
	case kind:
		return LockKindIndex
	}
	return ""
}

// overlapping adds the conditions of findings that overlap f's window: those
// that start in it, and those that started before it and last into it.
func (r *Reader) overlapping(w *rowcodec.Where, f audit.FindingFilter) {
	if f.LockID == 0 || f.From.IsZero() {
		if !f.To.IsZero() {
			w.Add("f.at <= ?", audit.Nanos(f.To))
		}
		if !f.From.IsZero() {
			w.Add("coalesce(f.until, f.at) >= ?", audit.Nanos(f.From))
		}
		return
	}
	to := int64(math.MaxInt64)
	if !f.To.IsZero() {
		to = audit.Nanos(f.To)
	}
	// One walk of the lock's findings newest first, which stops at the
	// limit: from the window's end down to the earliest start among those
	// lasting into it (both ranges read from the covering index on until
	// alone).
	from, lasting := audit.Nanos(f.From), `findings`+r.hint("findings_lock_until_at")+` WHERE lock_id = ? AND until >= ? AND at < ?`
	w.Add(`f.at BETWEEN coalesce((SELECT min(at) FROM `+lasting+`), ?) AND ?`, f.LockID, from, from, from, to)
	w.Add(`(f.at >= ? OR f.id IN (SELECT id FROM `+lasting+`))`, from, f.LockID, from, from)
}

// LastEventAt returns, per source name, the time of its newest event. Sources
// without events are absent. Apply keeps the per-source maximum up to date, so
// this reads one small table.
func (r *Reader) LastEventAt(ctx context.Context) (map[string]time.Time, error) {
	type last struct {
		source string
		at     time.Time
	}
	all, err := query(ctx, r, r.Pool, "last event per source", func(l *last) []any {
		return []any{&l.source, rowcodec.TimeDest{P: &l.at}}
	}, `SELECT source, last_event_at FROM source_events`)
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(all))
	for _, l := range all {
		out[l.source] = l.at
	}
	return out, nil
}
