package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"

	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
)

// Sealing the renewal log. A seal walk takes the locks first (their
// staged renewal rows, a database of the previous release's), and then the
// log's buckets: SealStep.AfterLock below logPhase is a lock id, and
// logPhase + b says the buckets before b are done. The rows go first so
// that a lock's runs from its rows are older than those from its log: a
// lock's staged rows older than its newest run are never sealed.
const logPhase = int64(1) << 62

// logRowSealable says a bucket ?1 has a log row wholly before ?2 at or
// below the log's sync floor.
var logRowSealable = `SELECT min(last_at) FROM renewal_log INDEXED BY renewal_log_bucket_last
	WHERE bucket = ?1 AND last_at < ?2 AND id <= ` + sqlread.LogFloor

// sealLogStep seals the log's buckets from the one step.AfterLock names,
// up to limit buckets that have rows to seal, each whole window of them
// while budget lasts. It returns the renewals sealed, the next position
// and whether every bucket is done.
func sealLogStep(ctx context.Context, tx *sql.Tx, after, before int64, limit int) (sealed int, next int64, done bool, err error) {
	budget := sealBudget
	for b := after - logPhase; b < runcodec.LogBuckets; b++ {
		if limit == 0 || budget <= 0 {
			return sealed, logPhase + b, false, nil
		}
		n, more, err := sealBucket(ctx, tx, b, before, &budget)
		if err != nil {
			return 0, 0, false, fmt.Errorf("bucket %d: %w", b, err)
		}
		sealed += n
		if more {
			return sealed, logPhase + b, false, nil // the bucket's next windows in the next step
		}
		if n > 0 {
			limit--
		}
	}
	return sealed, logPhase + runcodec.LogBuckets, true, nil
}

// sealBucket seals bucket b's log rows of whole windows before before,
// window after window while budget (renewals) lasts, at least one. more
// says windows may be left.
func sealBucket(ctx context.Context, tx *sql.Tx, b, before int64, budget *int) (sealed int, more bool, err error) {
	for *budget > 0 {
		var oldest sql.NullInt64
		if err := tx.QueryRowContext(ctx, logRowSealable, b, before).Scan(&oldest); err != nil {
			return 0, false, fmt.Errorf("oldest row: %w", err)
		}
		if !oldest.Valid {
			return sealed, false, nil
		}
		from := window(oldest.Int64) * int64(runcodec.Window)
		to := min(before, from+int64(runcodec.Window))
		if sealed > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(renewals), 0) FROM renewal_log INDEXED BY renewal_log_bucket_last
				WHERE bucket = ?1 AND last_at >= ?2 AND last_at < ?3 AND id <= `+sqlread.LogFloor, b, from, to).Scan(&n); err != nil {
				return 0, false, err
			}
			if n > *budget {
				return sealed, true, nil // the window in the next step, whole
			}
		}
		n, err := sealLogWindow(ctx, tx, b, from, to)
		if err != nil {
			return 0, false, err
		}
		sealed += n
		*budget -= n
	}
	return sealed, true, nil
}

// sealLogWindow seals bucket b's rows of one window, [from, to), at or
// below the log's sync floor: it packs each lock's renewals into runs,
// inserts them and deletes the rows. It returns the renewals sealed.
func sealLogWindow(ctx context.Context, tx *sql.Tx, b, from, to int64) (int, error) {
	rows, err := tx.QueryContext(ctx, `SELECT id, data FROM renewal_log INDEXED BY renewal_log_bucket_last
		WHERE bucket = ?1 AND last_at >= ?2 AND last_at < ?3 AND id <= `+sqlread.LogFloor, b, from, to)
	if err != nil {
		return 0, err
	}
	type row struct {
		id   int64
		data []byte
	}
	read, err := sqlread.Collect(sqlRows{rows}, func(r *row) []any { return []any{&r.id, &r.data} })
	if err != nil {
		return 0, fmt.Errorf("read log rows: %w", err)
	}
	byLock := make(map[int64][]runcodec.Staged)
	ids := make([]int64, len(read))
	for i, r := range read {
		ids[i] = r.id
		if err := stageLogRow(r.id, r.data, byLock); err != nil {
			return 0, err
		}
	}
	sealed := 0
	for _, lock := range slices.Sorted(maps.Keys(byLock)) {
		staged := byLock[lock]
		slices.SortFunc(staged, func(a, b runcodec.Staged) int { return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.ID, b.ID)) })
		runs, packed, err := runcodec.Pack(lock, staged)
		if err != nil {
			return 0, err
		}
		if len(packed) != len(staged) {
			return 0, fmt.Errorf("lock %d: runs hold %d of its %d logged renewals", lock, len(packed), len(staged))
		}
		if err := insertRuns(ctx, tx, runs); err != nil {
			return 0, err
		}
		sealed += len(packed)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM renewal_log WHERE id IN (SELECT value FROM json_each(?))`, jsonList(ids)); err != nil {
		return 0, fmt.Errorf("delete %d sealed log rows: %w", len(ids), err)
	}
	return sealed, nil
}

