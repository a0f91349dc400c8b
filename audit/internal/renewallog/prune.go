package renewallog

import (
	"context"
	"fmt"

	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
)

// Prune deletes up to limit of the log rows, and the renewals of rows,
// observed before before, of bucket rows and of commit rows at or below
// the log's sync floor, bucket by bucket, and keeps their summaries per tenure in
// renewal_summaries, as the stores keep those of renewal rows. A row whose
// renewals are partly due is written again in place with the others,
// which so get other ids (as sealing gives them). It returns the renewals
// deleted, and more if rows may be left to prune.
func Prune(ctx context.Context, tx Tx, q SQL, before int64, limit int) (int, bool, error) {
	sums := make(map[[2]int64]*summary)
	var gone []int64
	deleted, rows := 0, 0
	p := q.Dialect.P
	for b := int64(runcodec.CommitBucket); b < runcodec.LogBuckets && rows < limit; b++ {
		// A row lies within one run window: one that starts before the
		// cutoff ends before the cutoff's window ends.
		read, err := tx.Query(ctx, `SELECT id, data FROM renewal_log`+q.Hint+` WHERE bucket = `+p(1)+
			` AND last_at < `+p(2)+` AND first_at < `+p(3)+synced(b)+` LIMIT `+p(4),
			b, before+int64(runcodec.Window), before, limit-rows)
		if err != nil {
			return 0, false, err
		}
		due, err := sqlread.Collect(read, (*Stored).dest)
		if err != nil {
			return 0, false, err
		}
		for _, r := range due {
			rows++
			kept, n, err := summarize(r, before, sums)
			if err != nil {
				return 0, false, err
			}
			deleted += n
			if len(kept) == 0 {
				gone = append(gone, r.ID)
			} else if err := q.rewrite(ctx, tx, r.ID, kept); err != nil {
				return 0, false, err
			}
		}
	}
	for k, s := range sums {
		if err := tx.Exec(ctx, `INSERT INTO renewal_summaries (lock_id, seq, renewals, first_at, last_at, min_margin_permille)
			VALUES (`+p(1)+`, `+p(2)+`, `+p(3)+`, `+p(4)+`, `+p(5)+`, `+p(6)+`)`+q.SummaryUpsert,
			k[0], k[1], s.renewals, s.first, s.last, s.minMargin); err != nil {
			return 0, false, fmt.Errorf("summarize: %w", err)
		}
	}
	if len(gone) > 0 {
		if err := q.delete(ctx, tx, gone); err != nil {
			return 0, false, err
		}
	}
	return deleted, rows >= limit, nil
}

// rewrite writes log row id again with only the renewals kept.
func (q SQL) rewrite(ctx context.Context, tx Tx, id int64, kept []runcodec.Logged) error {
	row, err := runcodec.EncodeLog(kept)
	if err != nil {
		return fmt.Errorf("log row %d: %w", id, err)
	}
	p := q.Dialect.P
	if err := tx.Exec(ctx, `UPDATE renewal_log SET first_at = `+p(1)+`, last_at = `+p(2)+`, renewals = `+p(3)+
		`, data = `+p(4)+` WHERE id = `+p(5), row.FirstAt, row.LastAt, row.Renewals, row.Data, id); err != nil {
		return fmt.Errorf("log row %d: %w", id, err)
	}
	return nil
}

// summary is what renewal_summaries keeps of a tenure's renewals.
type summary struct {
	renewals    int64
	first, last int64
	minMargin   *int64
}

func (s *summary) add(r runcodec.Renewal) {
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

// summarize adds the renewals of log row r observed before before to
// sums, by lock and tenure. It returns the others, and how many it added.
func summarize(r Stored, before int64, sums map[[2]int64]*summary) ([]runcodec.Logged, int, error) {
	all, err := r.appendLogged(nil)
	if err != nil {
		return nil, 0, err
	}
	var kept []runcodec.Logged
	n := 0
	for _, l := range all {
		if l.At >= before {
			kept = append(kept, l)
			continue
		}
		k := [2]int64{l.LockID, l.Seq}
		if sums[k] == nil {
			sums[k] = &summary{}
		}
		sums[k].add(l.Renewal)
		n++
	}
	return kept, n, nil
}
