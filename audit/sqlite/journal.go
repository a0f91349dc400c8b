package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
)

// Apply writes b in one transaction: lock rows and the tracker's memory of
// them, tenures, events, findings, cursors, then the renewal columns of
// b.Renewed. Later entries for the same lock, tenure or cursor replace earlier
// ones. Locks are matched by key (TrackState.Lock.ID is ignored); a lock
// referenced only by a tenure, event or finding gets a bare row (class lock,
// state free). An empty Finding.Severity is filled from its kind. Concurrent
// calls are serialized.
func (s *Store) Apply(ctx context.Context, b audit.Batch) error {
	if b.Empty() {
		return nil
	}
	var w *batchWriter
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		w = &batchWriter{s: s, tx: tx, added: make(map[audit.LockKey]int64)}
		return w.write(ctx, b)
	}, func() {
		// Only now are the new rows' ids real; had the transaction rolled
		// back, they could be handed out again to other locks.
		for k, id := range w.added {
			s.ids[k] = id
		}
		if w.mark != nil {
			s.syncMark, s.syncLogMark = w.mark.event, w.mark.log
		}
		s.foldIdle = (s.foldIdle || (w.looked && w.folded == 0)) && !b.Synced && !b.SyncedToMark
	})
	if err != nil {
		return fmt.Errorf("apply batch: %w", storageError(err))
	}
	return nil
}

// writeTx runs fn in a transaction on the writer, between batches, and
// then committed (if set) while it still holds the writer.
func (s *Store) writeTx(ctx context.Context, fn func(*sql.Tx) error, committed func()) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Before the transaction takes the writer's one connection.
	if err := s.prepareWriter(ctx); err != nil {
		return err
	}
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if committed != nil {
		committed()
	}
	s.ckpt.committed()
	return nil
}

// batchWriter writes one batch inside one transaction.
type batchWriter struct {
	s     *Store // its ids and syncMark are read only here: those of committed batches
	tx    *sql.Tx
	added map[audit.LockKey]int64 // ids resolved or created in this transaction
	mark  *syncMark               // the batch's Batch.SyncMark, once it is committed
	// looked is whether it looked for commit rows to fold (rebucket), and
	// folded how many it folded.
	looked bool
	folded int
}

// syncMark is a sync mark: the newest event row and log row it covers.
type syncMark struct{ event, log int64 }

// writerQueries are the statements Apply runs. They are compiled once, on
// the writer's one connection, before the first batch's transaction takes it.
var writerQueries = []string{lockUpsert, trackUpsert, resourceUpsert, lockRenewal, tenureUpsert,
	eventInsert + eventRow, eventInsertMany, findingInsert,
	cursorUpsert, sourceEventUpsert, journalSyncedTo, fencesSyncedTo, sourcesSyncedTo, fenceUpsert,
	logInsert, logInsertMany, logMarksSyncedTo, logSourcesSyncedTo, logFenceMark}

// The statements nearly every commit runs once: compiled once like the
// rest, since parsing them cost more than running them (a tenth of the CPU
// of a stream of one-event commits).
const (
	cursorUpsert = `INSERT INTO cursors (source, position, at) VALUES (?, ?, ?)
		ON CONFLICT (source) DO UPDATE SET position = excluded.position, at = excluded.at`
	sourceEventUpsert = `INSERT INTO source_events (source, last_event_at) VALUES (?, ?)
		ON CONFLICT (source) DO UPDATE SET last_event_at = max(last_event_at, excluded.last_event_at)`
	journalSyncedTo = `UPDATE journal SET synced_event = max(synced_event, ?)`
	// A sync of the whole store raises every source's mark with its own.
	fencesSyncedTo  = `UPDATE source_fences SET synced_event = max(synced_event, ?)`
	sourcesSyncedTo = `UPDATE source_fences SET synced_event = max(synced_event, ?)
		WHERE source IN (SELECT value FROM json_each(?))`
)

func (s *Store) prepareWriter(ctx context.Context) error {
	for _, q := range writerQueries {
		if _, ok := s.prepared[q]; ok {
			continue
		}
		ps, err := s.writer.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("prepare %.40q: %w", q, err)
		}
		s.prepared[q] = ps
	}
	return nil
}

