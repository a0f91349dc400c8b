package renewallog

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
)

// Tx is a store's transaction, as sealing and pruning the log use it.
type Tx interface {
	sqlread.DB
	// Exec runs a statement.
	Exec(ctx context.Context, query string, args ...any) error
	// InsertRuns inserts runs into renewal_runs.
	InsertRuns(ctx context.Context, runs []runcodec.Run) error
	// InsertLog inserts rows into renewal_log, with new ids.
	InsertLog(ctx context.Context, rows []Row) error
}

// SQL is how a store writes what the log's statements need.
type SQL struct {
	Dialect rowcodec.Dialect
	// Hint is written after renewal_log to read it by the index of a
	// bucket's rows (SQLite's INDEXED BY); "" for an engine that plans by
	// statistics.
	Hint string
	// IDs is the condition that column id is one of ids, which it takes as
	// argument n, and that argument.
	IDs func(n int, ids []int64) (string, any)
	// SummaryUpsert ends an INSERT INTO renewal_summaries: it adds to the
	// tenure's summary there is.
	SummaryUpsert string
}

// Phase is where a seal walk (audit.SealStep.AfterLock) goes from the
// locks to the log's buckets: a position below it is a lock id, and Phase
// + b says the buckets before b are done. A store seals its locks' staged
// renewal rows (a database of the previous release's) first, so that a
// lock's runs from its rows are older than those from its log: a lock's
// staged rows older than its newest run are never sealed.
const Phase = int64(1) << 62

// SealStep seals the log's buckets from the one after names (Phase and
// up), up to limit buckets that have rows to seal, each whole window of
// them while budget (renewals) lasts: of each bucket, the rows wholly
// before before that are synced. At Phase it seals the synced commit rows
// first (runcodec.CommitBucket), those the writer has not rebucketed yet:
// fewer than its Fold's worth, unless sync marks lagged. It returns the renewals
// sealed, the next position and whether every bucket is done.
func SealStep(ctx context.Context, tx Tx, q SQL, after, before int64, limit, budget int) (sealed int, next int64, done bool, err error) {
	if after == Phase {
		// The commit rows the writer has not yet rebucketed, first.
		n, more, err := q.sealBucket(ctx, tx, runcodec.CommitBucket, before, &budget)
		if err != nil {
			return 0, 0, false, fmt.Errorf("commit rows: %w", err)
		}
		if more {
			return n, Phase, false, nil
		}
		sealed = n
		if n > 0 {
			limit--
		}
	}
	for b := after - Phase; b < runcodec.LogBuckets; b++ {
		if limit == 0 || budget <= 0 {
			return sealed, Phase + b, false, nil
		}
		n, more, err := q.sealBucket(ctx, tx, b, before, &budget)
		if err != nil {
			return 0, 0, false, fmt.Errorf("bucket %d: %w", b, err)
		}
		sealed += n
		if more {
			return sealed, Phase + b, false, nil // the bucket's next windows in the next step
		}
		if n > 0 {
			limit--
		}
	}
	return sealed, Phase + runcodec.LogBuckets, true, nil
}

// sealable is the condition on renewal_log that a row is of bucket b,
// P(1), ends at or after P(2) and before P(3), and is synced.
func (q SQL) sealable(b int64) string {
	p := q.Dialect.P
	return ` FROM renewal_log` + q.Hint + ` WHERE bucket = ` + p(1) + ` AND last_at >= ` + p(2) + ` AND last_at < ` + p(3) +
		synced(b)
}

// synced is the condition that a log row of bucket b is synced: a commit
// row at or below the log's sync floor, or any bucket row (Rebucket folds
// only synced commit rows).
func synced(b int64) string {
	if b != runcodec.CommitBucket {
		return ""
	}
	return ` AND id <= ` + sqlread.LogFloor
}

