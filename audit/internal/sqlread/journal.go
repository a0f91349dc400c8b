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

	type row struct {
		st      audit.TrackState
		raw     *string
		lastSeq *int64
	}
	rows, err := query(ctx, r, tx, "restore locks", func(l *row) []any {
		return append(rowcodec.LockDest(&l.st.Lock), &l.raw, &l.lastSeq)
	}, `SELECT `+LockColumns+`, k.state, (SELECT max(seq) FROM tenures t WHERE t.lock_id = l.id)
		FROM locks l LEFT JOIN lock_tracks k ON k.lock_id = l.id ORDER BY l.id`)
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
		FROM lock_tracks k JOIN tenures t ON t.lock_id = k.lock_id AND t.seq >= k.recent_from
		ORDER BY t.lock_id, t.seq`)
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

	cursors, err := r.CursorsIn(ctx, tx)
	if err != nil {
		return nil, nil, fmt.Errorf("restore: %w", err)
	}
	return states, cursors, nil
}

// Unsynced returns the renew events stored after the last Synced batch, in
// the order they were stored.
func (r *Reader) Unsynced(ctx context.Context) ([]audit.Event, error) {
	return query(ctx, r, r.Pool, "unsynced renewals", EventWithKey, `SELECT `+EventColumns+`, l.source, l.name
		FROM `+r.eventTables(r.timeline(), "")+` JOIN locks l ON l.id = e.lock_id
		WHERE e.id > (SELECT synced_event FROM journal) AND e.kind = 'renew'
		ORDER BY e.id`)
}

// EventWithKey scans EventColumns followed by the lock's source and name,
// into the event and its Lock.
func EventWithKey(e *audit.Event) []any {
	return append(rowcodec.EventDest(e), &e.Lock.Source, &e.Lock.Name)
}
