package sqlread

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
)

// LockKindIndex is the index of a lock's findings of one kind. It carries
// each finding's resource and tokens, so that counting a kind's findings
// per resource (FindingsByResource) and naming the writes that stale and
// unfenced writes are about (WriteMarks) read no finding: a busy lock's
// resources stop hundreds of thousands of stale writes a day.
const LockKindIndex = "findings_lock_kind_at"

// FindingsByResource counts the lock's findings of kind starting within
// f's window per resource, from the index alone. The index is in time
// order, so the engine sorts the window's entries by resource to group
// them: a few dozen bytes each, for as long as the read lasts.
func (r *Reader) FindingsByResource(ctx context.Context, lockID int64, kind audit.FindingKind, f audit.TimeFilter) ([]audit.ResourceFindings, error) {
	if _, err := r.LockKey(ctx, r.Pool, lockID); err != nil {
		return nil, err
	}
	w := r.Dialect.Where()
	w.Add("lock_id = ?", lockID)
	w.Add("kind = ?", string(kind))
	w.Window("at", f)
	return query(ctx, r, r.Pool, fmt.Sprintf("count %s findings of lock %d", kind, lockID), func(c *audit.ResourceFindings) []any {
		return []any{rowcodec.TextDest[string]{P: &c.Resource}, &c.N, rowcodec.TimeDest{P: &c.First}}
	}, `SELECT resource, count(*), min(at) FROM findings`+r.hint(LockKindIndex)+w.String()+` GROUP BY resource ORDER BY resource`, w.Args...)
}

// WriteMarks reads the stale and unfenced writes' findings in f's window
// from the index alone: the newest f.Limit of each kind, of which it keeps
// the newest f.Limit.
func (r *Reader) WriteMarks(ctx context.Context, lockID int64, f audit.TimeFilter) ([]audit.WriteMark, error) {
	if _, err := r.LockKey(ctx, r.Pool, lockID); err != nil {
		return nil, err
	}
	lim := rowcodec.Limit(f.Limit, audit.DefaultListLimit, audit.MaxListLimit)
	var marks []audit.WriteMark
	// One range per kind, each in index order: a range of both kinds
	// would be sorted whole before the limit cut it.
	for _, kind := range audit.WriteFindingKinds {
		w := r.Dialect.Where()
		w.Add("lock_id = ?", lockID)
		w.Add("kind = ?", string(kind))
		w.Window("at", f)
		n := w.Arg(lim)
		some, err := query(ctx, r, r.Pool, fmt.Sprintf("list %s findings of lock %d", kind, lockID), func(m *audit.WriteMark) []any {
			return []any{&m.ID, rowcodec.TextDest[audit.FindingKind]{P: &m.Kind}, rowcodec.TimeDest{P: &m.At},
				rowcodec.TextDest[string]{P: &m.Resource}, rowcodec.TokenDest{P: &m.Token}}
		}, `SELECT id, kind, at, resource, `+r.FirstToken+` FROM findings`+r.hint(LockKindIndex)+w.String()+
			` ORDER BY at DESC, id DESC LIMIT `+n, w.Args...)
		if err != nil {
			return nil, err
		}
		marks = append(marks, some...)
	}
	slices.SortFunc(marks, func(a, b audit.WriteMark) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.ID, b.ID))
	})
	return marks[max(0, len(marks)-lim):], nil
}
