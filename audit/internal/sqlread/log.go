package sqlread

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
)

// The renewal log (SQLite migration 0026, PostgreSQL 0016, Engine.Log): a
// commit's renewals of one run window are one commit row of renewal_log
// (runcodec.CommitBucket), folded once synced into a row per bucket of
// locks (runcodec.Bucket) and run window; their renewals have the ids
// runcodec.LogID gives them. Reads of a lock's renewals decode its groups
// of its bucket's rows and of the commit rows in the window, as they
// decode its runs, and merge them with the runs and the rows.

// LogIndex is the index of a bucket's log rows by their last renewal.
const LogIndex = "renewal_log_bucket_last"

// LogMarkOf is the log's sync mark of the source named by the SQL
// expression source: every logged renewal of the source in a row up to it
// is in its lock and tenure rows. The source's own mark, or the store's.
func LogMarkOf(source string) string {
	return `coalesce((SELECT m.synced_log FROM renewal_log_marks m WHERE m.source = ` + source + `),
		(SELECT synced_log FROM renewal_log_marks WHERE source = ''))`
}

// LogFloor is the oldest log sync mark of any source, in SQL, as
// SyncFloor is of the event rows: a source's own marks, once there are
// any, rule.
const LogFloor = `coalesce((SELECT min(synced_log) FROM renewal_log_marks WHERE source <> ''),
	(SELECT synced_log FROM renewal_log_marks WHERE source = ''), 0)`

// logRow is one row of renewal_log.
type logRow struct {
	id   int64
	last int64
	data []byte
}

// logRowsPerPage is how many log rows one query of a bucket reads: a
// lock's renewals are in one of its bucket's rows in a few dozen.
const logRowsPerPage = 64

// lockLog calls each with the groups of lock rr.lockID of its bucket's
// log rows, and of the commit rows (runcodec.CommitBucket), that may hold
// renewals rr selects, newest row first, as lockRuns does with runs. It
// returns what each returned that rr selects, the newest rr.lim of both.
func (r *Reader) lockLog(ctx context.Context, db DB, rr runRange, each func(row int64, g runcodec.LogGroup) ([]position, error)) ([]position, error) {
	kept, err := r.bucketLog(ctx, db, rr, runcodec.Bucket(rr.lockID), each)
	if err != nil {
		return nil, err
	}
	if len(kept) >= rr.lim && (rr.floor == nil || comparePositions(kept[0], *rr.floor) > 0) {
		rr.floor = &kept[0]
	}
	commit, err := r.bucketLog(ctx, db, rr, runcodec.CommitBucket, each)
	if err != nil {
		return nil, err
	}
	return mergeNewest(commit, kept, rr.lim, func(p position) position { return p }), nil
}

// bucketLog is lockLog of the log rows of bucket b.
func (r *Reader) bucketLog(ctx context.Context, db DB, rr runRange, b int64, each func(row int64, g runcodec.LogGroup) ([]position, error)) ([]position, error) {
	p := r.Dialect.P
	q := `SELECT id, last_at, data FROM renewal_log` + r.hint(LogIndex) + `
		WHERE bucket = ` + p(1) + ` AND last_at >= ` + p(2) + ` AND first_at <= ` + p(3) + `
			AND last_at <= ` + p(4) + ` AND (last_at < ` + p(4) + ` OR id < ` + p(5) + `)
		ORDER BY last_at DESC, id DESC LIMIT ` + p(6)
	return pageNewest(ctx, r, db, rr, newestPages[logRow]{
		what: fmt.Sprintf("logged renewals of lock %d", rr.lockID), query: q, first: b,
		dest: func(l *logRow) []any { return []any{&l.id, &l.last, &l.data} },
		key:  func(l logRow) position { return position{l.last, l.id} },
		each: func(l logRow) ([]position, error) {
			groups, err := runcodec.LogGroups(l.data, rr.lockID)
			if err != nil {
				return nil, err
			}
			var out []position
			for _, g := range groups {
				got, err := each(l.id, g)
				if err != nil {
					return nil, err
				}
				out = append(out, got...)
			}
			// A lock's groups of a row (tenures, details) are in the order
			// stored: in time order, but for renewals stored out of it.
			slices.SortFunc(out, comparePositions)
			return out, nil
		},
		page: logRowsPerPage,
	})
}

// holders gives the holder and token of a lock's tenures, which logged
// renewals take as compact rows do, reading each tenure once.
type holders struct {
	r    *Reader
	db   DB
	seen map[[2]int64]holder
}

type holder struct {
	name  string
	token *int64
}

