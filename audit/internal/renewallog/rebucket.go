package renewallog

import (
	"context"
	"fmt"

	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
)

// Rebucketing: the journal writes a commit's logged renewals as commit
// rows (runcodec.CommitBucket), whose index entries all land at the end of
// one range of renewal_log_bucket_last. Once every sync mark covers some,
// Rebucket folds them into rows of the locks' own buckets, a row per
// bucket and run window, so that a read of a lock decodes the group
// headers of its bucket and of the few commit rows not yet folded. It
// takes only synced commit rows, so a bucket row never holds a renewal a
// restart replays: Unsynced and RestoreSource read commit rows only. A
// folded renewal gets the id of its place in its bucket row, as sealing
// gives it a run's: ids change, the (at, id) order by observed time does
// not, but for renewals observed in the same nanosecond.

// Fold is when Rebucket folds and how much: once Rows commit rows are
// synced, or they hold Renewals renewals, it folds the oldest of them up
// to Renewals renewals (one row at least).
type Fold struct {
	Rows, Renewals int
}

// WriterFold is when a store's writer folds synced commit rows, in the
// transaction of a commit that finds them due: 64 commit rows, or 64Ki
// renewals, a fold, so that a fold of a fleet's commit rows writes about
// a row per bucket (256 index entries) for 64 commits' 64 (a row each),
// and no commit does more than that at once.
var WriterFold = Fold{Rows: 64, Renewals: 16 * runcodec.MaxRenewals}

// foldRows is how many synced commit rows Rebucket looks at, at most.
const foldRows = 4096

// commitRow is a synced commit row as Rebucket picks it.
type commitRow struct{ id, renewals int64 }

// Rebucket folds synced commit rows into bucket rows, oldest first, when
// f says they are due. It returns the commit rows and renewals it folded.
func Rebucket(ctx context.Context, tx Tx, q SQL, f Fold) (rows, renewals int, err error) {
	p := q.Dialect.P
	read, err := tx.Query(ctx, `SELECT id, renewals FROM renewal_log`+q.Hint+` WHERE bucket = `+p(1)+
		` AND id <= `+sqlread.LogFloor+` ORDER BY id LIMIT `+p(2), runcodec.CommitBucket, foldRows)
	if err != nil {
		return 0, 0, fmt.Errorf("synced commit rows: %w", err)
	}
	synced, err := sqlread.Collect(read, func(c *commitRow) []any { return []any{&c.id, &c.renewals} })
	if err != nil {
		return 0, 0, fmt.Errorf("synced commit rows: %w", err)
	}
	all := 0
	for _, c := range synced {
		all += int(c.renewals)
	}
	if len(synced) == 0 || (len(synced) < f.Rows && all < f.Renewals) {
		return 0, 0, nil // not due
	}
	var ids []int64
	for _, c := range synced {
		if len(ids) > 0 && renewals+int(c.renewals) > f.Renewals {
			break
		}
		ids = append(ids, c.id)
		renewals += int(c.renewals)
	}
	if err := q.fold(ctx, tx, ids, renewals); err != nil {
		return 0, 0, err
	}
	return len(ids), renewals, nil
}

// fold rewrites the commit rows ids, of renewals renewals, as bucket rows
// and deletes them.
func (q SQL) fold(ctx context.Context, tx Tx, ids []int64, renewals int) error {
	cond, arg := q.IDs(1, ids)
	read, err := tx.Query(ctx, `SELECT id, data FROM renewal_log WHERE `+cond+` ORDER BY id`, arg)
	if err != nil {
		return fmt.Errorf("read commit rows: %w", err)
	}
	stored, err := sqlread.Collect(read, (*Stored).dest)
	if err != nil {
		return fmt.Errorf("read commit rows: %w", err)
	}
	rows, err := bucketRows(stored, renewals)
	if err != nil {
		return err
	}
	if err := tx.InsertLog(ctx, rows); err != nil {
		return fmt.Errorf("rebucket %d commit rows: %w", len(ids), err)
	}
	return q.delete(ctx, tx, ids)
}

// bucketRows returns the renewals of commit rows stored, about renewals
// of them, as rows of their locks' buckets.
func bucketRows(stored []Stored, renewals int) ([]Row, error) {
	logged := make([]runcodec.Logged, 0, renewals)
	for _, r := range stored {
		var err error
		if logged, err = r.appendLogged(logged); err != nil {
			return nil, err
		}
	}
	rows, err := rowsOf(logged, runcodec.Bucket)
	if err != nil {
		return nil, fmt.Errorf("rebucket: %w", err)
	}
	return rows, nil
}

// appendLogged appends the renewals of log row r to dst, group after
// group.
func (r Stored) appendLogged(dst []runcodec.Logged) ([]runcodec.Logged, error) {
	err := runcodec.EachLogGroup(r.Data, 0, func(g runcodec.LogGroup) error {
		var err error
		dst, err = g.AppendLogged(dst)
		return err
	})
	if err != nil {
		return dst, fmt.Errorf("log row %d: %w", r.ID, err)
	}
	return dst, nil
}
