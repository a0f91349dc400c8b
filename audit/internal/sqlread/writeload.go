package sqlread

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
)

// The write-load reads (audit.WriteLoadStore), for what leases cost their
// backends: the stores embed Reader, so both have them.

var _ audit.WriteLoadStore = (*Reader)(nil)

// TenuresIn implements audit.WriteLoadStore: one read of every tenure, its
// renewals as TenureColumns gives them (a held one's from its lock's row
// where that row counts more).
func (r *Reader) TenuresIn(ctx context.Context, f audit.TimeFilter) ([]audit.LockTenure, error) {
	w := r.Dialect.Where()
	if !f.To.IsZero() {
		w.Add("t.granted_at <= ?", audit.Nanos(f.To))
	}
	if !f.From.IsZero() {
		w.Add("(t.ended_at IS NULL OR t.ended_at >= ?)", audit.Nanos(f.From))
	}
	return query(ctx, r, r.Pool, "list tenures in a window", func(t *audit.LockTenure) []any {
		return append(rowcodec.TenureDest(&t.Tenure), &t.Lock.Source, &t.Lock.Name,
			rowcodec.TextDest[audit.SourceKind]{P: &t.Kind}, rowcodec.TextDest[audit.Class]{P: &t.Class})
	}, `SELECT `+TenureColumns+`, lr.source, lr.name, lr.kind, lr.class FROM tenures t`+heldJoin+
		w.String()+` ORDER BY t.lock_id, t.seq`, w.Args...)
}

// RenewalCounts implements audit.WriteLoadStore, in one transaction, so
// that a renewal sealed or folded meanwhile is counted once: each lock's
// renewal rows counted from its timeline index and its runs decoded, and
// the renewal log's rows of the window read once for all the locks (its
// commit rows hold every lock's: a read per lock would walk them all
// again).
func (r *Reader) RenewalCounts(ctx context.Context, lockIDs []int64, f audit.TimeFilter) (map[int64]int64, error) {
	tx, end, err := r.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("count renewals: %w", r.wrap(err))
	}
	defer end()
	f.Limit = 0
	out := make(map[int64]int64, len(lockIDs))
	for _, id := range lockIDs {
		n, err := r.rowsAndRunsRenewals(ctx, tx, id, f)
		if err != nil {
			return nil, err
		}
		out[id] = n
	}
	if err := r.logRenewalCounts(ctx, tx, lockIDs, f, out); err != nil {
		return nil, err
	}
	return out, nil
}

// rowsAndRunsRenewals counts the lock's renewals within f's window that
// are rows or in runs.
func (r *Reader) rowsAndRunsRenewals(ctx context.Context, tx DB, lockID int64, f audit.TimeFilter) (int64, error) {
	w := r.Dialect.Where()
	w.Add("e.lock_id = ?", lockID)
	w.Add("e.kind = ?", string(audit.EventRenew))
	w.Window("e.at", f)
	var n int64
	err := tx.QueryRow(ctx, `SELECT count(*) FROM `+r.timeline()+` e`+r.hint(TimelineIndex)+w.String(), w.Args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count renewals of lock %d: %w", lockID, r.wrap(err))
	}
	runs, err := r.RunTimes(ctx, tx, lockID, f, math.MaxInt, nil)
	if err != nil {
		return 0, err
	}
	return n + int64(len(runs)), nil
}

// logRenewalCounts adds to counts the logged renewals within f's window of
// the locks of ids: it reads each of their buckets' log rows and the
// commit rows in the window once, and decodes only the groups that reach
// past one of its ends.
func (r *Reader) logRenewalCounts(ctx context.Context, tx DB, ids []int64, f audit.TimeFilter, counts map[int64]int64) error {
	if !r.Log || len(ids) == 0 {
		return nil
	}
	rr := newRunRange(0, f, audit.EventCursor{}, math.MaxInt)
	buckets := map[int64]bool{runcodec.CommitBucket: true}
	for _, id := range ids {
		buckets[runcodec.Bucket(id)] = true
	}
	// A row's renewals share an hour window, so it lies within Window of
	// its last renewal, as pageNewest reads them.
	upper := rr.to
	if upper <= math.MaxInt64-int64(runcodec.Window) {
		upper += int64(runcodec.Window)
	}
	p := r.Dialect.P
	q := `SELECT first_at, last_at, data FROM renewal_log` + r.hint(LogIndex) + `
		WHERE bucket = ` + p(1) + ` AND last_at >= ` + p(2) + ` AND last_at <= ` + p(3) + ` AND first_at <= ` + p(4)
	for b := range buckets {
		rows, err := query(ctx, r, tx, "count logged renewals", func(l *spanRow) []any { return []any{&l.first, &l.last, &l.data} },
			q, b, rr.from, upper, rr.to)
		if err != nil {
			return err
		}
		for _, l := range rows {
			err := runcodec.EachLogGroup(l.data, 0, func(g runcodec.LogGroup) error {
				if _, ok := counts[g.LockID]; !ok {
					return nil
				}
				n, err := l.renewals(g, rr)
				counts[g.LockID] += n
				return err
			})
			if err != nil {
				return fmt.Errorf("count logged renewals: %w", err)
			}
		}
	}
	return nil
}

// spanRow is a log row with the span of its renewals' observed times.
type spanRow struct {
	first, last int64 // ms-floored
	data        []byte
}

// renewals counts the renewals of group g of row l within rr's window: a
// row wholly within it counts its groups from their headers.
func (l spanRow) renewals(g runcodec.LogGroup, rr runRange) (int64, error) {
	if l.first >= rr.from && l.last <= rr.to-int64(time.Millisecond) {
		return int64(g.Renewals), nil
	}
	rs, err := g.Decode()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, x := range rs {
		if x.At >= rr.from && x.At <= rr.to {
			n++
		}
	}
	return n, nil
}
