package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/leasewatch/leasewatch/collectors/testcert"
)

// `leasewatch serve` with every access control on: HTTPS, basic users for the
// dashboard, an ingest token from the environment. Neither the token nor the
// password reaches the log.
func TestServeWithTLSAndBasicAuth(t *testing.T) {
	const (
		password = "correct horse battery"
		token    = "env-ingest-token-7f3a"
	)
	srv, _ := startEtcd(t)
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "leasewatch-e2e")
	pair := ca.Server(t, "leasewatch-e2e")
	certFile, keyFile, roots := pair.CertFile, pair.KeyFile, ca.Pool()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("LEASEWATCH_E2E_INGEST_TOKEN", token)
	base, stderr := startServe(t, fmt.Sprintf(`
listen: 0.0.0.0:0
database: %s
ingest_tokens_env: [LEASEWATCH_E2E_INGEST_TOKEN]
auth:
  mode: basic
  users:
    alice: "%s"
tls:
  cert_file: %s
  key_file: %s
sources:
  - name: e2e
    kind: etcd
    endpoints: ["%s"]
    prefixes: ["/locks/"]
`, filepath.Join(dir, "lw.db"), hash, certFile, keyFile, srv.Endpoint))

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	do := func(method, path, body string, header ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.Header.Get("Content-Security-Policy") == "" || res.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s %s: security headers missing: %v", method, path, res.Header)
		}
		return res.StatusCode, string(b)
	}
	basic := func(user, pw string) string {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.SetBasicAuth(user, pw)
		return r.Header.Get("Authorization")
	}

	if code, _ := do(http.MethodGet, "/api/v1/sources", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/sources without credentials: %d, want 401", code)
	}
	if code, _ := do(http.MethodGet, "/", "", "Authorization", basic("alice", "wrong")); code != http.StatusUnauthorized {
		t.Errorf("GET / with a wrong password: %d, want 401", code)
	}
	if code, body := do(http.MethodGet, "/api/v1/sources", "", "Authorization", basic("alice", password)); code != http.StatusOK || !strings.Contains(body, `"e2e"`) {
		t.Errorf("GET /api/v1/sources as alice: %d %s, want 200 listing e2e", code, body)
	}
	if code, _ := do(http.MethodGet, "/readyz", ""); code != http.StatusOK {
		t.Errorf("GET /readyz without credentials: %d, want 200 (probes stay open)", code)
	}
	report := `{"source":"e2e","lock":"/locks/x","resource":"db","token":1,"outcome":"accepted"}`
	if code, body := do(http.MethodPost, "/api/v1/writes", report, "Authorization", "Bearer "+token, "Content-Type", "application/json"); code != http.StatusAccepted {
		t.Errorf("POST /api/v1/writes with the token from the environment: %d %s, want 202", code, body)
	}
	if code, _ := do(http.MethodPost, "/api/v1/writes", report, "Authorization", "Bearer not-"+token); code != http.StatusUnauthorized {
		t.Errorf("POST /api/v1/writes with a wrong token: %d, want 401", code)
	}

	log := stderr.String()
	for _, secret := range []string{token, password, string(hash)} {
		if strings.Contains(log, secret) {
			t.Errorf("the log shows a secret %q:\n%s", secret, log)
		}
	}
	if !strings.Contains(log, "auth=basic") {
		t.Errorf("the log does not say which authentication guards the dashboard:\n%s", log)
	}
}

// A configuration that would serve an open dashboard to the network does not
// start; the error names the field to set.
func TestServeRefusesOpenDashboardOnNetwork(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leasewatch.yaml")
	if err := os.WriteFile(path, []byte("listen: 0.0.0.0:0\ndatabase: "+filepath.Join(t.TempDir(), "lw.db")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	code := run(context.Background(), []string{"serve", "--config", path}, &syncBuffer{}, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "auth.mode: none, but listen 0.0.0.0:0 is not a loopback address") {
		t.Fatalf("serve exited %d: %s; want 1 with an error naming auth.mode", code, stderr.String())
	}
}
