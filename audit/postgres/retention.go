package postgres

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
)

// PruneEvents deletes, in one transaction, the events of step.Rule older than
// step.Before among the ids of the next step.Limit after step.After, up to
// the first one of the rule that is not old enough, as audit/sqlite does:
// events are walked by id, the order they were stored, renewals not yet
// folded into their lock rows (the journal's unsynced tail) are never
// pruned, and pruned renewals leave their count, first and last time and
// least margin per tenure in renewal_summaries.
//
// The walk goes by ranges of ids, not by a count of rows, because renewals
// have no B-tree on id (migration 0003): a range is one partition's BRIN
// lookup, where the next rows by count would sort the partition's rest.
// Once the walk of a rule that governs renewals has passed a partition of
// renewals, every renewal in it was old enough and is gone, and the empty
// partition is dropped, which returns its space at once.
//
// Renewals sealed into runs (migration 0015) go a run at a time, once the
// run's last renewal is older than step.Before, in the steps that end the
// walk: up to step.Limit runs each, the walk staying done only when none
// is left. So a run outlives the cutoff by up to its window, an hour.
// Then the renewal log's rows (migration 0016) go the same way, a row's
// renewals that are due at a time (pruneLog).
func (s *Store) PruneEvents(ctx context.Context, step audit.PruneStep) (audit.PruneResult, error) {
	res := audit.PruneResult{Next: step.After}
	if step.Limit <= 0 {
		return res, fmt.Errorf("prune events: limit %d must be positive", step.Limit)
	}
	renewals := step.Rule.Governs(audit.EventRenew)
	s.mu.Lock()
	err := pgx.BeginFunc(ctx, s.writer, func(tx pgx.Tx) error {
		if err := s.pruneStep(ctx, tx, step, renewals, &res); err != nil || !renewals || !res.Done {
			return err
		}
		if err := pruneRuns(ctx, tx, audit.Nanos(step.Before), step.Limit, &res); err != nil || !res.Done {
			return err
		}
		return pruneLog(ctx, tx, audit.Nanos(step.Before), step.Limit, &res)
	})
	var walked []int64 // partitions of renewals the walk has passed
	if err == nil && renewals {
		for _, from := range s.parts.froms {
			if from+s.parts.span-1 <= res.Next {
				walked = append(walked, from)
			}
		}
	}
	s.mu.Unlock()
	if err != nil {
		return audit.PruneResult{Next: step.After}, fmt.Errorf("prune events: %w", storageError(err))
	}
	if err := s.dropPartitions(ctx, walked); err != nil {
		return res, fmt.Errorf("prune events: %w", storageError(err))
	}
	return res, nil
}

// pruneStep is PruneEvents' transaction.
func (s *Store) pruneStep(ctx context.Context, tx pgx.Tx, step audit.PruneStep, renewals bool, res *audit.PruneResult) error {
	// One replica's step at a time; what the next one reads is after it.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+pruneLock+`)`); err != nil {
		return err
	}
	if step.After >= s.highest {
		res.Done = true // nothing stored after step.After
		return nil
	}
	before := audit.Nanos(step.Before)
	end := min(step.After+int64(step.Limit), s.highest)
	governed, args := ruleCondition(step.Rule, 4)
	var keep *int64
	var synced int64
	q := `SELECT min(id) FROM timeline WHERE id > $2 AND id <= $3 AND at >= $1 AND ` + governed
	if err := tx.QueryRow(ctx, q, append([]any{before, step.After, end}, args...)...).Scan(&keep); err != nil {
		return err
	}
	if err := tx.QueryRow(ctx, `SELECT `+sqlread.SyncFloor).Scan(&synced); err != nil {
		return err
	}
	upper := end
	if keep != nil {
		upper, res.Done = *keep-1, true
	}
	if upper > synced {
		upper, res.Done = synced, true
	}
	if upper >= s.highest {
		res.Done = true
	}
	if upper <= step.After {
		return nil
	}
	where := ` WHERE id > $1 AND id <= $2 AND at < $3`
	wargs := []any{step.After, upper, before}
	if renewals {
		if _, err := tx.Exec(ctx, summarizeRenewals+where+` AND kind = 'renew' GROUP BY 1, 2`+summaryUpsert, wargs...); err != nil {
			return fmt.Errorf("summarize: %w", err)
		}
		tag, err := tx.Exec(ctx, `DELETE FROM renewals`+where, wargs...)
		if err != nil {
			return fmt.Errorf("delete renewals: %w", err)
		}
		res.Deleted += int(tag.RowsAffected())
	}
	tag, err := tx.Exec(ctx, `DELETE FROM events`+where+` AND `+governed, append(wargs, args...)...)
	if err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	res.Next, res.Deleted = upper, res.Deleted+int(tag.RowsAffected())
	return nil
}

