package sqlread

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
)

// Renewal runs (SQLite migration 0025, PostgreSQL 0015): sealing folds a
// lock's staged renewals of one tenure and hour window into one row of
// renewal_runs, whose renewals have the ids runcodec.ID gives them. Every
// read that returns renewals merges the runs with the rows left, in
// (at, id) order.

// RunIndex is the index of a lock's runs by their last renewal.
const RunIndex = "renewal_runs_lock_last"

// RunColumns are the columns RunDest scans, from renewal_runs aliased r.
const RunColumns = `r.id, r.lock_id, r.seq, r.first_at, r.last_at, r.renewals, r.ttl_ms,
	r.min_margin_permille, r.detail, r.data`

// RunDest scans RunColumns into a run.
func RunDest(run *runcodec.Run) []any {
	return []any{&run.ID, &run.LockID, &run.Seq, &run.FirstAt, &run.LastAt, &run.Renewals,
		rowcodec.MsDest{P: &run.TTL}, &run.MinMargin, rowcodec.TextDest[string]{P: &run.Detail}, &run.Data}
}

// heldRun is a run with the holder and token of its tenure, which its
// renewals take, as compact renewal rows do.
type heldRun struct {
	runcodec.Run
	holder string
	token  *int64
}

// runsPerPage is how many runs one query of a lock's runs reads: most
// reads want one or two hours of a lock.
const runsPerPage = 8

// position is an item's place in a lock's (at, id) order of events.
type position struct{ at, id int64 }

func comparePositions(a, b position) int {
	return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.id, b.id))
}

// runRange is what of a lock's runs a read selects: the renewals within
// its window and before its cursor, the newest lim of them.
type runRange struct {
	lockID   int64
	from, to int64 // inclusive, unix ns
	before   position
	lim      int
	// floor, when set, is the oldest of lim items the read has from
	// elsewhere (the rows): a renewal older cannot be among the newest.
	floor *position
}

// newRunRange is the range of f's renewals among lockID's runs.
func newRunRange(lockID int64, f audit.TimeFilter, before audit.EventCursor, lim int) runRange {
	rr := runRange{lockID: lockID, from: math.MinInt64, to: math.MaxInt64, before: position{math.MaxInt64, math.MaxInt64}, lim: lim}
	if !f.From.IsZero() {
		rr.from = audit.Nanos(f.From)
	}
	if !f.To.IsZero() {
		rr.to = audit.Nanos(f.To)
	}
	if !before.IsZero() {
		rr.before = position{audit.Nanos(before.At), before.ID}
	}
	return rr
}

// holds reports whether the range selects a renewal at p.
func (rr runRange) holds(p position) bool {
	return p.at >= rr.from && p.at <= rr.to && comparePositions(p, rr.before) < 0
}

// lockRuns calls each with the lock's runs that may hold renewals rr
// selects, newest first, until the renewals each has returned (the
// positions of those rr selects, newest last) are rr.lim or more and no
// run left can hold a newer one. It returns every position each returned
// that rr selects, the newest rr.lim, in time order.
func (r *Reader) lockRuns(ctx context.Context, db DB, rr runRange, each func(heldRun) ([]position, error)) ([]position, error) {
	p := r.Dialect.P
	q := `SELECT ` + RunColumns + `, coalesce(t.holder, ''), t.token FROM renewal_runs r` + r.hint(RunIndex) + `
		LEFT JOIN tenures t ON t.lock_id = r.lock_id AND t.seq = r.seq
		WHERE r.lock_id = ` + p(1) + ` AND r.last_at >= ` + p(2) + ` AND r.first_at <= ` + p(3) + `
			AND r.last_at <= ` + p(4) + ` AND (r.last_at < ` + p(4) + ` OR r.id < ` + p(5) + `)
		ORDER BY r.last_at DESC, r.id DESC LIMIT ` + p(6)
	return pageNewest(ctx, r, db, rr, newestPages[heldRun]{
		what: fmt.Sprintf("renewal runs of lock %d", rr.lockID), query: q, first: rr.lockID,
		dest: func(h *heldRun) []any { return append(RunDest(&h.Run), &h.holder, rowcodec.TokenDest{P: &h.token}) },
		key:  func(h heldRun) position { return position{h.LastAt, h.ID} },
		each: each, page: runsPerPage,
	})
}

// newestPages is a table of a lock's renewals that pageNewest reads: its
// query selects rows holding renewals of arguments 1 (the lock, or its
// bucket) between arguments 2 and 3, whose key (last_at, id) is before
// (argument 4, argument 5), newest first, argument 6 of them. Each row
// lies within runcodec.Window of its last renewal.
type newestPages[T any] struct {
	what  string
	query string
	first any
	dest  func(*T) []any
	key   func(T) position
	each  func(T) ([]position, error)
	page  int // rows a query reads
}

