package web

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasewatch/leasewatch/audit"
)

// metrics are the server's Prometheus collectors.
type metrics struct {
	duration       *prometheus.HistogramVec
	writes         *prometheus.CounterVec
	beliefs        prometheus.Counter
	reviewsWaiting prometheus.Gauge
	authFailures   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leasewatch_http_request_duration_seconds",
			Help:    "Time to answer HTTP requests, by route template, method and status code.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method", "code"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasewatch_ingest_writes_total",
			Help: "Write reports accepted by POST /api/v1/writes, by reported outcome.",
		}, []string{"outcome"}),
		beliefs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasewatch_ingest_beliefs_total",
			Help: "Holders' beliefs accepted by POST /api/v1/beliefs, zombie or not.",
		}),
		reviewsWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasewatch_reviews_waiting",
			Help: "Incident reviews (the page and its exports) waiting for a turn: a few are built at once.",
		}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasewatch_auth_failures_total",
			Help: "Requests to the dashboard refused for their credentials: a wrong basic user or password (credentials), a user named from outside the trusted proxies (untrusted_proxy).",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.duration, m.writes, m.beliefs, m.reviewsWaiting, m.authFailures} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register http metrics: %w", err)
		}
	}
	// Start both series at zero so rate() sees the first report.
	m.writes.WithLabelValues(string(audit.WriteAccepted))
	m.writes.WithLabelValues(string(audit.WriteRejected))
	return m, nil
}

// instrument observes every request's duration, labelled by the matched route
// template so raw paths (lock ids) never become label values. It answers
// errors itself, so the status it records is the one the client gets.
func (s *Server) instrument(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		if err := next(c); err != nil {
			c.Error(err)
		}
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		s.metrics.duration.
			WithLabelValues(route, methodLabel(c.Request().Method), strconv.Itoa(c.Response().Status)).
			Observe(time.Since(start).Seconds())
		return nil
	}
}

// methodLabel bounds the method label: clients can send any token as a method.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	default:
		return "other"
	}
}
