package postgres

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/renewallog"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
)

// Sealing (migration 0015): the staged renewals, rows of renewals, are
// folded into runs of renewal_runs once their hour has closed and their
// source's sync mark has passed them. A staged renewal that no run can hold
// (runcodec.Fits false) stays a row, moved into events, where PostgreSQL
// keeps every renewal that does not fit the narrow row either: so a sealed
// partition of renewals is left empty, and is dropped. Once every lock's
// rows are walked, the steps seal the renewal log (migration 0016), bucket
// by bucket (renewallog.SealStep; NextLock renewallog.Phase and above).

// sealChunk is the most staged renewals a step reads of one lock at once,
// its oldest: one run's worth, so that a window of a lock renewed up to
// MaxRenewals times an hour (every 0.9 s) is read whole. A lock with more
// (the rows of the previous release, before the first passes) is read on
// in chunks, each held in memory alone.
const sealChunk = runcodec.MaxRenewals

// sealBudget is the renewals after which a step stops, at the end of a
// lock, so that its transaction stays short however many rows the previous
// release left; the next step goes on after that lock.
const sealBudget = 16 * runcodec.MaxRenewals

// sealGroup is how many locks a step reads the first chunk of at once: at
// most sealBudget renewals in memory.
const sealGroup = sealBudget / sealChunk

// runColumns are the columns of renewal_runs a seal writes, in runRow's
// order; the id is the table's identity.
var runColumns = []string{"lock_id", "seq", "first_at", "last_at", "ttl_ms", "min_margin_permille", "renewals", "detail", "data"}

// SealRenewals folds, in one transaction, the staged renewals of the next
// step.Limit locks after step.AfterLock that were observed before
// step.Before and are at or below their source's sync mark into runs, and
// deletes their rows. Replicas sharing the store take turns, under the
// advisory lock retention steps take, so a renewal is never in two runs or
// both summarised and sealed. The transaction runs on a connection of the
// read pool: the writer, and the ingest behind it, never wait for it. Once
// a pass is done, the partitions of renewals that sealing emptied are
// dropped.
func (s *Store) SealRenewals(ctx context.Context, step audit.SealStep) (audit.SealResult, error) {
	res := audit.SealResult{NextLock: step.AfterLock}
	if step.Limit <= 0 {
		return res, fmt.Errorf("seal renewals: limit %d must be positive", step.Limit)
	}
	conn, err := s.reader.Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("seal renewals: %w", storageError(err))
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return sealStep(ctx, tx, step, &res) })
	conn.Release()
	if err != nil {
		return audit.SealResult{NextLock: step.AfterLock}, fmt.Errorf("seal renewals: %w", storageError(err))
	}
	if res.Done {
		if err := s.dropSealed(ctx); err != nil {
			return res, fmt.Errorf("seal renewals: %w", storageError(err))
		}
	}
	return res, nil
}

// stagedLock is one lock's staged renewals that a step read: those at or
// below mark, observed before the step's Before and after the position
// (at, id) after.
type stagedLock struct {
	id, mark int64
	after    [2]int64
	staged   []runcodec.Staged
}

// first is the position before every renewal.
var first = [2]int64{math.MinInt64, math.MinInt64}

// sealStep is SealRenewals' transaction: the staged rows of the locks
// (sealLocks), and once they are done, the log's buckets.
func sealStep(ctx context.Context, tx pgx.Tx, step audit.SealStep, res *audit.SealResult) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+pruneLock+`)`); err != nil {
		return err
	}
	if step.AfterLock >= renewallog.Phase {
		var err error
		res.Sealed, res.NextLock, res.Done, err = renewallog.SealStep(ctx, logTx{pgDB: pgDB{tx}, tx: tx}, logSQL, step.AfterLock,
			audit.Nanos(step.Before), step.Limit, sealBudget)
		return err
	}
	if err := sealLocks(ctx, tx, step, res); err != nil || !res.Done {
		return err
	}
	res.NextLock, res.Done = renewallog.Phase, false // the log's buckets in the next steps
	return nil
}

