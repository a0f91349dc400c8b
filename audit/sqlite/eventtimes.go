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
// reads one range of an index: the per-kind one, or renewals' own.
func (s *Store) EventTimes(ctx context.Context, lockID int64, kind audit.EventKind, f audit.TimeFilter) ([]time.Time, error) {
	tx, end, err := s.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("event times: %w", storageError(err))
	}
	defer end()
	if _, err := s.LockKey(ctx, tx, lockID); err != nil {
		return nil, err
	}
	w := dialect.Where()
	w.Add("lock_id = ?", lockID)
	index := sqlread.RenewalIndex
	if kind == audit.EventRenew {
		w.Add("kind = 'renew'") // a literal, which the partial index's planner needs
	} else {
		w.Add("kind = ?", string(kind))
		w.Add(sqlread.NotRenewal("kind"))
		index = sqlread.RareKindIndex
	}
	w.Window("at", f)
	rows, err := tx.Query(ctx, `SELECT at FROM events INDEXED BY `+index+w.String()+` ORDER BY at DESC`, w.Args...)
	var out []time.Time
	if err == nil {
		out, err = sqlread.Times(rows, rowcodec.Limit(f.Limit, audit.DefaultListLimit, audit.MaxListLimit))
	}
	if err != nil {
		return nil, fmt.Errorf("%s times of lock %d: %w", kind, lockID, storageError(err))
	}
	return out, nil
}
