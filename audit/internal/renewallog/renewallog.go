// Package renewallog is what both SQL stores do with their renewal log
// (renewal_log: SQLite migration 0026, PostgreSQL 0016; rows in
// runcodec's log format) besides reading it, which sqlread does: which of
// a commit's renewals the log keeps and the commit rows they make (Split),
// folding synced commit rows into rows of the locks' buckets (Rebucket),
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
// locks, or runcodec.CommitBucket) and its renewals.
type Row struct {
	Bucket int64
	runcodec.LogRow
}

// Split returns the log rows of the events the log keeps, commit rows
// (runcodec.CommitBucket), a row per run window (at most
// runcodec.MaxRenewals renewals each), and the other events, in order,
// for rows. lockID gives a logged renewal's lock id.
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
	rows, err := rowsOf(all, func(int64) int64 { return runcodec.CommitBucket })
	return rows, rest, err
}

// rowsOf returns logged renewals, in the order stored, as log rows: a row
// per bucket (bucket of each renewal's lock) and run window, at most
// runcodec.MaxRenewals renewals each, in bucket order. It works out each
// renewal's row once and sorts those, each lock's renewals kept in the
// order they were stored in; a commit's, of one bucket and nearly always
// one window, are in order already.
func rowsOf(logged []runcodec.Logged, bucket func(lockID int64) int64) ([]Row, error) {
	keys := make([]rowKey, len(logged))
	for i, l := range logged {
		keys[i] = rowKey{bucket(l.LockID), runcodec.WindowOf(l.At), i}
	}
	if !slices.IsSortedFunc(keys, rowKey.compare) {
		slices.SortFunc(keys, rowKey.compare)
		sorted := make([]runcodec.Logged, len(logged))
		for i, k := range keys {
			sorted[i] = logged[k.i]
		}
		logged = sorted
	}
	var rows []Row
	for start := 0; start < len(logged); {
		k, end := keys[start], start+1
		for end < len(logged) && end-start < runcodec.MaxRenewals && keys[end].row() == k.row() {
			end++
		}
		row, err := runcodec.EncodeLog(logged[start:end])
		if err != nil {
			return nil, err
		}
		rows = append(rows, Row{Bucket: k.bucket, LogRow: row})
		start = end
	}
	return rows, nil
}

// rowKey is the log row of logged renewal i: its bucket and run window.
type rowKey struct {
	bucket, window int64
	i              int
}

func (k rowKey) row() [2]int64 { return [2]int64{k.bucket, k.window} }

// compare orders keys by row, then as logged (which makes the sort stable).
func (k rowKey) compare(o rowKey) int {
	return cmp.Or(cmp.Compare(k.bucket, o.bucket), cmp.Compare(k.window, o.window), cmp.Compare(k.i, o.i))
}

// logged returns e as the log keeps it, but for its lock id, and false for
// an event the log does not keep: all but renewals of a tenure that a
// compact row would hold (not inferred, of no resource or request) and a
// run can hold.
func logged(e audit.Event) (runcodec.Logged, bool, error) {
	if e.Kind != audit.EventRenew || e.Seq <= 0 || e.Inferred || e.Resource != "" || e.RequestID != "" {
		return runcodec.Logged{}, false, nil
	}
	margin, renewedAt, rest := rowcodec.CompactRenewal(e)
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
