package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/leasewatch/leasewatch/audit/postgres"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/audit/storecopy"
	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
)

// progressEvery is how often copy reports a table's progress between the
// first chunk and the last.
const progressEvery = time.Second

// cmdCopy copies the whole audit log from one database into another, new or
// empty one (SQLite to PostgreSQL, or any other way), and verifies every
// table's row count; run again after an interruption, it resumes.
func cmdCopy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("copy", flag.ContinueOnError)
	from := fs.String("from", "", "the database to copy: a SQLite file or a postgres:// URL (required); it is only read")
	to := fs.String("to", "", "the database to copy into: a SQLite file or a postgres:// URL, new or empty, or that of an interrupted copy to resume (or --config)")
	configPath := fs.String("config", "", "copy into the database of this configuration file, with its database_password_file, _env and database_tls (instead of --to)")
	chunk := fs.Int("chunk", storecopy.DefaultChunk, "rows committed at once")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	var missing []error
	if *from == "" {
		missing = append(missing, errors.New("--from: the database to copy is required, a SQLite file or a postgres:// URL"))
	}
	if *to == "" && *configPath == "" {
		missing = append(missing, errors.New("--to: the database to copy into is required, a SQLite file or a postgres:// URL (or --config)"))
	}
	if len(missing) > 0 {
		return usageError{errors.Join(missing...)}
	}
	target, flag, err := chosenDatabase(*configPath, "--to", *to)
	if err != nil {
		return err
	}
	if *from == target.Database {
		return usageError{fmt.Errorf("%s: must not be the --from database", flag)}
	}
	if *chunk <= 0 {
		return usageError{errors.New("--chunk: must be a positive number")}
	}

	src, err := openCopySource(ctx, *from)
	if err != nil {
		return fmt.Errorf("--from %s: %w", config.DatabaseShown(*from), err)
	}
	defer src.Close()
	dst, err := openCopyTarget(ctx, target, slog.New(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		return fmt.Errorf("%s %s: %w", flag, target.DatabaseName(), err)
	}
	defer dst.Close()

	start := time.Now()
	res, err := storecopy.Copy(ctx, src, dst, storecopy.Options{Chunk: *chunk, Progress: progressPrinter(stderr)})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted; what is copied is committed: run the same command again to resume: %w", err)
		}
		return err
	}
	var total int64
	for _, n := range res.Rows {
		total += n
	}
	how := "copied"
	if res.Resumed {
		how = "resumed and finished the copy of"
	}
	fmt.Fprintf(stdout, "%s %s into %s: %d rows in %d tables, every count verified, in %s\n",
		how, config.DatabaseShown(*from), target.DatabaseName(), total, len(res.Rows), time.Since(start).Round(time.Millisecond))
	return nil
}

// copyStore is a store opened for a copy.
type copyStore interface{ Close() error }

// openCopySource opens the database to copy from without writing to it.
func openCopySource(ctx context.Context, database string) (interface {
	storecopy.Source
	copyStore
}, error) {
	if config.IsPostgres(database) {
		return postgres.OpenSource(ctx, database)
	}
	return sqlite.OpenSource(ctx, database)
}

// openCopyTarget opens (a SQLite file: creates) the database of cfg to copy
// into, migrated to this version's schema.
func openCopyTarget(ctx context.Context, cfg *config.Config, logger *slog.Logger) (interface {
	storecopy.Target
	copyStore
}, error) {
	if !cfg.Postgres() {
		return sqlite.Open(ctx, cfg.Database)
	}
	opts, err := postgresOptions(cfg, logger)
	if err != nil {
		return nil, err
	}
	return postgres.Open(ctx, cfg.Database, opts)
}

// progressPrinter returns a storecopy progress callback that writes a line
// per table to w when it starts, every progressEvery, and when it is done:
// rows in the target of the source's, and this run's rate.
func progressPrinter(w io.Writer) func(storecopy.Progress) {
	var table string
	var last time.Time
	return func(p storecopy.Progress) {
		now := time.Now()
		if p.Table == table && !p.Finished && now.Sub(last) < progressEvery {
			return
		}
		table, last = p.Table, now
		pct := 100.0
		if p.Total > 0 {
			pct = 100 * float64(p.Done) / float64(p.Total)
		}
		rate := 0.0
		if s := p.Elapsed.Seconds(); s > 0 {
			rate = float64(p.Copied) / s
		}
		state := ""
		if p.Finished {
			state = ", done"
		}
		fmt.Fprintf(w, "copy: %-17s %d/%d rows (%.0f%%), %.0f rows/s%s\n", p.Table, p.Done, p.Total, pct, rate, state)
	}
}
