package config

import (
	"fmt"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// HealthConfig is health: the thresholds of the leadership health findings
// (flapping, leaderless, tight_renewal, clock_skew). Optional, added to the
// contract; every key has a default.
//
//	health:
//	  flapping_per_hour: 6            # more grants of a lock within an hour: flapping
//	  leaderless_after: 1m            # a normally held lock free this long: leaderless
//	  tight_renewal_margin_ratio: 0.4 # typical renewal leaves less of the lease: tight_renewal
//	  clock_skew_ratio: 0.1           # holder's clock ahead by more of the lease: clock_skew
type HealthConfig struct {
	FlappingPerHour         int           `yaml:"flapping_per_hour" lw:"nonzero"`
	LeaderlessAfter         time.Duration `yaml:"leaderless_after" lw:"nonzero"`
	TightRenewalMarginRatio float64       `yaml:"tight_renewal_margin_ratio" lw:"nonzero"`
	ClockSkewRatio          float64       `yaml:"clock_skew_ratio" lw:"nonzero"`
}

func (h *HealthConfig) fillDefaults() {
	if h.FlappingPerHour == 0 {
		h.FlappingPerHour = audit.DefaultFlappingPerHour
	}
	if h.LeaderlessAfter == 0 {
		h.LeaderlessAfter = audit.DefaultLeaderlessAfter
	}
	if h.TightRenewalMarginRatio == 0 {
		h.TightRenewalMarginRatio = audit.DefaultTightMarginRatio
	}
	if h.ClockSkewRatio == 0 {
		h.ClockSkewRatio = audit.DefaultClockSkewRatio
	}
}

func (h *HealthConfig) validate() error {
	switch {
	case h.FlappingPerHour < 1 || h.FlappingPerHour > audit.MaxFlappingPerHour:
		return fmt.Errorf("flapping_per_hour: %d is outside 1..%d", h.FlappingPerHour, audit.MaxFlappingPerHour)
	case h.LeaderlessAfter < time.Second:
		return fmt.Errorf("leaderless_after: %v is shorter than 1s", h.LeaderlessAfter)
	case h.TightRenewalMarginRatio <= 0 || h.TightRenewalMarginRatio >= 1:
		return fmt.Errorf("tight_renewal_margin_ratio: %v is outside (0, 1)", h.TightRenewalMarginRatio)
	case h.ClockSkewRatio <= 0 || h.ClockSkewRatio >= 1:
		return fmt.Errorf("clock_skew_ratio: %v is outside (0, 1)", h.ClockSkewRatio)
	}
	return nil
}

// Tracker returns the tracker's leadership health thresholds.
func (h HealthConfig) Tracker() audit.HealthConfig {
	return audit.HealthConfig{FlappingPerHour: h.FlappingPerHour, LeaderlessAfter: h.LeaderlessAfter,
		TightMarginRatio: h.TightRenewalMarginRatio, ClockSkewRatio: h.ClockSkewRatio}
}
