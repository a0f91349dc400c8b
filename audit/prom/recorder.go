// Package prom adapts the recorder's commits and the store's reads to
// Prometheus: counters and histograms from each commit (RecorderMetrics, a
// recorder subscriber), and collectors that read the present from the store
// at scrape time (the leases, the kept verdicts, the database's size), with
// the Alertmanager sender's and retention's counts.
//
// It imports audit and its query layer, never web or a store.
package prom

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasewatch/leasewatch/audit"
)

// RecorderMetrics turns the recorder's commits into Prometheus metrics, and
// keeps each source's latest observation lag for the dashboard.
//
// Counters count the events of each commit, so each event counts once. What
// describes the present (time to expiry, lease duration, heartbeats by state)
// is read at scrape time by leaseCollector.
type RecorderMetrics struct {
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

// count adds grant or end e, of a lock whose previous change ls has, to
// the tenure and takeover histograms.
func (h healthMetrics) count(ls lockSeries, e audit.Event) {
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

// NewRecorderMetrics registers the commits' metrics in reg, with series of
// their own for the first maxResources resources to report writes.
func NewRecorderMetrics(reg prometheus.Registerer, maxResources int) *RecorderMetrics {
	m := &RecorderMetrics{
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

// StartSources makes each source's per-source counters exist at zero, so
// rate() and increase() see their first increment.
func (m *RecorderMetrics) StartSources(sources map[string]audit.SourceKind) {
	for name := range sources {
		m.heartbeatExpiries.WithLabelValues(name)
		m.blindSeconds.WithLabelValues(name)
	}
}

// TimeCommits returns j with every Apply, the recorder's commit, timed.
func (m *RecorderMetrics) TimeCommits(j audit.Journal) audit.Journal {
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

var _ audit.CommitSubscriber = (*RecorderMetrics)(nil)

// Committed counts commit c: RecorderMetrics is a recorder subscriber.
func (m *RecorderMetrics) Committed(c audit.Commit) {
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
func (m *RecorderMetrics) lockEvent(e audit.Event) {
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
		m.health.count(ls, e)
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

// WithLag sets each source's Lag and LagAt from the latest commit that
// stored its observations.
func (m *RecorderMetrics) WithLag(sources []audit.Source) []audit.Source {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range sources {
		if l, ok := m.latest[sources[i].Name]; ok {
			sources[i].Lag, sources[i].LagAt = l.lag, l.at
		}
	}
	return sources
}
