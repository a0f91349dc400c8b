package config

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/collectors"
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
//	    # Every POST authenticates as Prometheus's alertmanager_config does:
//	    basic_auth:                              # or a bearer token, not both
//	      username: leasewatch
//	      password_file: /run/secrets/am-password # or password, or password_env
//	    bearer_token_file: /run/secrets/am-token  # or bearer_token, or bearer_token_env
//	    tls:                                     # https URLs: the CA, a client certificate
//	      ca_file: /etc/leasewatch/am-ca.pem
//	      cert_file: /etc/leasewatch/am-client.pem
//	      key_file: /etc/leasewatch/am-client-key.pem
//	      server_name: alertmanager.example      # when the URLs' host is not the certificate's
//
// A password or token file is read again for every POST, and changed TLS
// files for every connection, so rotated secrets need no restart.
type AlertmanagerConfig struct {
	URLs        []string      `yaml:"urls"`
	ExternalURL string        `yaml:"external_url"`
	ResendEvery time.Duration `yaml:"resend_every" lw:"nonzero"`
	Timeout     time.Duration `yaml:"timeout" lw:"nonzero"`
	Queue       int           `yaml:"queue" lw:"nonzero"`

	BasicAuth       *AlertmanagerBasicAuth `yaml:"basic_auth"`
	BearerToken     string                 `yaml:"bearer_token"`
	BearerTokenFile string                 `yaml:"bearer_token_file"`
	BearerTokenEnv  string                 `yaml:"bearer_token_env"`
	TLS             *SourceTLS             `yaml:"tls"`
}

// AlertmanagerBasicAuth is alerts.alertmanager.basic_auth.
type AlertmanagerBasicAuth struct {
	Username     string `yaml:"username"`
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
	PasswordEnv  string `yaml:"password_env"`
}

// bearerKeys name the keys that may give the bearer token.
var bearerKeys = passwordKeys{"bearer_token", "bearer_token_file", "bearer_token_env"}

// Defaults for omitted alerts.alertmanager keys.
const (
	DefaultAlertmanagerResendEvery = alert.DefaultResendEvery
	DefaultAlertmanagerTimeout     = alert.DefaultSendTimeout
	DefaultAlertmanagerQueue       = alert.DefaultQueue
)

// Enabled reports whether any Alertmanager is configured.
func (m AlertmanagerConfig) Enabled() bool { return len(m.URLs) > 0 }

// SenderConfig returns the alert sender's configuration, with an HTTP
// client that authenticates and speaks TLS as configured; the caller adds
// its logger. Load must have read the secrets; logger (nil: discard) hears
// of TLS files that fail to load again.
func (m AlertmanagerConfig) SenderConfig(logger *slog.Logger) (alert.SenderConfig, error) {
	sc := alert.SenderConfig{
		URLs:        m.URLs,
		ExternalURL: m.ExternalURL,
		ResendEvery: m.ResendEvery,
		Timeout:     m.Timeout,
		Queue:       m.Queue,
	}
	if m.BasicAuth == nil && m.bearer().IsZero() && m.TLS == nil {
		return sc, nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if m.TLS != nil {
		cfg, err := m.TLS.ClientConfig(logger)
		if err != nil {
			return sc, fmt.Errorf("tls.%w", err)
		}
		tr.DialTLSContext = dialTLS(cfg)
	}
	sc.Client = &http.Client{Transport: authenticated{next: tr, basic: m.BasicAuth, bearer: m.bearer()}}
	return sc, nil
}

// bearer is the bearer token's secret: inline or from the environment
// (read by Load), or its file.
func (m AlertmanagerConfig) bearer() collectors.Secret {
	if m.BearerTokenFile != "" {
		return collectors.PasswordFile(m.BearerTokenFile)
	}
	return collectors.Password(m.BearerToken)
}

// dialTLS dials with the configuration cfg gives for each connection,
// naming the server by the URL's host unless it names one.
func dialTLS(cfg collectors.TLS) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := cfg.Get()
		if err != nil {
			return nil, err
		}
		c = c.Clone()
		if c.ServerName == "" {
			c.ServerName, _, _ = net.SplitHostPort(addr)
		}
		d := tls.Dialer{Config: c}
		return d.DialContext(ctx, network, addr)
	}
}

// authenticated adds basic or bearer authentication to every request,
// reading a password or token file afresh each time.
type authenticated struct {
	next   http.RoundTripper
	basic  *AlertmanagerBasicAuth
	bearer collectors.Secret
}

func (a authenticated) RoundTrip(req *http.Request) (*http.Response, error) {
	switch {
	case a.basic != nil:
		pw, err := a.basic.secret().Get()
		if err != nil {
			return nil, fmt.Errorf("basic_auth password: %w", err)
		}
		req = req.Clone(req.Context())
		req.SetBasicAuth(a.basic.Username, pw)
	case !a.bearer.IsZero():
		tok, err := a.bearer.Get()
		if err != nil {
			return nil, fmt.Errorf("bearer token: %w", err)
		}
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return a.next.RoundTrip(req)
}

// secret is the password's secret: inline or from the environment (read
// by Load), or its file.
func (b *AlertmanagerBasicAuth) secret() collectors.Secret {
	if b.PasswordFile != "" {
		return collectors.PasswordFile(b.PasswordFile)
	}
	return collectors.Password(b.Password)
}

// readSecrets checks that the password and token files hold one, reads
// the environment variables, and loads the TLS files.
func (m *AlertmanagerConfig) readSecrets() error {
	if b := m.BasicAuth; b != nil {
		if err := sourcePasswordKeys.read(b.PasswordFile, b.PasswordEnv, &b.Password); err != nil {
			return fmt.Errorf("basic_auth.%w", err)
		}
	}
	if err := bearerKeys.read(m.BearerTokenFile, m.BearerTokenEnv, &m.BearerToken); err != nil {
		return err
	}
	if _, err := m.TLS.ClientConfig(nil); err != nil {
		return fmt.Errorf("tls.%w", err)
	}
	return nil
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
// retry periods (docs/design/timing-bound.md), before the new owner
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
		parsed, err := alert.ParseHTTPURL(u)
		if err != nil {
			return fmt.Errorf("urls[%d]: %w", i, err)
		}
		if m.TLS != nil && parsed.Scheme != "https" {
			return fmt.Errorf("urls[%d]: %s is not https, and tls is set", i, urlShown(parsed))
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
	bearer, err := bearerKeys.check(m.BearerToken != "", m.BearerTokenFile, m.BearerTokenEnv)
	if err != nil {
		return err
	}
	if b := m.BasicAuth; b != nil {
		switch {
		case len(bearer) > 0:
			return fmt.Errorf("%s: give basic_auth or a bearer token, not both", bearer[0])
		case strings.TrimSpace(b.Username) == "":
			return errors.New("basic_auth.username: required")
		case strings.ContainsAny(b.Username, ":") || strings.ContainsFunc(b.Username, isControl):
			return errors.New("basic_auth.username: must hold neither ':' nor a control character")
		}
		set, err := sourcePasswordKeys.check(b.Password != "", b.PasswordFile, b.PasswordEnv)
		switch {
		case err != nil:
			return fmt.Errorf("basic_auth.%w", err)
		case len(set) == 0:
			return errors.New("basic_auth.password: required: give password, password_file or password_env")
		}
	}
	if m.TLS != nil {
		if err := m.TLS.validate(); err != nil {
			return fmt.Errorf("tls.%w", err)
		}
	}
	return nil
}

// urlShown is u without any user information it carries.
func urlShown(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}
