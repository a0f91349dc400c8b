package sqlread

import (
	"context"
	"slices"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
)

// tenureSummaryDest scans the columns of TenureColumns and then the
// engine's SummaryColumns.
func tenureSummaryDest(t *audit.Tenure) []any {
	return append(rowcodec.TenureDest(t), rowcodec.SummaryDest{P: &t.Pruned})
}

// TenuresByHolder returns the tenures of f.Holder across every lock granted
// within f's window (inclusive), in (granted_at, lock id, seq) order; if
// more than f.Limit match, the newest f.Limit. It is one range of
// HolderIndex read newest first, which stops at the limit however many
// tenures the holder has: the index ends in the tenures' key (lock_id,
// seq), so it holds the order the query asks for.
func (r *Reader) TenuresByHolder(ctx context.Context, f audit.HolderFilter) ([]audit.Tenure, error) {
	w := r.Dialect.Where()
	w.Add("t.holder = ?", f.Holder)
	w.Window("t.granted_at", f.TimeFilter)
	if c := f.Before; !c.IsZero() {
		// The plain bound lets the index range stop at the cursor.
		g := audit.Nanos(c.GrantedAt)
		w.Add("t.granted_at <= ? AND (t.granted_at < ? OR t.lock_id < ? OR (t.lock_id = ? AND t.seq < ?))", g, g, c.LockID, c.LockID, c.Seq)
	}
	lim := w.Arg(rowcodec.Limit(f.Limit, audit.DefaultListLimit, audit.MaxListLimit))
	tenures, err := query(ctx, r, r.Pool, "list tenures of a holder", func(t *audit.Tenure) []any {
		return append(tenureSummaryDest(t), &t.Lock.Source, &t.Lock.Name)
	}, `SELECT `+TenureColumns+`, `+r.SummaryColumns+`, lr.source, lr.name FROM tenures t`+r.hint(HolderIndex)+summaryJoin+
		heldJoin+w.String()+` ORDER BY t.granted_at DESC, t.lock_id DESC, t.seq DESC LIMIT `+lim, w.Args...)
	if err != nil {
		return nil, err
	}
	slices.Reverse(tenures)
	return tenures, nil
}
