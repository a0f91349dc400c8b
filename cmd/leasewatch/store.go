package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
	"github.com/leasewatch/leasewatch/collectors"
)

// openMode says what a command needs of the database it opens.
type openMode int

const (
	// forServing creates and migrates the database as needed, and waits
	// for a PostgreSQL server that cannot be reached yet.
	forServing openMode = iota
	// forReading opens a database that exists and holds leasewatch's
	// schema, changes nothing of it, and fails at once when it cannot.
	forReading
)

// Backoff between attempts to reach a PostgreSQL server at start: soon after
// it comes up, without hammering one that is down for long.
const (
	databaseRetryMin = 500 * time.Millisecond
	databaseRetryMax = 15 * time.Second
)

// openDatabase opens the store cfg.Database names, SQLite or PostgreSQL:
// the one place that knows both. A PostgreSQL server that cannot be reached
// at start is logged, naming its host, and tried again with backoff until
// it answers or ctx ends (forServing); any other failure, a refused password
// say, is returned at once.
func openDatabase(ctx context.Context, cfg *config.Config, mode openMode, logger *slog.Logger) (audit.Database, error) {
	if !cfg.Postgres() {
		if mode == forReading {
			if err := existingFile(cfg.Database); err != nil {
				return nil, err
			}
		}
		store, err := sqlite.Open(ctx, cfg.Database)
		if err != nil {
			return nil, fmt.Errorf("open database %s: %w", cfg.Database, err)
		}
		return store, nil
	}
	opts, err := postgresOptions(cfg, logger)
	if err != nil {
		return nil, err
	}
	opts.ExistingSchema = mode == forReading
	for attempt := 0; ; attempt++ {
		store, err := postgres.Open(ctx, cfg.Database, opts)
		if err == nil {
			if attempt > 0 {
				logger.Info("database reachable", "host", cfg.DatabaseHost())
			}
			return store, nil
		}
		err = config.HideSecrets(fmt.Errorf("open database %s: %w", cfg.DatabaseName(), err), cfg.Database)
		if mode == forReading || audit.ErrorCode(err) != audit.EUNAVAILABLE {
			return nil, err
		}
		delay := collectors.Backoff(databaseRetryMin, databaseRetryMax, attempt, rand.Float64())
		logger.Error("database unreachable; retrying", "host", cfg.DatabaseHost(), "err", err,
			"retry_in", delay.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("stopped while waiting for the database: %w", ctx.Err())
		case <-time.After(delay):
		}
	}
}

// backgroundReads returns st's reads for work done in the background over
// every lock (the verdict keeper, the scrape's verdict counts), where the
// store keeps them apart from the dashboard's (audit/sqlite's Background),
// else st.
func backgroundReads(st audit.Database) audit.Store {
	if b, ok := st.(interface{ Background() audit.Store }); ok {
		return b.Background()
	}
	return st
}

// postgresOptions are the store options for cfg's database keys: the
// password outside the URL and database_tls, both read for each connection.
func postgresOptions(cfg *config.Config, logger *slog.Logger) (postgres.Options, error) {
	var opts postgres.Options
	if secret := cfg.DatabaseSecret(); !secret.IsZero() {
		opts.Password = secret.Get
	}
	tlsConfig, err := cfg.DatabaseTLS.ClientConfig(logger.With("component", "database"))
	if err != nil {
		return opts, fmt.Errorf("database_tls.%w", err)
	}
	opts.TLS = tlsConfig
	return opts, nil
}

// existingFile fails unless path is a file: a reader never creates an empty
// database where the path is wrong.
func existingFile(path string) error {
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("database %s does not exist", path)
	case err != nil:
		return err
	case !info.Mode().IsRegular():
		return fmt.Errorf("database %s is not a file", path)
	}
	return nil
}