// stageLogRow adds the renewals of log row id to byLock, as staged
// renewals with their logged ids.
func stageLogRow(id int64, data []byte, byLock map[int64][]runcodec.Staged) error {
	groups, err := runcodec.LogGroups(data, 0)
	if err != nil {
		return fmt.Errorf("log row %d: %w", id, err)
	}
	for _, g := range groups {
		staged, err := g.Staged(id)
		if err != nil {
			return fmt.Errorf("log row %d: %w", id, err)
		}
		byLock[g.LockID] = append(byLock[g.LockID], staged...)
	}
	return nil
}

// pruneLog deletes up to limit of the log rows, and the renewals of rows,
// observed before before, of rows at or below the log's sync floor,
// bucket by bucket, and keeps their summaries per tenure as
// summarizeRenewals keeps the rows'. A row whose renewals are partly due
// is written again in place with the others, which so get other ids (as
// sealing gives them). It returns the renewals deleted, and more if rows
// may be left to prune.
func pruneLog(ctx context.Context, tx *sql.Tx, before int64, limit int) (int, bool, error) {
	sums := make(map[[2]int64]*logSummary)
	var gone []int64
	deleted, rows := 0, 0
	for b := int64(0); b < runcodec.LogBuckets && rows < limit; b++ {
		// A row lies within one run window: one that starts before the
		// cutoff ends before the cutoff's window ends.
		q, err := tx.QueryContext(ctx, `SELECT id, last_at, data FROM renewal_log INDEXED BY renewal_log_bucket_last
			WHERE bucket = ?1 AND last_at < ?2 AND first_at < ?3 AND id <= `+sqlread.LogFloor+` LIMIT ?4`,
			b, before+int64(runcodec.Window), before, limit-rows)
		if err != nil {
			return 0, false, err
		}
		type row struct {
			id, last int64
			data     []byte
		}
		read, err := sqlread.Collect(sqlRows{q}, func(r *row) []any { return []any{&r.id, &r.last, &r.data} })
		if err != nil {
			return 0, false, err
		}
		for _, r := range read {
			rows++
			kept, n, err := summarizeLogRow(r.id, r.data, before, sums)
			if err != nil {
				return 0, false, err
			}
			deleted += n
			if len(kept) == 0 {
				gone = append(gone, r.id)
				continue
			}
			if err := rewriteLogRow(ctx, tx, r.id, kept); err != nil {
				return 0, false, err
			}
		}
	}
	for k, s := range sums {
		if _, err := tx.ExecContext(ctx, `INSERT INTO renewal_summaries (lock_id, seq, renewals, first_at, last_at, min_margin_permille)
			VALUES (?, ?, ?, ?, ?, ?)`+summaryUpsert, k[0], k[1], s.renewals, s.first, s.last, s.minMargin); err != nil {
			return 0, false, fmt.Errorf("summarize: %w", err)
		}
	}
	if len(gone) > 0 {
		if _, err := tx.ExecContext(ctx, `DELETE FROM renewal_log WHERE id IN (SELECT value FROM json_each(?))`, jsonList(gone)); err != nil {
			return 0, false, fmt.Errorf("delete: %w", err)
		}
	}
	return deleted, rows >= limit, nil
}

// rewriteLogRow writes log row id again with only the renewals kept.
func rewriteLogRow(ctx context.Context, tx *sql.Tx, id int64, kept []runcodec.Logged) error {
	row, err := runcodec.EncodeLog(kept)
	if err != nil {
		return fmt.Errorf("log row %d: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE renewal_log SET first_at = ?, last_at = ?, renewals = ?, data = ? WHERE id = ?`,
		row.FirstAt, row.LastAt, row.Renewals, row.Data, id); err != nil {
		return fmt.Errorf("log row %d: %w", id, err)
	}
	return nil
}

// logSummary is what renewal_summaries keeps of a tenure's renewals.
type logSummary struct {
	renewals    int64
	first, last int64
	minMargin   *int64
}

func (s *logSummary) add(r runcodec.Renewal) {
	if s.renewals == 0 {
		s.first, s.last = r.At, r.At
	}
	s.renewals++
	s.first, s.last = min(s.first, r.At), max(s.last, r.At)
	if r.Margin != runcodec.NoMargin && (s.minMargin == nil || r.Margin < *s.minMargin) {
		m := r.Margin
		s.minMargin = &m
	}
}

// summarizeLogRow adds the renewals of log row id observed before before
// to sums, by lock and tenure. It returns the others, and how many it
// added.
func summarizeLogRow(id int64, data []byte, before int64, sums map[[2]int64]*logSummary) ([]runcodec.Logged, int, error) {
	groups, err := runcodec.LogGroups(data, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("log row %d: %w", id, err)
	}
	var kept []runcodec.Logged
	n := 0
	for _, g := range groups {
		rs, err := g.Decode()
		if err != nil {
			return nil, 0, fmt.Errorf("log row %d: %w", id, err)
		}
		for _, r := range rs {
			if r.At >= before {
				kept = append(kept, runcodec.Logged{LockID: g.LockID, Seq: g.Seq, Detail: g.Detail, Renewal: r})
				continue
			}
			k := [2]int64{g.LockID, g.Seq}
			if sums[k] == nil {
				sums[k] = &logSummary{}
			}
			sums[k].add(r)
			n++
		}
	}
	return kept, n, nil
}
