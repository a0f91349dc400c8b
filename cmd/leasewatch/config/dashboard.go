package config

import (
	"fmt"
	"time"

	"github.com/leasewatch/leasewatch/web"
)

// DashboardConfig is dashboard: how the pages show what is stored. Optional,
// added to the contract; every key has a default.
//
//	dashboard:
//	  group_exposures_under: 1s # shorter exposures of one lock and resource share a row
type DashboardConfig struct {
	// GroupExposuresUnder folds, in the findings lists (the findings page,
	// the overview's and the lock page's), the exposure findings shorter
	// than it of one lock and resource into one row that links to each.
	// The findings are stored and counted as they are.
	GroupExposuresUnder time.Duration `yaml:"group_exposures_under" lw:"nonzero"`
}

func (d *DashboardConfig) fillDefaults() {
	if d.GroupExposuresUnder == 0 {
		d.GroupExposuresUnder = web.DefaultGroupExposuresUnder
	}
}

func (d *DashboardConfig) validate() error {
	if d.GroupExposuresUnder < 0 {
		return fmt.Errorf("group_exposures_under: %v is negative; a nanosecond (1ns) lists every exposure on its own row", d.GroupExposuresUnder)
	}
	return nil
}
