package families

import (
	"slices"
	"testing"
)

func TestUnknown(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		unknown    []string
	}{
		{"Gauge", `leasewatch_lease_expiry_seconds{lock=~"$lock"}`, nil},
		{"HistogramBucket", `histogram_quantile(0.99, rate(leasewatch_observation_lag_seconds_bucket[5m]))`, nil},
		{"HistogramSumCount", `leasewatch_observation_lag_seconds_sum / leasewatch_observation_lag_seconds_count`, nil},
		{"CounterWithoutTotal", `rate(leasewatch_findings[5m])`, []string{"leasewatch_findings"}},
		{"SuffixOfNonHistogram", `leasewatch_lease_expiry_seconds_bucket`, []string{"leasewatch_lease_expiry_seconds_bucket"}},
		{"Typo", `leasewatch_lease_expiry_second > 0`, []string{"leasewatch_lease_expiry_second"}},
		{"RecordingRuleIgnored", `source_lock:leasewatch_lease_expiries:increase5m > 0`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Unknown(tc.expr); !slices.Equal(got, tc.unknown) {
				t.Errorf("Unknown(%q) = %v, want %v", tc.expr, got, tc.unknown)
			}
		})
	}
}

func TestNames(t *testing.T) {
	got := Names(`leasewatch_collector_up - leasewatch_collector_blind + leasewatch_collector_up`)
	want := []string{"leasewatch_collector_up", "leasewatch_collector_blind"}
	if !slices.Equal(got, want) {
		t.Errorf("Names = %v, want %v", got, want)
	}
}
