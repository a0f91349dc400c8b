package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// secretPiece marks every piece of a secret in these tests: a message that
// holds it shows (part of) the secret.
const secretPiece = "Zq"

// secretForms are connection strings that give the secret value of key, in
// every way libpq and pgx read one, each with connect_timeout=soon, which
// pgx refuses, quoting the string as its best-effort redaction leaves it.
func secretForms(key string) map[string]string {
	v := secretPiece + "1-" + key
	encodedKey := fmt.Sprintf("%%%02X%s", key[0], key[1:]) // pass%77ord is password
	return map[string]string{
		"URLQuery":               "postgres://lw@db/leasewatch?sslmode=require&" + key + "=" + v + "&connect_timeout=soon",
		"URLQueryEncoded":        "postgresql://lw@db/leasewatch?" + key + "=" + v + "%20" + secretPiece + "2&connect_timeout=soon",
		"URLQueryKeyEncoded":     "postgres://lw@db/leasewatch?" + encodedKey + "=" + v + "&connect_timeout=soon",
		"KeywordValue":           "host=db " + key + "=" + v + " dbname=leasewatch connect_timeout=soon",
		"KeywordValueSpaced":     "host=db " + key + " = " + v + " dbname=leasewatch connect_timeout=soon",
		"KeywordValueQuoted":     "host=db " + key + "='" + v + " " + secretPiece + `2\' ` + secretPiece + "3' connect_timeout=soon",
		"KeywordValueEscaped":    "host=db " + key + "=" + v + `\ ` + secretPiece + "2 connect_timeout=soon",
		"KeywordValueFirst":      key + "=" + v + " host=db connect_timeout=soon",
		"KeywordValueMalformed":  "lw.db " + key + "=" + v + " connect_timeout=soon",
		"KeywordValueUnquoted":   "host=db " + key + "='" + v + " " + secretPiece + "2",
		"KeywordValueUpperCase":  "host=db " + strings.ToUpper(key) + "=" + v + " connect_timeout=soon",
		"KeywordValueWithURL":    "host=db options=x://y " + key + "=" + v + " connect_timeout=soon",
		"KeywordValueEmptyFirst": "host= " + key + "=" + v + " connect_timeout=soon",
	}
}

// urlSecretForms are the secrets only a URL has: its user-part password,
// percent-encoded or not, and whatever follows a #.
var urlSecretForms = map[string]string{
	"UserPassword":          "postgres://lw:" + secretPiece + "1@db/leasewatch?connect_timeout=soon",
	"UserPasswordEncoded":   "postgres://lw:" + secretPiece + "1%40" + secretPiece + "2@db/leasewatch?connect_timeout=soon",
	"UserPasswordWithHash":  "postgres://lw:" + secretPiece + "1#" + secretPiece + "2@db/leasewatch?connect_timeout=soon",
	"UserPasswordWithSlash": "postgres://lw:" + secretPiece + "1/" + secretPiece + "2@db/leasewatch?connect_timeout=soon",
	"UserPasswordWithAt":    "postgres://lw:" + secretPiece + "1@" + secretPiece + "2@db/leasewatch?connect_timeout=soon",
	"Fragment":              "postgres://lw@db/leasewatch?connect_timeout=soon#" + secretPiece + "1",
	"FragmentInQuery":       "postgres://lw@db/leasewatch?sslmode=require#" + secretPiece + "1&connect_timeout=soon",
}

// Every secret key libpq knows, in every form of connection string, is
// hidden where leasewatch shows the string (DatabaseShown) and from pgx's
// own error when it refuses the string (HideSecrets), and the string is
// taken as PostgreSQL, never as a SQLite file to create.
func TestConnectionStringSecretsHidden(t *testing.T) {
	forms := make(map[string]string)
	for _, key := range SecretKeys {
		for name, dsn := range secretForms(key) {
			forms[key+"/"+name] = dsn
		}
	}
	for name, dsn := range urlSecretForms {
		forms["url/"+name] = dsn
	}
	for name, dsn := range forms {
		t.Run(name, func(t *testing.T) {
			if !IsPostgres(dsn) {
				t.Fatalf("IsPostgres(%q) = false: it would be a SQLite file", dsn)
			}
			if shown := DatabaseShown(dsn); strings.Contains(shown, secretPiece) || !strings.Contains(shown, redactedValue) {
				t.Errorf("DatabaseShown(%q) = %q, shows the secret", dsn, shown)
			}
			_, err := pgconn.ParseConfig(dsn)
			if err == nil {
				t.Fatalf("pgconn.ParseConfig(%q) took it; the test wants an error that quotes the string", dsn)
			}
			hidden := HideSecrets(fmt.Errorf("open database: %w", err), dsn)
			if strings.Contains(hidden.Error(), secretPiece) {
				t.Errorf("HideSecrets(pgx's %q) = %q, shows the secret", err, hidden)
			}
			for _, p := range connParams(dsn) {
				if p.secret() {
					if quoted := HideSecrets(fmt.Errorf("quoting %q", p.value), dsn); strings.Contains(quoted.Error(), secretPiece) {
						t.Errorf("a message quoting the decoded %s shows it: %q", p.key, quoted)
					}
				}
			}
		})
	}
}

var errTestCause = errors.New("the cause")

// What is not a secret stays in the message, and HideSecrets keeps the
// error it wraps reachable.
func TestHideSecretsKeepsTheRest(t *testing.T) {
	dsn := "host=db.internal user=lw password=pw-of-lw dbname=leasewatch"
	cause := fmt.Errorf("connect: %w", errTestCause)
	err := HideSecrets(fmt.Errorf("open %s as lw with pw-of-lw: %w", dsn, cause), dsn)
	want := "open host=db.internal user=lw password=xxxxx dbname=leasewatch as lw with xxxxx: connect: the cause"
	if err.Error() != want {
		t.Errorf("HideSecrets = %q, want %q", err, want)
	}
	if !errors.Is(err, errTestCause) {
		t.Error("HideSecrets hides the error it wraps from errors.Is")
	}
	if HideSecrets(nil, dsn) != nil {
		t.Error("HideSecrets(nil) is not nil")
	}
}

// A connection string that pgx refuses fails Load naming the database key,
// without its secrets.
func TestLoadRefusesAnUnparsableConnectionString(t *testing.T) {
	for _, dsn := range []string{
		"lw.db password=" + secretPiece + "1 host=db",
		"host=db sslpassword = '" + secretPiece + "1 " + secretPiece + "2' connect_timeout=soon",
		"postgres://lw:" + secretPiece + "1@db:port/leasewatch",
	} {
		_, err := Load(writeFile(t, t.TempDir(), "lw.yaml", fmt.Sprintf("database: %q\n", dsn)))
		if err == nil || !strings.Contains(err.Error(), ": database: ") || strings.Contains(err.Error(), secretPiece) {
			t.Errorf("database: %q: Load = %v, want an error naming database without the secret", dsn, err)
		}
	}
}
