package query

import (
	"context"
	"strconv"

	"github.com/leasewatch/leasewatch/audit"
)

// LockRef names a lock in a query: by id, or (ID zero) by its key.
type LockRef struct {
	ID  int64
	Key audit.LockKey
}

// IsZero reports whether the reference names no lock.
func (ref LockRef) IsZero() bool { return ref.ID == 0 && ref.Key == (audit.LockKey{}) }

// String is the reference as it was written: an id, or SOURCE/NAME.
func (ref LockRef) String() string {
	if ref.ID != 0 {
		return strconv.FormatInt(ref.ID, 10)
	}
	return ref.Key.String()
}

// resolve returns the id of the lock ref names; an error with ENOTFOUND
// when there is none, so a typo answers 404 rather than an empty list.
func (r *Reader) resolve(ctx context.Context, ref LockRef) (int64, error) {
	if ref.ID != 0 {
		_, err := r.store.Lock(ctx, ref.ID)
		return ref.ID, err
	}
	l, err := r.store.LockByKey(ctx, ref.Key)
	return l.ID, err
}

// FindingsQuery asks for one page of findings, the newest first.
type FindingsQuery struct {
	// Filter selects the findings; its Before is the page's cursor. Its
	// LockID and Limit are ignored: Lock and Limit say them.
	Filter audit.FindingFilter
	// Lock, when set, is the one lock whose findings are listed. Unless
	// ClassGiven, they are listed whatever the lock's class.
	Lock       LockRef
	ClassGiven bool
	// Limit is the most findings on the page; zero: audit.DefaultListLimit.
	Limit int
}

// FindingList is one page of findings in time order, the newest last.
type FindingList struct {
	Findings []audit.Finding
	// Older says older findings than the page's match too.
	Older bool
	// LockID is the lock the query named, resolved; zero for none.
	LockID int64
}

// Findings reads one page of findings.
func (r *Reader) Findings(ctx context.Context, q FindingsQuery) (FindingList, error) {
	limit := orDefault(q.Limit, audit.DefaultListLimit)
	f := q.Filter
	f.LockID = 0
	if !q.Lock.IsZero() {
		id, err := r.resolve(ctx, q.Lock)
		if err != nil {
			return FindingList{}, err
		}
		f.LockID = id
		if !q.ClassGiven {
			f.Class = "" // a lock asked for by name: whatever its class
		}
	}
	f.Limit = limit + 1
	findings, err := r.store.Findings(ctx, f)
	if err != nil {
		return FindingList{}, err
	}
	findings, older := olderPage(findings, limit)
	return FindingList{Findings: findings, Older: older, LockID: f.LockID}, nil
}

// EventList is one page of a lock's events in time order, the newest last.
type EventList struct {
	Events []audit.Event
	// Older says older events than the page's match too.
	Older bool
}

// Events reads one page of lock id's events, the newest limit that f
// selects (zero: audit.DefaultListLimit); f's Limit is ignored.
func (r *Reader) Events(ctx context.Context, id int64, f audit.EventFilter, limit int) (EventList, error) {
	limit = orDefault(limit, audit.DefaultListLimit)
	f.Limit = limit + 1
	events, err := r.store.Events(ctx, id, f)
	if err != nil {
		return EventList{}, err
	}
	events, older := olderPage(events, limit)
	return EventList{Events: events, Older: older}, nil
}

// Tenures reads lock id's tenures that f selects, in grant order.
func (r *Reader) Tenures(ctx context.Context, id int64, f audit.TimeFilter) ([]audit.Tenure, error) {
	return r.store.Tenures(ctx, id, f)
}
