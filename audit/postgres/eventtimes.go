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
func (s *Store) EventTimes(ctx context.Context, lockID int64, kind audit.EventKind, f audit.TimeFilter) ([]time.Time, error) {
	// No transaction, as in Events: one query reads the times, and a
	// lock's key never changes.
	if _, err := s.LockKey(ctx, s.Pool, lockID); err != nil {
		return nil, err
	}
	w := dialect.Where()
	w.Add("lock_id = ?", lockID)
	w.Add("kind = ?", string(kind))
	if kind != audit.EventRenew {
		w.Add(sqlread.NotRenewal("kind"))
	}
	from := "events"
	if kind == audit.EventRenew {
		from = "timeline"
	}
	w.Window("at", f)
	lim := w.Arg(rowcodec.Limit(f.Limit, audit.DefaultListLimit, audit.MaxListLimit))
	rows, err := s.Pool.Query(ctx, `SELECT at FROM `+from+w.String()+` ORDER BY at DESC LIMIT `+lim, w.Args...)
	if err != nil {
		return nil, fmt.Errorf("event times of lock %d: %w", lockID, storageError(err))
	}
	out, err := sqlread.Collect(rows, func(t *time.Time) []any { return []any{rowcodec.TimeDest{P: t}} })
	if err != nil {
		return nil, fmt.Errorf("event times of lock %d: %w", lockID, storageError(err))
	}
	slices.Reverse(out)
	return out, nil
}
