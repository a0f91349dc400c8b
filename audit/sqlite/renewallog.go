package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
)

// The renewal log (migration 0026): a batch's renewals that a run can
// hold are written as one row of renewal_log per bucket of locks and run
// window instead of a row of events each.

// logRowsPerInsert is how many log rows one INSERT carries: a commit of
// a thousand renewals writes a row for most of the 256 buckets.
const logRowsPerInsert = 32

var logInsertMany = logInsert + strings.Repeat(", (?, ?, ?, ?, ?)", logRowsPerInsert-1)

const (
	// OR FAIL: a failed statement fails the whole transaction, so a
	// statement of many rows needs no statement journal to undo its own
	// rows (with ABORT, SQLite copied every page it touched first).
	logInsert = `INSERT OR FAIL INTO renewal_log (bucket, first_at, last_at, renewals, data) VALUES (?, ?, ?, ?, ?)`
	// A sync of the whole store raises every source's log mark with its own.
	logMarksSyncedTo   = `UPDATE renewal_log_marks SET synced_log = max(synced_log, ?)`
	logSourcesSyncedTo = `INSERT INTO renewal_log_marks (source, synced_log) SELECT value, ?2 FROM json_each(?1) WHERE true
		ON CONFLICT (source) DO UPDATE SET synced_log = max(synced_log, excluded.synced_log)`
	// A source's first fence starts its log mark at the store's, as
	// fenceUpsert starts its event mark.
	logFenceMark = `INSERT INTO renewal_log_marks (source, synced_log)
		SELECT ?, synced_log FROM renewal_log_marks WHERE source = '' ON CONFLICT (source) DO NOTHING`
)

// logKey is what one log row's renewals share.
type logKey struct{ bucket, window int64 }

// putLog writes the events that the log keeps (logged) into it, a row per
// bucket and run window (at most runcodec.MaxRenewals renewals each), and
// returns the others, in order, for rows.
func (w *batchWriter) putLog(ctx context.Context, events []audit.Event) ([]audit.Event, error) {
	rest := events[:0:0]
	var keys []logKey
	groups := make(map[logKey][]runcodec.Logged)
	for _, e := range events {
		l, ok, err := w.logged(ctx, e)
		if err != nil {
			return nil, err
		}
		if !ok {
			rest = append(rest, e)
			continue
		}
		k := logKey{runcodec.Bucket(l.LockID), window(l.At)}
		if _, seen := groups[k]; !seen {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], l)
	}
	if len(keys) == 0 {
		return events, nil
	}
	args := make([]any, 0, 5*len(keys))
	for _, k := range keys {
		logged := groups[k]
		for start := 0; start < len(logged); start += runcodec.MaxRenewals {
			row, err := runcodec.EncodeLog(logged[start:min(start+runcodec.MaxRenewals, len(logged))])
			if err != nil {
				return nil, err
			}
			args = append(args, k.bucket, row.FirstAt, row.LastAt, row.Renewals, row.Data)
		}
	}
	if err := w.insertLogRows(ctx, args); err != nil {
		return nil, err
	}
	return rest, nil
}

// logged returns e as the log keeps it, and false for an event the log
// does not keep: all but renewals of a tenure that a compact row would
// hold (not inferred, of no resource or request) and a run can hold.
func (w *batchWriter) logged(ctx context.Context, e audit.Event) (runcodec.Logged, bool, error) {
	if e.Kind != audit.EventRenew || e.Seq <= 0 || e.Inferred || e.Resource != "" || e.RequestID != "" {
		return runcodec.Logged{}, false, nil
	}
	margin, renewedAt, rest := rowcodec.CompactRenewal(e.Detail)
	l := runcodec.Logged{Seq: e.Seq, Renewal: runcodec.Renewal{At: nanos(e.At),
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
	if !runcodec.LogFits(l) {
		return l, false, nil
	}
	id, err := w.lockID(ctx, e.Lock)
	if err != nil {
		return l, false, err
	}
	l.LockID = id
	return l, true, nil
}

// insertLogRows inserts log rows, given as logInsert's arguments one row
// after another, logRowsPerInsert a statement.
func (w *batchWriter) insertLogRows(ctx context.Context, args []any) error {
	for len(args) > 0 {
		q, n := logInsert, 5
		if len(args) >= 5*logRowsPerInsert {
			q, n = logInsertMany, 5*logRowsPerInsert
		}
		if err := w.exec(ctx, q, args[:n]...); err != nil {
			return fmt.Errorf("log renewals of bucket %d: %w", args[0], err)
		}
		args = args[n:]
	}
	return nil
}
