package zookeeper

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// The loop never waits for a commit: what it records while an input is in
// flight (collectors.Flight) gathers into a held input, handed to the
// sink once the one before it is durable. Under several busy sources the
// recorder paces its commits (audit's commit interval, 400 ms by default),
// and a loop that waited for each one read nothing meanwhile, so a grant
// shorter than that in a directory just created was never seen.

// queue adds obs to the pending input, whose cursor becomes cursor, and
// hands it to the sink unless an input is in flight.
func (r *run) queue(ctx context.Context, now time.Time, obs []audit.Observation, cursor int64) {
	if p := r.flight.Held(); p != nil {
		obs = append(p.Observations, obs...)
	}
	r.flight.Hold(ctx, r.sink, r.input(now, obs, cursor))
}

// land takes the outcome of the input in flight and hands over the
// pending one. An error stops the run: the Runner restarts it from the
// stored cursor, which names no read whose observations were lost.
func (r *run) land(ctx context.Context, err error) error {
	in := r.flight.Land()
	if err != nil {
		zxid, _ := strconv.ParseInt(in.Cursor, 10, 64)
		return fmt.Errorf("record zxid 0x%x: %w", zxid, err)
	}
	r.flight.Next(ctx, r.sink)
	return nil
}

// settle waits until every input recorded so far is durable.
func (r *run) settle(ctx context.Context) error {
	r.flight.Next(ctx, r.sink)
	for r.flight.Busy() {
		if err := r.land(ctx, <-r.flight.Landing()); err != nil {
			return err
		}
	}
	return nil
}
