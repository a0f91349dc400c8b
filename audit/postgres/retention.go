package postgres

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
)

// PruneEvents deletes, in one transaction, the events of step.Rule older than
// step.Before among the next step.Limit events by id, up to the first one of
// the rule that is not old enough, as audit/sqlite does: events are walked
// by id, the order they were stored, renewals not yet folded into their lock
// rows (the journal's unsynced tail) are never pruned, and pruned renewals
// leave their count, first and last time and least margin per tenure in
// renewal_summaries.
func (s *Store) PruneEvents(ctx context.Context, step audit.PruneStep) (audit.PruneResult, error) {
	res := audit.PruneResult{Next: step.After}
	if step.Limit <= 0 {
		return res, fmt.Errorf("prune events: limit %d must be positive", step.Limit)
	}
	before := audit.Nanos(step.Before)
	s.mu.Lock()
	defer s.mu.Unlock()
	err := pgx.BeginFunc(ctx, s.writer, func(tx pgx.Tx) error {
		governed, args := ruleCondition(step.Rule, 4)
		var last, keep *int64
		var synced int64
		q := `SELECT max(id), min(CASE WHEN ` + governed + ` AND at >= $1 THEN id END)
			FROM (SELECT id, kind, at FROM events WHERE id > $2 ORDER BY id LIMIT $3) w`
		if err := tx.QueryRow(ctx, q, append([]any{before, step.After, step.Limit}, args...)...).Scan(&last, &keep); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT synced_event FROM journal`).Scan(&synced); err != nil {
			return err
		}
		if last == nil {
			res.Done = true // nothing stored after step.After
			return nil
		}
		upper := *last
		if keep != nil {
			upper, res.Done = *keep-1, true
		}
		if upper > synced {
			upper, res.Done = synced, true
		}
		if upper <= step.After {
			return nil
		}
		governed, args = ruleCondition(step.Rule, 4)
		where := ` WHERE id > $1 AND id <= $2 AND at < $3 AND ` + governed
		wargs := append([]any{step.After, upper, before}, args...)
		if step.Rule.Governs(audit.EventRenew) {
			if _, err := tx.Exec(ctx, summarizeRenewals+where+` AND kind = 'renew' GROUP BY 1, 2`+summaryUpsert, wargs...); err != nil {
				return fmt.Errorf("summarize: %w", err)
			}
		}
		tag, err := tx.Exec(ctx, `DELETE FROM events`+where, wargs...)
		if err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		res.Next, res.Deleted = upper, int(tag.RowsAffected())
		return nil
	})
	if err != nil {
		return audit.PruneResult{Next: step.After}, fmt.Errorf("prune events: %w", storageError(err))
	}
	return res, nil
}

// summarizeRenewals folds a range of renewals into their tenures' summaries.
// A renewal stored without its tenure's seq belongs to the lock's last
// tenure granted by its time; its margin is in its detail.
const summarizeRenewals = `INSERT INTO renewal_summaries (lock_id, seq, renewals, first_at, last_at, min_margin_permille)
	SELECT lock_id,
		coalesce(seq, (SELECT t.seq FROM tenures t WHERE t.lock_id = events.lock_id AND t.granted_at <= events.at
			ORDER BY t.granted_at DESC LIMIT 1), 0),
		count(*), min(at), max(at),
		min(coalesce(margin_permille, CASE WHEN json_typeof(detail::json->'margin_ratio') = 'number'
			THEN round((detail::json->>'margin_ratio')::float8 * 1000)::bigint END))
	FROM events`

// summaryUpsert adds to a tenure's summary; least ignores NULL, as the
// least margin must.
const summaryUpsert = ` ON CONFLICT (lock_id, seq) DO UPDATE SET
	renewals = renewal_summaries.renewals + excluded.renewals,
	first_at = least(renewal_summaries.first_at, excluded.first_at),
	last_at = greatest(renewal_summaries.last_at, excluded.last_at),
	min_margin_permille = least(renewal_summaries.min_margin_permille, excluded.min_margin_permille)`

// ruleCondition is the SQL condition on events.kind for rule, and its
// one argument, numbered n.
func ruleCondition(rule audit.EventRule, n int) (string, []any) {
	if len(rule.Kinds) == 0 {
		if rule.Others {
			return "true", nil
		}
		return "false", nil
	}
	kinds := make([]string, len(rule.Kinds))
	for i, k := range rule.Kinds {
		kinds[i] = string(k)
	}
	cond := "kind = ANY($" + strconv.Itoa(n) + "::text[])"
	if rule.Others {
		cond = "NOT (" + cond + ")"
	}
	return cond, []any{kinds}
}

// PruneFindings deletes up to limit of the oldest findings that ended (or
// happened, for an instant) before before.
func (s *Store) PruneFindings(ctx context.Context, before time.Time, limit int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tag, err := s.writer.Exec(ctx, `DELETE FROM findings WHERE id IN (
		SELECT id FROM findings WHERE at < $1 AND coalesce(until, at) < $1 ORDER BY at LIMIT $2)`,
		audit.Nanos(before), limit)
	if err != nil {
		return 0, fmt.Errorf("prune findings: %w", storageError(err))
	}
	return int(tag.RowsAffected()), nil
}
