package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/advise"
	"github.com/leasewatch/leasewatch/audit/review"
)

// adviseMaxWindow bounds --window as the dashboard bounds a lock page's.
const adviseMaxWindow = 92 * 24 * time.Hour

// cmdAdvise prints the lease settings that fit the stalls a lock's holders
// had over a window ending now, from the database: the same advice as GET
// /api/v1/locks/{id}/advice.
func cmdAdvise(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("advise", flag.ContinueOnError)
	lock := flags.String("lock", "", "the lock, as SOURCE/NAME or an id (required)")
	window := flags.Duration("window", 24*time.Hour, "how far back from now to look, at most 92 days (e.g. 1h, 168h)")
	o := advise.DefaultOptions()
	flags.Float64Var(&o.Margin, "margin", o.Margin, "margin over the longest stall, a share of it (0.5: half again)")
	flags.IntVar(&o.Retries, "retries", o.Retries, "renewal attempts per renew deadline (renew deadline / retry period)")
	asJSON := flags.Bool("json", false, "print the advice as JSON (as the API's)")
	configPath := flags.String("config", "", "configuration file naming the database (default leasewatch.yaml)")
	database := flags.String("database", "", "SQLite database file or postgres:// URL (instead of --config)")
	if err := parseFlags(flags, args, stderr); err != nil {
		return err
	}
	if strings.TrimSpace(*lock) == "" {
		return usageError{errors.New("--lock: a lock is required, as SOURCE/NAME or an id")}
	}
	if *window <= 0 || *window > adviseMaxWindow {
		return usageError{fmt.Errorf("--window: %v: want a positive duration of at most 92 days (2208h)", *window)}
	}
	if err := o.Validate(); err != nil {
		// Its message starts with the option it is about: margin or retries.
		return usageError{fmt.Errorf("--%s", audit.ErrorMessage(err))}
	}

	cfg, flagName, err := reportDatabase(*configPath, *database)
	if err != nil {
		return err
	}
	store, err := openDatabase(ctx, cfg, forReading, slog.New(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		return fmt.Errorf("%s: %w", flagName, err)
	}
	defer store.Close()

	l, err := review.ResolveLock(ctx, store, *lock)
	if err != nil {
		if code := audit.ErrorCode(err); code == audit.ENOTFOUND || code == audit.EINVALID {
			return fmt.Errorf("--lock: %s", audit.ErrorMessage(err))
		}
		return err
	}
	now := time.Now().UTC()
	a, err := advise.Load(ctx, store, l, advise.Window{From: now.Add(-*window), To: now}, o)
	if err != nil {
		return err
	}
	if *asJSON {
		return advise.WriteJSON(stdout, a)
	}
	return advise.WriteText(stdout, a)
}