// pageNewest calls t.each with the rows of t that may hold renewals rr
// selects, newest first, until the renewals each has returned (the
// positions of those rr selects, newest last) are rr.lim or more and no
// row left can hold a newer one. It returns every position each returned
// that rr selects, the newest rr.lim, in time order.
func pageNewest[T any](ctx context.Context, r *Reader, db DB, rr runRange, t newestPages[T]) ([]position, error) {
	// A row's renewals share an hour window, so it lies within Window of
	// its last renewal: the rows that reach into the range are one range
	// of the index by last_at.
	last := min(rr.to, rr.before.at)
	upper := last
	if upper <= math.MaxInt64-int64(runcodec.Window) {
		upper += int64(runcodec.Window)
	}
	lower := rr.from
	if rr.floor != nil {
		lower = max(lower, rr.floor.at)
	}
	var kept []position
	after := position{math.MaxInt64, math.MaxInt64} // the keyset of the next page
	for {
		rows, err := query(ctx, r, db, t.what, t.dest, t.query, t.first, lower, last, min(upper, after.at), after.id, t.page)
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			key := t.key(row)
			if len(kept) >= rr.lim && key.at < kept[0].at {
				return kept, nil // nothing of this row or older ones is among the newest
			}
			got, err := t.each(row)
			if err != nil {
				return nil, fmt.Errorf("%s: row %d: %w", t.what, key.id, err)
			}
			sel := got[:0]
			for _, pos := range got {
				if rr.holds(pos) {
					sel = append(sel, pos)
				}
			}
			// Rows come newest first: a merge, not a sort of all kept so far.
			kept = mergeNewest(sel, kept, rr.lim, func(p position) position { return p })
			after = key
		}
		if len(rows) < t.page {
			return kept, nil
		}
	}
}

// runEvents returns the lock's renewals in runs that rr selects, the
// newest rr.lim, in time order.
func (r *Reader) runEvents(ctx context.Context, db DB, rr runRange) ([]audit.Event, error) {
	byID := make(map[int64]audit.Event)
	kept, err := r.lockRuns(ctx, db, rr, func(run heldRun) ([]position, error) {
		events, err := run.Events()
		if err != nil {
			return nil, err
		}
		return rr.positions(events, run.holder, run.token, byID), nil
	})
	if err != nil {
		return nil, err
	}
	return eventsAt(kept, byID), nil
}

// positions returns the positions of a tenure's renewals, and keeps in
// byID those rr selects, given the tenure's holder and token.
func (rr runRange) positions(events []audit.Event, holder string, token *int64, byID map[int64]audit.Event) []position {
	out := make([]position, 0, len(events))
	for _, e := range events {
		e.Holder, e.Token = holder, token
		p := position{audit.Nanos(e.At), e.ID}
		if rr.holds(p) {
			byID[e.ID] = e
		}
		out = append(out, p)
	}
	return out
}

// eventsAt returns the events of byID at the positions kept, in order.
func eventsAt(kept []position, byID map[int64]audit.Event) []audit.Event {
	out := make([]audit.Event, len(kept))
	for i, p := range kept {
		out[i] = byID[p.id]
	}
	return out
}

// RunTimes returns the times of the lock's renewals in runs that f
// selects, the newest lim, in time order, read through db. rows are the
// times the caller has of rows, in time order: when they are lim, runs
// older than all of them are not read.
func (r *Reader) RunTimes(ctx context.Context, db DB, lockID int64, f audit.TimeFilter, lim int, rows []time.Time) ([]time.Time, error) {
	if !r.Runs {
		return nil, nil
	}
	rr := newRunRange(lockID, f, audit.EventCursor{}, lim)
	if len(rows) >= lim {
		rr.floor = &position{audit.Nanos(rows[0]), 0}
	}
	kept, err := r.lockRuns(ctx, db, rr, func(run heldRun) ([]position, error) {
		rs, err := run.Decode()
		if err != nil {
			return nil, err
		}
		return decodedPositions(rs, func(i int) int64 { return runcodec.ID(run.ID, i) }), nil
	})
	if err != nil {
		return nil, err
	}
	return timesAt(kept), nil
}

// decodedPositions returns the positions of a run's or a log group's
// decoded renewals, the i-th of id(i).
func decodedPositions(rs []runcodec.Renewal, id func(i int) int64) []position {
	out := make([]position, len(rs))
	for i, x := range rs {
		out[i] = position{x.At, id(i)}
	}
	return out
}

// timesAt returns the times of the positions kept.
func timesAt(kept []position) []time.Time {
	times := make([]time.Time, len(kept))
	for i, p := range kept {
		times[i] = audit.TimeOf(p.at)
	}
	return times
}

// mergeNewest merges a and b, each in (at, id) order, and keeps the
// newest lim.
func mergeNewest[T any](a, b []T, lim int, pos func(T) position) []T {
	if len(b) == 0 {
		return a[max(0, len(a)-lim):]
	}
	out := make([]T, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j == len(b) || (i < len(a) && comparePositions(pos(a[i]), pos(b[j])) < 0) {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	return out[max(0, len(out)-lim):]
}

// MergeTimes merges the times of rows and of runs (each in time order;
// the rows' ids, which the runs' are above, order equal times) and keeps
// the newest lim.
func MergeTimes(rows []time.Time, runs []time.Time, lim int) []time.Time {
	type item struct {
		t   time.Time
		run bool
	}
	a, b := make([]item, len(rows)), make([]item, len(runs))
	for i, t := range rows {
		a[i] = item{t, false}
	}
	for i, t := range runs {
		b[i] = item{t, true}
	}
	merged := mergeNewest(a, b, lim, func(x item) position {
		id := int64(0)
		if x.run {
			id = 1
		}
		return position{audit.Nanos(x.t), id}
	})
	out := make([]time.Time, len(merged))
	for i, x := range merged {
		out[i] = x.t
	}
	return out
}
