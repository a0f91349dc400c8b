package config

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasewatch/leasewatch/collectors/testcert"
)

func TestParseConfigDatabase(t *testing.T) {
	for _, tt := range []struct {
		database string
		postgres bool
		name     string // as the log shows it
		host     string
	}{
		{"leasewatch.db", false, "leasewatch.db", ""},
		{"/var/lib/leasewatch/lw.db", false, "/var/lib/leasewatch/lw.db", ""},
		{"postgres://lw:s3cret@db.internal:5432/leasewatch?sslmode=verify-full", true,
			"postgres://lw:xxxxx@db.internal:5432/leasewatch?sslmode=verify-full", "db.internal:5432"},
		{"postgresql://db.internal/leasewatch?password=s3cret", true, "postgresql://db.internal/leasewatch?password=xxxxx", "db.internal"},
		{"POSTGRES://lw@db/leasewatch", true, "postgres://lw@db/leasewatch", "db"},
		{"postgres:///leasewatch", true, "postgres:///leasewatch", "the default host"},
		{"\"host=db.internal port=5432 user=lw password=s3cret dbname=leasewatch\"", true,
			"host=db.internal port=5432 user=lw password=xxxxx dbname=leasewatch", "db.internal:5432"},
		{"\" dbname = leasewatch  sslmode=require\"", true, " dbname = leasewatch  sslmode=require", "the default host"},
		{"hostaddr=10.0.0.7", true, "hostaddr=10.0.0.7", "10.0.0.7"},
		{"/var/lib/leasewatch/a=b.db", false, "/var/lib/leasewatch/a=b.db", ""},
		{"lw=1.db", false, "lw=1.db", ""},
	} {
		cfg, err := Parse([]byte("database: " + tt.database + "\n"))
		if err != nil {
			t.Fatalf("database: %s: %v", tt.database, err)
		}
		if cfg.Postgres() != tt.postgres || cfg.DatabaseName() != tt.name || cfg.DatabaseHost() != tt.host {
			t.Errorf("database: %s: Postgres %v, DatabaseName %q, DatabaseHost %q; want %v, %q, %q",
				tt.database, cfg.Postgres(), cfg.DatabaseName(), cfg.DatabaseHost(), tt.postgres, tt.name, tt.host)
		}
	}
}

func TestParseConfigDatabaseErrors(t *testing.T) {
	const secret = "hunter2-pw"
	pg := "database: postgres://lw:" + secret + "@db/leasewatch\n"
	pgNoPassword := "database: postgres://lw@db/leasewatch\n"
	for _, tt := range []struct{ name, yaml, want string }{
		{"URLPasswordAndFile", pg + "database_password_file: /run/pw\n",
			"database_password_file: give one of the connection string's password, database_password_file and database_password_env"},
		{"URLQueryPasswordAndEnv", "database: postgres://db/leasewatch?password=" + secret + "\ndatabase_password_env: PGPW\n",
			"database_password_env: give one of the connection string's password"},
		{"FileAndEnv", pgNoPassword + "database_password_file: /run/pw\ndatabase_password_env: PGPW\n", "database_password_env: give one of"},
		{"BadEnvName", pgNoPassword + "database_password_env: PG-PW\n", `database_password_env: "PG-PW" is not an environment variable name`},
		{"BadSSLMode", "database: postgres://lw:" + secret + "@db/leasewatch?sslmode=always\n", `database: sslmode "always" is not one of disable`},
		{"TLSWithSSLModeDisable", pgNoPassword[:len(pgNoPassword)-1] + "?sslmode=disable\ndatabase_tls: {}\n", "database_tls: requires TLS, but the connection string says sslmode=disable"},
		{"TLSCertWithoutKey", pgNoPassword + "database_tls: {cert_file: c.crt}\n", "database_tls.key_file: required with cert_file"},
		{"TLSUnknownKey", pgNoPassword + "database_tls: {cafile: ca.crt}\n", "database_tls.cafile (line"},
		{"OtherScheme", "database: mysql://lw:" + secret + "@db/leasewatch\n", "database: mysql:// is not a database leasewatch stores in"},
		{"FileForSQLite", "database: lw.db\ndatabase_password_file: /run/pw\n", "database_password_file: applies only to a PostgreSQL database"},
		{"TLSForSQLite", "database: lw.db\ndatabase_tls: {}\n", "database_tls: applies only to a PostgreSQL database"},
		{"NotAURL", "database: \"postgres://lw:" + secret + "@db:port/leasewatch\"\n", "database: not a valid URL"},
		{"NotAString", "database: {url: x}\n", "database (line 1)"},
		{"KeywordValuePasswordAndFile", "database: \"host=db password=" + secret + "\"\ndatabase_password_file: /run/pw\n",
			"database_password_file: give one of the connection string's password"},
		{"KeywordValueBadSSLMode", "database: \"host=db password=" + secret + " sslmode=always\"\n", `database: sslmode "always" is not one of`},
		{"KeywordValueTLSWithSSLModeDisable", "database: \"host=db sslmode=disable\"\ndatabase_tls: {}\n", "database_tls: requires TLS"},
		{"SchemeInAKeywordValueString", "database: \"password=" + secret + " options=x://y\"\ndatabase_password_env: PGPW\n",
			"database_password_env: give one of the connection string's password"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			parseFailsInEachStyle(t, tt.yaml, tt.want, func(t *testing.T, err error) {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q shows the password", err)
				}
			})
		})
	}
}

