package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
)

// EventTimes returns the times of the lock's events of one kind within f's
// window, in time order; if more than f.Limit match, the newest f.Limit. It
// reads only indexes: a rare kind its own range of the per-kind index, and
// renewals, which that index leaves out, the lock's timeline index, which
// carries each event's kind (migration 0019); and the renewals sealed in
// runs (migration 0025), a run at a time through their index, newest first.
func (s *Store) EventTimes(ctx context.Context, lockID int64, kind audit.EventKind, f audit.TimeFilter) ([]time.Time, error) {
	return eventTimes(ctx, &s.reads, lockID, kind, f)
}

// EventTimes is Store.EventTimes through the background connection.
func (b *background) EventTimes(ctx context.Context, lockID int64, kind audit.EventKind, f audit.TimeFilter) ([]time.Time, error) {
	return eventTimes(ctx, &b.reads, lockID, kind, f)
}

func eventTimes(ctx context.Context, r *reads, lockID int64, kind audit.EventKind, f audit.TimeFilter) ([]time.Time, error) {
	tx, end, err := r.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("event times: %w", storageError(err))
	}
	defer end()
	if _, err := r.LockKey(ctx, tx, lockID); err != nil {
		return nil, err
	}
	w := dialect.Where()
	w.Add("lock_id = ?", lockID)
	w.Add("kind = ?", string(kind))
	index := sqlread.TimelineIndex
	if kind != audit.EventRenew {
		w.Add(sqlread.NotRenewal("kind"))
		index = sqlread.RareKindIndex
	}
	w.Window("at", f)
	lim := rowcodec.Limit(f.Limit, audit.DefaultListLimit, audit.MaxListLimit)
	rows, err := tx.Query(ctx, `SELECT at FROM events INDEXED BY `+index+w.String()+` ORDER BY at DESC`, w.Args...)
	var out, runs []time.Time
	if err == nil {
		out, err = sqlread.Times(rows, lim)
	}
	if err == nil && kind == audit.EventRenew {
		runs, err = r.RunTimes(ctx, tx, lockID, f, lim, out)
		out = sqlread.MergeTimes(out, runs, lim)
	}
	if err == nil && kind == audit.EventRenew {
		var logged []time.Time
		logged, err = r.LogTimes(ctx, tx, lockID, f, lim, out)
		out = sqlread.MergeTimes(out, logged, lim)
	}
	if err != nil {
		return nil, fmt.Errorf("%s times of lock %d: %w", kind, lockID, storageError(err))
	}
	return out, nil
}