// stmt returns one of writerQueries for use in the transaction.
func (w *batchWriter) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	ps, ok := w.s.prepared[q]
	if !ok {
		return nil, fmt.Errorf("query not prepared: %.40q", q)
	}
	return w.tx.StmtContext(ctx, ps), nil
}

// exec runs the prepared statement q in the batch's transaction.
func (w *batchWriter) exec(ctx context.Context, q string, args ...any) error {
	st, err := w.stmt(ctx, q)
	if err != nil {
		return err
	}
	_, err = st.ExecContext(ctx, args...)
	return err
}

func (w *batchWriter) write(ctx context.Context, b audit.Batch) error {
	// First, so that a refused batch writes nothing before it fails.
	if err := w.putFences(ctx, b.Fences); err != nil {
		return err
	}
	shaped := rowcodec.Shape(b)
	if err := w.putLocks(ctx, shaped.Locks); err != nil {
		return err
	}
	if err := w.putTenures(ctx, shaped.Tenures); err != nil {
		return err
	}
	if err := w.putResources(ctx, shaped.Resources); err != nil {
		return err
	}
	if err := w.putEvents(ctx, b.Events); err != nil {
		return err
	}
	if err := w.putFindings(ctx, b.Findings); err != nil {
		return err
	}
	for _, c := range shaped.Cursors {
		if err := w.exec(ctx, cursorUpsert, c.Source, c.Position, nanos(c.At)); err != nil {
			return fmt.Errorf("cursor of %s: %w", c.Source, err)
		}
	}
	if err := w.putRenewed(ctx, shaped.Renewed); err != nil {
		return err
	}
	if err := w.putRefusals(ctx, b); err != nil {
		return err
	}
	if err := w.rebucket(ctx); err != nil {
		return err
	}
	return w.putSyncMarks(ctx, b)
}

// putRefusals logs the batch's fence refusals and deletes those it records.
func (w *batchWriter) putRefusals(ctx context.Context, b audit.Batch) error {
	for _, f := range b.Refusals {
		if _, err := w.tx.ExecContext(ctx, refusalInsert, f.Source, f.Token, f.Highest, nanos(f.At), f.Replica,
			f.Events, f.Inputs, f.Writes); err != nil {
			return fmt.Errorf("log the fence refusal of %s: %w", f.Source, err)
		}
	}
	for _, id := range b.RefusalsRecorded {
		if _, err := w.tx.ExecContext(ctx, `DELETE FROM fence_refusals WHERE id = ?`, id); err != nil {
			return fmt.Errorf("fence refusal %d: %w", id, err)
		}
	}
	return nil
}

// putSyncMarks records the batch's Synced, SyncMark and SyncedToMark: the
// store's mark, and with it every source's, or with SyncSources only those
// sources' marks.
func (w *batchWriter) putSyncMarks(ctx context.Context, b audit.Batch) error {
	if !b.Synced && !b.SyncMark && !b.SyncedToMark {
		return nil
	}
	var newest syncMark
	if err := w.tx.QueryRowContext(ctx, `SELECT coalesce(max(id), 0), coalesce((SELECT max(id) FROM renewal_log), 0) FROM events`).
		Scan(&newest.event, &newest.log); err != nil {
		return fmt.Errorf("mark sync: %w", err)
	}
	mark := syncMark{w.s.syncMark, w.s.syncLogMark}
	if b.SyncMark {
		mark = newest
		w.mark = &mark
	}
	switch {
	case b.Synced:
		mark = newest
	case !b.SyncedToMark:
		return nil
	}
	var err error
	if len(b.SyncSources) == 0 {
		err = w.exec(ctx, journalSyncedTo, mark.event)
		if err == nil {
			err = w.exec(ctx, fencesSyncedTo, mark.event)
		}
		if err == nil {
			err = w.exec(ctx, logMarksSyncedTo, mark.log)
		}
	} else {
		sources := jsonList(b.SyncSources)
		err = w.exec(ctx, sourcesSyncedTo, mark.event, sources)
		if err == nil {
			err = w.exec(ctx, logSourcesSyncedTo, sources, mark.log)
		}
	}
	if err != nil {
		return fmt.Errorf("record sync: %w", err)
	}
	return nil
}

// jsonList is a list of strings or numbers as a JSON array, for json_each.
func jsonList[T string | int64](list []T) string {
	b, _ := json.Marshal(list)
	return string(b)
}

