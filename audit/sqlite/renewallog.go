package sqlite

import (
	"context"
	"fmt"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
)

// The renewal log (migration 0026): a batch's renewals that a run can
// hold are written as one row of renewal_log per bucket of locks and run
// window instead of a row of events each.

const (
	logInsert = `INSERT INTO renewal_log (bucket, first_at, last_at, renewals, data) VALUES (?, ?, ?, ?, ?)`
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
	insert, err := w.stmt(ctx, logInsert)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		logged := groups[k]
		for start := 0; start < len(logged); start += runcodec.MaxRenewals {
			row, err := runcodec.EncodeLog(logged[start:min(start+runcodec.MaxRenewals, len(logged))])
			if err != nil {
				return nil, err
			}
			if _, err := insert.ExecContext(ctx, k.bucket, row.FirstAt, row.LastAt, row.Renewals, row.Data); err != nil {
				return nil, fmt.Errorf("log %d renewals of bucket %d: %w", row.Renewals, k.bucket, err)
			}
		}
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
	l := runcodec.Logged{Seq: e.Seq, TTL: e.TTL, Renewal: runcodec.Renewal{At: nanos(e.At),
		RenewedAt: audit.NoNanos, Margin: runcodec.NoMargin, Position: e.Position}}
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