// sealLocks seals the staged rows of the next step.Limit locks: the first
// chunk of each lock of a group of sealGroup, then the rest of those of the
// group that had more, chunk by chunk, and so on, group by group, up to
// sealBudget renewals. Done says no lock is left.
func sealLocks(ctx context.Context, tx pgx.Tx, step audit.SealStep, res *audit.SealResult) error {
	rows, err := tx.Query(ctx, `SELECT l.id, `+sqlread.SyncMarkOf("l.source")+` FROM locks l
		WHERE l.id > $1 ORDER BY l.id LIMIT $2`, step.AfterLock, step.Limit)
	if err != nil {
		return fmt.Errorf("locks: %w", err)
	}
	var locks []stagedLock
	l := stagedLock{after: first}
	if _, err := pgx.ForEachRow(rows, []any{&l.id, &l.mark}, func() error {
		locks = append(locks, l)
		return nil
	}); err != nil {
		return fmt.Errorf("locks: %w", err)
	}
	res.Done = len(locks) < step.Limit
	if len(locks) == 0 {
		return nil
	}
	res.NextLock = locks[len(locks)-1].id
	before := audit.Nanos(step.Before)
	for group := range slices.Chunk(locks, sealGroup) {
		more, err := sealChunks(ctx, tx, group, before, res)
		if err != nil {
			return err
		}
		stop := group[len(group)-1].id
		for _, l := range more {
			if err := sealRest(ctx, tx, l, before, res); err != nil {
				return err
			}
			if res.Sealed >= sealBudget {
				stop = l.id
				break
			}
		}
		if res.Sealed >= sealBudget && stop != res.NextLock {
			// The locks after stop in the next step, those of this group
			// included, which read on from what is left of them.
			res.NextLock, res.Done = stop, false
			return nil
		}
	}
	return nil
}

// sealRest seals the rest of a lock whose first chunk was sealed, chunk by
// chunk.
func sealRest(ctx context.Context, tx pgx.Tx, l stagedLock, before int64, res *audit.SealResult) error {
	for {
		more, err := sealChunks(ctx, tx, []stagedLock{l}, before, res)
		if err != nil || len(more) == 0 {
			return err
		}
		l = more[0]
	}
}

// sealChunks seals the next chunk of each of locks and returns those that
// may have more, each after the last renewal it sealed.
func sealChunks(ctx context.Context, tx pgx.Tx, locks []stagedLock, before int64, res *audit.SealResult) ([]stagedLock, error) {
	read, err := readStaged(ctx, tx, locks, before)
	if err != nil {
		return nil, err
	}
	var runs, moved [][]any
	var more []stagedLock
	for i := range read {
		l := &read[i]
		if len(l.staged) == sealChunk {
			trimLastWindow(l)
			last := l.staged[len(l.staged)-1]
			more = append(more, stagedLock{id: l.id, mark: l.mark, after: [2]int64{last.At, last.ID}})
		}
		lr, sealed, err := runcodec.Pack(l.id, l.staged)
		if err != nil {
			return nil, err
		}
		for _, r := range lr {
			runs = append(runs, runRow(r))
		}
		slices.Sort(sealed)
		for _, st := range l.staged {
			if _, ok := slices.BinarySearch(sealed, st.ID); !ok {
				moved = append(moved, stagedEventRow(l.id, st))
			}
		}
		res.Sealed += len(sealed)
	}
	return more, storeSealed(ctx, tx, runs, moved, read)
}

// readStaged reads the staged renewals of locks, at most sealChunk of each,
// its oldest, in (at, id) order.
func readStaged(ctx context.Context, tx pgx.Tx, locks []stagedLock, before int64) ([]stagedLock, error) {
	n := len(locks)
	ids, marks, ats, afterIDs := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	byLock := make(map[int64]*stagedLock, n)
	for i := range locks {
		l := &locks[i]
		ids[i], marks[i], ats[i], afterIDs[i] = l.id, l.mark, l.after[0], l.after[1]
		l.staged = nil
		byLock[l.id] = l
	}
	rows, err := tx.Query(ctx, `SELECT `+prefixed("r.", renewalColumns)+`
		FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[]) AS m (lock_id, mark, at, id)
		CROSS JOIN LATERAL (SELECT * FROM renewals r WHERE r.lock_id = m.lock_id AND r.at < $5 AND r.id <= m.mark
			AND (r.at, r.id) > (m.at, m.id) ORDER BY r.at, r.id LIMIT $6) r`, ids, marks, ats, afterIDs, before, sealChunk)
	if err != nil {
		return nil, fmt.Errorf("staged renewals: %w", err)
	}
	var r renewalRowValues
	_, err = pgx.ForEachRow(rows, r.dest(), func() error {
		l := byLock[r.lockID]
		l.staged = append(l.staged, r.staged())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("staged renewals: %w", err)
	}
	var read []stagedLock
	for _, l := range locks {
		if len(l.staged) > 0 {
			// In (at, id) order, which Pack needs, whatever order the
			// lateral join gave.
			slices.SortFunc(l.staged, func(a, b runcodec.Staged) int { return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.ID, b.ID)) })
			read = append(read, l)
		}
	}
	return read, nil
}

// trimLastWindow leaves out of l the renewals of the hour window of its
// newest, which may go on past what the step read, so that the next step
// seals that window whole. A step that read a single window takes it as it
// is.
func trimLastWindow(l *stagedLock) {
	w := int64(runcodec.Window)
	window := func(at int64) int64 { return at - (at%w+w)%w }
	last := window(l.staged[len(l.staged)-1].At)
	i := len(l.staged)
	for i > 0 && window(l.staged[i-1].At) == last {
		i--
	}
	if i > 0 {
		l.staged = l.staged[:i]
	}
}