// dropPartitions drops the partitions of renewals whose ids begin at
// froms, which retention has emptied. Each is detached CONCURRENTLY, which
// waits for the reads that may still see it without making new ones wait,
// and then dropped, on a connection of the read pool, so that the writer
// never waits either. A detach that a crash interrupted is finished, and a
// table it left detached is dropped, on the next call.
func (s *Store) dropPartitions(ctx context.Context, froms []int64) error {
	conn, err := s.reader.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	rows, err := conn.Query(ctx, `SELECT c.relname::text, i.inhrelid IS NOT NULL
		FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
		WHERE c.relkind = 'r' AND c.relname ~ '^renewals_[0-9]+$'
			AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'renewals'::regclass)
			AND (i.inhrelid IS NULL OR i.inhdetachpending)`)
	if err != nil {
		return err
	}
	type leftover struct {
		name    string
		pending bool // detached, not yet finalized
	}
	leftovers, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (leftover, error) {
		var l leftover
		return l, row.Scan(&l.name, &l.pending)
	})
	if err != nil {
		return err
	}
	for _, l := range leftovers {
		if l.pending {
			if _, err := conn.Exec(ctx, `ALTER TABLE renewals DETACH PARTITION `+l.name+` FINALIZE`); err != nil {
				return fmt.Errorf("finish detaching %s: %w", l.name, err)
			}
		}
		if _, err := conn.Exec(ctx, `DROP TABLE `+l.name); err != nil {
			return fmt.Errorf("drop %s: %w", l.name, err)
		}
	}
	for _, from := range froms {
		name := partitionName(from)
		if _, err := conn.Exec(ctx, `ALTER TABLE renewals DETACH PARTITION `+name+` CONCURRENTLY`); err != nil {
			return fmt.Errorf("detach %s: %w", name, err)
		}
		s.mu.Lock()
		s.parts.froms = slices.DeleteFunc(slices.Clone(s.parts.froms), func(f int64) bool { return f == from })
		s.mu.Unlock()
		if _, err := conn.Exec(ctx, `DROP TABLE `+name); err != nil {
			return fmt.Errorf("drop %s: %w", name, err)
		}
	}
	return nil
}

// pruneRuns deletes up to limit runs whose last renewal is older than
// before, adding each to its tenure's summary as pruneStep adds renewal
// rows, and leaves res.Done only if none is left. Each lock's oldest runs
// are one range of the index (lock_id, last_at).
func pruneRuns(ctx context.Context, tx pgx.Tx, before int64, limit int, res *audit.PruneResult) error {
	var runs, renewals int64
	err := tx.QueryRow(ctx, `WITH gone AS (
			DELETE FROM renewal_runs WHERE id IN (
				SELECT o.id FROM locks l CROSS JOIN LATERAL (SELECT id FROM renewal_runs r
					WHERE r.lock_id = l.id AND r.last_at < $1 ORDER BY r.last_at LIMIT $2) o
				LIMIT $2)
			RETURNING lock_id, seq, renewals, first_at, last_at, min_margin_permille),
		summed AS (
			INSERT INTO renewal_summaries (lock_id, seq, renewals, first_at, last_at, min_margin_permille)
			SELECT lock_id, seq, sum(renewals), min(first_at), max(last_at), min(min_margin_permille)
			FROM gone GROUP BY 1, 2`+summaryUpsert+`)
		SELECT count(*), coalesce(sum(renewals), 0) FROM gone`, before, limit).Scan(&runs, &renewals)
	if err != nil {
		return fmt.Errorf("prune renewal runs: %w", err)
	}
	res.Deleted += int(renewals)
	res.Done = runs < int64(limit)
	return nil
}

// summarizeRenewals folds a range of renewals into their tenures' summaries.
// A renewal stored without its tenure's seq belongs to the lock's last
// tenure granted by its time; its margin is in its detail.
const summarizeRenewals = `INSERT INTO renewal_summaries (lock_id, seq, renewals, first_at, last_at, min_margin_permille)
	SELECT lock_id,
		coalesce(seq, (SELECT t.seq FROM tenures t WHERE t.lock_id = e.lock_id AND t.granted_at <= e.at
			ORDER BY t.granted_at DESC LIMIT 1), 0),
		count(*), min(at), max(at),
		min(coalesce(margin_permille, CASE WHEN json_typeof(detail::json->'margin_ratio') = 'number'
			THEN round((detail::json->>'margin_ratio')::float8 * 1000)::bigint END))
	FROM timeline e`

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
