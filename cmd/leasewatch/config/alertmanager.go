package config

import (
	"fmt"
	"time"

	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/collectors/ownership"
)

// AlertmanagerConfig is alerts.alertmanager: where live alerts are sent.
// Optional, added to the contract; without urls no alert is sent.
//
//	alerts:
//	  alertmanager:
//	    urls: ["http://alertmanager:9093"]      # base URLs; each gets every alert
//	    external_url: https://leasewatch.example # the dashboard as users reach it: alerts link to the lock's timeline
//	    resend_every: 1m                         # firing alerts are re-sent this often
//	    timeout: 10s                             # one POST to one Alertmanager
//	    queue: 1000                              # alerts waiting per URL; when full, the oldest are dropped
type AlertmanagerConfig struct {
	URLs        []string      `yaml:"urls"`
	ExternalURL string        `yaml:"external_url"`
	ResendEvery time.Duration `yaml:"resend_every" lw:"nonzero"`
	Timeout     time.Duration `yaml:"timeout" lw:"nonzero"`
	Queue       int           `yaml:"queue" lw:"nonzero"`
}

// Defaults for omitted alerts.alertmanager keys.
const (
	DefaultAlertmanagerResendEvery = alert.DefaultResendEvery
	DefaultAlertmanagerTimeout     = alert.DefaultSendTimeout
	DefaultAlertmanagerQueue       = alert.DefaultQueue
)

// Enabled reports whether any Alertmanager is configured.
func (m AlertmanagerConfig) Enabled() bool { return len(m.URLs) > 0 }

// SenderConfig returns the alert sender's configuration; the caller adds
// its logger.
func (m AlertmanagerConfig) SenderConfig() alert.SenderConfig {
	return alert.SenderConfig{
		URLs:        m.URLs,
		ExternalURL: m.ExternalURL,
		ResendEvery: m.ResendEvery,
		Timeout:     m.Timeout,
		Queue:       m.Queue,
	}
}

// fillDefaults sets omitted (zero) keys to their defaults.
func (m *AlertmanagerConfig) fillDefaults() {
	if m.ResendEvery == 0 {
		m.ResendEvery = DefaultAlertmanagerResendEvery
	}
	if m.Timeout == 0 {
		m.Timeout = DefaultAlertmanagerTimeout
	}
	if m.Queue == 0 {
		m.Queue = DefaultAlertmanagerQueue
	}
}

// TakeoverSlack is what a takeover adds, past the ownership lease and two
// retry periods (ARCHITECTURE.md, "The timing bound"), before the new owner
// sends a source's firing alerts: its fence commit, its first evaluation
// (four a second) and a read of the source's findings back from the store,
// and the POST. In the e2e test the new owner's copy reached Alertmanager
// 2.5 to 3 s after a kill -9 of the owner, with a 2 s lease and 300 ms retries.
const TakeoverSlack = 5 * time.Second

// coversTakeover checks, with replication timed t, that a firing alert
// outlives in Alertmanager the gap a takeover leaves in its re-sends: the
// dead owner's last copy was sent up to resend_every before it died and ends
// EndsAfterResends of them after it was sent, and the new owner sends its
// own within the takeover bound.
func (m *AlertmanagerConfig) coversTakeover(t ownership.Timing) error {
	gap := m.ResendEvery + t.LeaseDuration + 2*t.RetryPeriod + TakeoverSlack
	if lasts := alert.EndsAfterResends * m.ResendEvery; lasts <= gap {
		return fmt.Errorf("resend_every: %v is too short for replication: a firing alert lasts %v in Alertmanager after a send, "+
			"and a takeover can leave up to %v between two sends (resend_every + lease_duration + 2 × retry_period + %v); "+
			"resend_every must be longer than %v", m.ResendEvery, lasts, gap, TakeoverSlack,
			(t.LeaseDuration+2*t.RetryPeriod+TakeoverSlack)/(alert.EndsAfterResends-1))
	}
	return nil
}

func (m *AlertmanagerConfig) validate() error {
	for i, u := range m.URLs {
		if _, err := alert.ParseHTTPURL(u); err != nil {
			return fmt.Errorf("urls[%d]: %w", i, err)
		}
	}
	if m.ExternalURL != "" {
		if _, err := alert.ParseHTTPURL(m.ExternalURL); err != nil {
			return fmt.Errorf("external_url: %w", err)
		}
	}
	switch {
	case m.ResendEvery <= 0:
		return fmt.Errorf("resend_every: %v must be positive", m.ResendEvery)
	case m.Timeout <= 0:
		return fmt.Errorf("timeout: %v must be positive", m.Timeout)
	case m.Queue <= 0:
		return fmt.Errorf("queue: %d must be positive", m.Queue)
	}
	return nil
}
