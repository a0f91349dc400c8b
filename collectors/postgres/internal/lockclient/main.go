// Command lockclient runs a real migration tool's PostgreSQL migrations,
// under that tool's own advisory lock, for collectors/postgres's tests:
//
//	lockclient migrate URL DIR   golang-migrate (pgx/v5 driver): pg_advisory_lock, blocking
//	lockclient goose URL DIR     goose's Postgres session locker: pg_try_advisory_lock, retried each second
//
// URL is a postgres:// URL; DIR holds the tool's migration files.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // the pgx5:// driver
	_ "github.com/golang-migrate/migrate/v4/source/file"     // the file:// source
	_ "github.com/jackc/pgx/v5/stdlib"                       // database/sql's "pgx"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: lockclient migrate|goose URL DIR")
		os.Exit(2)
	}
	tool, url, dir := os.Args[1], os.Args[2], os.Args[3]
	var err error
	switch tool {
	case "migrate":
		err = runMigrate(url, dir)
	case "goose":
		err = runGoose(url, dir)
	default:
		err = fmt.Errorf("unknown tool %q", tool)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockclient:", err)
		os.Exit(1)
	}
}

// runMigrate runs golang-migrate's Up, which holds pg_advisory_lock on a
// key derived from the URL's database path, schema and migrations table.
func runMigrate(url, dir string) error {
	m, err := migrate.New("file://"+dir, "pgx5://"+strings.TrimPrefix(url, "postgres://"))
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return err
	}
	return nil
}

// runGoose runs goose's Up with its Postgres session locker, trying for
// the lock every second for up to a minute.
func runGoose(url, dir string) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 60))
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, os.DirFS(dir), goose.WithSessionLocker(locker))
	if err != nil {
		return err
	}
	_, err = p.Up(context.Background())
	return err
}
