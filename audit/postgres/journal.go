package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/renewallog"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
)

// Apply writes b in one transaction: lock rows and the tracker's memory of
// them, tenures, events, findings, cursors, then the renewal columns of
// b.Renewed. Later entries for the same lock, tenure or cursor replace
// earlier ones. Locks are matched by key (TrackState.Lock.ID is ignored); a
// lock referenced only by a tenure, event or finding gets a bare row (class
// lock, state free). An empty Finding.Severity is filled from its kind.
// Concurrent calls are serialized. A failure rolls back the whole batch.
//
// Three round trips carry a batch of any size: the lock upserts (whose ids
// the rest need), the events by COPY, and every other statement in one
// pipeline. A batch that needs no answer of the server before its pipeline
// (no fences, lock rows or new locks, no event rows: the renewals of known
// locks, which go into the renewal log) is its pipeline alone, which the
// server runs as one implicit transaction: one round trip, where BEGIN,
// the event ids and COMMIT took three more. Events are most of every batch and COPY streams them in the
// binary format with no statement to plan and no limit on parameters, where
// a multi-row INSERT would be cut into chunks of at most 65,535 parameters;
// nothing that COPY cannot do is needed of them (no ON CONFLICT: a retried
// write report is caught by the recorder before, and a duplicate that slips
// through fails the batch, as in SQLite).
func (s *Store) Apply(ctx context.Context, b audit.Batch) error {
	if b.Empty() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unreplicated.Store(false)
	w := &batchWriter{s: s, added: make(map[audit.LockKey]int64), parts: s.parts, highest: s.highest,
		highestLog: s.highestLog, logIDs: s.logIDs}
	err := w.write(ctx, b)
	if w.tx != nil {
		if err == nil {
			err = w.tx.Commit(ctx)
		}
		if err != nil {
			w.tx.Rollback(context.WithoutCancel(ctx))
		}
	}
	if err != nil {
		// Another writer may have made a partition this one tried to:
		// the next batch goes by the catalog.
		if parts, perr := loadPartitions(ctx, s.writer, s.parts.span); perr == nil {
			s.parts = parts
		}
		// A commit whose connection ended may have been made (kept by a
		// synchronous standby, say) with ids of the reserved block: the
		// next batch reserves a new one.
		s.logIDs = idBlock{}
		return fmt.Errorf("apply batch: %w", storageError(err))
	}
	// Only now are the new rows' ids real; had the transaction rolled
	// back, they would name no row.
	for k, id := range w.added {
		s.ids[k] = id
	}
	if w.mark != nil {
		s.syncMark = *w.mark
	}
	s.parts, s.highest, s.highestLog, s.logIDs = w.parts, w.highest, w.highestLog, w.logIDs
	s.commitRows += w.commitRows - w.folded
	s.marked = (s.marked && !w.looked) || b.Synced || b.SyncedToMark
	if s.unreplicated.Load() {
		// Committed, and kept in the state above, but not acknowledged: the
		// recorder answers as for a commit whose outcome it cannot know,
		// and a retry finds what is stored.
		return fmt.Errorf("apply batch: %w", errUnreplicated)
	}
	return nil
}

// batchWriter writes one batch inside one transaction.
type batchWriter struct {
	s     *Store                  // its ids and syncMark are read only here: those of committed batches
	tx    pgx.Tx                  // nil until a statement needs an answer before the pipeline (begin)
	added map[audit.LockKey]int64 // ids resolved or created in this transaction
	mark  *syncMark               // the batch's Batch.SyncMark, once it is committed
	parts partitions              // the renewals partitions, with those made in this transaction
	// highest is the newest event id given out, this batch's included,
	// and highestLog the newest renewal_log id.
	highest, highestLog int64
	logIDs              idBlock // the renewal_log ids reserved and not yet given out
	commitRows          int     // the renewal log's commit rows this batch writes
	looked              bool    // whether it looked for commit rows to fold (rebucket)
	folded              int     // and how many it folded

	pipe  pgx.Batch
	names []string // what each statement of pipe writes, for its error
}

// begin returns the batch's transaction, which begins at the first
// statement whose answer the batch needs before its pipeline.
func (w *batchWriter) begin(ctx context.Context) (pgx.Tx, error) {
	if w.tx == nil {
		tx, err := w.s.writer.Begin(ctx)
		if err != nil {
			return nil, err
		}
		w.tx = tx
	}
	return w.tx, nil
}

