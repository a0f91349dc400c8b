// Package systemd_test checks the systemd unit and the example configuration
// in this directory with the real tools: systemd-analyze verifies the unit
// and rates its sandbox (exposure at most 2.0 of 10), and leasewatch's own
// `check config` loads the example with its secrets where the unit's
// credentials would put them.
package systemd_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/leasewatch/leasewatch/collectors/testcert"
)

const (
	unitFile   = "leasewatch.service"
	configFile = "leasewatch.yaml"
	// binPath is where the unit runs leasewatch from.
	binPath = "/usr/local/bin/leasewatch"
	// credentials is where systemd puts the unit's LoadCredential= files.
	credentials = "/run/credentials/leasewatch.service/"
	// maxExposure is the overall exposure systemd-analyze security may give
	// the unit, in its tenths (2.0).
	maxExposure = 20
)

// systemdAnalyze returns the systemd-analyze binary. Missing, it fails the
// test under CI=true and skips it elsewhere.
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is missing: install Debian's systemd package (make deps)")
		}
		t.Skip("systemd-analyze is missing: install Debian's systemd package")
	}
	return bin
}

// leasewatch builds the leasewatch binary into dir.
func leasewatch(t *testing.T, dir string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "leasewatch")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/leasewatch/leasewatch/cmd/leasewatch").CombinedOutput()
	if err != nil {
		t.Fatalf("build leasewatch: %v\n%s", err, out)
	}
	return bin
}

// directives returns the values of key in the unit, in order.
func directives(t *testing.T, unit []byte, key string) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(unit))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// systemd-analyze verify finds nothing to say of the unit (an unknown or
// misspelt directive is only a warning there, so any output fails), and its
// sandbox rates at most 2.0: the unit as shipped, bar the binary's path,
// which verify requires to exist.
func TestUnitVerifiesAndIsHardened(t *testing.T) {
	analyze := systemdAnalyze(t)
	dir := t.TempDir()
	bin := leasewatch(t, dir)
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(dir, unitFile)
	if err := os.WriteFile(local, bytes.ReplaceAll(unit, []byte(binPath), []byte(bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", local).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(analyze, "security", "--offline=true", fmt.Sprintf("--threshold=%d", maxExposure), local).CombinedOutput()
	level := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if err != nil || level == nil {
		t.Fatalf("systemd-analyze security: %v (want an exposure of at most %d.%d)\n%s", err, maxExposure/10, maxExposure%10, out)
	}
	t.Logf("exposure %s", level[1])

	for _, want := range []string{"DynamicUser=yes", "ProtectSystem=strict", "StateDirectory=leasewatch", "NoNewPrivileges=yes"} {
		if !bytes.Contains(unit, []byte("\n"+want+"\n")) {
			t.Errorf("the unit lacks %s", want)
		}
	}
	// The configuration is checked, as it is served, before each start.
	start, pre := directives(t, unit, "ExecStart"), directives(t, unit, "ExecStartPre")
	if len(start) != 1 || len(pre) != 1 || pre[0] != strings.Replace(start[0], " serve --config ", " check config ", 1) {
		t.Errorf("ExecStartPre %q does not check the configuration that ExecStart %q serves", pre, start)
	}
}

// Every secret the example configuration names is a credential the unit
// loads, and every credential it loads is named. With the credentials in
// place, `leasewatch check config` (the unit's ExecStartPre) passes on the
// example, and fails naming the field when one is missing.
func TestExampleConfigTakesTheUnitsCredentials(t *testing.T) {
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile(configFile)
	if err != nil {
		t.Fatal(err)
	}
	var loaded []string
	for _, c := range directives(t, unit, "LoadCredential") {
		name, _, _ := strings.Cut(c, ":")
		loaded = append(loaded, name)
	}
	var named []string
	for _, m := range regexp.MustCompile(regexp.QuoteMeta(credentials)+`([A-Za-z0-9._-]+)`).FindAllSubmatch(config, -1) {
		named = append(named, string(m[1]))
	}
	slices.Sort(loaded)
	slices.Sort(named)
	if !slices.Equal(loaded, named) {
		t.Errorf("the unit loads credentials %q, the configuration names %q", loaded, named)
	}
	if state := directives(t, unit, "StateDirectory"); len(state) != 1 || !bytes.Contains(config, []byte("database: /var/lib/"+state[0]+"/")) {
		t.Errorf("the example's database is not in the unit's StateDirectory %q", state)
	}

	dir := t.TempDir()
	bin := leasewatch(t, dir)
	creds := filepath.Join(dir, "credentials") + "/"
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	ca := testcert.NewCA(t, dir, "ca")
	pair := ca.Server(t, "leasewatch")
	hash, err := bcrypt.GenerateFromPassword([]byte("correct horse"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"ingest-tokens":  "a-long-random-ingest-token-0123456789\n",
		"htpasswd":       "alice:" + string(hash) + "\n",
		"etcd-password":  "etcd-secret\n",
		"redis-password": "redis-secret\n",
	}
	for name, data := range files {
		if err := os.WriteFile(creds+name, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, src := range map[string]string{"tls.crt": pair.CertFile, "tls.key": pair.KeyFile} {
		if err := os.Link(src, creds+name); err != nil {
			t.Fatal(err)
		}
	}
	local := filepath.Join(dir, configFile)
	if err := os.WriteFile(local, bytes.ReplaceAll(config, []byte(credentials), []byte(creds)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "check", "config", local).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OK, 2 source(s)") {
		t.Fatalf("leasewatch check config on the example: %v\n%s", err, out)
	}

	if err := os.Remove(creds + "htpasswd"); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(bin, "check", "config", local).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "users_file") {
		t.Errorf("check config without the htpasswd credential: %v, want it to fail naming auth.users_file:\n%s", err, out)
	}
}
