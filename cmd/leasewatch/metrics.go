package main

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// recorderMetrics turns the recorder's commits into Prometheus metrics, and
// keeps each source's latest observation lag for the dashboard.
//
// Counters count the events of each commit, so each event counts once. What
// describes the present (time to expiry, lease duration, heartbeats by state)
// is read at scrape time by leaseCollector.
type recorderMetrics struct {
	lag               *prometheus.HistogramVec
	events            *prometheus.CounterVec
	commits           prometheus.Histogram
	findings          *prometheus.CounterVec
	writes            *prometheus.CounterVec
	heartbeatExpiries *prometheus.CounterVec
	blindSeconds      *prometheus.CounterVec
	health            healthMetrics

	mu sync.Mutex
	// resources are the resources with series of their own in writes.
	resources resourceSeries
	latest    map[string]sourceLag // by source
	// locks are the per-lock counters and last renewal margin of locks of
	// class lock, kept here because they come from commits.
	locks map[audit.LockKey]lockSeries
	// heartbeats are the locks known to be of class heartbeat: summarised,
	// never given series of their own.
	heartbeats map[audit.LockKey]bool
}

// sourceLag is the longest observation lag of one commit, and when it was.
type sourceLag struct {
	lag time.Duration
	at  time.Time
}

// lockSeries is what the commits say of one lock of class lock.
type lockSeries struct {
	changes   float64 // grants that changed the holder
	expiries  float64 // leases that expired while held
	margin    float64 // margin_ratio of the held tenure's last renewal
	hasMargin bool
	last      lastChange // what changedAt was
	changedAt int64      // Unix nanoseconds of the last grant or end, to rank locks no longer held
}

// lastChange is what a lock's last grant or end was, for the tenure and
// takeover histograms: unknown before this process saw one.
type lastChange uint8

const (
	changeUnknown  lastChange = iota
	changeGranted             // a grant: a tenure's start
	changeObserved            // a first sight: a tenure of unknown start
	changeEnded               // a release or an expiry: the lock is free
)

// resourceSeries admits resources to series of their own in
// leasewatch_write_reports_total: the first max (of every source) to report,
// for as long as the process runs, since a counter that came and went would
// read as resets. The reports of the rest are counted in one series per
// source and outcome with an empty resource label, so a client reporting a
// new resource name with every write grows the scrape by nothing.
type resourceSeries struct {
	max  int
	seen map[resourceKey]struct{}
}

// resourceKey is a resource of a source.
type resourceKey struct{ source, resource string }

// label is the resource label of a write report of resource: the resource,
// or "" once max others have series of their own.
func (r *resourceSeries) label(source, resource string) string {
	k := resourceKey{source, resource}
	if _, ok := r.seen[k]; ok {
		return resource
	}
	if len(r.seen) >= r.max {
		return ""
	}
	if r.seen == nil {
		r.seen = make(map[resourceKey]struct{})
	}
	r.seen[k] = struct{}{}
	return resource
}

// healthMetrics are the leadership health histograms of locks of class
// lock: how long tenures last, how long a lock stays free between holders,
// and how much of the lease each renewal had left.
type healthMetrics struct {
	tenure, takeover, margin *prometheus.HistogramVec
}

func newHealthMetrics() healthMetrics {
	return healthMetrics{
		tenure: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasewatch_tenure_seconds",
			Help:    "How long tenures of locks of class lock lasted, from grant to release, expiry or the next holder's grant; tenures this process saw begin only.",
			Buckets: []float64{1, 5, 15, 30, 60, 300, 900, 3600, 6 * 3600, 24 * 3600, 7 * 24 * 3600},
		}, []string{"source"}),
		takeover: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasewatch_takeover_seconds",
			Help:    "Time from a tenure's end (release or expiry) to the next grant of the lock, for locks of class lock; 0 when the next holder took it over directly.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 300},
		}, []string{"source"}),
		margin: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasewatch_renewal_margin_ratio",
			Help:    "Fraction of the lease left when each renewal of a lock of class lock arrived (0.25: a quarter); renewals read after a blind window or at a start have none.",
			Buckets: []float64{0, .1, .2, .25, .3, .4, .5, .6, .7, .8, .9, 1},
		}, []string{"source"}),
	}
}

