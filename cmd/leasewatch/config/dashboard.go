package config

import (
	"fmt"
	"net"
	"time"

	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/web"
)

// DashboardConfig is dashboard: how the pages show what is stored, and
// where users reach them. Optional, added to the contract; every key has a
// default.
//
//	dashboard:
//	  group_exposures_under: 1s # shorter exposures of one lock and resource share a row
//	  external_url: https://leasewatch.example   # the dashboard as users reach it
type DashboardConfig struct {
	// GroupExposuresUnder folds, in the findings lists (the findings page,
	// the overview's and the lock page's), the exposure findings shorter
	// than it of one lock and resource into one row that links to each.
	// The findings are stored and counted as they are.
	GroupExposuresUnder time.Duration `yaml:"group_exposures_under" lw:"nonzero"`
	// ExternalURL is the dashboard's URL as users reach it, through a proxy
	// or a name of its own. With auth mode none the dashboard answers only
	// requests naming its listen host, a loopback name, an IP address or
	// this URL's host (Hosts).
	ExternalURL string `yaml:"external_url"`
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
	if d.ExternalURL != "" {
		if _, err := alert.ParseHTTPURL(d.ExternalURL); err != nil {
			return fmt.Errorf("external_url: %w", err)
		}
	}
	return nil
}

// DashboardHosts are the host names an open dashboard (auth mode none)
// answers to besides loopback names and IP addresses: listen's host when it
// is a name, and the hosts of dashboard.external_url and of
// alerts.alertmanager.external_url, which alerts link to. Call it on a
// validated configuration.
func (c *Config) DashboardHosts() []string {
	var hosts []string
	if host, _, err := net.SplitHostPort(c.Listen); err == nil && host != "" {
		hosts = append(hosts, host)
	}
	for _, raw := range []string{c.Dashboard.ExternalURL, c.Alerts.Alertmanager.ExternalURL} {
		if u, err := alert.ParseHTTPURL(raw); raw != "" && err == nil {
			hosts = append(hosts, u.Hostname())
		}
	}
	return hosts
}
