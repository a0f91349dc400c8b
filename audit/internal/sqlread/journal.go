package sqlread

import (
	"context"
	"fmt"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
)

// The reads of audit.Journal: what the recorder restores at start.

// Restore returns the tracker's saved memory of every lock, with Lock filled
// from the lock row and Recent from its tenures, and every cursor, read in
// one snapshot.
func (r *Reader) Restore(ctx context.Context) ([]audit.TrackState, []audit.Cursor, error) {
	tx, end, err := r.Begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("restore: %w", r.wrap(err))
	}
	defer end()
	return r.restore(ctx, tx, "")
}

// RestoreSource is Restore and Unsynced of one source, read in one
// snapshot: what a replica that takes the source over loads. Its renewals
// are those after the source's own sync mark.
func (r *Reader) RestoreSource(ctx context.Context, source string) ([]audit.TrackState, []audit.Cursor, []audit.Event, error) {
	tx, end, err := r.Begin(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("restore source %s: %w", source, r.wrap(err))
	}
	defer end()
	states, cursors, err := r.restore(ctx, tx, source)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("restore source %s: %w", source, err)
	}
	p := r.Dialect.P
	renewals, err := query(ctx, r, tx, "unsynced renewals", EventWithKey, `SELECT `+EventColumns+`, l.source, l.name
		FROM `+r.eventTables(r.timeline(), "")+` JOIN locks l ON l.id = e.lock_id
		WHERE e.id > `+SyncMarkOf(p(1))+` AND e.kind = 'renew' AND l.source = `+p(1)+`
		ORDER BY e.id`, source)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("restore source %s: %w", source, err)
	}
	logged, err := r.unsyncedLog(ctx, tx, source)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("restore source %s: %w", source, err)
	}
	return states, cursors, withLogged(renewals, logged), nil
}

// restore reads the saved memory of every lock and every cursor through
// tx, or only source's when it is not "".
func (r *Reader) restore(ctx context.Context, tx DB, source string) ([]audit.TrackState, []audit.Cursor, error) {
	var args []any
	lockWhere, trackWhere, cursorWhere := "", "", ""
	if source != "" {
		args = []any{source}
		p := r.Dialect.P(1)
		lockWhere = ` WHERE l.source = ` + p
		trackWhere = ` WHERE k.lock_id IN (SELECT id FROM locks WHERE source = ` + p + `)`
		cursorWhere = ` WHERE source = ` + p
	}
	type row struct {
		st      audit.TrackState
		raw     *string
		lastSeq *int64
	}
	rows, err := query(ctx, r, tx, "restore locks", func(l *row) []any {
		return append(rowcodec.LockDest(&l.st.Lock), &l.raw, &l.lastSeq)
	}, `SELECT `+LockColumns+`, k.state, (SELECT max(seq) FROM tenures t WHERE t.lock_id = l.id)
		FROM locks l LEFT JOIN lock_tracks k ON k.lock_id = l.id`+lockWhere+` ORDER BY l.id`, args...)
	if err != nil {
		return nil, nil, err
	}
	states := make([]audit.TrackState, len(rows))
	index := make(map[int64]int, len(rows)) // lock id → states index
	for i, l := range rows {
		switch {
		case l.raw != nil:
			if err := rowcodec.DecodeTrackState(&l.st, *l.raw); err != nil {
				return nil, nil, err
			}
		case l.lastSeq != nil:
			// A lock the tracker never saved: only its tenure numbering
			// must carry on.
			l.st.NextSeq = *l.lastSeq
		}
		states[i] = l.st
		index[l.st.Lock.ID] = i
	}

	// One index range of tenures per lock: the ones its Recent holds.
	tenures, err := query(ctx, r, tx, "restore tenures", rowcodec.TenureDest, `SELECT `+TenureColumns+`
		FROM lock_tracks k JOIN tenures t ON t.lock_id = k.lock_id AND t.seq >= k.recent_from`+heldJoin+trackWhere+`
		ORDER BY t.lock_id, t.seq`, args...)
	if err != nil {
		return nil, nil, err
	}
	for _, t := range tenures {
		i, ok := index[t.LockID]
		if !ok {
			continue
		}
		st := &states[i]
		t.Lock = st.Lock.Key()
		st.Recent = append(st.Recent, t)
	}
	if err := r.restoreResources(ctx, tx, states, index, trackWhere, args); err != nil {
		return nil, nil, err
	}

	cursors, err := r.cursorsIn(ctx, tx, cursorWhere, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("restore: %w", err)
	}
	return states, cursors, nil
}

