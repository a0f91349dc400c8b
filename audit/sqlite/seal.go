package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/renewallog"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
)

// SealRenewals folds the staged renewals of the next step.Limit locks after
// step.AfterLock, observed before step.Before, into renewal runs, in one
// transaction: it reads each lock's in (at, id) order, packs them
// (runcodec.Pack), inserts the runs and deletes the rows they hold.
//
// Only renewals at or below the sync marks are sealed (the oldest of any
// source's, and their own source's), so the renewals Unsynced and
// RestoreSource replay are always rows. The newest row of events is never
// sealed either: SQLite gives a new row the id after the largest one left,
// and a new event with an id at or below a sync mark would be taken as
// synced. A lock's rows older than its newest run are left alone: they are
// the renewals the codec cannot hold, which stay rows for good, and
// walking them again on every pass would cost a walk of the lock's
// history. A step reads at most sealBudget renewals, in whole windows of
// a lock; a lock with more is continued by the next step (NextLock stays
// before it). Once every lock is walked, the steps seal the renewal log,
// bucket by bucket (renewallog.SealStep; NextLock renewallog.Phase and
// above).
func (s *Store) SealRenewals(ctx context.Context, step audit.SealStep) (audit.SealResult, error) {
	res := audit.SealResult{NextLock: step.AfterLock}
	if step.Limit <= 0 {
		return res, audit.Errorf(audit.EINVALID, "seal renewals: SealStep.Limit %d must be positive", step.Limit)
	}
	if step.Before.IsZero() || step.Before.UnixNano()%int64(runcodec.Window) != 0 {
		return res, audit.Errorf(audit.EINVALID, "seal renewals: SealStep.Before %s is not the start of a run window (%s)",
			step.Before.UTC().Format(time.RFC3339Nano), runcodec.Window)
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if step.AfterLock >= renewallog.Phase {
			var err error
			res.Sealed, res.NextLock, res.Done, err = renewallog.SealStep(ctx, newLogTx(tx), logSQL, step.AfterLock,
				nanos(step.Before), step.Limit, sealBudget)
			return err
		}
		var locks []int64
		rows, err := tx.QueryContext(ctx, `SELECT id FROM locks WHERE id > ? ORDER BY id LIMIT ?`, step.AfterLock, step.Limit)
		if err == nil {
			locks, err = sqlread.Collect(sqlRows{rows}, func(id *int64) []any { return []any{id} })
		}
		if err != nil {
			return fmt.Errorf("locks: %w", err)
		}
		budget := sealBudget
		for _, id := range locks {
			if budget < runcodec.MaxRenewals {
				return nil // so that a lock's window is not cut between steps
			}
			sealed, read, err := sealLock(ctx, tx, id, nanos(step.Before), budget)
			if err != nil {
				return fmt.Errorf("lock %d: %w", id, err)
			}
			res.Sealed += sealed
			if read >= budget {
				return nil // the lock's next windows in the next step
			}
			res.NextLock, budget = id, budget-read
		}
		if len(locks) < step.Limit {
			res.NextLock = renewallog.Phase // the log's buckets in the next steps
		}
		return nil
	}, nil)
	if err != nil {
		return audit.SealResult{NextLock: step.AfterLock}, fmt.Errorf("seal renewals: %w", storageError(err))
	}
	return res, nil
}

// sealBudget bounds the staged renewals one step reads, so that a step is
// a short transaction (about 7 µs a renewal) whatever a lock's backlog: the
// first passes after an upgrade seal days of renewals of each lock.
const sealBudget = 4 * runcodec.MaxRenewals

// sealFloor is the highest event id sealing may take of lock ?1's: at or
// below the oldest sync mark of any source (sqlread.SyncFloor) and the
// mark of the lock's own source (which is the store's for a source without
// a fence row), and below the newest event. NULL without events.
var sealFloor = `SELECT min((SELECT max(id) FROM events) - 1, ` + sqlread.SyncFloor + `, ` + sqlread.SyncMarkOf("l.source") + `)
	FROM locks l WHERE l.id = ?1`

// stagedRenewals are a lock's staged renewals (compact renewal rows, as
// the journal writes them) observed from ?2 up to ?3, at or below the seal
// floor ?4, in (at, id) order, the first ?5. The timeline index carries the kind, so the
// other kinds among them cost no row read.
const stagedRenewals = `SELECT id, seq, at, renewed_at, margin_permille, position, ttl_ms, detail
	FROM events INDEXED BY events_lock_at
	WHERE lock_id = ?1 AND at >= ?2 AND at < ?3 AND kind = 'renew' AND id <= ?4
		AND seq IS NOT NULL AND inferred = 0 AND holder = '' AND token IS NULL AND resource = '' AND request_id IS NULL
	ORDER BY at, id LIMIT ?5`

