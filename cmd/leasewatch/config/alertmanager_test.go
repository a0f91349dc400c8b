package config

import (
	"slices"
	"testing"
	"time"
)

func TestParseConfigAlertmanager(t *testing.T) {
	t.Run("Defaults", func(t *testing.T) {
		cfg, err := Parse([]byte("{}"))
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		m := cfg.Alerts.Alertmanager
		if m.Enabled() || m.ResendEvery != time.Minute || m.Timeout != 10*time.Second || m.Queue != 1000 || m.ExternalURL != "" {
			t.Errorf("alerts.alertmanager = %+v, want disabled with resend_every 1m, timeout 10s, queue 1000", m)
		}
	})
	t.Run("Set", func(t *testing.T) {
		cfg, err := Parse([]byte(`
alerts:
  alertmanager:
    urls: ["http://am-0:9093", "https://am-1.example/alertmanager/"]
    external_url: https://leasewatch.example
    resend_every: 30s
    timeout: 2s
    queue: 50
`))
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		m := cfg.Alerts.Alertmanager
		if !m.Enabled() || !slices.Equal(m.URLs, []string{"http://am-0:9093", "https://am-1.example/alertmanager/"}) ||
			m.ExternalURL != "https://leasewatch.example" || m.ResendEvery != 30*time.Second || m.Timeout != 2*time.Second || m.Queue != 50 {
			t.Fatalf("alerts.alertmanager = %+v", m)
		}
		sc := m.SenderConfig()
		if !slices.Equal(sc.URLs, m.URLs) || sc.ExternalURL != m.ExternalURL || sc.ResendEvery != m.ResendEvery || sc.Timeout != m.Timeout || sc.Queue != m.Queue {
			t.Errorf("SenderConfig() = %+v, want the same settings as %+v", sc, m)
		}
	})
}

func TestParseConfigAlertmanagerErrorsNameTheField(t *testing.T) {
	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"URLNotHTTP", `urls: ["am:9093"]`, "alerts.alertmanager.urls[0]:"},
		{"URLUnparsable", `urls: ["http://am:9093", "http://am:port"]`, "alerts.alertmanager.urls[1]:"},
		{"URLNoHost", `urls: ["https://"]`, "alerts.alertmanager.urls[0]:"},
		{"ExternalURLNotHTTP", `external_url: leasewatch.example`, "alerts.alertmanager.external_url:"},
		{"NegativeResendEvery", `resend_every: -1m`, "alerts.alertmanager.resend_every:"},
		{"NegativeTimeout", `timeout: -1s`, "alerts.alertmanager.timeout:"},
		{"NegativeQueue", `queue: -5`, "alerts.alertmanager.queue:"},
		{"UnknownKey", `url: http://am:9093`, "alerts.alertmanager.url"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			parseFailsInEachStyle(t, "alerts:\n  alertmanager:\n    "+tt.yaml+"\n", tt.want, nil)
		})
	}
}
