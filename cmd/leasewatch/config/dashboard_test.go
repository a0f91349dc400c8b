package config

import (
	"slices"
	"testing"
)

// An open dashboard answers the names it is reached by: listen's host when
// it is a name, and the hosts of both external URLs.
func TestDashboardHosts(t *testing.T) {
	for _, tt := range []struct {
		name, yaml string
		want       []string
	}{
		{"Default", "{}", []string{"127.0.0.1"}},
		{"EveryInterface", "listen: \":8080\"\nauth: {allow_open: true}\n", nil},
		{"ListenName", "listen: localhost:8080\n", []string{"localhost"}},
		{"ExternalURL", "dashboard:\n  external_url: https://LeaseWatch.example:8443/lw/\n",
			[]string{"127.0.0.1", "LeaseWatch.example"}},
		{"AlertsExternalURL", "alerts:\n  alertmanager:\n    external_url: http://[fd00::1]:8080\n",
			[]string{"127.0.0.1", "fd00::1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := cfg.DashboardHosts(); !slices.Equal(got, tt.want) {
				t.Errorf("DashboardHosts = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDashboardExternalURLRefused(t *testing.T) {
	for _, tt := range []struct{ name, yaml, want string }{
		{"NoScheme", "dashboard:\n  external_url: leasewatch.example\n", "dashboard.external_url:"},
		{"NotHTTP", "dashboard:\n  external_url: ftp://leasewatch.example\n", "dashboard.external_url: \"ftp://leasewatch.example\": scheme must be http or https"},
		{"NoHost", "dashboard:\n  external_url: \"https://\"\n", "dashboard.external_url: \"https://\": no host"},
		{"NotAString", "dashboard:\n  external_url: [a]\n", "dashboard.external_url"},
	} {
		t.Run(tt.name, func(t *testing.T) { parseFailsInEachStyle(t, tt.yaml, tt.want, nil) })
	}
}
