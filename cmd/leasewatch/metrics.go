package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasewatch/leasewatch/audit"
)

// recorderMetrics turns the recorder's commits into Prometheus metrics.
type recorderMetrics struct {
	lag    *prometheus.HistogramVec
	events *prometheus.CounterVec
}

func newRecorderMetrics(reg prometheus.Registerer) *recorderMetrics {
	m := &recorderMetrics{
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasewatch_observation_lag_seconds",
			Help:    "Time from a backend change (the holder's renewTime where the backend records it, else the collector's receipt) to the commit that stored it.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"source"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasewatch_events_recorded_total",
			Help: "Events stored, by source and event kind.",
		}, []string{"source", "kind"}),
	}
	reg.MustRegister(m.lag, m.events)
	return m
}

// observe is the recorder's commit hook.
func (m *recorderMetrics) observe(c audit.Commit) {
	for _, in := range c.Inputs {
		for _, ob := range in.Observations {
			from := ob.At
			if !ob.RenewedAt.IsZero() {
				from = ob.RenewedAt
			}
			if lag := c.At.Sub(from).Seconds(); lag >= 0 {
				m.lag.WithLabelValues(in.Source).Observe(lag)
			}
		}
	}
	for _, e := range c.Batch.Events {
		m.events.WithLabelValues(e.Lock.Source, string(e.Kind)).Inc()
	}
}
