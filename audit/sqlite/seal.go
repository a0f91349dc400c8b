package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/leasewatch/leasewatch/audit"
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
// RestoreSource replay are always rows. The newest row of events is never sealed either: SQLite
// gives a new row the id after the largest one left, and a new event with
// an id at or below a sync mark would be taken as synced. A lock's rows
// older than its newest run are left alone: they are the renewals the
// codec cannot hold, which stay rows for good, and walking them again on
// every pass would cost a walk of the lock's history.
func (s *Store) SealRenewals(ctx context.Context, step audit.SealStep) (audit.SealResult, error) {
	res := audit.SealResult{NextLock: step.AfterLock}
	if step.Limit <= 0 {
		return res, audit.Errorf(audit.EINVALID, "seal renewals: limit %d must be positive", step.Limit)
	}
	if step.Before.IsZero() || step.Before.UnixNano()%int64(runcodec.Window) != 0 {
		return res, audit.Errorf(audit.EINVALID, "seal renewals: before %s is not the start of a window of %s", step.Before, runcodec.Window)
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT id FROM locks WHERE id > ? ORDER BY id LIMIT ?`, step.AfterLock, step.Limit)
		if err != nil {
			return err
		}
		var locks []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			locks = append(locks, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, id := range locks {
			n, err := sealLock(ctx, tx, id, nanos(step.Before))
			if err != nil {
				return fmt.Errorf("lock %d: %w", id, err)
			}
			res.Sealed += n
		}
		if len(locks) > 0 {
			res.NextLock = locks[len(locks)-1]
		}
		res.Done = len(locks) < step.Limit
		return nil
	}, nil)
	if err != nil {
		return audit.SealResult{NextLock: step.AfterLock}, fmt.Errorf("seal renewals: %w", storageError(err))
	}
	return res, nil
}

// sealFloor is the highest event id sealing may take of lock ?1's: at or
// below the oldest sync mark of any source (sqlread.SyncFloor) and the
// mark of the lock's own source (which is the store's for a source without
// a fence row), and below the newest event. NULL without events.
var sealFloor = `SELECT min((SELECT max(id) FROM events) - 1, ` + sqlread.SyncFloor + `, ` + sqlread.SyncMarkOf("l.source") + `)
	FROM locks l WHERE l.id = ?1`

// stagedRenewals are a lock's staged renewals (compact renewal rows, as
// the journal writes them) observed from ?2 up to ?3, at or below the seal
// floor ?4, in (at, id) order. The timeline index carries the kind, so the
// other kinds among them cost no row read.
const stagedRenewals = `SELECT id, seq, at, renewed_at, margin_permille, position, ttl_ms, detail
	FROM events INDEXED BY events_lock_at
	WHERE lock_id = ?1 AND at >= ?2 AND at < ?3 AND kind = 'renew' AND id <= ?4
		AND seq IS NOT NULL AND inferred = 0 AND holder = '' AND token IS NULL AND resource = '' AND request_id IS NULL
	ORDER BY at, id`

// sealLock seals lock id's staged renewals observed before before, and
// returns how many it sealed.
func sealLock(ctx context.Context, tx *sql.Tx, id, before int64) (int, error) {
	var floor, from sql.NullInt64
	if err := tx.QueryRowContext(ctx, sealFloor, id).Scan(&floor); err != nil {
		return 0, fmt.Errorf("sync marks: %w", err)
	}
	if !floor.Valid {
		return 0, nil // no event stored
	}
	if err := tx.QueryRowContext(ctx, `SELECT max(last_at) FROM renewal_runs INDEXED BY renewal_runs_lock_last WHERE lock_id = ?`, id).Scan(&from); err != nil {
		return 0, fmt.Errorf("newest run: %w", err)
	}
	if !from.Valid {
		from.Int64 = audit.NoNanos
	}
	rows, err := tx.QueryContext(ctx, stagedRenewals, id, from.Int64, before, floor.Int64)
	if err != nil {
		return 0, err
	}
	var staged []runcodec.Staged
	for rows.Next() {
		var st runcodec.Staged
		var renewedAt, margin sql.NullInt64
		if err := rows.Scan(&st.ID, &st.Seq, &st.At, &renewedAt, &margin, &st.Position,
			rowcodec.MsDest{P: &st.TTL}, rowcodec.TextDest[string]{P: &st.Detail}); err != nil {
			rows.Close()
			return 0, err
		}
		st.RenewedAt, st.Margin = audit.NoNanos, runcodec.NoMargin
		if renewedAt.Valid {
			st.RenewedAt = renewedAt.Int64
		}
		if margin.Valid {
			st.Margin = margin.Int64
		}
		staged = append(staged, st)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(staged) == 0 {
		return 0, nil
	}
	runs, sealed, err := runcodec.Pack(id, staged)
	if err != nil {
		return 0, fmt.Errorf("pack %d renewals: %w", len(staged), err)
	}
	return len(sealed), putRuns(ctx, tx, runs, sealed)
}

// putRuns inserts runs and deletes the staged rows they hold, sealed.
func putRuns(ctx context.Context, tx *sql.Tx, runs []runcodec.Run, sealed []int64) error {
	for _, r := range runs {
		if _, err := tx.ExecContext(ctx, `INSERT INTO renewal_runs (lock_id, seq, first_at, last_at, renewals, ttl_ms,
			min_margin_permille, detail, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.LockID, r.Seq, r.FirstAt, r.LastAt, r.Renewals, rowcodec.Ms(r.TTL), r.MinMargin,
			rowcodec.NullString(r.Detail), r.Data); err != nil {
			return fmt.Errorf("insert a run of %d renewals: %w", r.Renewals, err)
		}
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