func TestLoadConfigDatabasePassword(t *testing.T) {
	dir := t.TempDir()
	const pg = "database: postgres://lw@db/leasewatch\n"
	pwFile := writeFile(t, dir, "pg-password", "s3cret from a file\n")
	cfg, err := Load(writeFile(t, dir, "file.yaml", pg+"database_password_file: "+pwFile+"\n"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got, err := cfg.DatabaseSecret().Get(); err != nil || got != "s3cret from a file" {
		t.Errorf("password from database_password_file = %q, %v; want the file's line", got, err)
	}
	writeFile(t, dir, "pg-password", "rotated\n")
	if got, _ := cfg.DatabaseSecret().Get(); got != "rotated" {
		t.Errorf("password from database_password_file after a rotation = %q, want the file's new line", got)
	}
	t.Setenv("LW_TEST_PG_PASSWORD", " s3cret from env ")
	cfg, err = Load(writeFile(t, dir, "env.yaml", pg+"database_password_env: LW_TEST_PG_PASSWORD\n"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got, _ := cfg.DatabaseSecret().Get(); got != "s3cret from env" {
		t.Errorf("password from database_password_env = %q, want the variable's value", got)
	}
	if s := cfg.DatabaseSecret().String(); strings.Contains(s, "s3cret") {
		t.Errorf("DatabaseSecret prints %q, which shows the password", s)
	}

	ca := testcert.NewCA(t, dir, "pg")
	notPEM := writeFile(t, dir, "not-pem.crt", "not a certificate\n")
	t.Setenv("LW_TEST_PG_EMPTY", "")
	for name, tt := range map[string]struct{ yaml, want string }{
		"MissingFile":        {"database_password_file: " + filepath.Join(dir, "nope"), "database_password_file: open "},
		"EmptyFile":          {"database_password_file: " + writeFile(t, dir, "empty", "\n"), "database_password_file: " + filepath.Join(dir, "empty") + " is empty"},
		"UnsetEnv":           {"database_password_env: LW_TEST_PG_UNSET", "database_password_env: environment variable LW_TEST_PG_UNSET is not set"},
		"EmptyEnv":           {"database_password_env: LW_TEST_PG_EMPTY", "database_password_env: environment variable LW_TEST_PG_EMPTY is empty"},
		"MissingCA":          {"database_tls: {ca_file: " + filepath.Join(dir, "no-ca.crt") + "}", "database_tls.ca_file: open "},
		"CANotPEM":           {"database_tls: {ca_file: " + notPEM + "}", "database_tls.ca_file: " + notPEM + " holds no PEM certificate"},
		"URLRootCertMissing": {"", "database: unable to read CA file: open " + filepath.Join(dir, "no-root.crt")},
		"TLSGood":            {"database_tls: {ca_file: " + ca.CertFile + "}", ""},
	} {
		t.Run(name, func(t *testing.T) {
			yaml := pg + tt.yaml + "\n"
			if name == "URLRootCertMissing" {
				yaml = "database: postgres://lw@db/leasewatch?sslmode=verify-full&sslrootcert=" + filepath.Join(dir, "no-root.crt") + "\n"
			}
			_, err := Load(writeFile(t, t.TempDir(), "lw.yaml", yaml))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Load: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Load: error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
