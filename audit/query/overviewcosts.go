package query

import (
	"context"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// OverviewTopWriters is how many locks the overview's top writers list.
const OverviewTopWriters = 5

// topWriters reads the overview's top writers: the locks with the most
// writes over the last hour, from a kept reading (Costs) only, so that the
// hot page never waits for one. None for a store that cannot count writes
// per lease, or while the first reading is under way (it starts it).
func (r *Reader) topWriters(ctx context.Context, now time.Time) (*Costs, error) {
	if _, ok := r.store.(audit.WriteLoadStore); !ok {
		return nil, nil
	}
	c, ok, err := r.costsOf(ctx, now, time.Hour, CostByLock, OverviewTopWriters, false)
	if !ok || err != nil {
		return nil, err
	}
	return &c, nil
}
