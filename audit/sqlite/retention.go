package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/renewallog"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
)

var _ audit.Pruner = (*Store)(nil)

// PruneEvents deletes, in one transaction, the events of step.Rule older than
// step.Before among the next step.Limit events by id, up to the first one of
// the rule that is not old enough. Events are walked by id, the order they
// were stored, because that needs no index of its own: ids follow time
// closely enough, and an event stored late with an old time only waits for
// the walk. Renewals not yet folded into their lock rows (the journal's
// unsynced tail) are never pruned. Pruned renewals leave their count, first
// and last time and least margin per tenure in renewal_summaries. Renewals
// sealed into runs go a run at a time, once its last renewal is older than
// step.Before (pruneRuns), and logged renewals a log row at a time
// (renewallog.Prune), in the steps before the walk of the rows.
func (s *Store) PruneEvents(ctx context.Context, step audit.PruneStep) (audit.PruneResult, error) {
	res := audit.PruneResult{Next: step.After}
	if step.Limit <= 0 {
		return res, fmt.Errorf("prune events: limit %d must be positive", step.Limit)
	}
	governed, args := ruleCondition(step.Rule)
	before := nanos(step.Before)

	var walk runsWalk
	newest := int64(math.MaxInt64)
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		walk = s.runs
		if step.Rule.Governs(audit.EventRenew) {
			n, more, err := pruneRuns(ctx, tx, &walk, before, step.Limit)
			if err != nil {
				return fmt.Errorf("prune renewal runs: %w", err)
			}
			res.Deleted = n
			if more {
				return nil // the events in the next step
			}
			n, more, err = renewallog.Prune(ctx, newLogTx(tx), logSQL, before, step.Limit)
			if err != nil {
				return fmt.Errorf("prune the renewal log: %w", err)
			}
			res.Deleted += n
			if more {
				return nil
			}
		}
		// The window's last id, and the first event in it the rule keeps.
		var last, keep, synced sql.NullInt64
		q := `SELECT max(id), min(CASE WHEN ` + governed + ` AND at >= ? THEN id END)
			FROM (SELECT id, kind, at FROM events WHERE id > ? ORDER BY id LIMIT ?)`
		if err := tx.QueryRowContext(ctx, q, append(args, before, step.After, step.Limit)...).Scan(&last, &keep); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT `+sqlread.SyncFloor).Scan(&synced); err != nil && err != sql.ErrNoRows {
			return err
		}
		if !last.Valid {
			res.Done = true // nothing stored after step.After
			return nil
		}
		upper := last.Int64
		if keep.Valid {
			upper, res.Done = keep.Int64-1, true
		}
		if synced.Valid && upper > synced.Int64 {
			upper, res.Done = synced.Int64, true
		}
		if upper <= step.After {
			return nil
		}
		where := ` WHERE id > ? AND id <= ? AND at < ? AND ` + governed
		wargs := append([]any{step.After, upper, before}, args...)
		if step.Rule.Governs(audit.EventRenew) {
			if _, err := tx.ExecContext(ctx, summarizeRenewals+where+` AND kind = 'renew' GROUP BY 1, 2`+summaryUpsert, wargs...); err != nil {
				return fmt.Errorf("summarize: %w", err)
			}
		}
		r, err := tx.ExecContext(ctx, `DELETE FROM events`+where, wargs...)
		if err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		n, _ := r.RowsAffected()
		res.Next, res.Deleted = upper, res.Deleted+int(n)
		newest, err = lowerMarks(ctx, tx)
		return err
	}, func() {
		s.runs = walk
		s.syncMark = min(s.syncMark, newest)
	})
	if err != nil {
		return audit.PruneResult{Next: step.After}, fmt.Errorf("prune events: %w", err)
	}
	return res, nil
}

// lowerMarks brings the sync marks down to the newest event row left, and
// returns it. SQLite numbers a new row after the largest id left: had
// pruning deleted the newest rows, a new event would be numbered at or
// below a mark and taken for synced. The rows between the two are
// deleted, so the lower mark claims the same renewals. (Renewals are
// logged, not rows, so the newest row is seldom a renewal: keeping it, as
// before, would keep a grant or a write past its age.)
func lowerMarks(ctx context.Context, tx *sql.Tx) (int64, error) {
	var newest int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) FROM events`).Scan(&newest); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE journal SET synced_event = ?1 WHERE synced_event > ?1`, newest); err != nil {
		return 0, fmt.Errorf("lower the sync mark: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE source_fences SET synced_event = ?1 WHERE synced_event > ?1`, newest); err != nil {
		return 0, fmt.Errorf("lower the sources' sync marks: %w", err)
	}
	return newest, nil
}

// runsWalk is where retention's walk of the renewal runs stands. A lock's
// runs are found by their last renewal (renewal_runs_lock_last), so the
// walk looks at every lock once per cutoff, in steps, and again only for a
// later one: every step of a pass has the pass's cutoff.
type runsWalk struct {
	from   int64 // the lock the next step starts at
	done   bool  // a walk ended, with cutoff
	cutoff int64
}

