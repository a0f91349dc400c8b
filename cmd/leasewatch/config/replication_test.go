package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/collectors/etcd"
	"github.com/leasewatch/leasewatch/collectors/kubernetes"
	"github.com/leasewatch/leasewatch/collectors/ownership"
)

const pgDatabase = "database: postgres://leasewatch@db.internal:5432/leasewatch\n"

func TestReplicationKubernetes(t *testing.T) {
	cfg, err := Parse([]byte(pgDatabase + `
replication:
  backend: kubernetes
  namespace: leasewatch
  identity: leasewatch-0
  lease_duration: 20s
  renew_deadline: 12s
  retry_period: 3s
`))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Replication
	if !r.Enabled() || r.Namespace != "leasewatch" || r.Identity != "leasewatch-0" {
		t.Fatalf("replication = %+v", r)
	}
	if got, want := r.Timing(), (ownership.Timing{LeaseDuration: 20 * time.Second, RenewDeadline: 12 * time.Second, RetryPeriod: 3 * time.Second}); got != want {
		t.Fatalf("timing = %+v, want %+v", got, want)
	}
}

// The defaults: client-go's timing, the host name, the etcd prefix.
func TestReplicationDefaults(t *testing.T) {
	cfg, err := Parse([]byte(pgDatabase + `
replication:
  backend: etcd
  endpoints: ["etcd-0:2379"]
`))
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	r := cfg.Replication
	if r.Identity != host || r.Prefix != ownership.DefaultEtcdPrefix {
		t.Fatalf("identity %q prefix %q, want %q and %q", r.Identity, r.Prefix, host, ownership.DefaultEtcdPrefix)
	}
	if got, want := r.Timing(), (ownership.Timing{}).WithDefaults(); got != want {
		t.Fatalf("timing = %+v, want %+v", got, want)
	}
	off, err := Parse([]byte(`{}`))
	if err != nil || off.Replication.Enabled() {
		t.Fatalf("without replication: enabled %v, err %v", off.Replication.Enabled(), err)
	}
}

// The etcd backend takes an etcd source's credential and TLS keys, read as
// a source's are.
func TestReplicationEtcdSecrets(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "leasewatch.yaml")
	t.Setenv("LW_REPLICATION_PW", "s3cret")
	if err := os.WriteFile(path, []byte(pgDatabase+`
replication:
  backend: etcd
  endpoints: ["https://etcd-0:2379"]
  username: leasewatch
  password_env: LW_REPLICATION_PW
  tls: {}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cfg.Replication.EtcdSource().Secret().Get()
	if err != nil || got != "s3cret" {
		t.Fatalf("password = %q, %v; want it from password_env", got, err)
	}
	if err := os.WriteFile(path, []byte(pgDatabase+`
replication:
  backend: etcd
  endpoints: ["etcd-0:2379"]
  username: leasewatch
  password_file: `+filepath.Join(dir, "missing")+`
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "replication.password_file") {
		t.Fatalf("missing password file: %v, want an error naming replication.password_file", err)
	}
}

