package sqlread

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
)

// WriteBin is the width of a write_bins row: a minute, in nanoseconds. The
// migrations' triggers bin a write at at (at >= 0) into at - at % WriteBin.
const WriteBin = int64(time.Minute)

// WriteStats returns, per resource that reported writes of the lock within
// f's window (both ends inclusive, either open), how many it accepted and
// rejected, how many of those it accepted carried no token, and its newest
// report, ordered by resource. The minutes whole inside the window are read
// from their counts (write_bins), the partial ones at either end from the
// writes, so that a day's totals read a row per minute and resource rather
// than every write.
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
	lo, hi := wholeBins(from, to)
	p := r.Dialect.P
	// The part minutes' writes come from the index that carries their
	// resource and token (WriteIndex): each write's row would cost a page.
	writes := `SELECT resource, kind, 1 AS n, CASE WHEN token IS NULL THEN 1 ELSE 0 END AS u, at AS last FROM events` + r.hint(WriteIndex) +
		` WHERE lock_id = ` + p(1) + ` AND kind IN (` + p(2) + `, ` + p(3) + `) AND ` + NotRenewal("kind")
	type group struct {
		resource string
		kind     audit.EventKind
		n        int
		untoken  int
		last     time.Time
	}
	groups, err := query(ctx, r, r.Pool, fmt.Sprintf("write totals of lock %d", lockID), func(g *group) []any {
		return []any{rowcodec.TextDest[string]{P: &g.resource}, rowcodec.TextDest[audit.EventKind]{P: &g.kind}, &g.n, &g.untoken, rowcodec.TimeDest{P: &g.last}}
	}, `SELECT resource, kind, CAST(sum(n) AS BIGINT), CAST(sum(u) AS BIGINT), max(last) FROM (
		SELECT resource, kind, n, untokened AS u, last_at AS last FROM write_bins
			WHERE lock_id = `+p(1)+` AND kind IN (`+p(2)+`, `+p(3)+`) AND bin >= `+p(4)+` AND bin < `+p(5)+`
		UNION ALL `+writes+` AND at >= `+p(6)+` AND at < `+p(4)+`
		UNION ALL `+writes+` AND at >= `+p(5)+` AND at <= `+p(7)+`
	) w GROUP BY resource, kind ORDER BY resource, kind`,
		lockID, string(audit.EventWriteAccepted), string(audit.EventWriteRejected), lo, hi, from, to)
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

// wholeBins returns the bins whole inside from..to (both inclusive) as
// lo..hi (the first bin and the end of the last, hi exclusive): the writes
// of from..lo and hi..to are read one by one. Writes before 1970 are not
// binned, so lo is never below 0; with no whole bin, lo = hi = to + 1 and
// every write is read.
func wholeBins(from, to int64) (lo, hi int64) {
	lo = max(from, 0)
	if r := lo % WriteBin; r != 0 && lo <= math.MaxInt64-WriteBin {
		lo += WriteBin - r
	}
	hi = to - to%WriteBin
	if to%WriteBin == WriteBin-1 {
		hi = to + 1 // to < MaxInt64: MaxInt64 is not a bin's last nanosecond
	}
	if to < 0 || hi <= lo || lo%WriteBin != 0 {
		if to == math.MaxInt64 {
			return to, to // no write is after MaxInt64
		}
		return to + 1, to + 1
	}
	return lo, hi
}
