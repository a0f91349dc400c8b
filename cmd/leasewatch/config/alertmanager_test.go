package config

import (
	"slices"
	"strings"
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

// With replication, a firing alert must outlive in Alertmanager the gap a
// takeover leaves between two sends: resend_every is refused where it
// would not.
func TestAlertmanagerResendCoversTakeover(t *testing.T) {
	doc := func(resend string) string {
		return pgDatabase + `
replication: {backend: kubernetes, namespace: lw}
alerts:
  alertmanager: {urls: ["http://alertmanager:9093"], resend_every: ` + resend + `}
`
	}
	// The default lease of 15 s, 2 s retries and 5 s slack: 24 s at most
	// between sends beyond resend_every, which 3 resends must exceed.
	if _, err := Parse([]byte(doc("8s"))); err == nil || !strings.HasPrefix(err.Error(), "alerts.alertmanager.resend_every:") {
		t.Fatalf("resend_every 8s with a 15s ownership lease: Parse = %v, want an error naming alerts.alertmanager.resend_every", err)
	}
	if _, err := Parse([]byte(doc("9s"))); err != nil {
		t.Fatalf("resend_every 9s with a 15s ownership lease: %v", err)
	}
	if _, err := Parse([]byte(`alerts: {alertmanager: {urls: ["http://alertmanager:9093"], resend_every: 1s}}`)); err != nil {
		t.Fatalf("resend_every 1s without replication: %v", err)
	}
}
