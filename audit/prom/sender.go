package prom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasewatch/leasewatch/audit/alert"
)

// RegisterSender exports the Alertmanager sender's counts.
func RegisterSender(reg prometheus.Registerer, s *alert.Sender) {
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
