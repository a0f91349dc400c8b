package config

import (
	"os"
	"path/filepath"
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
		sc, err := m.SenderConfig(nil)
		if err != nil || !slices.Equal(sc.URLs, m.URLs) || sc.ExternalURL != m.ExternalURL || sc.ResendEvery != m.ResendEvery ||
			sc.Timeout != m.Timeout || sc.Queue != m.Queue || sc.Client != nil {
			t.Errorf("SenderConfig() = %+v, %v; want the same settings as %+v and the default client", sc, err, m)
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
		{"BasicWithoutUser", `basic_auth: {password: pw}`, "alerts.alertmanager.basic_auth.username:"},
		{"BasicUserWithColon", `basic_auth: {username: "a:b", password: pw}`, "alerts.alertmanager.basic_auth.username:"},
		{"BasicWithoutPassword", `basic_auth: {username: lw}`, "alerts.alertmanager.basic_auth.password:"},
		{"BasicTwoPasswords", `basic_auth: {username: lw, password: pw, password_file: /f}`, "alerts.alertmanager.basic_auth.password_file:"},
		{"BasicUnknownKey", `basic_auth: {user: lw, password: pw}`, "alerts.alertmanager.basic_auth.user"},
		{"BasicAndBearer", `{basic_auth: {username: lw, password: pw}, bearer_token: t}`, "alerts.alertmanager.bearer_token:"},
		{"TwoBearerTokens", `{bearer_token: t, bearer_token_env: AM_TOKEN}`, "alerts.alertmanager.bearer_token_env:"},
		{"BearerEnvNotAName", `bearer_token_env: "AM TOKEN"`, "alerts.alertmanager.bearer_token_env:"},
		{"TLSOverHTTP", `{urls: ["https://am-0:9093", "http://am-1:9093"], tls: {ca_file: /ca.pem}}`, "alerts.alertmanager.urls[1]:"},
		{"TLSCertWithoutKey", `{urls: ["https://am:9093"], tls: {cert_file: /c.pem}}`, "alerts.alertmanager.tls.key_file:"},
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

// Load reads the Alertmanager's secrets as it does a source's: a password
// or token file must hold one, an environment variable must be set, and the
// TLS files must load; each error names the key, never the secret.
func TestLoadConfigAlertmanagerSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	empty := write("empty", "\n")
	token := write("token", "s3cret-token\n")
	t.Setenv("LW_AM_PASSWORD", "from-env")
	for _, tt := range []struct {
		name, am, want string
	}{
		{"PasswordFile", `basic_auth: {username: lw, password_file: ` + token + `}`, ""},
		{"PasswordEnv", `basic_auth: {username: lw, password_env: LW_AM_PASSWORD}`, ""},
		{"TokenFile", `bearer_token_file: ` + token, ""},
		{"EmptyPasswordFile", `basic_auth: {username: lw, password_file: ` + empty + `}`, "alerts.alertmanager.basic_auth.password_file:"},
		{"MissingTokenFile", `bearer_token_file: ` + filepath.Join(dir, "none"), "alerts.alertmanager.bearer_token_file:"},
		{"UnsetTokenEnv", `bearer_token_env: LW_AM_UNSET`, "alerts.alertmanager.bearer_token_env:"},
		{"MissingCA", `{urls: ["https://am:9093"], tls: {ca_file: ` + filepath.Join(dir, "none.pem") + `}}`, "alerts.alertmanager.tls.ca_file:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := write("lw.yaml", "alerts:\n  alertmanager:\n    "+tt.am+"\n")
			cfg, err := Load(path)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if tt.name == "PasswordEnv" && cfg.Alerts.Alertmanager.BasicAuth.Password != "from-env" {
					t.Errorf("password_env read as %q", cfg.Alerts.Alertmanager.BasicAuth.Password)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load: %v, want an error naming %s", err, tt.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error shows the secret: %v", err)
			}
		})
	}
}
