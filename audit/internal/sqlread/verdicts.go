package sqlread

import (
	"context"
	"fmt"
	"strings"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
)

// Verdicts returns the kept verdicts of the locks ids names.
func (r *Reader) Verdicts(ctx context.Context, ids []int64) (map[int64]audit.LockVerdict, error) {
	out := make(map[int64]audit.LockVerdict, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	marks := make([]string, len(ids))
	args := make([]any, len(ids))
	for i, id := range ids {
		marks[i], args[i] = r.Dialect.P(i+1), id
	}
	rows, err := r.Pool.Query(ctx, `SELECT lock_id, verdict, judged_at FROM lock_verdicts WHERE lock_id IN (`+strings.Join(marks, ", ")+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("read verdicts: %w", r.wrap(err))
	}
	defer rows.Close()
	for rows.Next() {
		var v audit.LockVerdict
		var judged int64
		if err := rows.Scan(&v.LockID, &v.Verdict, &judged); err != nil {
			return nil, fmt.Errorf("read verdicts: %w", r.wrap(err))
		}
		v.JudgedAt = audit.TimeOf(judged)
		out[v.LockID] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read verdicts: %w", r.wrap(err))
	}
	return out, nil
}

// VerdictCounts returns how many locks of class (every class when empty)
// have each kept verdict.
func (r *Reader) VerdictCounts(ctx context.Context, class audit.Class) (map[string]int, error) {
	w := rowcodec.LockWhere(audit.LockFilter{Class: class}, r.Dialect)
	rows, err := r.Pool.Query(ctx, `SELECT v.verdict, count(*) FROM lock_verdicts v JOIN locks l ON l.id = v.lock_id`+w.String()+` GROUP BY v.verdict`, w.Args...)
	if err != nil {
		return nil, fmt.Errorf("count verdicts: %w", r.wrap(err))
	}
	defer rows.Close()
	out := make(map[string]int)
	for rows.Next() {
		var kind string
		var n int
		if err := rows.Scan(&kind, &n); err != nil {
			return nil, fmt.Errorf("count verdicts: %w", r.wrap(err))
		}
		out[kind] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count verdicts: %w", r.wrap(err))
	}
	return out, nil
}

// MaxPutVerdicts is how many verdicts one PutVerdicts statement keeps.
const MaxPutVerdicts = 500

// PutVerdicts returns the statement that keeps verdicts (at most
// MaxPutVerdicts), and its
// arguments: an upsert of (lock_id, verdict, judged_at) rows, of locks that
// exist, in one statement both engines run.
func PutVerdicts(d rowcodec.Dialect, verdicts []audit.LockVerdict) (string, []any) {
	var b strings.Builder
	args := make([]any, 0, 3*len(verdicts))
	b.WriteString(`INSERT INTO lock_verdicts (lock_id, verdict, judged_at) SELECT v.lock_id, v.verdict, v.judged_at FROM (`)
	for i, v := range verdicts {
		if i > 0 {
			b.WriteString(` UNION ALL `)
		}
		n := 3 * i
		fmt.Fprintf(&b, `SELECT CAST(%s AS BIGINT) AS lock_id, CAST(%s AS TEXT) AS verdict, CAST(%s AS BIGINT) AS judged_at`, d.P(n+1), d.P(n+2), d.P(n+3))
		args = append(args, v.LockID, v.Verdict, audit.Nanos(v.JudgedAt))
	}
	// WHERE true: SQLite reads an upsert's ON CONFLICT after a SELECT
	// only past a WHERE.
	b.WriteString(`) v JOIN locks l ON l.id = v.lock_id WHERE true
		ON CONFLICT (lock_id) DO UPDATE SET verdict = excluded.verdict, judged_at = excluded.judged_at`)
	return b.String(), args
}
