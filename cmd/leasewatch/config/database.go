package config

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasewatch/leasewatch/collectors"
)

// The database keys. database is a SQLite file path (the default) or a
// PostgreSQL connection string, a postgres:// or postgresql:// URL or
// libpq's keyword/value form (connstring.go); the others apply only to
// PostgreSQL:
//
//	database: postgres://leasewatch@db.internal:5432/leasewatch?sslmode=verify-full
//	# or: database: host=db.internal user=leasewatch dbname=leasewatch sslmode=verify-full
//	database_password_file: /run/secrets/pg-password  # or database_password_env: PGPASSWORD_LW
//	database_tls:                                    # as a source's tls; presence requires TLS
//	  ca_file: /etc/leasewatch/pg/ca.crt
//	  cert_file: /etc/leasewatch/pg/client.crt
//	  key_file: /etc/leasewatch/pg/client.key
//
// The string's own sslmode, sslrootcert, sslcert and sslkey work as libpq's;
// database_tls overrides them and never falls back to plain text.

// databasePasswordKeys are the keys that give the database password.
var databasePasswordKeys = passwordKeys{"the connection string's password", "database_password_file", "database_password_env"}

// postgresSchemes are the URL schemes that name a PostgreSQL database.
var postgresSchemes = []string{"postgres", "postgresql"}

// sslModes are libpq's sslmode values, which pgx takes.
var sslModes = []string{"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}

// Postgres reports whether database names a PostgreSQL database rather than
// a SQLite file (IsPostgres).
func (c *Config) Postgres() bool { return IsPostgres(c.Database) }

// DatabaseName is database as the log may show it (DatabaseShown).
func (c *Config) DatabaseName() string { return DatabaseShown(c.Database) }

// DatabaseHost is the host (and port) of a PostgreSQL database, for a
// message saying it cannot be reached; "" for SQLite.
func (c *Config) DatabaseHost() string {
	if !c.Postgres() {
		return ""
	}
	if _, ok := isURL(c.Database); ok {
		if u, err := url.Parse(c.Database); err == nil && u.Host != "" {
			return u.Host
		}
		return "the default host"
	}
	params := connParams(c.Database)
	host, ok := connValue(params, "host")
	if !ok {
		if host, ok = connValue(params, "hostaddr"); !ok {
			return "the default host"
		}
	}
	if port, ok := connValue(params, "port"); ok {
		return host + ":" + port
	}
	return host
}

// DatabaseSecret is the database password given outside the URL: the file
// read again for each new connection, or the variable read at start. The
// zero Secret means the URL's, if it has one.
func (c *Config) DatabaseSecret() collectors.Secret {
	if c.DatabasePasswordFile != "" {
		return collectors.PasswordFile(c.DatabasePasswordFile)
	}
	return collectors.Password(c.databasePassword)
}

// validateDatabase checks the database keys. Its messages never quote the
// connection string, which may hold a password.
func (c *Config) validateDatabase() error {
	if !c.Postgres() {
		return c.validateSQLite()
	}
	if _, ok := isURL(c.Database); ok {
		if _, err := url.Parse(c.Database); err != nil {
			return errors.New("database: not a valid URL (the value is hidden: it may hold a password)")
		}
	}
	params := connParams(c.Database)
	password, _ := connValue(params, "password")
	if _, err := databasePasswordKeys.check(password != "", c.DatabasePasswordFile, c.DatabasePasswordEnv); err != nil {
		return err
	}
	mode, _ := connValue(params, "sslmode")
	if mode != "" && !slices.Contains(sslModes, mode) {
		return fmt.Errorf("database: sslmode %q is not one of %s", mode, strings.Join(sslModes, ", "))
	}
	if c.DatabaseTLS == nil {
		return nil
	}
	if mode == "disable" {
		return errors.New("database_tls: requires TLS, but the connection string says sslmode=disable: leave one of them out")
	}
	if err := c.DatabaseTLS.validate(); err != nil {
		return fmt.Errorf("database_tls.%w", err)
	}
	return nil
}

// validateSQLite checks the database keys of a SQLite file.
func (c *Config) validateSQLite() error {
	if scheme, ok := isURL(c.Database); ok {
		return fmt.Errorf("database: %s:// is not a database leasewatch stores in: give a SQLite file path or a PostgreSQL connection string (postgres:// or host=... dbname=...)", scheme)
	}
	for key, set := range map[string]bool{
		"database_password_file": c.DatabasePasswordFile != "",
		"database_password_env":  c.DatabasePasswordEnv != "",
		"database_tls":           c.DatabaseTLS != nil,
	} {
		if set {
			return fmt.Errorf("%s: applies only to a PostgreSQL database, not a SQLite file", key)
		}
	}
	return nil
}

// readDatabaseSecrets reads database_password_env, checks the password file
// and the TLS files, and has pgx parse the connection string, which reads
// the files its sslrootcert, sslcert and sslkey name.
func (c *Config) readDatabaseSecrets() error {
	if !c.Postgres() {
		return nil
	}
	if err := databasePasswordKeys.read(c.DatabasePasswordFile, c.DatabasePasswordEnv, &c.databasePassword); err != nil {
		return err
	}
	if _, err := c.DatabaseTLS.ClientConfig(nil); err != nil {
		return fmt.Errorf("database_tls.%w", err)
	}
	if _, err := pgconn.ParseConfig(c.Database); err != nil {
		return HideSecrets(fmt.Errorf("database: %s", pgconnMessage(err)), c.Database)
	}
	return nil
}

// pgconnMessage is the reason pgconn gives for refusing a connection string,
// without the string, which may hold a password: its cause where it has one
// (a file of sslrootcert, sslcert or sslkey that does not load).
func pgconnMessage(err error) string {
	if cause := errors.Unwrap(err); cause != nil {
		return cause.Error()
	}
	return "not a valid PostgreSQL connection string (the value is hidden: it may hold a password)"
}
