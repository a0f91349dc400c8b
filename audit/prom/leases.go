package prom

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasewatch/leasewatch/audit"
)

// scrapeTimeout bounds the store reads of one scrape.
const scrapeTimeout = 10 * time.Second

// leaseCollector computes the metrics of the present at scrape time: each
// held lease's time to expiry, duration and last renewal margin, the
// per-lock counters, heartbeats by state and which collectors are blind.
//
// Per-lock series are capped at max locks: held locks soonest to expire
// first, then locks no longer held by their latest grant or end, newest
// first; the rest are counted in leasewatch_lock_series_limit_exceeded.
type leaseCollector struct {
	m       *RecorderMetrics
	store   audit.Store // must not lag renewals: the recorder's Fresh store
	sources func() []audit.Source
	max     int
	now     func() time.Time
	log     *slog.Logger
}

// LeaseCollector returns the scrape-time collector of the leases over
// store, which must not lag renewals (the recorder's Fresh store), with
// per-lock series for at most max locks. sources may be nil.
func (m *RecorderMetrics) LeaseCollector(store audit.Reads, sources func() []audit.Source, max int, logger *slog.Logger) prometheus.Collector {
	return m.newLeaseCollector(store, sources, max, logger)
}

func (m *RecorderMetrics) newLeaseCollector(store audit.Reads, sources func() []audit.Source, max int, logger *slog.Logger) *leaseCollector {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &leaseCollector{m: m, store: store, sources: sources, max: max, now: time.Now, log: logger}
}

var (
	expiryDesc = prometheus.NewDesc("leasewatch_lease_expiry_seconds",
		"Seconds until the held lease of a lock of class lock expires (last renewal + lease duration), negative once past; absent when the expiry is unknown.",
		[]string{"source", "lock", "holder"}, nil)
	durationDesc = prometheus.NewDesc("leasewatch_lease_duration_seconds",
		"Lease duration (TTL) of a held lock of class lock.",
		[]string{"source", "lock"}, nil)
	marginDesc = prometheus.NewDesc("leasewatch_lease_renewal_margin_ratio",
		"Fraction of the lease that was left when the held lease's last renewal arrived (0.25: a quarter); absent until the holder renews.",
		[]string{"source", "lock"}, nil)
	holderChangesDesc = prometheus.NewDesc("leasewatch_lock_holder_changes_total",
		"Grants of a lock of class lock that changed its holder (a lock's first grant included), since this process started.",
		[]string{"source", "lock"}, nil)
	expiriesDesc = prometheus.NewDesc("leasewatch_lease_expiries_total",
		"Leases of a lock of class lock that expired while held (the holder stopped renewing), since this process started.",
		[]string{"source", "lock"}, nil)
	limitDesc = prometheus.NewDesc("leasewatch_lock_series_limit_exceeded",
		"Locks of the source left out of the per-lock series because of metrics.max_lock_series.",
		[]string{"source"}, nil)
	heartbeatDesc = prometheus.NewDesc("leasewatch_heartbeat_leases",
		"Heartbeat-class leases (liveness leases such as kube-node-lease) by source and state (held, expired, free).",
		[]string{"source", "state"}, nil)
	blindDesc = prometheus.NewDesc("leasewatch_collector_blind",
		"1 while the source's collector cannot see its backend, else 0.",
		[]string{"source"}, nil)
)

