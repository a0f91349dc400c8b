package main

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
	"github.com/leasewatch/leasewatch/collectors/testcert"
)

// database_tls against a PostgreSQL server that speaks TLS with a
// certificate of the test's own CA: the store's connections are encrypted
// and verified, and a server whose certificate another CA signed is refused
// at once, naming the certificate, rather than retried as unreachable.
func TestDatabaseTLSAgainstARealServer(t *testing.T) {
	// The server reads its key as the postgres user, which wants it its own
	// and private; the test's temporary directories are root's alone.
	dir, err := os.MkdirTemp("", "leasewatch-pgtls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ca := testcert.NewCA(t, dir, "pg")
	server := ca.Server(t, "server")
	other := testcert.NewCA(t, t.TempDir(), "other")
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the postgres user: %v (make install-postgresql)", err)
		}
		t.Skipf("no postgres user, so no PostgreSQL (%v): make install-postgresql", err)
	}
	uid, _ := strconv.Atoi(pgUser.Uid)
	gid, _ := strconv.Atoi(pgUser.Gid)
	if err := os.Chmod(ca.CertFile, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{server.CertFile, server.KeyFile} {
		if err := os.Chown(f, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// certuser may log in only with a client certificate of the CA (its
	// common name), over TLS; everyone else with a password, as pgtest's
	// own connections do.
	hba := filepath.Join(dir, "pg_hba.conf")
	if err := os.WriteFile(hba, []byte("local all all scram-sha-256\n"+
		"hostssl all certuser 127.0.0.1/32 cert\n"+
		"host all all 127.0.0.1/32 scram-sha-256\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := pgtest.New(t, pgtest.Options{NoFsync: true, Settings: map[string]string{
		"ssl": "on", "ssl_cert_file": server.CertFile, "ssl_key_file": server.KeyFile,
		"ssl_ca_file": ca.CertFile, "hba_file": hba,
	}})
	u, err := url.Parse(srv.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("sslmode") // database_tls decides
	u.RawQuery = q.Encode()
	database := u.String()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	openWith := func(t *testing.T, yaml string) (audit.Database, error) {
		t.Helper()
		cfg, err := config.Parse([]byte(yaml))
		if err != nil {
			t.Fatalf("config: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return openDatabase(ctx, cfg, forServing, logger)
	}
	open := func(t *testing.T, caFile string) (audit.Database, error) {
		t.Helper()
		return openWith(t, "database: "+database+"\ndatabase_tls:\n  ca_file: "+caFile+"\n")
	}

	t.Run("TheServersCA", func(t *testing.T) {
		store, err := open(t, ca.CertFile)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		if _, err := store.Locks(context.Background(), audit.LockFilter{}); err != nil {
			t.Fatal(err)
		}
		// Every connection of this database's is encrypted, as the
		// server sees them.
		admin, err := pgx.Connect(context.Background(), srv.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(context.Background())
		var all, encrypted int
		if err := admin.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE s.ssl)
			FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.datname = $1`, u.Path[1:]).Scan(&all, &encrypted); err != nil {
			t.Fatal(err)
		}
		if all == 0 || encrypted != all {
			t.Fatalf("%d of the store's %d connections use TLS, want all", encrypted, all)
		}
	})

	t.Run("AnotherCA", func(t *testing.T) {
		start := time.Now()
		store, err := open(t, other.CertFile)
		if err == nil {
			store.Close()
			t.Fatal("opened a server whose certificate the configured CA did not sign")
		}
		if !strings.Contains(err.Error(), "certificate") {
			t.Errorf("error %q does not say the certificate is wrong", err)
		}
		if audit.ErrorCode(err) == audit.EUNAVAILABLE || time.Since(start) > 10*time.Second {
			t.Errorf("a wrong certificate was taken for an unreachable server (retried for %s): %v", time.Since(start), err)
		}
	})

	t.Run("ClientCertificate", func(t *testing.T) {
		admin, err := pgx.Connect(context.Background(), srv.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(context.Background())
		name := u.Path[1:] + "_cert"
		for _, q := range []string{"CREATE ROLE certuser LOGIN", "CREATE DATABASE " + name + " OWNER certuser"} {
			if _, err := admin.Exec(context.Background(), q); err != nil {
				t.Fatal(err)
			}
		}
		client := ca.Client(t, "certuser")
		certURL := "postgres://certuser@" + u.Host + "/" + name
		store, err := openWith(t, "database: "+certURL+"\ndatabase_tls:\n  ca_file: "+ca.CertFile+
			"\n  cert_file: "+client.CertFile+"\n  key_file: "+client.KeyFile+"\n")
		if err != nil {
			t.Fatalf("open with the client certificate: %v", err)
		}
		defer store.Close()
		if _, err := store.Locks(context.Background(), audit.LockFilter{}); err != nil {
			t.Fatal(err)
		}
		// Without it the server refuses, and serve stops at once.
		start := time.Now()
		bare, err := openWith(t, "database: "+certURL+"\ndatabase_tls:\n  ca_file: "+ca.CertFile+"\n")
		if err == nil {
			bare.Close()
			t.Fatal("opened as certuser without a client certificate")
		}
		if audit.ErrorCode(err) == audit.EUNAVAILABLE || time.Since(start) > 10*time.Second {
			t.Errorf("a refused login was taken for an unreachable server: %v", err)
		}
	})
}
