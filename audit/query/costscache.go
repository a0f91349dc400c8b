package query

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/leasewatch/leasewatch/audit"
)

// A window's writes are read at most once per CostsFresh, however many
// ask: a reading reads every tenure of the window, and the lock's stored
// renewals of each tenure held across its start (a day of a busy lock's
// renewals), too much for a hot page. A reading older than CostsFresh but
// at most CostsKept old is answered at once while a newer one is read for
// the next request; older ones are waited for. Costs says when it was
// read (its Window.To).
const (
	CostsFresh = 30 * time.Second
	CostsKept  = 5 * time.Minute
)

// costCache keeps each window's newest reading and reads each window once
// at a time.
type costCache struct {
	mu     sync.Mutex
	kept   map[time.Duration]writeTally
	flight singleflight.Group
}

func newCostCache() *costCache {
	return &costCache{kept: make(map[time.Duration]writeTally)}
}

// Costs returns the writes of the window (one of CostWindows) ending at
// now, or at a reading at most CostsKept older (see CostsFresh), grouped
// by by, the limit groups with the most (DefaultCostLimit when 0, at most
// MaxCostLimit). Returns EINVALID naming the parameter that is not one of
// those, EUNAVAILABLE for a store that cannot count writes per lease.
func (r *Reader) Costs(ctx context.Context, now time.Time, window time.Duration, by CostBy, limit int) (Costs, error) {
	c, _, err := r.costsOf(ctx, now, window, by, limit, true)
	return c, err
}

// costsOf is Costs; unless wait, it answers only from a kept reading, and
// false when there is none recent enough (it starts one).
func (r *Reader) costsOf(ctx context.Context, now time.Time, window time.Duration, by CostBy, limit int, wait bool) (Costs, bool, error) {
	if err := checkCosts(window, by, limit); err != nil {
		return Costs{}, false, err
	}
	if limit == 0 {
		limit = DefaultCostLimit
	}
	s, ok := r.store.(audit.WriteLoadStore)
	if !ok {
		return Costs{}, false, audit.Errorf(audit.EUNAVAILABLE, "this store cannot count writes per lease")
	}
	t, ok, err := r.costs.tally(ctx, s, now, window, wait, r.logger)
	if !ok || err != nil {
		return Costs{}, false, err
	}
	return t.group(by, limit), true, nil
}

// checkCosts says which of Costs' parameters is not one it takes.
func checkCosts(window time.Duration, by CostBy, limit int) error {
	if !slices.Contains(CostWindows, window) {
		return audit.Errorf(audit.EINVALID, "window: %v is not one of %s", window, CostWindowNames())
	}
	if !slices.Contains(CostGroupings, by) {
		names := make([]string, len(CostGroupings))
		for i, g := range CostGroupings {
			names[i] = string(g)
		}
		return audit.Errorf(audit.EINVALID, "by: %q is not one of %s", by, strings.Join(names, ", "))
	}
	if limit < 0 || limit > MaxCostLimit {
		return audit.Errorf(audit.EINVALID, "limit: %d is not between 1 and %d", limit, MaxCostLimit)
	}
	return nil
}

// CostWindowName is how the API names a window of CostWindows: 1h, 24h.
func CostWindowName(d time.Duration) string { return fmt.Sprintf("%dh", int(d/time.Hour)) }

// CostWindowNames lists the names of CostWindows.
func CostWindowNames() string {
	names := make([]string, len(CostWindows))
	for i, d := range CostWindows {
		names[i] = CostWindowName(d)
	}
	return strings.Join(names, ", ")
}

// tally returns the window's kept reading if fresh enough, else a new one;
// unless wait, only a kept one, and false when there is none recent enough.
// The reading outlives the request that started it, as the overview's does;
// one that fails is logged, since a request that did not wait for it
// cannot say so.
func (c *costCache) tally(ctx context.Context, s audit.WriteLoadStore, now time.Time, window time.Duration, wait bool, logger *slog.Logger) (writeTally, bool, error) {
	c.mu.Lock()
	kept, ok := c.kept[window]
	c.mu.Unlock()
	age := now.Sub(kept.window.To)
	if ok && age.Abs() <= CostsFresh {
		return kept, true, nil
	}
	read := c.flight.DoChan(CostWindowName(window), func() (any, error) {
		t, err := readTally(context.WithoutCancel(ctx), s, audit.TimeFilter{From: now.Add(-window), To: now})
		if err != nil {
			logger.Warn("count writes per lease", "window", CostWindowName(window), "err", err)
		} else {
			c.mu.Lock()
			if cur, ok := c.kept[window]; !ok || cur.window.To.Before(t.window.To) {
				c.kept[window] = t
			}
			c.mu.Unlock()
		}
		return t, err
	})
	switch {
	case ok && age > 0 && age <= CostsKept:
		return kept, true, nil // the newer reading is for the requests after it
	case !wait:
		return writeTally{}, false, nil
	}
	select {
	case res := <-read:
		if res.Err != nil {
			return writeTally{}, false, res.Err
		}
		return res.Val.(writeTally), true, nil
	case <-ctx.Done():
		return writeTally{}, false, ctx.Err()
	}
}
