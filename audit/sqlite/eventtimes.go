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
// reads only indexes: renewals, which the per-kind index leaves out, are the
// lock's event times less those of every other kind.
func (s *Store) EventTimes(ctx context.Context, lockID int64, kind audit.EventKind, f audit.TimeFilter) ([]time.Time, error) {
	tx, end, err := s.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("event times: %w", storageError(err))
	}
	defer end()
	if _, err := s.LockKey(ctx, tx, lockID); err != nil {
		return nil, err
	}
	// times reads the lock's times in f's window that cond selects (""
	// for all), newest first.
	times := func(cond string, args ...any) (sqlread.Rows, error) {
		w := dialect.Where()
		w.Add("lock_id = ?", lockID)
		index := sqlread.TimelineIndex
		if cond != "" {
			w.Add(cond, args...)
			index = sqlread.RareKindIndex // every cond here excludes renewals
		}
		w.Window("at", f)
		return tx.Query(ctx, `SELECT at FROM events INDEXED BY `+index+w.String()+` ORDER BY at DESC`, w.Args...)
	}
	lim := rowcodec.Limit(f.Limit, audit.DefaultListLimit, audit.MaxListLimit)
	var out []time.Time
	if kind != audit.EventRenew {
		var rows sqlread.Rows
		if rows, err = times("kind = ? AND "+sqlread.NotRenewal("kind"), string(kind)); err == nil {
			out, err = sqlread.Times(rows, lim)
		}
	} else {
		var all, others sqlread.Rows
		if all, err = times(""); err == nil {
			if others, err = times(sqlread.NotRenewal("kind")); err != nil {
				all.Close()
			} else {
				out, err = sqlread.TimesLess(all, others, lim)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s times of lock %d: %w", kind, lockID, storageError(err))
	}
	return out, nil
}
