package prom

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// NewVerdictCollector returns the collector of how many locks of class
// lock have each kept safety verdict, read from store at scrape time;
// errors go to log.
func NewVerdictCollector(store audit.Store, log *slog.Logger) prometheus.Collector {
	return verdictCollector{store: store, log: log}
}

// verdictCollector exports how many locks of class lock have each kept
// safety verdict (audit/verdict Keeper), read from the store at scrape
// time: one series per verdict, whatever the number of locks. The count
// joins every lock's row, so it should read through reads that do not keep
// what they read in resident memory (leasewatch serve's background reads).
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
