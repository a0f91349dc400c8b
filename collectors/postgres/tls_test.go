package postgres

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
	"github.com/leasewatch/leasewatch/collectors/testcert"
)

// A source with tls verifies the server's certificate against its CA and
// the url's host, and reads the locks over TLS.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "pg")
	pair := ca.Server(t, "server")
	serverReadable(t, dir, pair.CertFile, pair.KeyFile)
	srv := pgtest.New(t, pgtest.Options{NoFsync: true, Settings: map[string]string{
		"ssl": "on", "ssl_cert_file": pair.CertFile, "ssl_key_file": pair.KeyFile,
	}})
	withWatcher(t, srv)
	db := database(t, srv)
	c, err := New(Config{
		Name: "pg", URL: "postgres://" + watcher + "@" + srv.Addr + "/" + db + "?sslmode=verify-full",
		PollEvery: MinPollEvery, Password: collectors.Password(watcherPassword),
		TLS: collectors.StaticTLS(testcert.ClientTLS(t, ca, testcert.Pair{})),
	}, collectortest.Logger(t, "pg"))
	if err != nil {
		t.Fatal(err)
	}
	sk := collectortest.NewSink(t, "pg", Backend.Kind)
	collectortest.Run(t, c, sk)
	h := connectHolder(t, srv, db, "over-tls")
	h.exec(t, `SELECT pg_advisory_lock(60)`)
	sk.WaitEvents(t, wait, db+"/60", 1, audit.EventGrant)

	conn, err := pgx.Connect(context.Background(), srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var ssl bool
	err = conn.QueryRow(context.Background(), `SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.usename = $1`, watcher).Scan(&ssl)
	if err != nil || !ssl {
		t.Fatalf("the collector's connection: ssl %v, %v; want TLS", ssl, err)
	}
}

// serverReadable lets the server's user read the certificate and key in
// dir: PostgreSQL wants its key file its own and private, and runs as the
// postgres user when the tests run as root.
func serverReadable(t *testing.T, dir, cert, key string) {
	t.Helper()
	// dir and the test's own directory above it (t.TempDir makes both
	// private), and the certificate; nothing further up.
	for _, p := range []string{dir, filepath.Dir(dir), cert} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if os.Geteuid() != 0 {
		return
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(key, uid, gid); err != nil {
		t.Fatal(err)
	}
}
