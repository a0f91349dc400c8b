package sqlread

import (
	"context"
	"fmt"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
)

// WriteStats returns, per resource that reported writes of the lock within
// f's window (both ends inclusive, either open), how many it accepted and
// rejected, how many of those it accepted carried no token, and its newest
// report, ordered by resource: one grouped read of
// the lock's writes, which holds only the totals.
func (r *Reader) WriteStats(ctx context.Context, lockID int64, f audit.TimeFilter) ([]audit.ResourceWrites, error) {
	if _, err := r.LockKey(ctx, r.Pool, lockID); err != nil {
		return nil, err
	}
	from, to := audit.Nanos(audit.EarliestTime), audit.Nanos(audit.LatestTime)
	if !f.From.IsZero() {
		from = audit.Nanos(f.From)
	}
	if !f.To.IsZero() {
		to = audit.Nanos(f.To)
	}
	p := r.Dialect.P
	type group struct {
		resource string
		kind     audit.EventKind
		n        int
		untoken  int
		last     time.Time
	}
	groups, err := query(ctx, r, r.Pool, fmt.Sprintf("write totals of lock %d", lockID), func(g *group) []any {
		return []any{rowcodec.TextDest[string]{P: &g.resource}, rowcodec.TextDest[audit.EventKind]{P: &g.kind}, &g.n, &g.untoken, rowcodec.TimeDest{P: &g.last}}
	}, `SELECT resource, kind, count(*), sum(CASE WHEN token IS NULL THEN 1 ELSE 0 END), max(at) FROM events`+r.hint(RareKindIndex)+
		` WHERE lock_id = `+p(1)+` AND kind IN (`+p(2)+`, `+p(3)+`) AND `+NotRenewal("kind")+
		` AND at >= `+p(4)+` AND at <= `+p(5)+` GROUP BY resource, kind ORDER BY resource, kind`,
		lockID, string(audit.EventWriteAccepted), string(audit.EventWriteRejected), from, to)
	if err != nil {
		return nil, err
	}
	var out []audit.ResourceWrites
	for _, g := range groups {
		if len(out) == 0 || out[len(out)-1].Resource != g.resource {
			out = append(out, audit.ResourceWrites{Resource: g.resource})
		}
		rw := &out[len(out)-1]
		if g.kind == audit.EventWriteAccepted {
			rw.Accepted, rw.Untokened = g.n, g.untoken
		} else {
			rw.Rejected = g.n
		}
		if g.last.After(rw.LastAt) {
			rw.LastAt = g.last
		}
	}
	return out, nil
}