// pruneRuns deletes runs whose last renewal is older than before, up to
// limit of them, from where walk stands, and keeps their summaries as
// summarizeRenewals keeps the rows'. A run is deleted whole: one that
// straddles the cutoff waits until its last renewal is due. It returns the
// renewals deleted, and more if runs may be left to delete.
func pruneRuns(ctx context.Context, tx *sql.Tx, walk *runsWalk, before int64, limit int) (int, bool, error) {
	if walk.done && before <= walk.cutoff {
		return 0, false, nil
	}
	var ids []int64
	var last int64
	rows, err := tx.QueryContext(ctx, `SELECT r.id, l.id FROM locks l
		JOIN renewal_runs r INDEXED BY renewal_runs_lock_last ON r.lock_id = l.id AND r.last_at < ?
		WHERE l.id >= ? ORDER BY l.id LIMIT ?`, before, walk.from, limit)
	if err != nil {
		return 0, false, err
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id, &last); err != nil {
			rows.Close()
			return 0, false, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, false, err
	}
	more := len(ids) == limit
	if more {
		*walk = runsWalk{from: last, done: walk.done, cutoff: walk.cutoff}
	} else {
		*walk = runsWalk{done: true, cutoff: before}
	}
	if len(ids) == 0 {
		return 0, more, nil
	}
	list := jsonList(ids)
	if _, err := tx.ExecContext(ctx, summarizeRuns+summaryUpsert, list); err != nil {
		return 0, false, fmt.Errorf("summarize: %w", err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(renewals), 0) FROM renewal_runs WHERE id IN (SELECT value FROM json_each(?))`, list).Scan(&n); err != nil {
		return 0, false, err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM renewal_runs WHERE id IN (SELECT value FROM json_each(?))`, list); err != nil {
		return 0, false, fmt.Errorf("delete: %w", err)
	}
	return n, more, nil
}

// summarizeRuns folds the runs of a JSON list of ids into their tenures'
// summaries.
const summarizeRuns = `INSERT INTO renewal_summaries (lock_id, seq, renewals, first_at, last_at, min_margin_permille)
	SELECT lock_id, seq, sum(renewals), min(first_at), max(last_at), min(min_margin_permille)
	FROM renewal_runs WHERE id IN (SELECT value FROM json_each(?)) GROUP BY 1, 2`

// summarizeRenewals folds a range of renewals into their tenures' summaries.
// A renewal stored before renewals named their tenure (no seq) belongs to the
// lock's last tenure granted by its time; its margin is in its detail.
const summarizeRenewals = `INSERT INTO renewal_summaries (lock_id, seq, renewals, first_at, last_at, min_margin_permille)
	SELECT lock_id,
		coalesce(seq, (SELECT t.seq FROM tenures t WHERE t.lock_id = events.lock_id AND t.granted_at <= events.at
			ORDER BY t.granted_at DESC LIMIT 1), 0),
		count(*), min(at), max(at),
		min(coalesce(margin_permille, CAST(round(json_extract(detail, '$.margin_ratio') * 1000) AS INTEGER)))
	FROM events`

const summaryUpsert = ` ON CONFLICT (lock_id, seq) DO UPDATE SET
	renewals = renewals + excluded.renewals,
	first_at = min(first_at, excluded.first_at),
	last_at = max(last_at, excluded.last_at),
	min_margin_permille = CASE WHEN min_margin_permille IS NULL THEN excluded.min_margin_permille
		WHEN excluded.min_margin_permille IS NULL THEN min_margin_permille
		ELSE min(min_margin_permille, excluded.min_margin_permille) END`

// ruleCondition is the SQL condition on events.kind for rule, and its
// arguments.
func ruleCondition(rule audit.EventRule) (string, []any) {
	if len(rule.Kinds) == 0 {
		if rule.Others {
			return "1", nil
		}
		return "0", nil
	}
	args := make([]any, len(rule.Kinds))
	for i, k := range rule.Kinds {
		args[i] = string(k)
	}
	op := "IN"
	if rule.Others {
		op = "NOT IN"
	}
	return "kind " + op + " (?" + strings.Repeat(", ?", len(args)-1) + ")", args
}

// PruneFindings deletes up to limit of the oldest findings that ended (or
// happened, for an instant) before before.
func (s *Store) PruneFindings(ctx context.Context, before time.Time, limit int) (int, error) {
	var n int64
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx, `DELETE FROM findings WHERE id IN (
			SELECT id FROM findings INDEXED BY findings_at WHERE at < ?1 AND coalesce(until, at) < ?1 ORDER BY at LIMIT ?2)`,
			nanos(before), limit)
		if err != nil {
			return err
		}
		n, _ = r.RowsAffected()
		return nil
	}, nil)
	if err != nil {
		return 0, fmt.Errorf("prune findings: %w", err)
	}
	return int(n), nil
}
