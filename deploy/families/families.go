// Package families lists the metric families leasewatch exports that the
// Prometheus rules and the Grafana dashboard in deploy/ may query, so their
// tests can catch a query of a family that does not exist (a typo, or a
// metric renamed in the code but not here).
package families

import (
	"regexp"
	"slices"
	"strings"
)

// Type is a metric family's Prometheus type.
type Type string

// Metric types.
const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Histogram Type = "histogram"
)

// Families maps each family name to its type.
var Families = map[string]Type{
	"leasewatch_lease_expiry_seconds":           Gauge,
	"leasewatch_lease_duration_seconds":         Gauge,
	"leasewatch_lease_renewal_margin_ratio":     Gauge,
	"leasewatch_lock_holder_changes_total":      Counter,
	"leasewatch_lease_expiries_total":           Counter,
	"leasewatch_heartbeat_leases":               Gauge,
	"leasewatch_heartbeat_lease_expiries_total": Counter,
	"leasewatch_findings_total":                 Counter,
	"leasewatch_write_reports_total":            Counter,
	"leasewatch_collector_up":                   Gauge,
	"leasewatch_collector_blind":                Gauge,
	"leasewatch_collector_blind_seconds_total":  Counter,
	"leasewatch_events_recorded_total":          Counter,
	"leasewatch_observation_lag_seconds":        Histogram,
	"leasewatch_tenure_seconds":                 Histogram,
	"leasewatch_takeover_seconds":               Histogram,
	"leasewatch_renewal_margin_ratio":           Histogram,
	"leasewatch_locks_by_verdict":               Gauge,
}

// CriticalKinds are the finding kinds of severity critical: the ones that
// fire FencingViolation.
var CriticalKinds = []string{"overlap", "unfenced_write", "token_regression", "token_reuse"}

// name matches a leasewatch metric name where it starts a word (not inside a
// recording rule's name such as source_lock:leasewatch_...:rate5m, whose
// leasewatch_ part follows a colon).
var name = regexp.MustCompile(`(^|[^a-zA-Z0-9_:])(leasewatch_[a-z_]+)`)

// Names returns the leasewatch_ metric names expr mentions, in order of first
// appearance.
func Names(expr string) []string {
	var names []string
	for _, m := range name.FindAllStringSubmatch(expr, -1) {
		if !slices.Contains(names, m[2]) {
			names = append(names, m[2])
		}
	}
	return names
}

// Known reports whether name is a listed family, or a series of a listed
// histogram (its _bucket, _sum or _count).
func Known(name string) bool {
	if _, ok := Families[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && Families[base] == Histogram {
			return true
		}
	}
	return false
}

// Unknown returns the leasewatch_ metric names in expr that are not Known.
func Unknown(expr string) []string {
	var unknown []string
	for _, n := range Names(expr) {
		if !Known(n) {
			unknown = append(unknown, n)
		}
	}
	return unknown
}
