package config

import "testing"

func TestParseConfigMetrics(t *testing.T) {
	t.Run("DefaultCap", func(t *testing.T) {
		cfg, err := Parse([]byte("{}"))
		if err != nil {
			t.Fatalf("Parse({}): %v", err)
		}
		if got := cfg.Metrics.MaxLockSeries; got != DefaultMaxLockSeries {
			t.Fatalf("metrics.max_lock_series = %d, want the default %d", got, DefaultMaxLockSeries)
		}
		if got := cfg.Metrics.MaxResourceSeries; got != DefaultMaxResourceSeries {
			t.Fatalf("metrics.max_resource_series = %d, want the default %d", got, DefaultMaxResourceSeries)
		}
	})
	t.Run("Cap", func(t *testing.T) {
		cfg, err := Parse([]byte("metrics:\n  max_lock_series: 50\n  max_resource_series: 20\n"))
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		if got := cfg.Metrics.MaxLockSeries; got != 50 {
			t.Fatalf("metrics.max_lock_series = %d, want 50", got)
		}
		if got := cfg.Metrics.ResourceSeries(); got != 20 {
			t.Fatalf("metrics.max_resource_series = %d, want 20", got)
		}
	})
	t.Run("UnsetInCodeIsTheDefault", func(t *testing.T) {
		var m MetricsConfig
		if err := m.validate(); err != nil {
			t.Fatalf("zero MetricsConfig: %v", err)
		}
		if got := m.LockSeries(); got != DefaultMaxLockSeries {
			t.Fatalf("LockSeries() = %d, want the default %d", got, DefaultMaxLockSeries)
		}
	})
	for _, tt := range []struct{ name, yaml, want string }{
		{"Negative", "metrics:\n  max_lock_series: -1\n", "metrics.max_lock_series: -1 is outside 1..10000"},
		{"TooMany", "metrics:\n  max_lock_series: 10001\n", "metrics.max_lock_series: 10001 is outside"},
		{"NotANumber", "metrics:\n  max_lock_series: lots\n", "metrics.max_lock_series"},
		{"ResourcesZero", "metrics:\n  max_resource_series: 0\n", "metrics.max_resource_series (line 2): 0 would silently mean the default"},
		{"ResourcesTooMany", "metrics:\n  max_resource_series: 10001\n", "metrics.max_resource_series: 10001 is outside 1..10000"},
		{"UnknownField", "metrics:\n  max_series: 5\n", "metrics.max_series"},
	} {
		t.Run(tt.name, func(t *testing.T) { parseFailsInEachStyle(t, tt.yaml, tt.want, nil) })
	}
}
