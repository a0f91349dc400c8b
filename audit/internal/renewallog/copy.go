package renewallog

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
	"github.com/leasewatch/leasewatch/audit/storecopy"
)

// A copy reads the renewal log, which the stores' logical schema does not
// have (storecopy.Converted), as rows of the tables it has:
//   - a lock group of a bucket row, or of a commit row at or below its
//     source's log mark, is a run: its data is a run already, of one tenure and detail, and a log
//     row's renewals share a run window. It gets a run id after the
//     largest the snapshot has, and keeps, as sealing would, the observed
//     times to the millisecond (the log keeps their nanoseconds).
//   - a renewal of a row after the mark, which a restore must replay, is
//     a compact renewal row of events, numbered after the snapshot's
//     largest event id, so after every sync mark, in the order Unsynced
//     gives them (by observed time). A store's unsynced renewal rows
//     (renewals the log cannot keep) so come before them in the target's
//     replay, which is by id.
//
// So the target, whatever it keeps, holds every renewal once, in the
// places its reads and its journal's replay find it.

// Copy adds a snapshot's log to the rows of events and renewal_runs that
// its tables give a copy.
type Copy struct {
	DB      sqlread.DB // the snapshot's transaction
	Dialect rowcodec.Dialect
	// Newest reads the largest event id and run id the snapshot has.
	Newest func(ctx context.Context) (event, run int64, err error)
	// Wrap turns an engine's error into the one callers see.
	Wrap func(error) error

	rows *converted // the log as rows, once read
}

// converted are a snapshot's log as rows of events and renewal_runs, in
// the column order of storecopy.Tables, in key order.
type converted struct {
	events, runs [][]any
}

// Stat is a table's count and last key, n and last as its own rows give
// them (err their error), with the log's rows among them.
func (c *Copy) Stat(ctx context.Context, t storecopy.Table, n int64, last []any, err error) (int64, []any, error) {
	if err != nil {
		return 0, nil, err
	}
	extra, err := c.logged(ctx, t)
	if err != nil || len(extra) == 0 {
		return n, last, err
	}
	return n + int64(len(extra)), t.KeyOf(extra[len(extra)-1]), nil
}

// Rows returns rows, a table's own rows after after (err their error),
// then the log's, whose keys come after every row's, up to limit in all.
func (c *Copy) Rows(ctx context.Context, t storecopy.Table, after []any, limit int, rows [][]any, err error) ([][]any, error) {
	if err != nil {
		return nil, err
	}
	extra, err := c.logged(ctx, t)
	if err != nil || len(extra) == 0 || (limit > 0 && len(rows) >= limit) {
		return rows, err
	}
	for _, row := range extra {
		if after != nil && row[0].(int64) <= after[0].(int64) {
			continue
		}
		if limit > 0 && len(rows) >= limit {
			break
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// logged returns the log's rows of t, converting the log once.
func (c *Copy) logged(ctx context.Context, t storecopy.Table) ([][]any, error) {
	if t.Name != "events" && t.Name != "renewal_runs" {
		return nil, nil
	}
	if c.rows == nil {
		l, err := c.convert(ctx)
		if err != nil {
			return nil, c.Wrap(fmt.Errorf("renewal log: %w", err))
		}
		c.rows = l
	}
	if t.Name == "events" {
		return c.rows.events, nil
	}
	return c.rows.runs, nil
}

// convert reads the snapshot's log as rows.
func (c *Copy) convert(ctx context.Context) (*converted, error) {
	event, run, err := c.Newest(ctx)
	if err != nil {
		return nil, err
	}
	read, err := c.DB.Query(ctx, `SELECT id, bucket, data FROM renewal_log ORDER BY id`)
	if err != nil {
		return nil, err
	}
	log, err := sqlread.Collect(read, func(r *bucketRow) []any { return []any{&r.ID, &r.bucket, &r.Data} })
	if err != nil {
		return nil, err
	}
	out := &converted{}
	var pending []unsyncedRenewal
	marks := make(map[int64]int64) // lock id → its source's log mark
	for _, r := range log {
		groups, err := runcodec.LogGroups(r.Data, 0)
		if err != nil {
			return nil, fmt.Errorf("log row %d: %w", r.ID, err)
		}
		for _, g := range groups {
			mark, err := c.markOf(ctx, marks, g.LockID)
			if err != nil {
				return nil, err
			}
			rs, err := g.Decode()
			if err != nil {
				return nil, fmt.Errorf("log row %d: %w", r.ID, err)
			}
			if r.bucket != runcodec.CommitBucket || r.ID <= mark {
				run++
				out.runs = append(out.runs, runRow(run, g, rs))
				continue
			}
			for i, x := range rs {
				pending = append(pending, unsyncedRenewal{runcodec.LogID(r.ID, g.Index+i), g, x})
			}
		}
	}
	// Numbered in the order Unsynced gives them, by time: the target
	// replays them by id.
	slices.SortFunc(pending, func(a, b unsyncedRenewal) int {
		return cmp.Or(cmp.Compare(a.x.At, b.x.At), cmp.Compare(a.id, b.id))
	})
	for _, p := range pending {
		event++
		out.events = append(out.events, loggedEventRow(event, p.g, p.x))
	}
	return out, nil
}

// bucketRow is a log row with its bucket: a row of a lock bucket is
// synced whatever its id (Rebucket).
type bucketRow struct {
	Stored
	bucket int64
}

// markOf returns the log mark of lock's source, remembered in marks.
func (c *Copy) markOf(ctx context.Context, marks map[int64]int64, lock int64) (int64, error) {
	if mark, ok := marks[lock]; ok {
		return mark, nil
	}
	var mark int64
	if err := c.DB.QueryRow(ctx, `SELECT `+sqlread.LogMarkOf("l.source")+` FROM locks l WHERE l.id = `+c.Dialect.P(1), lock).
		Scan(&mark); err != nil {
		return 0, fmt.Errorf("log mark of lock %d: %w", lock, err)
	}
	marks[lock] = mark
	return mark, nil
}

// unsyncedRenewal is a logged renewal after its source's log mark.
type unsyncedRenewal struct {
	id int64 // its logged id
	g  runcodec.LogGroup
	x  runcodec.Renewal
}

// runRow is a lock group as a row of renewal_runs.
func runRow(id int64, g runcodec.LogGroup, rs []runcodec.Renewal) []any {
	var least any
	for _, x := range rs {
		if x.Margin != runcodec.NoMargin && (least == nil || x.Margin < least.(int64)) {
			least = x.Margin
		}
	}
	// As sealing makes a run: its first and last renewal, as it keeps
	// them, and its first renewal's lease, which its data does not repeat.
	last := rs[len(rs)-1].At / 1e6 * 1e6
	return []any{id, g.LockID, g.Seq, g.FirstAt, last, int64(g.Renewals), rowcodec.Ms(g.TTL), least, nullText(g.Detail), g.Run}
}

// loggedEventRow is a logged renewal as a compact renewal row of events.
func loggedEventRow(id int64, g runcodec.LogGroup, x runcodec.Renewal) []any {
	var margin, renewed any
	if x.Margin != runcodec.NoMargin {
		margin = x.Margin
	}
	if x.RenewedAt != audit.NoNanos {
		renewed = x.RenewedAt
	}
	return []any{id, g.LockID, string(audit.EventRenew), x.At, "", nil, rowcodec.Ms(x.TTL), x.Position, false, "", nil,
		nullText(g.Detail), g.Seq, margin, renewed}
}

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}
