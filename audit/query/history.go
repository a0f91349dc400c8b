package query

import (
	"context"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/history"
)

// LockAt reads what lock id was at instant at (history.At): the API's lock
// at an instant. Returns ENOTFOUND if the lock does not exist.
func (r *Reader) LockAt(ctx context.Context, id int64, at time.Time) (history.Moment, error) {
	l, err := r.store.Lock(ctx, id)
	if err != nil {
		return history.Moment{}, err
	}
	return history.At(ctx, r.store, l, at)
}

// Holder reads the page of a holder's tenures that f selects, at now
// (history.Holder): the holder page and its API.
func (r *Reader) Holder(ctx context.Context, f audit.HolderFilter, now time.Time) (history.Holding, error) {
	return history.Holder(ctx, r.store, f, now)
}