// queue adds a statement without results to the pipeline.
func (w *batchWriter) queue(name, sql string, args ...any) {
	w.pipe.Queue(sql, args...)
	w.names = append(w.names, name)
}

func (w *batchWriter) write(ctx context.Context, b audit.Batch) error {
	// First, so that a refused batch sends nothing more, and so that the
	// fence rows' locks order two replicas' commits of a source.
	if err := w.putFences(ctx, b.Fences); err != nil {
		return err
	}
	shaped := rowcodec.Shape(b)
	if err := w.putLocks(ctx, shaped.Locks); err != nil {
		return err
	}
	if err := w.resolve(ctx, b, shaped); err != nil {
		return err
	}
	for _, t := range shaped.Tenures {
		w.queue(fmt.Sprintf("tenure %d of lock %s", t.Seq, t.Lock), tenureUpsert, w.added[t.Lock], t.Seq, t.Holder,
			rowcodec.NullToken(t.Token), audit.Nanos(t.GrantedAt), t.Observed, t.Position, t.Renewals,
			audit.Nanos(t.LastRenewedAt), rowcodec.Ms(t.LeaseDuration), audit.Nanos(t.ExpiresAt),
			rowcodec.NullNanos(t.EndedAt), rowcodec.NullString(string(t.End)))
	}
	if err := w.putResources(shaped.Resources); err != nil {
		return err
	}
	if err := w.putEvents(ctx, b.Events); err != nil {
		return err
	}
	if err := w.putFindings(b.Findings); err != nil {
		return err
	}
	for _, c := range shaped.Cursors {
		w.queue("cursor of "+c.Source, `INSERT INTO cursors (source, position, at) VALUES ($1, $2, $3)
			ON CONFLICT (source) DO UPDATE SET position = excluded.position, at = excluded.at`,
			c.Source, c.Position, audit.Nanos(c.At))
	}
	w.putRenewed(shaped.Renewed)
	// The newest id given out stands for the newest event stored: the
	// store is the one writer, and an id given to a batch that rolled back
	// names no event.
	for _, f := range b.Refusals {
		w.queue("fence refusal of "+f.Source, `INSERT INTO fence_refusals (source, token, highest, at, replica, events, inputs, writes)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, f.Source, f.Token, f.Highest, audit.Nanos(f.At), f.Replica, f.Events, f.Inputs, f.Writes)
	}
	if len(b.RefusalsRecorded) > 0 {
		w.queue("recorded fence refusals", `DELETE FROM fence_refusals WHERE id = ANY($1)`, b.RefusalsRecorded)
	}
	if err := w.rebucket(ctx); err != nil {
		return err
	}
	w.putSyncMarks(b)
	if w.pipe.Len() > 0 {
		var res pgx.BatchResults
		if w.tx != nil {
			res = w.tx.SendBatch(ctx, &w.pipe)
		} else {
			res = w.s.writer.SendBatch(ctx, &w.pipe) // one implicit transaction
		}
		for _, name := range w.names {
			if _, err := res.Exec(); err != nil {
				res.Close()
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		if err := res.Close(); err != nil {
			return err
		}
	}
	if b.SyncMark {
		w.mark = &syncMark{event: w.highest, log: w.highestLog}
	}
	return nil
}

// syncMark is a sync mark: the newest event id and renewal_log id it
// covers.
type syncMark struct{ event, log int64 }

// putSyncMarks queues the batch's Synced and SyncedToMark: the store's
// marks, and with them every source's, or with SyncSources only those
// sources' marks; each of the events and of the renewal log. The newest id
// given out stands for the newest event or log row stored: this store is
// its sources' one writer (their owner, when replicas share the store),
// and an id given to a batch that rolled back names nothing.
func (w *batchWriter) putSyncMarks(b audit.Batch) {
	var mark syncMark
	switch {
	case b.Synced || (b.SyncedToMark && b.SyncMark):
		mark = syncMark{event: w.highest, log: w.highestLog}
	case b.SyncedToMark:
		mark = w.s.syncMark
	default:
		return
	}
	if len(b.SyncSources) == 0 {
		w.queue("sync", `UPDATE journal SET synced_event = greatest(synced_event, $1)`, mark.event)
		w.queue("sync", `UPDATE source_fences SET synced_event = greatest(synced_event, $1)`, mark.event)
		w.queue("sync of the renewal log", `UPDATE renewal_log_marks SET synced_log = greatest(synced_log, $1)`, mark.log)
		return
	}
	w.queue("sync of sources", `UPDATE source_fences SET synced_event = greatest(synced_event, $1) WHERE source = ANY($2)`,
		mark.event, b.SyncSources)
	w.queue("sync of the sources' renewal log", `INSERT INTO renewal_log_marks (source, synced_log)
		SELECT unnest($1::text[]), $2 ON CONFLICT (source)
		DO UPDATE SET synced_log = greatest(renewal_log_marks.synced_log, excluded.synced_log)`, b.SyncSources, mark.log)
}

// putFences checks and moves the batch's fences in one round trip, failing
// with EFENCED at the first that is older than its source's. An upsert
// waits for another transaction that holds the fence's row, then judges by
// what that one committed.
func (w *batchWriter) putFences(ctx context.Context, fences []audit.Fence) error {
	if len(fences) == 0 {
		return nil
	}
	var pipe pgx.Batch
	moved := make([]bool, len(fences))
	for i, f := range fences {
		pipe.Queue(`INSERT INTO source_fences (source, token, synced_event) VALUES ($1, $2, (SELECT synced_event FROM journal))
			ON CONFLICT (source) DO UPDATE SET token = excluded.token WHERE source_fences.token <= excluded.token
			RETURNING true`, f.Source, f.Token).QueryRow(func(row pgx.Row) error {
			err := row.Scan(&moved[i])
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		})
	}
	tx, err := w.begin(ctx)
	if err != nil {
		return err
	}
	if err := tx.SendBatch(ctx, &pipe).Close(); err != nil {
		return fmt.Errorf("fences of %d sources from %s: %w", len(fences), fences[0].Source, err)
	}
	for i, f := range fences {
		if moved[i] {
			continue
		}
		var highest int64
		if err := tx.QueryRow(ctx, `SELECT token FROM source_fences WHERE source = $1`, f.Source).Scan(&highest); err != nil {
			return fmt.Errorf("fence of source %s: %w", f.Source, err)
		}
		return audit.FencedError(f, highest)
	}
	for _, f := range fences {
		// A source's first fence starts its log mark at the store's, as
		// its event mark starts at the journal's.
		w.queue("renewal log mark of source "+f.Source, `INSERT INTO renewal_log_marks (source, synced_log)
			SELECT $1, synced_log FROM renewal_log_marks WHERE source = '' ON CONFLICT (source) DO NOTHING`, f.Source)
	}
	return nil
}

const lockUpsert = `INSERT INTO locks (source, name, kind, class, state, holder, token,
		acquired_at, renewed_at, expires_at, lease_duration_ms, changed_at, renewed_seq, renewals)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
	ON CONFLICT (source, name) DO UPDATE SET
		kind = excluded.kind, class = excluded.class, state = excluded.state,
		holder = excluded.holder, token = excluded.token, acquired_at = excluded.acquired_at,
		renewed_at = excluded.renewed_at, expires_at = excluded.expires_at,
		lease_duration_ms = excluded.lease_duration_ms, changed_at = excluded.changed_at,
		renewed_seq = excluded.renewed_seq, renewals = excluded.renewals
	RETURNING id`

const trackUpsert = `INSERT INTO lock_tracks (lock_id, recent_from, state) VALUES ($1, $2, $3)
	ON CONFLICT (lock_id) DO UPDATE SET recent_from = excluded.recent_from, state = excluded.state`

// putLocks upserts the lock rows in one pipeline, for their ids, and
// queues their track states.
func (w *batchWriter) putLocks(ctx context.Context, states []audit.TrackState) error {
	if len(states) == 0 {
		return nil
	}
	var pipe pgx.Batch
	ids := make([]int64, len(states))
	encoded := make([]string, len(states))
	for i, st := range states {
		var err error
		if encoded[i], err = rowcodec.EncodeTrackState(st); err != nil {
			return err
		}
		pipe.Queue(lockUpsert, rowcodec.LockRow(st)...).QueryRow(func(row pgx.Row) error { return row.Scan(&ids[i]) })
	}
	tx, err := w.begin(ctx)
	if err != nil {
		return err
	}
	if err := tx.SendBatch(ctx, &pipe).Close(); err != nil {
		return fmt.Errorf("%d locks from %s: %w", len(states), states[0].Lock.Key(), err)
	}
	for i, st := range states {
		w.added[st.Lock.Key()] = ids[i]
		w.queue("track state of lock "+st.Lock.Key().String(), trackUpsert, ids[i], rowcodec.RecentFrom(st), encoded[i])
	}
	return nil
}

// resolve finds or creates the rows of every lock the batch names besides
// its lock rows.
func (w *batchWriter) resolve(ctx context.Context, b audit.Batch, shaped rowcodec.Shaped) error {
	for _, t := range shaped.Tenures {
		if err := w.lockID(ctx, t.Lock); err != nil {
			return err
		}
	}
	for _, e := range b.Events {
		if err := w.lockID(ctx, e.Lock); err != nil {
			return err
		}
	}
	for _, f := range b.Findings {
		if err := w.lockID(ctx, f.Lock); err != nil {
			return err
		}
	}
	for _, r := range shaped.Renewed {
		if err := w.lockID(ctx, r.Lock); err != nil {
			return err
		}
	}
	for _, r := range shaped.Resources {
		if err := w.lockID(ctx, r.Lock); err != nil {
			return err
		}
	}
	return nil
}

// putResources queues the resource states the batch changed, a row each.
func (w *batchWriter) putResources(rows []audit.ResourceRow) error {
	for _, r := range rows {
		state, err := rowcodec.EncodeResourceState(r)
		if err != nil {
			return err
		}
		w.queue("resource "+r.Resource+" of lock "+r.Lock.String(), `INSERT INTO lock_resources (lock_id, resource, state) VALUES ($1, $2, $3)
			ON CONFLICT (lock_id, resource) DO UPDATE SET state = excluded.state`, w.added[r.Lock], r.Resource, state)
	}
	return nil
}

// lockID resolves a lock key into w.added, inserting a bare lock row if
// there is none.
func (w *batchWriter) lockID(ctx context.Context, key audit.LockKey) error {
	if _, ok := w.added[key]; ok {
		return nil
	}
	if id, ok := w.s.ids[key]; ok {
		w.added[key] = id
		return nil
	}
	tx, err := w.begin(ctx)
	if err != nil {
		return err
	}
	var id int64
	err = tx.QueryRow(ctx, `SELECT id FROM locks WHERE source = $1 AND name = $2`, key.Source, key.Name).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		err = tx.QueryRow(ctx, `INSERT INTO locks (source, name) VALUES ($1, $2) RETURNING id`, key.Source, key.Name).Scan(&id)
	}
	if err != nil {
		return fmt.Errorf("resolve lock %s: %w", key, err)
	}
	w.added[key] = id
	return nil
}

const tenureUpsert = `INSERT INTO tenures (lock_id, seq, holder, token, granted_at,
		observed, position, renewals, last_renewed_at, lease_duration_ms, expires_at, ended_at, end_reason)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
	ON CONFLICT (lock_id, seq) DO UPDATE SET
		holder = excluded.holder, token = excluded.token, granted_at = excluded.granted_at,
		observed = excluded.observed, position = excluded.position, renewals = excluded.renewals,
		last_renewed_at = excluded.last_renewed_at, lease_duration_ms = excluded.lease_duration_ms,
		expires_at = excluded.expires_at, ended_at = excluded.ended_at, end_reason = excluded.end_reason`

// putEvents writes the events: the renewals the renewal log keeps as its
// rows (renewallog.Split), queued, and the others copied in, with ids
// given out in their order; and it queues the newest event per source and
// the blind windows' reasons.
func (w *batchWriter) putEvents(ctx context.Context, events []audit.Event) error {
	if len(events) == 0 {
		return nil
	}
	logged, rest := []renewallog.Row(nil), events
	if !w.s.renewalRows {
		var err error
		logged, rest, err = renewallog.Split(events, func(key audit.LockKey) (int64, error) { return w.added[key], nil })
		if err != nil {
			return err
		}
	}
	ids, err := w.eventIDs(ctx, len(rest))
	if err != nil {
		return err
	}
	logIDs, err := w.newLogIDs(ctx, len(logged))
	if err != nil {
		return err
	}
	w.putLog(logged, logIDs)
	w.commitRows = len(logged)
	rows := make([][]any, 0, len(rest))
	for i, e := range rest {
		if e.Kind == audit.EventBlind {
			if from, to, reason, ok := rowcodec.BlindInterval(e); ok {
				w.queue("blind window of source "+e.Lock.Source, `INSERT INTO source_blinds (source, from_at, to_at, reason)
					VALUES ($1, $2, $3, $4) ON CONFLICT (source, from_at, to_at) DO UPDATE SET reason = excluded.reason`,
					e.Lock.Source, audit.Nanos(from), audit.Nanos(to), reason)
			}
		}
		row, err := w.eventRow(ids[i], e)
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	if len(rows) > 0 {
		if w.parts, err = copyEvents(ctx, w.tx, w.parts, rows); err != nil { // begun by eventIDs
			return fmt.Errorf("%d events from %s event of lock %s: %w", len(rows), rest[0].Kind, rest[0].Lock, err)
		}
	}
	w.putLastEvents(events)
	return nil
}

// putLastEvents queues the newest event of each source among events.
func (w *batchWriter) putLastEvents(events []audit.Event) {
	last := make(map[string]int64) // newest event per source in this batch
	var sources []string
	for _, e := range events {
		at := audit.Nanos(e.At)
		if newest, ok := last[e.Lock.Source]; !e.At.IsZero() && (!ok || at > newest) {
			if !ok {
				sources = append(sources, e.Lock.Source)
			}
			last[e.Lock.Source] = at
		}
	}
	for _, src := range sources {
		w.queue("last event of source "+src, `INSERT INTO source_events (source, last_event_at) VALUES ($1, $2)
			ON CONFLICT (source) DO UPDATE SET last_event_at = greatest(source_events.last_event_at, excluded.last_event_at)`,
			src, last[src])
	}
}

// eventIDs gives out n event ids, in order, from the events table's
// sequence: the batch's events go to two tables, and their ids must still
// follow the batch's order.
func (w *batchWriter) eventIDs(ctx context.Context, n int) ([]int64, error) {
	if n == 0 {
		return nil, nil
	}
	tx, err := w.begin(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT nextval('events_id_seq') FROM generate_series(1, $1)`, n)
	if err != nil {
		return nil, fmt.Errorf("event ids: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("event ids: %w", err)
	}
	if len(ids) != n || !slices.IsSorted(ids) {
		return nil, fmt.Errorf("event ids: got %d ids, not %d in order", len(ids), n)
	}
	w.highest = max(w.highest, ids[n-1])
	return ids, nil
}

// logIDBlock is how many renewal_log ids one nextval of its sequence
// reserves: migration 0016's INCREMENT BY.
const logIDBlock = 4096

// idBlock is a block of reserved renewal_log ids, from next to end.
type idBlock struct{ next, end int64 }

// newLogIDs gives out n renewal_log ids, in order, from the block the
// store has reserved, reserving another when it runs out: a commit's log
// rows mostly need no round trip for their ids. An id reserved and never
// given out (the store closed, or a batch failed, which drops the block)
// is a gap, which neither the marks nor the reads mind.
func (w *batchWriter) newLogIDs(ctx context.Context, n int) ([]int64, error) {
	if n == 0 {
		return nil, nil
	}
	ids := make([]int64, n)
	for i := range ids {
		if w.logIDs.next == w.logIDs.end {
			var q querier = w.s.writer
			if w.tx != nil {
				q = w.tx
			}
			var first int64
			if err := q.QueryRow(ctx, `SELECT nextval('renewal_log_id_seq')`).Scan(&first); err != nil {
				return nil, fmt.Errorf("renewal log ids: %w", err)
			}
			w.logIDs = idBlock{next: first, end: first + logIDBlock}
		}
		ids[i] = w.logIDs.next
		w.logIDs.next++
	}
	w.highestLog = max(w.highestLog, ids[n-1])
	return ids, nil
}

// putLog queues the insert of the log rows, with their ids.
func (w *batchWriter) putLog(rows []renewallog.Row, ids []int64) {
	if len(rows) == 0 {
		return
	}
	w.queue(fmt.Sprintf("%d renewal log rows", len(rows)), logRowsInsert, logRowsArgs(rows, ids)...)
}

// logRowsInsert inserts log rows with their ids, logRowsArgs: one
// statement over arrays, however many rows.
const logRowsInsert = `INSERT INTO renewal_log (id, bucket, first_at, last_at, renewals, data)
	OVERRIDING SYSTEM VALUE SELECT * FROM unnest($1::bigint[], $2::int[], $3::bigint[], $4::bigint[], $5::int[], $6::bytea[])`

// logRowsArgs are logRowsInsert's arguments for rows and their ids.
func logRowsArgs(rows []renewallog.Row, ids []int64) []any {
	n := len(rows)
	buckets, counts := make([]int32, n), make([]int32, n)
	firsts, lasts, data := make([]int64, n), make([]int64, n), make([][]byte, n)
	for i, r := range rows {
		buckets[i], counts[i], firsts[i], lasts[i], data[i] = int32(r.Bucket), int32(r.Renewals), r.FirstAt, r.LastAt, r.Data
	}
	return []any{ids, buckets, firsts, lasts, counts, data}
}

// eventRow returns the events row (eventColumns) of one event
// (rowcodec.EventRowOf).
func (w *batchWriter) eventRow(id int64, e audit.Event) ([]any, error) {
	r, err := rowcodec.EventRowOf(e)
	if err != nil {
		return nil, err
	}
	return []any{id, w.added[e.Lock], string(e.Kind), audit.Nanos(e.At), r.Holder, r.Token, rowcodec.Ms(e.TTL),
		e.Position, e.Inferred, e.Resource, rowcodec.NullString(e.RequestID), r.Detail, r.Seq, r.Margin, r.RenewedAt}, nil
}

// findingInsert copies the lock's class into the finding: the batch's lock
// rows are written before its findings.
const findingInsert = `INSERT INTO findings (lock_id, class, kind, severity, at, until,
		summary, tokens, holders, resource)
	VALUES ($1, coalesce((SELECT class FROM locks WHERE id = $1), 'lock'), $2, $3, $4, $5, $6, $7, $8, $9)`

func (w *batchWriter) putFindings(findings []audit.Finding) error {
	for _, f := range findings {
		name := fmt.Sprintf("%s finding of lock %s", f.Kind, f.Lock)
		tokens, err := rowcodec.JSONArray(f.Tokens)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		holders, err := rowcodec.JSONArray(f.Holders)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		w.queue(name, findingInsert, w.added[f.Lock], string(f.Kind), string(rowcodec.Severity(f)),
			audit.Nanos(f.At), rowcodec.NullNanos(f.Until), f.Summary, tokens, holders, f.Resource)
		if f.Kind == audit.FindingBlindWindow {
			w.queue("blind window of source "+f.Lock.Source, `INSERT INTO source_blinds (source, from_at, to_at, locks)
				VALUES ($1, $2, $3, 1) ON CONFLICT (source, from_at, to_at) DO UPDATE SET locks = source_blinds.locks + 1`,
				f.Lock.Source, audit.Nanos(f.At), audit.Nanos(rowcodec.BlindUntil(f)))
		}
	}
	return nil
}

// putRenewed queues the renewal columns of locks, touching no other
// column: one statement over arrays, however many locks a sync writes. The
// held tenures' rows are left as they were granted: readers take their
// renewals from the lock row (migration 0017).
func (w *batchWriter) putRenewed(renewals []audit.Renewal) {
	if len(renewals) == 0 {
		return
	}
	n := len(renewals)
	ids, seqs, counts := make([]int64, n), make([]int64, n), make([]int64, n)
	renewed, expires, durations := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, r := range renewals {
		ids[i], seqs[i], counts[i] = w.added[r.Lock], r.Seq, r.Renewals
		renewed[i], expires[i], durations[i] = audit.Nanos(r.RenewedAt), audit.Nanos(r.ExpiresAt), rowcodec.Ms(r.LeaseDuration)
	}
	w.queue(fmt.Sprintf("renewals of %d locks from %s", n, renewals[0].Lock), `UPDATE locks l
		SET renewed_at = v.renewed_at, expires_at = v.expires_at, lease_duration_ms = v.ms, renewed_seq = v.seq, renewals = v.renewals
		FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[])
			AS v (id, renewed_at, expires_at, ms, seq, renewals)
		WHERE l.id = v.id`, ids, renewed, expires, durations, seqs, counts)
}

// StoredWrites returns the write events stored with any of the request ids,
// under any lock and resource, each with its Lock set: one array parameter,
// read from the request id index.
func (s *Store) StoredWrites(ctx context.Context, ids []string) ([]audit.Event, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	rows, err := s.reader.Query(ctx, `SELECT `+sqlread.EventColumns+`, l.source, l.name FROM `+sqlread.EventTables("events", "")+`
		JOIN locks l ON l.id = e.lock_id WHERE e.request_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("stored writes: %w", storageError(err))
	}
	events, err := sqlread.Collect(rows, sqlread.EventWithKey)
	if err != nil {
		return nil, fmt.Errorf("stored writes: %w", storageError(err))
	}
	return events, nil
}