// Describe implements prometheus.Collector.
func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{expiryDesc, durationDesc, marginDesc, holderChangesDesc, expiriesDesc, limitDesc, heartbeatDesc, blindDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	sources := make(map[string]bool)
	if c.sources != nil {
		for _, src := range c.sources() {
			sources[src.Name] = true
			blind := 0.0
			if !src.BlindSince.IsZero() {
				blind = 1
			}
			for _, m := range c.series(nil, blindDesc, prometheus.GaugeValue, blind, src.Name) {
				ch <- m
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	counts, err := c.store.LockCounts(ctx)
	if err != nil {
		c.log.Error("metrics: count locks", "err", err)
		return
	}
	// Held locks by soonest expiry: ask for more than the cap, since the
	// store orders by its rows and the Fresh store's renewals move expiries
	// later.
	held, err := c.store.Locks(ctx, audit.LockFilter{Class: audit.ClassLock, State: audit.StateHeld, Sort: audit.SortExpiry, Limit: 2 * c.max})
	if err != nil {
		c.log.Error("metrics: held locks", "err", err)
		return
	}
	for _, m := range c.collect(sources, counts, held) {
		ch <- m
	}
}

// collect returns the metrics of counts and held. It builds them all before
// Collect sends any, so a commit never waits on a slow scrape.
func (c *leaseCollector) collect(sources map[string]bool, counts []audit.LockCount, held []audit.Lock) []prometheus.Metric {
	out, heldTotal := c.classCounts(nil, sources, counts)
	sortByExpiry(held)

	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	out, kept, isHeld := c.heldSeries(out, held, heldTotal)
	excluded := make(map[string]int)
	for src, n := range heldTotal {
		if n > 0 {
			excluded[src] += n
		}
	}
	out = c.releasedCounters(out, sources, isHeld, kept, excluded)
	for src := range sources {
		out = c.series(out, limitDesc, prometheus.GaugeValue, float64(excluded[src]), src)
	}
	return out
}

// classCounts adds the heartbeats' series by state to out, and returns the
// held locks of class lock per source; it marks every source counted.
func (c *leaseCollector) classCounts(out []prometheus.Metric, sources map[string]bool, counts []audit.LockCount) ([]prometheus.Metric, map[string]int) {
	heldTotal := make(map[string]int)
	heartbeats := make(map[string]map[audit.LockState]int)
	for _, n := range counts {
		sources[n.Source] = true
		switch n.Class {
		case audit.ClassHeartbeat:
			if heartbeats[n.Source] == nil {
				heartbeats[n.Source] = make(map[audit.LockState]int)
			}
			heartbeats[n.Source][n.State] += n.N
		case audit.ClassLock:
			if n.State == audit.StateHeld {
				heldTotal[n.Source] += n.N
			}
		}
	}
	for src, byState := range heartbeats {
		for _, state := range []audit.LockState{audit.StateHeld, audit.StateExpired, audit.StateFree} {
			out = c.series(out, heartbeatDesc, prometheus.GaugeValue, float64(byState[state]), src, string(state))
		}
	}
	return out, heldTotal
}

// sortByExpiry orders held locks by soonest expiry, those without one last.
func sortByExpiry(held []audit.Lock) {
	slices.SortFunc(held, func(a, b audit.Lock) int {
		if a.ExpiresAt.IsZero() != b.ExpiresAt.IsZero() {
			if a.ExpiresAt.IsZero() {
				return 1
			}
			return -1
		}
		return cmp.Or(a.ExpiresAt.Compare(b.ExpiresAt), cmp.Compare(a.Source, b.Source), cmp.Compare(a.Name, b.Name))
	})
}

// heldSeries adds the series of the first c.max held locks to out, taking
// each from heldTotal, so that what is left there is the held locks past
// the cap. It returns how many locks got series, and which were held. The
// caller holds c.m.mu.
func (c *leaseCollector) heldSeries(out []prometheus.Metric, held []audit.Lock, heldTotal map[string]int) ([]prometheus.Metric, int, map[audit.LockKey]bool) {
	now := c.now()
	kept := 0
	isHeld := make(map[audit.LockKey]bool, len(held))
	for _, l := range held {
		isHeld[l.Key()] = true
		if kept >= c.max {
			continue // counted by the caller, from heldTotal
		}
		kept++
		heldTotal[l.Source]--
		ls, tracked := c.m.locks[l.Key()]
		if !l.ExpiresAt.IsZero() {
			out = c.series(out, expiryDesc, prometheus.GaugeValue, l.ExpiresAt.Sub(now).Seconds(), l.Source, l.Name, l.Holder)
		}
		if l.LeaseDuration > 0 {
			out = c.series(out, durationDesc, prometheus.GaugeValue, l.LeaseDuration.Seconds(), l.Source, l.Name)
		}
		if tracked && ls.hasMargin {
			out = c.series(out, marginDesc, prometheus.GaugeValue, ls.margin, l.Source, l.Name)
		}
		out = c.counters(out, l.Key(), ls)
	}
	return out, kept, isHeld
}

// releasedCounters adds the counters of locks no longer held, which keep
// their series while the cap allows (kept locks have series already), the
// most recently changed first; those past the cap are counted in excluded.
// The caller holds c.m.mu.
func (c *leaseCollector) releasedCounters(out []prometheus.Metric, sources map[string]bool, isHeld map[audit.LockKey]bool, kept int, excluded map[string]int) []prometheus.Metric {
	var rest []audit.LockKey
	for key, ls := range c.m.locks {
		// A lock known only by its renewals may be a heartbeat whose class
		// this process has not seen yet: it has no counts to show.
		if !isHeld[key] && (ls.changes > 0 || ls.expiries > 0) {
			rest = append(rest, key)
		}
	}
	slices.SortFunc(rest, func(a, b audit.LockKey) int {
		return cmp.Or(cmp.Compare(c.m.locks[b].changedAt, c.m.locks[a].changedAt), cmp.Compare(a.Source, b.Source), cmp.Compare(a.Name, b.Name))
	})
	for _, key := range rest {
		sources[key.Source] = true
		if kept >= c.max {
			excluded[key.Source]++
			continue
		}
		kept++
		out = c.counters(out, key, c.m.locks[key])
	}
	return out
}

// counters adds a lock's counters to out, zero when nothing happened to it
// since this process started (ls is then the zero lockSeries), so increase()
// sees its first expiry.
func (c *leaseCollector) counters(out []prometheus.Metric, key audit.LockKey, ls lockSeries) []prometheus.Metric {
	out = c.series(out, holderChangesDesc, prometheus.CounterValue, ls.changes, key.Source, key.Name)
	return c.series(out, expiriesDesc, prometheus.CounterValue, ls.expiries, key.Source, key.Name)
}

// series adds one series to out, or logs why it cannot be made and leaves
// it out: one bad label value (a name not valid UTF-8, stored before
// collectors made backend bytes text) costs its own series, never the scrape.
func (c *leaseCollector) series(out []prometheus.Metric, desc *prometheus.Desc, typ prometheus.ValueType, v float64, labels ...string) []prometheus.Metric {
	m, err := prometheus.NewConstMetric(desc, typ, v, labels...)
	if err != nil {
		c.log.Warn("metrics: series left out", "series", desc.String(), "err", err)
		return out
	}
	return append(out, m)
}
