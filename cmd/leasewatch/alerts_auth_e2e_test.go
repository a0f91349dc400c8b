package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/audit/alert/alertmanagertest"
	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
	"github.com/leasewatch/leasewatch/collectors/testcert"
)

// amSender loads a configuration whose alerts.alertmanager section is am
// (YAML, indented under it) and runs the sender it makes until the test
// ends.
func amSender(t *testing.T, dir, am string) *alert.Sender {
	t.Helper()
	path := filepath.Join(dir, "lw.yaml")
	doc := "database: " + filepath.Join(dir, "lw.db") + "\nalerts:\n  alertmanager:\n" + am
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("load:\n%s\n%v", doc, err)
	}
	sc, err := cfg.Alerts.Alertmanager.SenderConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	sc.MinBackoff, sc.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
	s, err := alert.NewSender(sc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// lockAlert is a firing LeaseNearExpiry alert for lock.
func lockAlert(lock string) alert.Alert {
	return alert.Alert{
		Labels: map[string]string{
			alert.LabelAlertName: alert.LeaseNearExpiry, alert.LabelSeverity: "warning",
			alert.LabelSource: "prod-etcd", alert.LabelLock: lock, alert.LabelHolder: "worker-a",
		},
		Annotations: map[string]string{alert.AnnotationSummary: "lease of " + lock + " runs out"},
		StartsAt:    time.Now(),
	}
}

// waitHeld waits until am holds an alert for each of locks.
func waitHeld(t *testing.T, am *alertmanagertest.Alertmanager, s *alert.Sender, locks ...string) {
	t.Helper()
	eventually(t, 20*time.Second, fmt.Sprintf("%s to hold %v", am.URL, locks), func() bool {
		alerts, err := am.Alerts(context.Background())
		if err != nil {
			return false
		}
		held := map[string]bool{}
		for _, a := range alerts {
			held[a.Labels[alert.LabelLock]] = true
		}
		for _, l := range locks {
			if !held[l] {
				return false
			}
		}
		return true
	})
	// Alertmanager holds an alert before its answer reaches the sender,
	// which counts it then.
	eventually(t, 20*time.Second, "the sender to count what it sent", func() bool { return s.Stats().Sent > 0 })
}

// basicAuth adds a user's credentials to a client's requests.
type basicAuth struct {
	next       http.RoundTripper
	user, pass string
}

func (b basicAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(b.user, b.pass)
	return b.next.RoundTrip(r)
}

// An Alertmanager that serves HTTPS, asks for a client certificate its CA
// signed and a basic-auth user gets the alerts of a sender configured with
// all three, from files; one without the client certificate, or with a
// wrong password, gets nothing in.
func TestAlertmanagerWithTLSClientCertificatesAndBasicAuth(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "ca")
	server, client := ca.Server(t, "alertmanager"), ca.Client(t, "leasewatch")
	hash, err := bcrypt.GenerateFromPassword([]byte("am-password"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(client.CertFile, client.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	tlsClient := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}}}
	am := alertmanagertest.StartWith(t, alertmanagertest.Options{
		TLS: true,
		WebConfig: fmt.Sprintf(`tls_server_config:
  cert_file: %s
  key_file: %s
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: %s
basic_auth_users:
  leasewatch: %s
`, server.CertFile, server.KeyFile, ca.CertFile, hash),
		Client: &http.Client{Transport: basicAuth{next: tlsClient, user: "leasewatch", pass: "am-password"}},
	})
	passwordFile := filepath.Join(dir, "am-password")
	if err := os.WriteFile(passwordFile, []byte("am-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrongFile := filepath.Join(dir, "wrong-password")
	if err := os.WriteFile(wrongFile, []byte("not-it\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsKeys := fmt.Sprintf("    tls: {ca_file: %s, cert_file: %s, key_file: %s}\n", ca.CertFile, client.CertFile, client.KeyFile)

	s := amSender(t, t.TempDir(), fmt.Sprintf("    urls: [%q]\n    basic_auth: {username: leasewatch, password_file: %s}\n", am.URL, passwordFile)+tlsKeys)
	s.Send([]alert.Alert{lockAlert("/locks/tls")})
	waitHeld(t, am, s, "/locks/tls")

	for name, keys := range map[string]string{
		"no client certificate": fmt.Sprintf("    urls: [%q]\n    basic_auth: {username: leasewatch, password_file: %s}\n    tls: {ca_file: %s}\n", am.URL, passwordFile, ca.CertFile),
		"a wrong password":      fmt.Sprintf("    urls: [%q]\n    basic_auth: {username: leasewatch, password_file: %s}\n", am.URL, wrongFile) + tlsKeys,
	} {
		bad := amSender(t, t.TempDir(), keys)
		bad.Send([]alert.Alert{lockAlert("/locks/refused")})
		eventually(t, 20*time.Second, "the refused sends to be counted as failed", func() bool { return bad.Stats().Failed > 0 })
		alerts, err := am.Alerts(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range alerts {
			if a.Labels[alert.LabelLock] == "/locks/refused" {
				t.Errorf("with %s the alert got in", name)
			}
		}
	}
}

// A bearer token, read from its file for every POST, reaches an
// Alertmanager behind a proxy that demands it (Alertmanager's own web
// server takes basic authentication only, so a token is checked in front
// of it, as an ingress or an auth proxy does): a rotated file is used from
// the next POST on, and the old token is refused.
func TestAlertmanagerBehindABearerTokenProxy(t *testing.T) {
	am := alertmanagertest.Start(t)
	target, err := url.Parse(am.URL)
	if err != nil {
		t.Fatal(err)
	}
	token := "token-1"
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		proxy.ServeHTTP(w, r)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "am-token")
	if err := os.WriteFile(tokenFile, []byte("token-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := amSender(t, dir, fmt.Sprintf("    urls: [\"http://%s\"]\n    bearer_token_file: %s\n", ln.Addr(), tokenFile))
	s.Send([]alert.Alert{lockAlert("/locks/bearer-1")})
	waitHeld(t, am, s, "/locks/bearer-1")

	token = "token-2" // the proxy's side rotates first: the old token is refused
	s.Send([]alert.Alert{lockAlert("/locks/bearer-2")})
	eventually(t, 20*time.Second, "the send with the old token to fail", func() bool { return s.Stats().Failed > 0 })
	if err := os.WriteFile(tokenFile, []byte("token-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, am, s, "/locks/bearer-2")
}

// Two Alertmanagers in one cluster (gossip on loopback) each get every
// alert, as Prometheus sends to every peer; with one down, the other still
// gets them, and the one down gets its queue once it is back.
func TestAlertmanagerClusterGetsEveryAlertAtEachPeer(t *testing.T) {
	a := alertmanagertest.StartWith(t, alertmanagertest.Options{Cluster: true})
	b := alertmanagertest.StartWith(t, alertmanagertest.Options{Cluster: true, Peers: []*alertmanagertest.Alertmanager{a}})
	for _, am := range []*alertmanagertest.Alertmanager{a, b} {
		eventually(t, 20*time.Second, am.URL+" to see its peer", func() bool {
			n, err := am.ClusterPeers(context.Background())
			return err == nil && n == 2
		})
	}
	s := amSender(t, t.TempDir(), fmt.Sprintf("    urls: [%q, %q]\n", a.URL, b.URL))
	s.Send([]alert.Alert{lockAlert("/locks/both")})
	waitHeld(t, a, s, "/locks/both")
	waitHeld(t, b, s, "/locks/both")

	b.Stop()
	s.Send([]alert.Alert{lockAlert("/locks/while-b-down")})
	waitHeld(t, a, s, "/locks/both", "/locks/while-b-down")
	b.Start()
	waitHeld(t, b, s, "/locks/while-b-down")
}
