package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
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

	plan, err := prepareCopy(ctx, *from)
	if err != nil {
		return err
	}
	defer plan.Close()
	dst, err := openCopyTarget(ctx, plan, target, slog.New(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		return config.HideSecrets(fmt.Errorf("%s %s: %w", flag, target.DatabaseName(), err), target.Database)
	}
	defer dst.Close()

	start := time.Now()
	res, err := plan.Run(ctx, dst, storecopy.Options{Chunk: *chunk, Progress: progressPrinter(stderr)})
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

// sourcePlan is a copy's plan with the source it reads.
type sourcePlan struct {
	*storecopy.Plan
	src copyStore
}

func (p sourcePlan) Close() error { return errors.Join(p.Plan.Close(), p.src.Close()) }

// prepareCopy opens the database to copy from without writing to it, and
// checks it (storecopy.Prepare).
func prepareCopy(ctx context.Context, from string) (sourcePlan, error) {
	src, err := openCopySource(ctx, from, postgres.Options{})
	if err == nil {
		var plan *storecopy.Plan
		if plan, err = storecopy.Prepare(ctx, src); err == nil {
			return sourcePlan{Plan: plan, src: src}, nil
		}
		src.Close()
	}
	return sourcePlan{}, config.HideSecrets(fmt.Errorf("--from %s: %w", config.DatabaseShown(from), err), from)
}

// openCopySource opens database for reading only: a SQLite file that
// exists, or a PostgreSQL database, with opts' password and TLS.
func openCopySource(ctx context.Context, database string, opts postgres.Options) (interface {
	storecopy.Source
	copyStore
}, error) {
	if config.IsPostgres(database) {
		return postgres.OpenSourceWith(ctx, database, opts)
	}
	return sqlite.OpenSource(ctx, database)
}

// openCopyTarget opens the database of cfg to copy into, migrated to this
// version's schema (a SQLite file that does not exist is created), once
// plan.CheckTarget has passed it as it is: a copy that is refused leaves
// its target as it was.
func openCopyTarget(ctx context.Context, plan sourcePlan, cfg *config.Config, logger *slog.Logger) (interface {
	storecopy.Target
	copyStore
}, error) {
	var opts postgres.Options
	if cfg.Postgres() {
		var err error
		if opts, err = postgresOptions(cfg, logger); err != nil {
			return nil, err
		}
	}
	if err := checkCopyTarget(ctx, plan, cfg.Database, opts); err != nil {
		return nil, err
	}
	if !cfg.Postgres() {
		return sqlite.Open(ctx, cfg.Database)
	}
	return postgres.Open(ctx, cfg.Database, opts)
}

// checkCopyTarget reads the target database as it is, if it exists, and
// refuses it for the plan before anything is written (Plan.CheckTarget).
func checkCopyTarget(ctx context.Context, plan sourcePlan, database string, opts postgres.Options) error {
	if !config.IsPostgres(database) {
		if _, err := os.Stat(database); errors.Is(err, fs.ErrNotExist) {
			return nil // a new file
		}
	}
	target, err := openCopySource(ctx, database, opts)
	if err != nil {
		return err
	}
	defer target.Close()
	snap, err := target.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("read the target: %w", err)
	}
	defer snap.Close()
	_, err = plan.CheckTarget(ctx, snap)
	return err
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