const refusalInsert = `INSERT INTO fence_refusals (source, token, highest, at, replica, events, inputs, writes)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?)`

// fenceUpsert moves a source's fence up to the batch's token, and returns
// no row if the fence is already higher.
const fenceUpsert = `INSERT INTO source_fences (source, token, synced_event) VALUES (?, ?, (SELECT synced_event FROM journal))
	ON CONFLICT (source) DO UPDATE SET token = excluded.token WHERE source_fences.token <= excluded.token
	RETURNING token`

// putFences checks and moves the batch's fences, failing with EFENCED at
// the first that is older than its source's.
func (w *batchWriter) putFences(ctx context.Context, fences []audit.Fence) error {
	if len(fences) == 0 {
		return nil
	}
	st, err := w.stmt(ctx, fenceUpsert)
	if err != nil {
		return fmt.Errorf("prepare fence upsert: %w", err)
	}
	for _, f := range fences {
		var token int64
		err := st.QueryRowContext(ctx, f.Source, f.Token).Scan(&token)
		if errors.Is(err, sql.ErrNoRows) {
			var highest int64
			if err := w.tx.QueryRowContext(ctx, `SELECT token FROM source_fences WHERE source = ?`, f.Source).Scan(&highest); err != nil {
				return fmt.Errorf("fence of source %s: %w", f.Source, err)
			}
			return audit.FencedError(f, highest)
		}
		if err != nil {
			return fmt.Errorf("fence of source %s: %w", f.Source, err)
		}
		if err := w.exec(ctx, logFenceMark, f.Source); err != nil {
			return fmt.Errorf("log mark of source %s: %w", f.Source, err)
		}
	}
	return nil
}

const lockUpsert = `INSERT INTO locks (source, name, kind, class, state, holder, token,
		acquired_at, renewed_at, expires_at, lease_duration_ms, changed_at, renewed_seq, renewals)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (source, name) DO UPDATE SET
		kind = excluded.kind, class = excluded.class, state = excluded.state,
		holder = excluded.holder, token = excluded.token, acquired_at = excluded.acquired_at,
		renewed_at = excluded.renewed_at, expires_at = excluded.expires_at,
		lease_duration_ms = excluded.lease_duration_ms, changed_at = excluded.changed_at,
		renewed_seq = excluded.renewed_seq, renewals = excluded.renewals
	RETURNING id`

const trackUpsert = `INSERT INTO lock_tracks (lock_id, recent_from, state) VALUES (?, ?, ?)
	ON CONFLICT (lock_id) DO UPDATE SET recent_from = excluded.recent_from, state = excluded.state`

func (w *batchWriter) putLocks(ctx context.Context, states []audit.TrackState) error {
	if len(states) == 0 {
		return nil
	}
	locks, err := w.stmt(ctx, lockUpsert)
	if err != nil {
		return fmt.Errorf("prepare lock upsert: %w", err)
	}
	tracks, err := w.stmt(ctx, trackUpsert)
	if err != nil {
		return fmt.Errorf("prepare track upsert: %w", err)
	}
	for _, st := range states {
		l := st.Lock
		state, err := rowcodec.EncodeTrackState(st)
		if err != nil {
			return err
		}
		var id int64
		if err := locks.QueryRowContext(ctx, rowcodec.LockRow(st)...).Scan(&id); err != nil {
			return fmt.Errorf("lock %s: %w", l.Key(), err)
		}
		w.added[l.Key()] = id
		if _, err := tracks.ExecContext(ctx, id, rowcodec.RecentFrom(st), state); err != nil {
			return fmt.Errorf("lock %s: track state: %w", l.Key(), err)
		}
	}
	return nil
}

const resourceUpsert = `INSERT INTO lock_resources (lock_id, resource, state) VALUES (?, ?, ?)
	ON CONFLICT (lock_id, resource) DO UPDATE SET state = excluded.state`

// putResources writes the resource states the batch changed, a row each.
func (w *batchWriter) putResources(ctx context.Context, rows []audit.ResourceRow) error {
	if len(rows) == 0 {
		return nil
	}
	stmt, err := w.stmt(ctx, resourceUpsert)
	if err != nil {
		return fmt.Errorf("prepare resource upsert: %w", err)
	}
	for _, r := range rows {
		id, err := w.lockID(ctx, r.Lock)
		if err != nil {
			return err
		}
		state, err := rowcodec.EncodeResourceState(r)
		if err != nil {
			return err
		}
		if _, err := stmt.ExecContext(ctx, id, r.Resource, state); err != nil {
			return fmt.Errorf("lock %s: resource %s: %w", r.Lock, r.Resource, err)
		}
	}
	return nil
}

