package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
)

// EventTimes returns the times of the lock's events of one kind within f's
// window, in time order; if more than f.Limit match, the newest f.Limit.
// Renewals come from their rows, their runs (migration 0015) and the
// renewal log (0016), read in one snapshot, so that a seal between the
// reads neither doubles nor hides its renewals.
func (s *Store) EventTimes(ctx context.Context, lockID int64, kind audit.EventKind, f audit.TimeFilter) ([]time.Time, error) {
	// No transaction for other kinds, as in Events: one query reads the
	// times, and a lock's key never changes.
	if _, err := s.LockKey(ctx, s.Pool, lockID); err != nil {
		return nil, err
	}
	lim := rowcodec.Limit(f.Limit, audit.DefaultListLimit, audit.MaxListLimit)
	db, end := s.Pool, func() {}
	if kind == audit.EventRenew {
		var err error
		if db, end, err = s.Begin(ctx); err != nil {
			return nil, fmt.Errorf("event times of lock %d: %w", lockID, storageError(err))
		}
	}
	defer end()
	out, err := rowTimes(ctx, db, lockID, kind, f, lim)
	if err == nil && kind == audit.EventRenew {
		var runs []time.Time
		runs, err = s.RunTimes(ctx, db, lockID, f, lim, out)
		out = sqlread.MergeTimes(out, runs, lim)
	}
	if err == nil && kind == audit.EventRenew {
		var logged []time.Time
		logged, err = s.LogTimes(ctx, db, lockID, f, lim, out)
		out = sqlread.MergeTimes(out, logged, lim)
	}
	if err != nil {
		return nil, fmt.Errorf("event times of lock %d: %w", lockID, storageError(err))
	}
	return out, nil
}

// rowTimes returns the times of the lock's events of kind stored as rows
// within f's window, the newest lim, in time order.
func rowTimes(ctx context.Context, db sqlread.DB, lockID int64, kind audit.EventKind, f audit.TimeFilter, lim int) ([]time.Time, error) {
	w := dialect.Where()
	w.Add("lock_id = ?", lockID)
	w.Add("kind = ?", string(kind))
	from := "timeline"
	if kind != audit.EventRenew {
		w.Add(sqlread.NotRenewal("kind"))
		from = "events"
	}
	w.Window("at", f)
	rows, err := db.Query(ctx, `SELECT at FROM `+from+w.String()+` ORDER BY at DESC LIMIT `+w.Arg(lim), w.Args...)
	if err != nil {
		return nil, err
	}
	out, err := sqlread.Collect(rows, func(t *time.Time) []any { return []any{rowcodec.TimeDest{P: t}} })
	if err != nil {
		return nil, err
	}
	slices.Reverse(out)
	return out, nil
}