// sealLock seals lock id's staged renewals observed before before, up to
// budget of them read, whole windows but when one window holds more. It
// returns how many it sealed and read; read is below budget once the lock
// has no more to seal before before (or, when none of the budget's could be
// sealed, none this pass).
func sealLock(ctx context.Context, tx *sql.Tx, id, before int64, budget int) (sealed, read int, err error) {
	var floor, from sql.NullInt64
	if err := tx.QueryRowContext(ctx, sealFloor, id).Scan(&floor); err != nil {
		return 0, 0, fmt.Errorf("sync marks: %w", err)
	}
	if !floor.Valid {
		return 0, 0, nil // no event stored
	}
	if err := tx.QueryRowContext(ctx, `SELECT max(last_at) FROM renewal_runs INDEXED BY renewal_runs_lock_last WHERE lock_id = ?`, id).Scan(&from); err != nil {
		return 0, 0, fmt.Errorf("newest run: %w", err)
	}
	if !from.Valid {
		from.Int64 = audit.NoNanos
	}
	staged, err := readStaged(ctx, tx, id, from.Int64, before, floor.Int64, budget)
	if err != nil {
		return 0, 0, err
	}
	read = len(staged)
	if read >= budget {
		staged = wholeWindows(staged)
	}
	if len(staged) == 0 {
		return 0, read, nil
	}
	runs, ids, err := runcodec.Pack(id, staged)
	if err != nil {
		return 0, 0, fmt.Errorf("pack %d renewals: %w", len(staged), err)
	}
	if len(ids) == 0 {
		return 0, 0, nil // none of them can be sealed: the lock is done for this pass
	}
	return len(ids), read, putRuns(ctx, tx, runs, ids)
}

// readStaged reads up to limit of lock id's staged renewals (stagedRenewals).
func readStaged(ctx context.Context, tx *sql.Tx, id, from, before, floor int64, limit int) ([]runcodec.Staged, error) {
	rows, err := tx.QueryContext(ctx, stagedRenewals, id, from, before, floor, limit)
	if err != nil {
		return nil, err
	}
	return sqlread.Collect(sqlRows{rows}, func(st *runcodec.Staged) []any {
		return []any{&st.ID, &st.Seq, &st.At, nullAs{&st.RenewedAt, audit.NoNanos}, nullAs{&st.Margin, runcodec.NoMargin},
			&st.Position, rowcodec.MsDest{P: &st.TTL}, rowcodec.TextDest[string]{P: &st.Detail}}
	})
}

// nullAs scans an integer, and NULL as none.
type nullAs struct {
	p    *int64
	none int64
}

func (d nullAs) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*d.p = d.none
	case int64:
		*d.p = v
	default:
		return fmt.Errorf("unexpected %T", v)
	}
	return nil
}

// wholeWindows is staged (in time order) without the renewals of its last
// window, which may go on past them, unless that is all of them.
func wholeWindows(staged []runcodec.Staged) []runcodec.Staged {
	last := window(staged[len(staged)-1].At)
	for i := len(staged) - 1; i >= 0; i-- {
		if window(staged[i].At) != last {
			return staged[:i+1]
		}
	}
	return staged
}

// window is the index of the run window (runcodec.Window) that holds at.
func window(at int64) int64 {
	w := int64(runcodec.Window)
	if at < 0 {
		return (at+1)/w - 1
	}
	return at / w
}

// putRuns inserts runs and deletes the staged rows they hold, sealed.
func putRuns(ctx context.Context, tx *sql.Tx, runs []runcodec.Run, sealed []int64) error {
	if err := insertRuns(ctx, tx, runs); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM events WHERE id IN (SELECT value FROM json_each(?)) AND kind = 'renew'`, jsonList(sealed))
	if err != nil {
		return fmt.Errorf("delete %d sealed renewals: %w", len(sealed), err)
	}
	if n, _ := res.RowsAffected(); n != int64(len(sealed)) {
		return fmt.Errorf("deleted %d of %d sealed renewals", n, len(sealed))
	}
	return nil
}

// insertRuns inserts runs.
func insertRuns(ctx context.Context, tx *sql.Tx, runs []runcodec.Run) error {
	for _, r := range runs {
		if _, err := tx.ExecContext(ctx, `INSERT INTO renewal_runs (lock_id, seq, first_at, last_at, renewals, ttl_ms,
			min_margin_permille, detail, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.LockID, r.Seq, r.FirstAt, r.LastAt, r.Renewals, rowcodec.Ms(r.TTL), r.MinMargin,
			rowcodec.NullString(r.Detail), r.Data); err != nil {
			return fmt.Errorf("insert a run of %d renewals: %w", r.Renewals, err)
		}
	}
	return nil
}