// renewalsPerUpdate is how many locks one renewal UPDATE carries: a sync
// writes every lock renewed since the last, often thousands.
const renewalsPerUpdate = 64

// renewalColumns are the columns of lockRenewal's VALUES rows.
const renewalColumns = 6

// lockRenewal updates renewalsPerUpdate lock rows from a VALUES list.
var lockRenewal = func() string {
	row := "(?" + strings.Repeat(", ?", renewalColumns-1) + ")"
	return `UPDATE locks SET renewed_at = v.column2, expires_at = v.column3, lease_duration_ms = v.column4,
		renewed_seq = v.column5, renewals = v.column6
		FROM (VALUES ` + row + strings.Repeat(", "+row, renewalsPerUpdate-1) + `) AS v WHERE locks.id = v.column1`
}()

// putRenewed brings the renewal columns of locks up to date, touching no
// other column. The held tenures' rows are left as they were granted:
// readers take their renewals from the lock row (migration 0027).
func (w *batchWriter) putRenewed(ctx context.Context, renewals []audit.Renewal) error {
	if len(renewals) == 0 {
		return nil
	}
	locks, err := w.stmt(ctx, lockRenewal)
	if err != nil {
		return fmt.Errorf("prepare lock renewal: %w", err)
	}
	args := make([]any, 0, renewalColumns*renewalsPerUpdate)
	for start := 0; start < len(renewals); start += renewalsPerUpdate {
		chunk := renewals[start:min(start+renewalsPerUpdate, len(renewals))]
		args = args[:0]
		for _, r := range chunk {
			id, err := w.lockID(ctx, r.Lock)
			if err != nil {
				return err
			}
			args = append(args, id, nanos(r.RenewedAt), nanos(r.ExpiresAt), rowcodec.Ms(r.LeaseDuration), r.Seq, r.Renewals)
		}
		// A short last chunk repeats its first row: updating a row twice to
		// the same values changes nothing.
		for n := len(chunk); n < renewalsPerUpdate; n++ {
			args = append(args, args[:renewalColumns]...)
		}
		if _, err := locks.ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("renewals of %d locks from %s: %w", len(chunk), chunk[0].Lock, err)
		}
	}
	return nil
}

// lockID resolves a lock key, inserting a bare lock row if there is none.
func (w *batchWriter) lockID(ctx context.Context, key audit.LockKey) (int64, error) {
	if id, ok := w.added[key]; ok {
		return id, nil
	}
	if id, ok := w.s.ids[key]; ok {
		return id, nil
	}
	var id int64
	err := w.tx.QueryRowContext(ctx, `SELECT id FROM locks WHERE source = ? AND name = ?`, key.Source, key.Name).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		err = w.tx.QueryRowContext(ctx, `INSERT INTO locks (source, name, acquired_at, renewed_at, expires_at, changed_at)
			VALUES (?1, ?2, ?3, ?3, ?3, ?3) RETURNING id`, key.Source, key.Name, audit.NoNanos).Scan(&id)
	}
	if err != nil {
		return 0, fmt.Errorf("resolve lock %s: %w", key, err)
	}
	w.added[key] = id
	return id, nil
}

const tenureUpsert = `INSERT INTO tenures (lock_id, seq, holder, token, granted_at,
		observed, position, renewals, last_renewed_at, lease_duration_ms, expires_at, ended_at, end_reason)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (lock_id, seq) DO UPDATE SET
		holder = excluded.holder, token = excluded.token, granted_at = excluded.granted_at,
		observed = excluded.observed, position = excluded.position, renewals = excluded.renewals,
		last_renewed_at = excluded.last_renewed_at, lease_duration_ms = excluded.lease_duration_ms,
		expires_at = excluded.expires_at, ended_at = excluded.ended_at, end_reason = excluded.end_reason`

