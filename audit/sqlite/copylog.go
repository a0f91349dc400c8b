package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
	"github.com/leasewatch/leasewatch/audit/storecopy"
)

// A copy reads the renewal log (migration 0026), which the stores' logical
// schema does not have (storecopy.Converted), as rows of the tables it has:
//   - a lock group of a log row at or below its source's log mark is a
//     run: its data is a run already, of one tenure and detail, and
//     a log row's renewals share a run window. It gets a run id after the
//     largest the snapshot has, and keeps, as sealing would, the observed
//     times to the millisecond (the log keeps their nanoseconds).
//   - a renewal of a row after the mark, which a restore must replay, is
//     a compact renewal row of events, numbered after the snapshot's
//     largest event id, so after every sync mark, in the order Unsynced
//     gives them (by observed time). A store's unsynced renewal rows
//     (renewals the log cannot keep) so come before them in the target's
//     replay, which is by id.
//
// So the target, which keeps no log, holds every renewal once, in the
// places its reads and its journal's replay find it.

// loggedRows are a snapshot's log as rows of events and renewal_runs, in
// the column order of storecopy.Tables, in key order.
type loggedRows struct {
	events, runs [][]any
}

// readLogged converts the snapshot's log.
func readLogged(ctx context.Context, tx *sql.Tx) (*loggedRows, error) {
	var event, run int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce((SELECT max(id) FROM events), 0), coalesce((SELECT max(id) FROM renewal_runs), 0)`).
		Scan(&event, &run); err != nil {
		return nil, err
	}
	type logRow struct {
		id   int64
		data []byte
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, data FROM renewal_log ORDER BY id`)
	if err != nil {
		return nil, err
	}
	log, err := sqlread.Collect(sqlRows{rows}, func(r *logRow) []any { return []any{&r.id, &r.data} })
	if err != nil {
		return nil, err
	}
	out := &loggedRows{}
	var pending []unsyncedRenewal
	marks := make(map[int64]int64) // lock id → its source's log mark
	for _, r := range log {
		groups, err := runcodec.LogGroups(r.data, 0)
		if err != nil {
			return nil, fmt.Errorf("log row %d: %w", r.id, err)
		}
		for _, g := range groups {
			mark, ok := marks[g.LockID]
			if !ok {
				if err := tx.QueryRowContext(ctx, `SELECT `+sqlread.LogMarkOf("l.source")+` FROM locks l WHERE l.id = ?`, g.LockID).Scan(&mark); err != nil {
					return nil, fmt.Errorf("log mark of lock %d: %w", g.LockID, err)
				}
				marks[g.LockID] = mark
			}
			rs, err := g.Decode()
			if err != nil {
				return nil, fmt.Errorf("log row %d: %w", r.id, err)
			}
			if r.id <= mark {
				run++
				out.runs = append(out.runs, runRow(run, g, rs))
				continue
			}
			for i, x := range rs {
				pending = append(pending, unsyncedRenewal{runcodec.LogID(r.id, g.Index+i), g, x})
			}
		}
	}
	// Numbered in the order Unsynced gives them, by time: the target's
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

// of returns the converted rows of table t, nil for a table the log adds
// none to.
func (l *loggedRows) of(t storecopy.Table) [][]any {
	switch t.Name {
	case "events":
		return l.events
	case "renewal_runs":
		return l.runs
	}
	return nil
}

// Stat counts t's rows, the log's among them, and reads the last key.
func (s *snapshot) Stat(ctx context.Context, t storecopy.Table) (int64, []any, error) {
	n, last, err := s.CopyReads.Stat(ctx, t)
	if err != nil {
		return 0, nil, err
	}
	extra, err := s.logged(ctx, t)
	if err != nil || len(extra) == 0 {
		return n, last, err
	}
	return n + int64(len(extra)), t.KeyOf(extra[len(extra)-1]), nil
}

// Rows returns t's rows after after, then the log's, whose keys come
// after every row's.
func (s *snapshot) Rows(ctx context.Context, t storecopy.Table, after []any, limit int) ([][]any, error) {
	rows, err := s.CopyReads.Rows(ctx, t, after, limit)
	if err != nil {
		return nil, err
	}
	extra, err := s.logged(ctx, t)
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

// logged returns the log's rows of t, converting the log once per
// snapshot.
func (s *snapshot) logged(ctx context.Context, t storecopy.Table) ([][]any, error) {
	if t.Name != "events" && t.Name != "renewal_runs" {
		return nil, nil
	}
	if s.log == nil {
		l, err := readLogged(ctx, s.tx)
		if err != nil {
			return nil, storageError(fmt.Errorf("renewal log: %w", err))
		}
		s.log = l
	}
	return s.log.of(t), nil
}
