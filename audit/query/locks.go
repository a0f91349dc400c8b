package query

import (
	"context"

	"github.com/leasewatch/leasewatch/audit"
)

// SearchCountCap is how far a list searched by substring (LockFilter.Q) is
// counted: the substring is tested on every index entry.
const SearchCountCap = 1000

// KeptLock is a lock with its kept verdict (audit/verdict's Keeper: over
// the last 24 hours); Verdict is "" until one is kept.
type KeptLock struct {
	audit.Lock
	Verdict string
}

// LocksQuery asks for one page of the locks list.
type LocksQuery struct {
	// Filter selects and orders the locks, and its After and Before are
	// the page's keyset cursor. Its Limit is ignored: Limit counts.
	Filter audit.LockFilter
	// Limit is the most locks on the page; zero: audit.DefaultLockLimit.
	Limit int
	// Count asks for the whole list's length, as the page shows it.
	Count bool
}

// LockList is one page of the locks list, and where it stands in the list.
type LockList struct {
	Locks            []KeptLock
	HasPrev, HasNext bool
	// Total counts the whole list when the query asked (Count), or when
	// the page holds all of it.
	Total int
	// AtLeast says Total stopped at SearchCountCap.
	AtLeast bool
}

// Locks reads one page of the locks list, with the locks' kept verdicts.
func (r *Reader) Locks(ctx context.Context, q LocksQuery) (LockList, error) {
	limit := orDefault(q.Limit, audit.DefaultLockLimit)
	f := q.Filter
	f.Limit = limit + 1 // one more tells whether more follow
	locks, err := r.store.Locks(ctx, f)
	if err != nil {
		return LockList{}, err
	}
	var pg LockList
	switch {
	case f.After == 0 && f.Before == 0 && len(locks) <= limit:
		pg.Total = len(locks) // the whole list fits this page
	case q.Count:
		cf := f
		cf.Limit = 0
		if cf.Q != "" {
			cf.Limit = SearchCountCap
		}
		if pg.Total, err = r.store.CountLocks(ctx, cf); err != nil {
			return LockList{}, err
		}
		pg.AtLeast = cf.Limit > 0 && pg.Total == cf.Limit
	}
	if len(locks) > limit {
		if f.Before != 0 {
			locks, pg.HasPrev = locks[1:], true
		} else {
			locks, pg.HasNext = locks[:limit], true
		}
	}
	pg.HasNext = pg.HasNext || f.Before != 0
	pg.HasPrev = pg.HasPrev || f.After != 0
	if pg.Locks, err = r.kept(ctx, locks); err != nil {
		return LockList{}, err
	}
	return pg, nil
}

// Lock reads lock id with its kept verdict.
func (r *Reader) Lock(ctx context.Context, id int64) (KeptLock, error) {
	l, err := r.store.Lock(ctx, id)
	if err != nil {
		return KeptLock{}, err
	}
	kept, err := r.kept(ctx, []audit.Lock{l})
	if err != nil {
		return KeptLock{}, err
	}
	return kept[0], nil
}

// kept returns locks with their kept verdicts.
func (r *Reader) kept(ctx context.Context, locks []audit.Lock) ([]KeptLock, error) {
	ids := make([]int64, len(locks))
	for i, l := range locks {
		ids[i] = l.ID
	}
	verdicts, err := r.store.Verdicts(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]KeptLock, len(locks))
	for i, l := range locks {
		out[i] = KeptLock{Lock: l, Verdict: verdicts[l.ID].Verdict}
	}
	return out, nil
}