func (w *batchWriter) putTenures(ctx context.Context, tenures []audit.Tenure) error {
	if len(tenures) == 0 {
		return nil
	}
	stmt, err := w.stmt(ctx, tenureUpsert)
	if err != nil {
		return fmt.Errorf("prepare tenure insert: %w", err)
	}
	for _, t := range tenures {
		id, err := w.lockID(ctx, t.Lock)
		if err != nil {
			return err
		}
		if _, err := stmt.ExecContext(ctx, id, t.Seq, t.Holder, rowcodec.NullToken(t.Token), nanos(t.GrantedAt),
			t.Observed, t.Position, t.Renewals, nanos(t.LastRenewedAt), rowcodec.Ms(t.LeaseDuration),
			nanos(t.ExpiresAt), rowcodec.NullNanos(t.EndedAt), rowcodec.NullString(string(t.End))); err != nil {
			return fmt.Errorf("tenure %d of lock %s: %w", t.Seq, t.Lock, err)
		}
	}
	return nil
}

// eventsPerInsert is how many events one INSERT statement carries: far fewer
// statement executions on big batches, within maxVars parameters.
const eventsPerInsert = 32

const eventInsert = `INSERT INTO events (lock_id, kind, at, holder, token, ttl_ms,
			position, inferred, resource, request_id, detail, seq, margin_permille, renewed_at) VALUES `

const eventRow = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// eventCols is the number of columns eventArgs returns.
const eventCols = 14

var eventInsertMany = eventInsert + eventRow + strings.Repeat(", "+eventRow, eventsPerInsert-1)

func (w *batchWriter) putEvents(ctx context.Context, events []audit.Event) error {
	if len(events) == 0 {
		return nil
	}
	last := make(map[string]int64) // newest event per source in this batch
	for _, e := range events {
		if newest, ok := last[e.Lock.Source]; !e.At.IsZero() && (!ok || nanos(e.At) > newest) {
			last[e.Lock.Source] = nanos(e.At)
		}
	}
	events, err := w.putLog(ctx, events)
	if err != nil {
		return err
	}
	if err := w.putEventRows(ctx, events); err != nil {
		return err
	}
	for src, at := range last {
		if err := w.exec(ctx, sourceEventUpsert, src, at); err != nil {
			return fmt.Errorf("last event of source %s: %w", src, err)
		}
	}
	return nil
}

// putEventRows inserts events as rows.
func (w *batchWriter) putEventRows(ctx context.Context, events []audit.Event) error {
	if len(events) == 0 {
		return nil
	}
	one, err := w.stmt(ctx, eventInsert+eventRow)
	if err != nil {
		return fmt.Errorf("prepare event insert: %w", err)
	}
	var many *sql.Stmt
	if len(events) >= eventsPerInsert {
		many, err = w.stmt(ctx, eventInsertMany)
		if err != nil {
			return fmt.Errorf("prepare event insert: %w", err)
		}
	}
	args := make([]any, 0, eventCols*eventsPerInsert)
	for start := 0; start < len(events); start += eventsPerInsert {
		chunk := events[start:min(start+eventsPerInsert, len(events))]
		args = args[:0]
		for _, e := range chunk {
			if e.Kind == audit.EventBlind {
				if err := w.putBlindReason(ctx, e); err != nil {
					return err
				}
			}
			row, err := w.eventArgs(ctx, e)
			if err != nil {
				return err
			}
			args = append(args, row...)
		}
		if len(chunk) == eventsPerInsert {
			// A failed statement changes nothing, so on error the rows are
			// retried one by one to name the event that failed.
			if _, err := many.ExecContext(ctx, args...); err == nil {
				continue
			}
		}
		for i, e := range chunk {
			if _, err := one.ExecContext(ctx, args[eventCols*i:eventCols*(i+1)]...); err != nil {
				return fmt.Errorf("%s event of lock %s: %w", e.Kind, e.Lock, err)
			}
		}
	}
	return nil
}

// eventArgs returns the column values of one event row
// (rowcodec.EventRowOf).
func (w *batchWriter) eventArgs(ctx context.Context, e audit.Event) ([]any, error) {
	id, err := w.lockID(ctx, e.Lock)
	if err != nil {
		return nil, err
	}
	r, err := rowcodec.EventRowOf(e)
	if err != nil {
		return nil, err
	}
	return []any{id, string(e.Kind), nanos(e.At), r.Holder, r.Token, rowcodec.Ms(e.TTL), e.Position, e.Inferred,
		e.Resource, rowcodec.NullString(e.RequestID), r.Detail, r.Seq, r.Margin, r.RenewedAt}, nil
}

