package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasewatch/leasewatch/collectors/zookeeper"
)

func TestParseConfigZooKeeperSource(t *testing.T) {
	cfg, err := Parse([]byte(`
sources:
  - name: zk
    kind: zookeeper
    servers: ["zk-0:2281", "zk-1:2281", "zk-2:2281"]
    chroot: /app
    paths: ["/locks", "/election/leader"]
    probe_sessions: true
    username: leasewatch
    password_env: LEASEWATCH_ZK_PASSWORD
    tls: {ca_file: /etc/leasewatch/zk/ca.crt}
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	s := cfg.Sources[0]
	zc := sectionOf[zookeeper.Section](t, s)
	if len(zc.Servers) != 3 || zc.Chroot != "/app" || len(zc.Paths) != 2 || !zc.ProbeSessions || s.Username != "leasewatch" {
		t.Fatalf("section = %+v, username %q", zc, s.Username)
	}
	if s.PasswordEnv != "LEASEWATCH_ZK_PASSWORD" || s.TLS == nil || s.TLS.CAFile != "/etc/leasewatch/zk/ca.crt" {
		t.Fatalf("source = %+v, tls %+v", s, s.TLS)
	}
}

// The password comes from a file or the environment as for the other
// sources; Load reads it.
func TestLoadZooKeeperPassword(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "leasewatch.yaml")
	conf := "sources:\n  - name: zk\n    kind: zookeeper\n    servers: [\"h:2181\"]\n    paths: [\"/locks\"]\n    username: u\n    password_file: " + pw + "\n"
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cfg.Sources[0].Secret().Get()
	if err != nil || got != "s3cret" {
		t.Fatalf("password = %q, %v", got, err)
	}
}

func TestParseConfigZooKeeperErrorsNameTheField(t *testing.T) {
	zk := "sources:\n  - name: z\n    kind: zookeeper\n"
	ok := zk + "    servers: [\"h:2181\"]\n    paths: [\"/locks\"]\n"
	for _, tt := range []struct{ name, yaml, want string }{
		{"NoServers", zk + "    paths: [\"/locks\"]\n", "sources[0].servers: at least one"},
		{"ServerWithoutPort", zk + "    servers: [\"h\"]\n    paths: [\"/locks\"]\n", `sources[0].servers[0]: "h": want host:port`},
		{"NoPaths", zk + "    servers: [\"h:2181\"]\n", "sources[0].paths: at least one"},
		{"RelativePath", zk + "    servers: [\"h:2181\"]\n    paths: [\"locks\"]\n", `sources[0].paths[0]: "locks" must start with /`},
		{"PathEndsInSlash", zk + "    servers: [\"h:2181\"]\n    paths: [\"/locks/\"]\n", "sources[0].paths[0]"},
		{"BadChroot", ok + "    chroot: app/\n", "sources[0].chroot"},
		{"PasswordWithoutUser", ok + "    password: p\n", "sources[0].username: required with password"},
		{"UserWithoutPassword", ok + "    username: u\n", "sources[0].password: required with username"},
		{"EtcdKeyOnZooKeeper", ok + "    prefixes: [\"/l/\"]\n", "sources[0].prefixes: applies only to etcd sources, not zookeeper"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}
