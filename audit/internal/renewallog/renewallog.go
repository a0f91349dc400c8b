// Package renewallog is what both SQL stores do with their renewal log
// (renewal_log: SQLite migration 0026, PostgreSQL 0016; rows in
// runcodec's log format) besides reading it, which sqlread does: which of
// a commit's renewals the log keeps and the rows they make (Split),
// sealing log rows into runs (SealStep), pruning them (Prune), and giving
// a copy their renewals as rows of the stores' logical schema (Copy). What
// the stores write differently is their Tx and SQL.
package renewallog

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
)

// Row is a log row to insert: its bucket (runcodec.Bucket of each of its
// locks) and its renewals.
type Row struct {
	Bucket int64
	runcodec.LogRow
}

// Split returns the log rows of the events the log keeps, a row per
// bucket and run window (at most runcodec.MaxRenewals renewals each), in
// bucket order, and the other events, in order, for rows. lockID gives a
// logged renewal's lock id.
func Split(events []audit.Event, lockID func(audit.LockKey) (int64, error)) ([]Row, []audit.Event, error) {
	rest := events[:0:0]
	all := make([]runcodec.Logged, 0, len(events))
	for _, e := range events {
		l, ok, err := logged(e)
		if err == nil && ok {
			l.LockID, err = lockID(e.Lock)
		}
		if err != nil {
			return nil, nil, err
		}
		if ok {
			all = append(all, l)
		} else {
			rest = append(rest, e)
		}
	}
	// Stable: each lock's renewals keep the order they were stored in.
	slices.SortStableFunc(all, func(a, b runcodec.Logged) int {
		return cmp.Or(cmp.Compare(runcodec.Bucket(a.LockID), runcodec.Bucket(b.LockID)),
			cmp.Compare(runcodec.WindowOf(a.At), runcodec.WindowOf(b.At)))
	})
	var rows []Row
	for start := 0; start < len(all); {
		end := start + 1
		for end < len(all) && end-start < runcodec.MaxRenewals && sameRow(all[start], all[end]) {
			end++
		}
		row, err := runcodec.EncodeLog(all[start:end])
		if err != nil {
			return nil, nil, err
		}
		rows = append(rows, Row{Bucket: runcodec.Bucket(all[start].LockID), LogRow: row})
		start = end
	}
	return rows, rest, nil
}

// sameRow reports whether a and b go into one log row: of one bucket and
// run window.
func sameRow(a, b runcodec.Logged) bool {
	return runcodec.Bucket(a.LockID) == runcodec.Bucket(b.LockID) && runcodec.WindowOf(a.At) == runcodec.WindowOf(b.At)
}

// logged returns e as the log keeps it, but for its lock id, and false for
// an event the log does not keep: all but renewals of a tenure that a
// compact row would hold (not inferred, of no resource or request) and a
// run can hold.
func logged(e audit.Event) (runcodec.Logged, bool, error) {
	if e.Kind != audit.EventRenew || e.Seq <= 0 || e.Inferred || e.Resource != "" || e.RequestID != "" {
		return runcodec.Logged{}, false, nil
	}
	margin, renewedAt, rest := rowcodec.CompactRenewal(e.Detail)
	l := runcodec.Logged{Seq: e.Seq, Renewal: runcodec.Renewal{At: audit.Nanos(e.At),
		RenewedAt: audit.NoNanos, Margin: runcodec.NoMargin, Position: e.Position, TTL: e.TTL}}
	if m, ok := margin.(int64); ok {
		l.Margin = m
	}
	if t, ok := renewedAt.(int64); ok {
		l.RenewedAt = t
	}
	if rest != nil {
		d, err := rowcodec.EncodeDetail(rest)
		if err != nil {
			return l, false, fmt.Errorf("renew event of lock %s: encode detail: %w", e.Lock, err)
		}
		l.Detail = d
	}
	l.LockID = 1 // a placeholder until the lock's id is resolved, for LogFits
	return l, runcodec.LogFits(l), nil
}
