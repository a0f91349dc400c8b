package zookeeper

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// The loop never waits for a commit. What it records goes into a pending
// input, handed to the sink once the input before it is durable: under
// several busy sources the recorder paces its commits (audit's commit
// interval, 400 ms by default), and a loop that waited for each one read
// nothing meanwhile, so a grant shorter than that in a directory just
// created was never seen. One input at a time: the recorder goes on with
// later inputs after one fails to commit, so a second in flight could
// store a cursor past observations that were never stored.

// flight is an input handed to the sink and not yet known durable.
type flight struct {
	in   audit.Input
	done chan error
}

// queue adds obs to the pending input, whose cursor becomes cursor, and
// hands it to the sink unless an input is in flight.
func (r *run) queue(ctx context.Context, now time.Time, obs []audit.Observation, cursor int64) {
	if r.pending != nil {
		obs = append(r.pending.Observations, obs...)
	}
	in := r.input(now, obs, cursor)
	r.pending = &in
	r.submit(ctx)
}

// submit hands the pending input to the sink unless one is in flight;
// land learns its outcome.
func (r *run) submit(ctx context.Context) {
	if r.inflight != nil || r.pending == nil {
		return
	}
	f := &flight{in: *r.pending, done: make(chan error, 1)}
	r.pending, r.inflight = nil, f
	wait := collectors.Submit(ctx, r.sink, f.in)
	r.flights.Add(1)
	go func() {
		defer r.flights.Done()
		f.done <- wait()
	}()
}

// landing is where the input in flight reports; nil when none is.
func (r *run) landing() <-chan error {
	if r.inflight == nil {
		return nil
	}
	return r.inflight.done
}

// land takes the outcome of the input in flight and hands over the
// pending one. An error stops the run: the Runner restarts it from the
// stored cursor, which names no read whose observations were lost.
func (r *run) land(ctx context.Context, err error) error {
	f := r.inflight
	r.inflight = nil
	if err != nil {
		zxid, _ := strconv.ParseInt(f.in.Cursor, 10, 64)
		return fmt.Errorf("record zxid 0x%x: %w", zxid, err)
	}
	r.submit(ctx)
	return nil
}

// settle waits until every input recorded so far is durable.
func (r *run) settle(ctx context.Context) error {
	r.submit(ctx)
	for r.inflight != nil {
		if err := r.land(ctx, <-r.inflight.done); err != nil {
			return err
		}
	}
	return nil
}