func (h healthMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{h.tenure, h.takeover, h.margin}
}

// observe adds grant or end e, of a lock whose previous change ls has, to
// the tenure and takeover histograms.
func (h healthMetrics) observe(ls lockSeries, e audit.Event) {
	since := time.Duration(e.At.UnixNano() - ls.changedAt).Seconds()
	if ls.last == changeGranted && (e.Kind != audit.EventGrant || e.Detail["superseded"] != nil) {
		h.tenure.WithLabelValues(e.Lock.Source).Observe(since)
	}
	if e.Kind != audit.EventGrant {
		return
	}
	switch {
	case e.Detail["superseded"] != nil:
		h.takeover.WithLabelValues(e.Lock.Source).Observe(0)
	case ls.last == changeEnded:
		h.takeover.WithLabelValues(e.Lock.Source).Observe(since)
	}
}

// newRecorderMetrics registers the commits' metrics in reg, with series of
// their own for the first maxResources resources to report writes.
func newRecorderMetrics(reg prometheus.Registerer, maxResources int) *recorderMetrics {
	m := &recorderMetrics{
		resources: resourceSeries{max: maxResources},
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasewatch_observation_lag_seconds",
			Help:    "Time from a backend change to the commit that stored it. The change counts from the holder's renewal time where the backend records it (a Kubernetes renewTime, a Redis PTTL read back), else from the collector's receipt; for etcd always from the receipt of the watch response (grants, releases, expiries) or of the TTL read that showed a renewal, since etcd records no keepalive time and one estimated from whole-second TTLs would pass its resolution off as lag. Where the collector can tell how long the change waited before it received it (a Redis PING round trip, an etcd read that showed the revision before the watch delivered it), that counts too.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"source"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasewatch_events_recorded_total",
			Help: "Events stored, by source and event kind.",
		}, []string{"source", "kind"}),
		commits: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leasewatch_commit_duration_seconds",
			Help:    "Time the recorder took to write one group commit (one SQLite transaction), failed ones included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		findings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasewatch_findings_total",
			Help: "Findings (fencing gaps, late renewals, expiries, blind windows) recorded, by source, finding kind and severity.",
		}, []string{"source", "kind", "severity"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasewatch_write_reports_total",
			Help: "Write reports from protected resources recorded (duplicates by request ID not counted), by source, resource and outcome (accepted or rejected); resource is empty for the reports of resources beyond metrics.max_resource_series.",
		}, []string{"source", "resource", "outcome"}),
		heartbeatExpiries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasewatch_heartbeat_lease_expiries_total",
			Help: "Heartbeat-class leases that expired while held, by source.",
		}, []string{"source"}),
		blindSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasewatch_collector_blind_seconds_total",
			Help: "Time the source's collector could not see its backend, summed over the blind windows it recorded; a window counts once it has ended.",
		}, []string{"source"}),
	}
	m.health = newHealthMetrics()
	reg.MustRegister(m.lag, m.events, m.commits, m.findings, m.writes, m.heartbeatExpiries, m.blindSeconds)
	reg.MustRegister(m.health.collectors()...)
	m.latest = make(map[string]sourceLag)
	m.locks = make(map[audit.LockKey]lockSeries)
	m.heartbeats = make(map[audit.LockKey]bool)
	return m
}

// newRetentionMetrics registers retention's counters and the database's
// size, and returns the Retainer's Pruned and Sealed hooks.
func newRetentionMetrics(reg prometheus.Registerer, store interface {
	Size(context.Context) (int64, error)
}) (pruned func(string, int), sealed func(int)) {
	prunedRows := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasewatch_retention_pruned_total",
		Help: "Rows retention deleted, by table (events or findings).",
	}, []string{"table"})
	for _, t := range []string{"events", "findings"} {
		prunedRows.WithLabelValues(t)
	}
	sealedRenewals := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasewatch_renewals_sealed_total",
		Help: "Renewals sealed from rows into runs (docs/design/renewal-runs.md).",
	})
	size := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "leasewatch_database_bytes",
		Help: "Bytes the database takes: SQLite's pages in use (less the free ones), or PostgreSQL's tables with their indexes. Retention frees space that new rows reuse, so this levels off.",
	}, func() float64 {
		n, err := store.Size(context.Background())
		if err != nil {
			return math.NaN()
		}
		return float64(n)
	})
	reg.MustRegister(prunedRows, sealedRenewals, size)
	return func(table string, n int) { prunedRows.WithLabelValues(table).Add(float64(n)) },
		func(n int) { sealedRenewals.Add(float64(n)) }
}