func (h *holders) of(ctx context.Context, lockID, seq int64) (holder, error) {
	k := [2]int64{lockID, seq}
	if x, ok := h.seen[k]; ok {
		return x, nil
	}
	if h.seen == nil {
		h.seen = make(map[[2]int64]holder)
	}
	var x holder
	p := h.r.Dialect.P
	err := h.db.QueryRow(ctx, `SELECT holder, token FROM tenures WHERE lock_id = `+p(1)+` AND seq = `+p(2), lockID, seq).
		Scan(rowcodec.TextDest[string]{P: &x.name}, rowcodec.TokenDest{P: &x.token})
	if err != nil && !h.r.noRows(err) {
		return x, fmt.Errorf("tenure %d of lock %d: %w", seq, lockID, h.r.wrap(err))
	}
	h.seen[k] = x
	return x, nil
}

// logEvents returns the lock's logged renewals that rr selects, the
// newest rr.lim, in time order.
func (r *Reader) logEvents(ctx context.Context, db DB, rr runRange) ([]audit.Event, error) {
	byID := make(map[int64]audit.Event)
	hs := holders{r: r, db: db}
	kept, err := r.lockLog(ctx, db, rr, func(row int64, g runcodec.LogGroup) ([]position, error) {
		events, err := g.Events(row)
		if err != nil {
			return nil, err
		}
		h, err := hs.of(ctx, g.LockID, g.Seq)
		if err != nil {
			return nil, err
		}
		return rr.positions(events, h.name, h.token, byID), nil
	})
	if err != nil {
		return nil, err
	}
	return eventsAt(kept, byID), nil
}

// LogTimes returns the times of the lock's logged renewals that f
// selects, the newest lim, in time order, read through db; rows are the
// times the caller has from rows and runs, as RunTimes takes them.
func (r *Reader) LogTimes(ctx context.Context, db DB, lockID int64, f audit.TimeFilter, lim int, rows []time.Time) ([]time.Time, error) {
	if !r.Log {
		return nil, nil
	}
	rr := newRunRange(lockID, f, audit.EventCursor{}, lim)
	if len(rows) >= lim {
		rr.floor = &position{audit.Nanos(rows[0]), 0}
	}
	kept, err := r.lockLog(ctx, db, rr, func(row int64, g runcodec.LogGroup) ([]position, error) {
		rs, err := g.Decode()
		if err != nil {
			return nil, err
		}
		return decodedPositions(rs, func(i int) int64 { return runcodec.LogID(row, g.Index+i) }), nil
	})
	if err != nil {
		return nil, err
	}
	return timesAt(kept), nil
}

// unsyncedLog returns the logged renewals after their source's log mark,
// only source's when it is not "", as renew events with their locks' keys.
// They are in commit rows: rebucketing folds only synced ones.
func (r *Reader) unsyncedLog(ctx context.Context, db DB, source string) ([]audit.Event, error) {
	if !r.Log {
		return nil, nil
	}
	type mark struct {
		source string
		log    int64
	}
	marks, err := query(ctx, r, db, "log sync marks", func(m *mark) []any { return []any{&m.source, &m.log} },
		`SELECT source, synced_log FROM renewal_log_marks`)
	if err != nil {
		return nil, err
	}
	markOf := make(map[string]int64, len(marks))
	for _, m := range marks {
		markOf[m.source] = m.log
	}
	lowest := markOf[""]
	for _, m := range marks {
		lowest = min(lowest, m.log)
	}
	rows, err := query(ctx, r, db, "unsynced logged renewals", func(l *logRow) []any { return []any{&l.id, &l.data} },
		`SELECT id, data FROM renewal_log WHERE bucket = `+r.Dialect.P(1)+` AND id > `+r.Dialect.P(2)+` ORDER BY id`,
		runcodec.CommitBucket, lowest)
	if err != nil {
		return nil, err
	}
	hs := holders{r: r, db: db}
	var out []audit.Event
	for _, l := range rows {
		groups, err := runcodec.LogGroups(l.data, 0)
		if err != nil {
			return nil, fmt.Errorf("log row %d: %w", l.id, err)
		}
		for _, g := range groups {
			key, err := r.LockKey(ctx, db, g.LockID)
			if err != nil {
				return nil, err
			}
			m, ok := markOf[key.Source]
			if !ok {
				m = markOf[""]
			}
			if l.id <= m || (source != "" && key.Source != source) {
				continue
			}
			events, err := g.Events(l.id)
			if err != nil {
				return nil, fmt.Errorf("log row %d: %w", l.id, err)
			}
			h, err := hs.of(ctx, g.LockID, g.Seq)
			if err != nil {
				return nil, err
			}
			for _, e := range events {
				e.Lock, e.Holder, e.Token = key, h.name, h.token
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// withLogged merges rows, renewal rows in id order, with logged renewals,
// in the order each lock's were stored: by observed time, then id.
func withLogged(rows, logged []audit.Event) []audit.Event {
	if len(logged) == 0 {
		return rows
	}
	out := append(rows, logged...)
	slices.SortStableFunc(out, func(a, b audit.Event) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.ID, b.ID))
	})
	return out
}