// Every bad value is refused, naming its field, and quoting no password.
func TestReplicationInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, field string
		sqlite            bool
	}{
		{"no backend", "replication: {namespace: leasewatch}", "replication.backend", false},
		{"unknown backend", "replication: {backend: zookeeper}", "replication.backend", false},
		{"sqlite store", "replication: {backend: kubernetes, namespace: leasewatch}", "replication.backend", true},
		{"no namespace", "replication: {backend: kubernetes}", "replication.namespace", false},
		{"bad namespace", "replication: {backend: kubernetes, namespace: Lease_Watch}", "replication.namespace", false},
		{"etcd key on kubernetes", "replication: {backend: kubernetes, namespace: lw, endpoints: [a:1]}", "replication.endpoints", false},
		{"kubernetes key on etcd", "replication: {backend: etcd, endpoints: [a:1], kubeconfig: /k}", "replication.kubeconfig", false},
		{"no endpoints", "replication: {backend: etcd}", "replication.endpoints", false},
		{"empty endpoint", "replication: {backend: etcd, endpoints: [' ']}", "replication.endpoints[0]", false},
		{"plain endpoint with tls", "replication: {backend: etcd, endpoints: ['http://a:1'], tls: {}}", "replication.endpoints[0]", false},
		{"tls key without cert", "replication: {backend: etcd, endpoints: [a:1], tls: {key_file: /k}}", "replication.tls.cert_file", false},
		{"password without user", "replication: {backend: etcd, endpoints: [a:1], password: hunter2}", "replication.username", false},
		{"two passwords", "replication: {backend: etcd, endpoints: [a:1], username: u, password: hunter2, password_env: PW}", "replication.password", false},
		{"bad prefix", "replication: {backend: etcd, endpoints: [a:1], prefix: leasewatch}", "replication.prefix", false},
		{"identity with space", "replication: {backend: kubernetes, namespace: lw, identity: 'a b'}", "replication.identity", false},
		{"identity too long", "replication: {backend: kubernetes, namespace: lw, identity: " + strings.Repeat("x", 129) + "}", "replication.identity", false},
		{"fractional lease", "replication: {backend: kubernetes, namespace: lw, lease_duration: 1500ms}", "replication.lease_duration", false},
		{"zero lease", "replication: {backend: kubernetes, namespace: lw, lease_duration: 0s}", "replication.lease_duration", false},
		{"deadline past lease", "replication: {backend: kubernetes, namespace: lw, lease_duration: 5s}", "replication.renew_deadline", false},
		{"negative deadline", "replication: {backend: kubernetes, namespace: lw, renew_deadline: -1s}", "replication.renew_deadline", false},
		{"retry past deadline", "replication: {backend: kubernetes, namespace: lw, retry_period: 9s}", "replication.retry_period", false},
		{"retry not a duration", "replication: {backend: kubernetes, namespace: lw, retry_period: often}", "replication.retry_period", false},
		{"unknown key", "replication: {backend: kubernetes, namespace: lw, replicas: 3}", "replication.replicas", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := pgDatabase + tc.yaml
			if tc.sqlite {
				doc = tc.yaml
			}
			_, err := Parse([]byte(doc))
			if err == nil || !strings.HasPrefix(err.Error(), tc.field) {
				t.Fatalf("Parse = %v, want an error naming %s", err, tc.field)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error quotes the password: %v", err)
			}
		})
	}
}

// leasewatch's own source: made from the replication keys, or the configured
// source of its name, used as it is.
func TestReplicationOwnSource(t *testing.T) {
	own := func(t *testing.T, yaml string) (SourceConfig, int) {
		t.Helper()
		cfg, err := Parse([]byte(pgDatabase + yaml))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		var found SourceConfig
		for _, s := range cfg.Sources {
			if s.Name == cfg.Replication.Source {
				found = s
				n++
			}
		}
		return found, n
	}
	t.Run("etcd", func(t *testing.T) {
		src, n := own(t, `
replication:
  backend: etcd
  endpoints: ["etcd-0:2379"]
  username: lw
  password: secret
`)
		sec := sectionOf[etcd.Section](t, src)
		if n != 1 || src.Name != DefaultOwnSource || src.Kind != "etcd" || strings.Join(sec.Endpoints, ",") != "etcd-0:2379" ||
			src.Username != "lw" || src.Password != "secret" || strings.Join(sec.Prefixes, ",") != "/leasewatch/ownership/sources/" {
			t.Errorf("own source = %+v (%d of its name)", src, n)
		}
	})
	t.Run("kubernetes", func(t *testing.T) {
		src, n := own(t, `
replication:
  backend: kubernetes
  namespace: lw-system
  source: ownership
`)
		if n != 1 || src.Name != "ownership" || src.Kind != "kubernetes" || strings.Join(sectionOf[kubernetes.Section](t, src).Namespaces, ",") != "lw-system" {
			t.Errorf("own source = %+v (%d of its name)", src, n)
		}
	})
	t.Run("configured", func(t *testing.T) {
		src, n := own(t, `
sources:
  - name: leasewatch
    kind: etcd
    endpoints: ["etcd-9:2379"]
    prefixes: ["/elsewhere/"]
replication:
  backend: etcd
  endpoints: ["etcd-0:2379"]
`)
		if n != 1 || strings.Join(sectionOf[etcd.Section](t, src).Endpoints, ",") != "etcd-9:2379" {
			t.Errorf("own source = %+v (%d of its name), want the configured one alone", src, n)
		}
	})
}

// The lock each source's ownership lease is recorded as.
func TestReplicationOwnLock(t *testing.T) {
	etcd := ReplicationConfig{Backend: ReplicationEtcd, Prefix: "/lw/"}
	if got := etcd.OwnLock("a b"); got != "/lw/sources/a%20b/" {
		t.Errorf("etcd OwnLock = %q", got)
	}
	kube := ReplicationConfig{Backend: ReplicationKubernetes, Namespace: "lw"}
	if got, want := kube.OwnLock("alpha"), "lw/"+ownership.SourceLeaseName("alpha"); got != want {
		t.Errorf("kubernetes OwnLock = %q, want %q", got, want)
	}
}