// startSources makes each source's per-source counters exist at zero, so
// rate() and increase() see their first increment.
func (m *recorderMetrics) startSources(sources map[string]audit.SourceKind) {
	for name := range sources {
		m.heartbeatExpiries.WithLabelValues(name)
		m.blindSeconds.WithLabelValues(name)
	}
}

// timeCommits returns j with every Apply, the recorder's commit, timed.
func (m *recorderMetrics) timeCommits(j audit.Journal) audit.Journal {
	return timedJournal{Journal: j, duration: m.commits}
}

// timedJournal observes how long each Apply takes.
type timedJournal struct {
	audit.Journal
	duration prometheus.Histogram
}

func (j timedJournal) Apply(ctx context.Context, b audit.Batch) error {
	start := time.Now()
	err := j.Journal.Apply(ctx, b)
	j.duration.Observe(time.Since(start).Seconds())
	return err
}

// Committed counts commit c: recorderMetrics is a recorder subscriber.
func (m *recorderMetrics) Committed(c audit.Commit) {
	var longest map[string]time.Duration
	for _, in := range c.Inputs {
		if b := in.Blind; b != nil && b.To.After(b.From) {
			m.blindSeconds.WithLabelValues(in.Source).Add(b.To.Sub(b.From).Seconds())
		}
		for _, ob := range in.Observations {
			from := ob.At
			if !ob.RenewedAt.IsZero() && !in.CoarseRenewals {
				from = ob.RenewedAt
			}
			lag := c.At.Sub(from) + in.Behind
			if lag < 0 {
				continue // a holder's clock ahead of ours says nothing of the lag
			}
			m.lag.WithLabelValues(in.Source).Observe(lag.Seconds())
			if longest == nil {
				longest = make(map[string]time.Duration)
			}
			if l, ok := longest[in.Source]; !ok || lag > l {
				longest[in.Source] = lag
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for src, lag := range longest {
		m.latest[src] = sourceLag{lag: lag, at: c.At}
	}
	if c.Batch == nil {
		return
	}
	for _, f := range c.Batch.Findings {
		m.findings.WithLabelValues(f.Lock.Source, string(f.Kind), string(f.Severity)).Inc()
	}
	for _, st := range c.Batch.Locks {
		if st.Lock.Class == audit.ClassHeartbeat {
			m.heartbeats[st.Lock.Key()] = true
			delete(m.locks, st.Lock.Key()) // renewed before its class was known
		} else {
			delete(m.heartbeats, st.Lock.Key())
		}
	}
	for _, e := range c.Batch.Events {
		m.events.WithLabelValues(e.Lock.Source, string(e.Kind)).Inc()
		m.lockEvent(e)
	}
}

// lockEvent counts one event into the per-lock and per-class metrics. The
// caller holds m.mu.
func (m *recorderMetrics) lockEvent(e audit.Event) {
	switch e.Kind {
	case audit.EventWriteAccepted, audit.EventWriteRejected:
		m.writes.WithLabelValues(e.Lock.Source, m.resources.label(e.Lock.Source, e.Resource), strings.TrimPrefix(string(e.Kind), "write_")).Inc()
		return
	case audit.EventGrant, audit.EventObserved, audit.EventRenew, audit.EventRelease, audit.EventExpire:
	default:
		return
	}
	if m.heartbeats[e.Lock] {
		if e.Kind == audit.EventExpire {
			m.heartbeatExpiries.WithLabelValues(e.Lock.Source).Inc()
		}
		return
	}
	// Kept by value, in a map of 100,000 locks at scale.
	ls := m.locks[e.Lock]
	if e.Kind != audit.EventRenew {
		m.health.observe(ls, e)
	}
	switch e.Kind {
	case audit.EventGrant:
		// The tracker says who held the lock before, since before this
		// process started too.
		if !e.Previous.Known || e.Previous.Holder != e.Holder {
			ls.changes++
		}
		ls.hasMargin = false
		ls.last, ls.changedAt = changeGranted, e.At.UnixNano()
	case audit.EventObserved:
		ls.hasMargin = false
		ls.last, ls.changedAt = changeObserved, e.At.UnixNano()
	case audit.EventRenew:
		if r, ok := e.MarginRatio(); ok {
			ls.margin, ls.hasMargin = r, true
			m.health.margin.WithLabelValues(e.Lock.Source).Observe(r)
		}
	case audit.EventRelease, audit.EventExpire:
		if e.Kind == audit.EventExpire {
			ls.expiries++
		}
		ls.hasMargin = false
		ls.last, ls.changedAt = changeEnded, e.At.UnixNano()
	}
	m.locks[e.Lock] = ls
}

// withLag sets each source's Lag and LagAt from the latest commit that
// stored its observations.
func (m *recorderMetrics) withLag(sources []audit.Source) []audit.Source {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range sources {
		if l, ok := m.latest[sources[i].Name]; ok {
			sources[i].Lag, sources[i].LagAt = l.lag, l.at
		}
	}
	return sources
}

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
	m       *recorderMetrics
	store   audit.Store // must not lag renewals: the recorder's Fresh store
	sources func() []audit.Source
	max     int
	now     func() time.Time
	log     *slog.Logger
}

// newLeaseCollector returns the scrape-time collector over store, which
// must not lag renewals (the recorder's Fresh store), with per-lock series
// for at most max locks. sources may be nil.
func (m *recorderMetrics) newLeaseCollector(store audit.Reads, sources func() []audit.Source, max int, logger *slog.Logger) *leaseCollector {
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

// verdictCollector exports how many locks of class lock have each kept
// safety verdict (audit/verdict Keeper), read from the store at scrape
// time: one series per verdict, whatever the number of locks. The count
// joins every lock's row, so it reads through the background reads
// (backgroundReads), which do not keep what they read in resident memory.
type verdictCollector struct {
	store audit.Store
	log   *slog.Logger
}

var verdictsDesc = prometheus.NewDesc("leasewatch_locks_by_verdict",
	"Locks of class lock by their safety verdict over the last 24 hours, as last judged (every 10 s for locks that changed, every 10 min for all); locks not judged yet are not counted.",
	[]string{"verdict"}, nil)

// Describe implements prometheus.Collector.
func (c verdictCollector) Describe(ch chan<- *prometheus.Desc) { ch <- verdictsDesc }

// Collect implements prometheus.Collector.
func (c verdictCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	counts, err := c.store.VerdictCounts(ctx, audit.ClassLock)
	if err != nil {
		c.log.Error("count locks by verdict for a scrape", "err", err)
		ch <- prometheus.NewInvalidMetric(verdictsDesc, err)
		return
	}
	for _, k := range verdict.Kinds {
		ch <- prometheus.MustNewConstMetric(verdictsDesc, prometheus.GaugeValue, float64(counts[string(k)]), string(k))
	}
}

// registerSenderMetrics exports the Alertmanager sender's counts.
func registerSenderMetrics(reg prometheus.Registerer, s *alert.Sender) {
	counter := func(name, help string, v func(alert.SenderStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(s.Stats())) })
	}
	reg.MustRegister(
		counter("leasewatch_alertmanager_alerts_sent_total", "Alerts Alertmanager accepted, counted once per Alertmanager URL.",
			func(st alert.SenderStats) uint64 { return st.Sent }),
		counter("leasewatch_alertmanager_send_failures_total", "POSTs to Alertmanager that failed and will be retried.",
			func(st alert.SenderStats) uint64 { return st.Failed }),
		counter("leasewatch_alertmanager_alerts_dropped_total", "Alerts dropped: a full queue's oldest, or a batch Alertmanager rejected.",
			func(st alert.SenderStats) uint64 { return st.Dropped }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasewatch_alertmanager_alerts_queued", Help: "Alerts waiting to be sent, over every Alertmanager URL."},
			func() float64 { return float64(s.Stats().Queued) }),
	)
}
