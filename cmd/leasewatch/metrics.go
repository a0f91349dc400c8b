package main

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasewatch/leasewatch/audit"
)

// recorderMetrics turns the recorder's commits into Prometheus metrics, and
// keeps each source's latest observation lag for the dashboard.
type recorderMetrics struct {
	lag    *prometheus.HistogramVec
	events *prometheus.CounterVec

	mu     sync.Mutex
	latest map[string]sourceLag // by source
}

// sourceLag is the longest observation lag of one commit, and when it was.
type sourceLag struct {
	lag time.Duration
	at  time.Time
}

func newRecorderMetrics(reg prometheus.Registerer) *recorderMetrics {
	m := &recorderMetrics{
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasewatch_observation_lag_seconds",
			Help:    "Time from a backend change (the holder's renewTime where the backend records it, else the collector's receipt, less how long the backend's notification waited before it, where the collector can tell) to the commit that stored it.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"source"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasewatch_events_recorded_total",
			Help: "Events stored, by source and event kind.",
		}, []string{"source", "kind"}),
	}
	reg.MustRegister(m.lag, m.events)
	m.latest = make(map[string]sourceLag)
	return m
}

// observe is the recorder's commit hook.
func (m *recorderMetrics) observe(c audit.Commit) {
	var longest map[string]time.Duration
	for _, in := range c.Inputs {
		for _, ob := range in.Observations {
			from := ob.At
			if !ob.RenewedAt.IsZero() {
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
	if longest != nil {
		m.mu.Lock()
		for src, lag := range longest {
			m.latest[src] = sourceLag{lag: lag, at: c.At}
		}
		m.mu.Unlock()
	}
	for _, e := range c.Batch.Events {
		m.events.WithLabelValues(e.Lock.Source, string(e.Kind)).Inc()
	}
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