// storeSealed inserts the runs, moves the staged renewals no run holds into
// events, and deletes every staged renewal the step took from renewals.
func storeSealed(ctx context.Context, tx pgx.Tx, runs, moved [][]any, gone []stagedLock) error {
	if err := copyRuns(ctx, tx, runs); err != nil {
		return err
	}
	if len(moved) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"events"}, eventColumns, pgx.CopyFromRows(moved)); err != nil {
			return fmt.Errorf("move renewals no run holds: %w", err)
		}
	}
	var locks, ats, ids []int64
	for _, l := range gone {
		for _, st := range l.staged {
			locks, ats, ids = append(locks, l.id), append(ats, st.At), append(ids, st.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	// By the timeline index, which finds each row; renewals have no
	// B-tree on id.
	tag, err := tx.Exec(ctx, `DELETE FROM renewals r USING unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS d (lock_id, at, id)
		WHERE r.lock_id = d.lock_id AND r.at = d.at AND r.id = d.id`, locks, ats, ids)
	if err != nil {
		return fmt.Errorf("delete sealed renewals: %w", err)
	}
	if n := tag.RowsAffected(); n != int64(len(ids)) {
		return fmt.Errorf("delete sealed renewals: %d rows deleted, not the %d read", n, len(ids))
	}
	return nil
}

// copyRuns inserts rows of renewal_runs (runColumns).
func copyRuns(ctx context.Context, tx pgx.Tx, runs [][]any) error {
	if len(runs) == 0 {
		return nil
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"renewal_runs"}, runColumns, pgx.CopyFromRows(runs)); err != nil {
		return fmt.Errorf("insert runs: %w", err)
	}
	return nil
}

// runRow is the renewal_runs row (runColumns) of a run.
func runRow(r runcodec.Run) []any {
	var detail any
	if r.Detail != "" {
		detail = r.Detail
	}
	return []any{r.LockID, r.Seq, r.FirstAt, r.LastAt, r.TTL.Milliseconds(), r.MinMargin, int32(r.Renewals), detail, r.Data}
}

// renewalRowValues scans one renewals row (renewalColumns).
type renewalRowValues struct {
	id, lockID, at, renewedAt int64
	seq, ttl, margin          int32
	position, detail          string
}

func (v *renewalRowValues) dest() []any {
	return []any{&v.id, &v.lockID, &v.at, &v.renewedAt, &v.seq, &v.ttl, &v.margin, &v.position, &v.detail}
}

// staged is the renewal as runcodec.Pack takes it.
func (v *renewalRowValues) staged() runcodec.Staged {
	margin := int64(v.margin)
	if v.margin == noMargin {
		margin = runcodec.NoMargin
	}
	return runcodec.Staged{ID: v.id, Seq: int64(v.seq), Detail: v.detail,
		Renewal: runcodec.Renewal{At: v.at, RenewedAt: v.renewedAt, Margin: margin, Position: v.position, TTL: time.Duration(v.ttl) * time.Millisecond}}
}

// stagedEventRow is the events row (eventColumns) of a staged renewal of
// lock, as the view timeline reads its renewals row.
func stagedEventRow(lock int64, st runcodec.Staged) []any {
	ev := []any{st.ID, lock, string(audit.EventRenew), st.At, "", nil, st.TTL.Milliseconds(), st.Position, false, "", nil,
		nil, st.Seq, nil, nil}
	if st.Detail != "" {
		ev[evDetail] = st.Detail
	}
	if st.Margin != runcodec.NoMargin {
		ev[evMargin] = st.Margin
	}
	if st.RenewedAt != noRenewedAt {
		ev[evRenewedAt] = st.RenewedAt
	}
	return ev
}

// dropSealed drops the partitions of renewals that sealing has emptied:
// those whose every id is at or below every source's sync mark (so no
// batch still to commit holds one) and that hold no row. A partition still
// holding rows is told by its first live entry of the timeline index,
// which a scan finds after the dead ones of at most a few locks; each scan
// marks the dead entries it passes, so the next skips them.
func (s *Store) dropSealed(ctx context.Context) error {
	var floor int64
	if err := s.reader.QueryRow(ctx, `SELECT `+sqlread.SyncFloor).Scan(&floor); err != nil {
		return err
	}
	s.mu.Lock()
	var candidates []int64
	for _, from := range s.parts.froms {
		if from+s.parts.span-1 <= floor {
			candidates = append(candidates, from)
		}
	}
	s.mu.Unlock()
	var empty []int64
	for _, from := range candidates {
		var held bool
		err := pgx.BeginFunc(ctx, s.reader, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+partitionName(from)+`)`).Scan(&held)
		})
		if err != nil {
			return fmt.Errorf("look into %s: %w", partitionName(from), err)
		}
		if !held {
			empty = append(empty, from)
		}
	}
	return s.dropPartitions(ctx, empty)
}