// restoreResources reads each lock's resources (migration 0024 of SQLite,
// 0014 of PostgreSQL) into states, whose index maps lock ids; where is
// restore's filter of lock_tracks, k.
func (r *Reader) restoreResources(ctx context.Context, tx DB, states []audit.TrackState, index map[int64]int, where string, args []any) error {
	type row struct {
		lockID    int64
		name, raw string
	}
	rows, err := query(ctx, r, tx, "restore resources", func(x *row) []any { return []any{&x.lockID, &x.name, &x.raw} },
		`SELECT k.lock_id, k.resource, k.state FROM lock_resources k`+where+` ORDER BY k.lock_id, k.resource`, args...)
	if err != nil {
		return err
	}
	for _, x := range rows {
		if i, ok := index[x.lockID]; ok {
			if err := rowcodec.DecodeResourceState(&states[i], x.name, x.raw); err != nil {
				return err
			}
		}
	}
	return nil
}

// SyncMarkOf is the sync mark of the source named by the SQL expression
// source: every event of the source up to it is in its lock and tenure
// rows. It is the source's own mark, which its owner moves when replicas
// share the store, or the store's for a source that never had an owner.
func SyncMarkOf(source string) string {
	return `coalesce((SELECT f.synced_event FROM source_fences f WHERE f.source = ` + source + `),
		(SELECT synced_event FROM journal))`
}

// SyncFloor is the oldest sync mark of any source, in SQL: retention keeps
// the renew events after it, which a restore may yet replay. A source's
// own marks, once there are any, rule: a sync of the whole store raises
// them too, and the store's mark stands still while replicas share it.
const SyncFloor = `(SELECT coalesce((SELECT min(synced_event) FROM source_fences), synced_event) FROM journal)`

// Unsynced returns the renew events stored after their source's sync
// mark, rows and logged renewals read in one snapshot, in the order they
// were stored.
func (r *Reader) Unsynced(ctx context.Context) ([]audit.Event, error) {
	db, end := DB(r.Pool), func() {}
	if r.Log {
		tx, done, err := r.Begin(ctx)
		if err != nil {
			return nil, fmt.Errorf("unsynced renewals: %w", r.wrap(err))
		}
		db, end = tx, done
	}
	defer end()
	rows, err := query(ctx, r, db, "unsynced renewals", EventWithKey, `SELECT `+EventColumns+`, l.source, l.name
		FROM `+r.eventTables(r.timeline(), "")+` JOIN locks l ON l.id = e.lock_id
		WHERE e.id > (SELECT synced_event FROM journal) AND e.id > `+SyncMarkOf("l.source")+` AND e.kind = 'renew'
		ORDER BY e.id`)
	if err != nil {
		return nil, err
	}
	logged, err := r.unsyncedLog(ctx, db, "")
	if err != nil {
		return nil, fmt.Errorf("unsynced renewals: %w", err)
	}
	return withLogged(rows, logged), nil
}

// Refusals returns the logged fence refusals not yet recorded, oldest
// first, at most limit.
func (r *Reader) Refusals(ctx context.Context, limit int) ([]audit.LoggedRefusal, error) {
	return query(ctx, r, r.Pool, "fence refusals", func(f *audit.LoggedRefusal) []any {
		return []any{&f.ID, &f.Source, &f.Token, &f.Highest, rowcodec.TimeDest{P: &f.At}, &f.Replica, &f.Events, &f.Inputs, &f.Writes}
	}, `SELECT id, source, token, highest, at, replica, events, inputs, writes FROM fence_refusals ORDER BY id LIMIT `+r.Dialect.P(1), limit)
}

// EventWithKey scans EventColumns followed by the lock's source and name,
// into the event and its Lock.
func EventWithKey(e *audit.Event) []any {
	return append(rowcodec.EventDest(e), &e.Lock.Source, &e.Lock.Name)
}