// sealBucket seals bucket b's log rows of whole windows before before,
// window after window while budget (renewals) lasts, at least one. more
// says windows may be left.
func (q SQL) sealBucket(ctx context.Context, tx Tx, b, before int64, budget *int) (sealed int, more bool, err error) {
	for *budget > 0 {
		var oldest *int64
		if err := tx.QueryRow(ctx, `SELECT min(last_at)`+q.sealable(b), b, int64(math.MinInt64), before).Scan(&oldest); err != nil {
			return 0, false, fmt.Errorf("oldest row: %w", err)
		}
		if oldest == nil {
			return sealed, false, nil
		}
		from := runcodec.WindowOf(*oldest) * int64(runcodec.Window)
		to := min(before, from+int64(runcodec.Window))
		if sealed > 0 {
			var n int64
			if err := tx.QueryRow(ctx, `SELECT coalesce(sum(renewals), 0)`+q.sealable(b), b, from, to).Scan(&n); err != nil {
				return 0, false, err
			}
			if n > int64(*budget) {
				return sealed, true, nil // the window in the next step, whole
			}
		}
		n, err := q.sealWindow(ctx, tx, b, from, to)
		if err != nil {
			return 0, false, err
		}
		sealed += n
		*budget -= n
	}
	return sealed, true, nil
}

// Stored is a row of renewal_log as read.
type Stored struct {
	ID   int64
	Data []byte
}

// dest scans id and data.
func (s *Stored) dest() []any { return []any{&s.ID, &s.Data} }

// sealWindow seals bucket b's rows of one window, [from, to), at or below
// the log's sync floor: it packs each lock's renewals into runs, inserts
// them and deletes the rows. It returns the renewals sealed.
func (q SQL) sealWindow(ctx context.Context, tx Tx, b, from, to int64) (int, error) {
	rows, err := tx.Query(ctx, `SELECT id, data`+q.sealable(b), b, from, to)
	if err != nil {
		return 0, err
	}
	read, err := sqlread.Collect(rows, (*Stored).dest)
	if err != nil {
		return 0, fmt.Errorf("read log rows: %w", err)
	}
	runs, sealed, err := Pack(read)
	if err != nil {
		return 0, err
	}
	if err := tx.InsertRuns(ctx, runs); err != nil {
		return 0, err
	}
	ids := make([]int64, len(read))
	for i, r := range read {
		ids[i] = r.ID
	}
	if err := q.delete(ctx, tx, ids); err != nil {
		return 0, err
	}
	return sealed, nil
}

// delete deletes the log rows ids.
func (q SQL) delete(ctx context.Context, tx Tx, ids []int64) error {
	cond, arg := q.IDs(1, ids)
	if err := tx.Exec(ctx, `DELETE FROM renewal_log WHERE `+cond, arg); err != nil {
		return fmt.Errorf("delete %d log rows: %w", len(ids), err)
	}
	return nil
}

// Pack returns the runs that hold the renewals of log rows, every one of
// them, each lock's in (at, id) order, and how many renewals they hold.
func Pack(rows []Stored) ([]runcodec.Run, int, error) {
	byLock := make(map[int64][]runcodec.Staged)
	for _, r := range rows {
		err := runcodec.EachLogGroup(r.Data, 0, func(g runcodec.LogGroup) error {
			staged, err := g.Staged(r.ID)
			byLock[g.LockID] = append(byLock[g.LockID], staged...)
			return err
		})
		if err != nil {
			return nil, 0, fmt.Errorf("log row %d: %w", r.ID, err)
		}
	}
	var runs []runcodec.Run
	sealed := 0
	for _, lock := range slices.Sorted(maps.Keys(byLock)) {
		staged := byLock[lock]
		slices.SortFunc(staged, func(a, b runcodec.Staged) int { return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.ID, b.ID)) })
		lr, packed, err := runcodec.Pack(lock, staged)
		if err != nil {
			return nil, 0, err
		}
		if len(packed) != len(staged) {
			return nil, 0, fmt.Errorf("lock %d: runs hold %d of its %d logged renewals", lock, len(packed), len(staged))
		}
		runs = append(runs, lr...)
		sealed += len(packed)
	}
	return runs, sealed, nil
}
