package prom

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasewatch/leasewatch/audit"
)

// DefaultClockSeries is how many holders' clocks have series of their own:
// those whose offset is largest either way. A cluster's thousands of nodes
// would otherwise each be a series; the API lists them all.
const DefaultClockSeries = 100

var (
	clockOffsetDesc = prometheus.NewDesc("leasewatch_holder_clock_offset_seconds",
		"The holder's clock less leasewatch's, at least (positive: ahead), from its renewals of the last 10 minutes that carry its own time (a Kubernetes renewTime); for the holders whose offset is largest either way.",
		[]string{"source", "holder"}, nil)
	clockBoundDesc = prometheus.NewDesc("leasewatch_holder_clock_offset_bound_seconds",
		"How far each minute's estimate of leasewatch_holder_clock_offset_seconds spread over the window; absent until the holder renewed in two minutes.",
		[]string{"source", "holder"}, nil)
	clockLimitDesc = prometheus.NewDesc("leasewatch_holder_clock_series_limit_exceeded",
		"Holders with a clock estimate left out of leasewatch_holder_clock_offset_seconds by its cap.",
		nil, nil)
)

// clockCollector reports the holders' clock estimates at scrape time.
type clockCollector struct {
	clocks *audit.HolderClocks
	max    int
	now    func() time.Time
	log    *slog.Logger
}

// NewClockCollector returns the scrape-time collector of clocks' estimates,
// with series for at most max holders (DefaultClockSeries when 0 or less),
// the largest offsets either way; the others are counted in
// leasewatch_holder_clock_series_limit_exceeded. A series that cannot be
// made is logged and left out.
func NewClockCollector(clocks *audit.HolderClocks, max int, logger *slog.Logger) prometheus.Collector {
	if max <= 0 {
		max = DefaultClockSeries
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &clockCollector{clocks: clocks, max: max, now: time.Now, log: logger}
}

// Describe implements prometheus.Collector.
func (c *clockCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- clockOffsetDesc
	ch <- clockBoundDesc
	ch <- clockLimitDesc
}

// Collect implements prometheus.Collector.
func (c *clockCollector) Collect(ch chan<- prometheus.Metric) {
	top, total := c.clocks.Largest(c.now(), audit.ClockFilter{Limit: c.max})
	var out []prometheus.Metric
	for _, e := range top {
		out = c.series(out, clockOffsetDesc, e.Offset.Seconds(), e.Source, e.Holder)
		if e.Bounded() {
			out = c.series(out, clockBoundDesc, e.Bound.Seconds(), e.Source, e.Holder)
		}
	}
	out = c.series(out, clockLimitDesc, float64(total-len(top)))
	for _, m := range out {
		ch <- m
	}
}

// series adds one gauge to out, or logs why it cannot be made (a label
// that is not valid UTF-8) and leaves it out.
func (c *clockCollector) series(out []prometheus.Metric, desc *prometheus.Desc, v float64, labels ...string) []prometheus.Metric {
	m, err := prometheus.NewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	if err != nil {
		c.log.Warn("metrics: series left out", "series", desc.String(), "err", err)
		return out
	}
	return append(out, m)
}
