package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
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
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("event times: %w", err)
	}
	defer tx.Rollback()
	if _, err := s.LockKey(ctx, sqlDB{tx}, lockID); err != nil {
		return nil, err
	}
	lim := rowcodec.Limit(f.Limit, audit.DefaultListLimit, audit.MaxListLimit)
	times := func(cond string, args ...any) (*sql.Rows, error) {
		w := dialect.Where()
		w.Add("lock_id = ?", lockID)
		if cond != "" {
			w.Add(cond, args...)
		}
		w.Window("at", f)
		index := sqlread.TimelineIndex
		if cond != "" {
			index = sqlread.RareKindIndex // every cond here excludes renewals
		}
		return tx.QueryContext(ctx, `SELECT at FROM events INDEXED BY `+index+w.String()+` ORDER BY at DESC`, w.Args...)
	}
	var out []time.Time
	if kind != audit.EventRenew {
		rows, err := times("kind = ? AND "+sqlread.NotRenewal("kind"), string(kind))
		if err != nil {
			return nil, fmt.Errorf("event times of lock %d: %w", lockID, err)
		}
		defer rows.Close()
		for len(out) < lim && rows.Next() {
			var t int64
			if err := rows.Scan(&t); err != nil {
				return nil, fmt.Errorf("event times of lock %d: %w", lockID, err)
			}
			out = append(out, time.Unix(0, t).UTC())
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("event times of lock %d: %w", lockID, err)
		}
		slices.Reverse(out)
		return out, nil
	}

	// Both newest first: each time of another kind cancels one equal time
	// of the whole timeline.
	all, err := times("")
	if err != nil {
		return nil, fmt.Errorf("renewal times of lock %d: %w", lockID, err)
	}
	defer all.Close()
	others, err := times(sqlread.NotRenewal("kind"))
	if err != nil {
		return nil, fmt.Errorf("renewal times of lock %d: %w", lockID, err)
	}
	defer others.Close()
	next := func(rows *sql.Rows) (int64, bool, error) {
		if !rows.Next() {
			return 0, false, rows.Err()
		}
		var t int64
		err := rows.Scan(&t)
		return t, err == nil, err
	}
	other, more, err := next(others)
	for err == nil && len(out) < lim {
		var t int64
		var ok bool
		if t, ok, err = next(all); !ok || err != nil {
			break
		}
		for more && other > t {
			other, more, err = next(others)
		}
		if more && other == t {
			other, more, err = next(others)
			continue
		}
		out = append(out, time.Unix(0, t).UTC())
	}
	if err != nil {
		return nil, fmt.Errorf("renewal times of lock %d: %w", lockID, err)
	}
	slices.Reverse(out)
	return out, nil
}
