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
	"github.com/leasewatch/leasewatch/audit/review"
	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
)

// stringList is a flag that may be given more than once.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// cmdReport prints the incident review of locks over a window, from the
// database: the same report as the dashboard's /review page and its exports.
func cmdReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("report", flag.ContinueOnError)
	var locks stringList
	flags.Var(&locks, "lock", "the lock, as SOURCE/NAME or an id; repeat for several (required)")
	fromFlag := flags.String("from", "", "start of the window: RFC 3339 (2006-01-02T15:04:05Z) or a duration before now (-2h) (required)")
	toFlag := flags.String("to", "", "end of the window: RFC 3339, a duration before now, or now (default now)")
	format := flags.String("format", "md", "output format: md (Markdown) or json")
	configPath := flags.String("config", "", "configuration file naming the database (default leasewatch.yaml)")
	database := flags.String("database", "", "SQLite database file or postgres:// URL (instead of --config)")
	maxHandovers := flags.Int("max-handovers", review.DefaultMaxHandovers, "most handovers per lock; the newest are kept")
	maxWrites := flags.Int("max-writes", 0, "most writes listed per handover, the stale and unfenced first; the rest are counted (0: all)")
	if err := parseFlags(flags, args, stderr); err != nil {
		return err
	}

	now := time.Now().UTC()
	// Both required flags are named when both are missing, so the error
	// never blames only --lock for a missing --from.
	var missing []error
	if len(locks) == 0 {
		missing = append(missing, errors.New("--lock: a lock is required, as SOURCE/NAME"))
	}
	if *fromFlag == "" {
		missing = append(missing, errors.New("--from: a start time is required, e.g. 2006-01-02T15:04:05Z or -1h"))
	}
	if len(missing) > 0 {
		return usageError{errors.Join(missing...)}
	}
	for _, l := range locks {
		if strings.TrimSpace(l) == "" {
			return usageError{errors.New("--lock: must not be empty")}
		}
	}
	from, err := parseReportTime(*fromFlag, now)
	if err != nil {
		return usageError{fmt.Errorf("--from: %w", err)}
	}
	to := now
	if *toFlag != "" {
		if to, err = parseReportTime(*toFlag, now); err != nil {
			return usageError{fmt.Errorf("--to: %w", err)}
		}
	}
	if to.Before(from) {
		return usageError{fmt.Errorf("--to: %s is before --from %s", to.Format(time.RFC3339Nano), from.Format(time.RFC3339Nano))}
	}
	write := review.WriteMarkdown
	switch *format {
	case "md", "markdown":
	case "json":
		write = review.WriteJSON
	default:
		return usageError{fmt.Errorf("--format: %q: want md or json", *format)}
	}
	if *maxHandovers <= 0 {
		return usageError{errors.New("--max-handovers: must be a positive number")}
	}
	if *maxWrites < 0 {
		return usageError{errors.New("--max-writes: must not be negative")}
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

	q := review.Query{
		Window:   review.Window{From: from, To: to},
		Locks:    locks,
		MaxLocks: max(len(locks), review.DefaultMaxLocks),
		Purposes: cfg.VerdictPurposes(),
		Options:  review.Options{MaxHandovers: *maxHandovers, MaxWrites: *maxWrites},
	}
	if err := q.Validate(); err != nil {
		// Its message starts with the field it is about: from, to or lock.
		return usageError{fmt.Errorf("--%s", audit.ErrorMessage(err))}
	}
	r, err := review.Load(ctx, store, q)
	if err != nil {
		if code := audit.ErrorCode(err); code == audit.ENOTFOUND || code == audit.EINVALID {
			return fmt.Errorf("--lock: %s", audit.ErrorMessage(err))
		}
		return err
	}
	return write(stdout, r)
}

// reportDatabase returns the configuration of the database the report
// reads, --database or the database of the configuration file (by default
// leasewatch.yaml), and the flag that named it.
func reportDatabase(configPath, database string) (*config.Config, string, error) {
	if configPath == "" && database == "" {
		configPath = "leasewatch.yaml"
	}
	return chosenDatabase(configPath, "--database", database)
}

// chosenDatabase returns the configuration of the database a command was
// given: by flag, a SQLite file or a postgres:// URL, or as the database of
// the configuration file at configPath, with its password and TLS keys. It
// returns the flag that named it; one of the two must be given.
func chosenDatabase(configPath, flag, database string) (*config.Config, string, error) {
	if configPath != "" && database != "" {
		return nil, "", usageError{fmt.Errorf("%s: give --config or %s, not both", flag, flag)}
	}
	if database != "" {
		cfg := &config.Config{Database: database}
		cfg.SetDefaults()
		if err := cfg.Validate(); err != nil {
			return nil, "", usageError{fmt.Errorf("--%w", err)}
		}
		return cfg, flag, nil
	}
	cfg, err := config.Load(configPath)
	if err != nil {
		return nil, "", fmt.Errorf("--config: %w", err)
	}
	return cfg, "--config", nil
}

// parseReportTime reads an RFC 3339 time, "now", or a duration before now
// such as -90m (a leading minus is optional). Like the dashboard's from and
// to, the time is clamped to what the database keeps (audit.BoundTime), so
// --to 2300-01-01T00:00:00Z covers everything up to 2262 and
// --from 0001-01-01T00:00:00Z everything since 1677.
func parseReportTime(s string, now time.Time) (time.Time, error) {
	if s == "now" {
		return now, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return audit.BoundTime(t), nil
	}
	if d, err := time.ParseDuration(strings.TrimPrefix(s, "-")); err == nil && d >= 0 {
		return audit.BoundTime(now.Add(-d)), nil
	}
	return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time such as 2006-01-02T15:04:05Z, now, or a duration before now such as -1h", s)
}
