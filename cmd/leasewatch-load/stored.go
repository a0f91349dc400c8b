package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// eventReader reads a lock's events as leasewatch's pages and API do: its
// renewals from rows, the renewal log and sealed runs alike, which no one
// table holds.
type eventReader interface {
	Events(ctx context.Context, lockID int64, f audit.EventFilter) ([]audit.Event, error)
	Close() error
}

// openReader opens database (a SQLite file or a postgres:// URL) for
// reading while leasewatch may still write to it.
func openReader(ctx context.Context, database string) (eventReader, error) {
	if strings.HasPrefix(database, "postgres://") {
		return postgres.OpenSource(ctx, database)
	}
	return sqlite.OpenSource(ctx, database)
}

// storedEvents calls each with every event of kinds that leasewatch stored
// for source's locks, lock by lock, each lock's in (at, id) order.
func storedEvents(ctx context.Context, database, source string, kinds []audit.EventKind, each func(name string, e audit.Event)) error {
	locks, err := sourceLocks(ctx, database, source)
	if err != nil {
		return err
	}
	r, err := openReader(ctx, database)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, l := range locks {
		events, err := lockEvents(ctx, r, l.id, kinds)
		if err != nil {
			return fmt.Errorf("events of %s: %w", l.name, err)
		}
		for _, e := range events {
			each(l.name, e)
		}
	}
	return nil
}

type storedLock struct {
	id   int64
	name string
}

// sourceLocks returns the locks of source that database has.
func sourceLocks(ctx context.Context, database, source string) ([]storedLock, error) {
	db, err := openDatabase(database)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT id, name FROM locks WHERE source = $1 ORDER BY id`, source)
	if err != nil {
		return nil, fmt.Errorf("read the locks of %s: %w", source, err)
	}
	defer rows.Close()
	var out []storedLock
	for rows.Next() {
		var l storedLock
		if err := rows.Scan(&l.id, &l.name); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// lockEvents reads every event of kinds of a lock, a page of the most a
// read returns at a time, oldest first.
func lockEvents(ctx context.Context, r eventReader, id int64, kinds []audit.EventKind) ([]audit.Event, error) {
	f := audit.EventFilter{Kinds: kinds, TimeFilter: audit.TimeFilter{Limit: audit.MaxListLimit}}
	var out []audit.Event
	for {
		page, err := r.Events(ctx, id, f)
		if err != nil {
			return nil, err
		}
		out = append(page, out...)
		if len(page) < f.Limit {
			return out, nil
		}
		f.Before = audit.EventCursor{At: page[0].At, ID: page[0].ID}
	}
}

// renewedAt is the backend's renewal time a renew event keeps in its
// detail (a Kubernetes renewTime), as Unix nanoseconds; 0 when it has none.
func renewedAt(e audit.Event) int64 {
	s, _ := e.Detail["renewed_at"].(string)
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0
	}
	return t.UnixNano()
}