// putBlindReason records a blind event's interval and reason once per source:
// the tracker writes one event per lock, the sources page wants one row.
func (w *batchWriter) putBlindReason(ctx context.Context, e audit.Event) error {
	from, to, reason, ok := rowcodec.BlindInterval(e)
	if !ok {
		return nil
	}
	if _, err := w.tx.ExecContext(ctx, `INSERT INTO source_blinds (source, from_at, to_at, reason) VALUES (?, ?, ?, ?)
		ON CONFLICT (source, from_at, to_at) DO UPDATE SET reason = excluded.reason`,
		e.Lock.Source, nanos(from), nanos(to), reason); err != nil {
		return fmt.Errorf("blind window of source %s: %w", e.Lock.Source, err)
	}
	return nil
}

// findingInsert copies the lock's class into the finding (migration 0007):
// the batch's lock rows are written before its findings.
const findingInsert = `INSERT INTO findings (lock_id, class, kind, severity, at, until,
		summary, tokens, holders, resource)
	VALUES (?1, coalesce((SELECT class FROM locks WHERE id = ?1), 'lock'), ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)`

func (w *batchWriter) putFindings(ctx context.Context, findings []audit.Finding) error {
	if len(findings) == 0 {
		return nil
	}
	stmt, err := w.stmt(ctx, findingInsert)
	if err != nil {
		return fmt.Errorf("prepare finding insert: %w", err)
	}
	for _, f := range findings {
		id, err := w.lockID(ctx, f.Lock)
		if err != nil {
			return err
		}
		sev := rowcodec.Severity(f)
		tokens, err := rowcodec.JSONArray(f.Tokens)
		if err != nil {
			return fmt.Errorf("%s finding of lock %s: %w", f.Kind, f.Lock, err)
		}
		holders, err := rowcodec.JSONArray(f.Holders)
		if err != nil {
			return fmt.Errorf("%s finding of lock %s: %w", f.Kind, f.Lock, err)
		}
		if _, err := stmt.ExecContext(ctx, id, string(f.Kind), string(sev), nanos(f.At), rowcodec.NullNanos(f.Until),
			f.Summary, tokens, holders, f.Resource); err != nil {
			return fmt.Errorf("%s finding of lock %s: %w", f.Kind, f.Lock, err)
		}
		if f.Kind == audit.FindingBlindWindow {
			until := rowcodec.BlindUntil(f)
			if _, err := w.tx.ExecContext(ctx, `INSERT INTO source_blinds (source, from_at, to_at, locks) VALUES (?, ?, ?, 1)
				ON CONFLICT (source, from_at, to_at) DO UPDATE SET locks = locks + 1`,
				f.Lock.Source, nanos(f.At), nanos(until)); err != nil {
				return fmt.Errorf("blind window of source %s: %w", f.Lock.Source, err)
			}
		}
	}
	return nil
}

// maxVars bounds the bound parameters of one statement, well under SQLite's
// SQLITE_MAX_VARIABLE_NUMBER (999 in old builds).
const maxVars = 500

// StoredWrites returns the write events stored with any of the request ids,
// under any lock and resource, each with its Lock set. It reads the
// request id index (migration 0010), whose first column is request_id.
func (s *Store) StoredWrites(ctx context.Context, ids []string) ([]audit.Event, error) {
	// Each id once: chunks must not meet the same rows twice.
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	var events []audit.Event
	for start := 0; start < len(ids); start += maxVars {
		chunk := ids[start:min(start+maxVars, len(ids))]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		q := `SELECT ` + sqlread.EventColumns + `, l.source, l.name FROM ` + sqlread.EventTables("events", "") + ` JOIN locks l ON l.id = e.lock_id
			WHERE e.request_id IN (?` + strings.Repeat(", ?", len(chunk)-1) + `)`
		// Unprepared: a text per chunk length would crowd the kept
		// statements out.
		rows, err := s.reader.DB.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("stored writes: %w", storageError(err))
		}
		found, err := sqlread.Collect(sqlRows{rows}, sqlread.EventWithKey)
		if err != nil {
			return nil, fmt.Errorf("stored writes: %w", storageError(err))
		}
		events = append(events, found...)
	}
	return events, nil
}
