// Command leasewatch records distributed-lock lease history and fencing
// outcomes, and serves the dashboard and API.
//
//	leasewatch serve [--config leasewatch.yaml] [--cpuprofile FILE] [--memprofile FILE]
//	leasewatch demo [--listen 127.0.0.1:8080]
//	leasewatch report --lock SOURCE/NAME --from T [--to T] [--format md|json]
//	leasewatch advise --lock SOURCE/NAME [--window 24h] [--json]
//	leasewatch copy --from DATABASE (--to DATABASE | --config FILE)
//	leasewatch check config [--syntax-only] FILE...
//	leasewatch version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"syscall"

	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `leasewatch: an audit service and dashboard for distributed-lock leases.

Usage:
  leasewatch serve [--config leasewatch.yaml]   run collectors, store and dashboard
                   [--cpuprofile FILE]          (and write a CPU profile there until it stops,
                   [--memprofile FILE]          a heap profile there when told to stop)
  leasewatch demo [--listen 127.0.0.1:8080]     run against an in-process etcd with a demo workload
  leasewatch report --lock SOURCE/NAME --from T [--to T] [--format md|json]
                    [--config leasewatch.yaml | --database FILE|URL]
                                                the incident review of locks' handovers in a window
  leasewatch advise --lock SOURCE/NAME [--window 24h] [--margin 0.5] [--retries 5] [--json]
                    [--config leasewatch.yaml | --database FILE|URL]
                                                lease settings that fit the stalls a lock's holders had
  leasewatch copy --from DATABASE (--to DATABASE | --config FILE) [--chunk N]
                                                copy the whole history into a new database (a SQLite
                                                file or a postgres:// URL); rerun to resume
  leasewatch check config [--syntax-only] FILE...
                                                validate configuration files as serve loads them
                                                (--syntax-only: without reading the secrets they name)
  leasewatch version                            print the version
`

// run executes one subcommand and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var err error
	switch args[0] {
	case "serve":
		tuneGC(ctx, gcTuneEvery)
		err = cmdServe(ctx, args[1:], logger, stderr)
	case "report":
		err = cmdReport(ctx, args[1:], stdout, stderr)
	case "advise":
		err = cmdAdvise(ctx, args[1:], stdout, stderr)
	case "copy":
		err = cmdCopy(ctx, args[1:], stdout, stderr)
	case "check":
		err = cmdCheck(ctx, args[1:], stdout, stderr)
	case "demo":
		tuneGC(ctx, gcTuneEvery)
		err = cmdDemo(ctx, args[1:], logger, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "leasewatch", versionString())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "leasewatch: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "leasewatch %s: %v\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "leasewatch %s: %v\n", args[0], err)
		return 1
	}
}

// usageError marks a bad command line.
type usageError struct{ error }

func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

func cmdServe(ctx context.Context, args []string, logger *slog.Logger, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	path := fs.String("config", "leasewatch.yaml", "configuration file")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (for go tool pprof)")
	memProfile := fs.String("memprofile", "", "when told to stop, write a heap profile to this file before shutting down (for go tool pprof)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	if *memProfile != "" {
		written, err := heapProfileAtStop(ctx, *memProfile)
		if err != nil {
			return err
		}
		defer written()
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	svc, err := startService(ctx, cfg, logger)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil // stopped before it could serve: waiting for the database, say
	}
	if err != nil {
		return err
	}
	return svc.serve(ctx)
}

// startCPUProfile profiles the process into path until the returned stop is
// called. A file rather than a /debug/pprof endpoint: the dashboard's
// listener may be reachable by anyone, and a profile is only wanted when
// measuring.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("cpuprofile: %w", err)}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// heapProfileAtStop writes a heap profile into path once ctx ends, after a
// collection and before the service has let go of its state: what the
// process held while it ran. wait blocks until the profile is written.
func heapProfileAtStop(ctx context.Context, path string) (wait func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("memprofile: %w", err)}
	}
	done := make(chan struct{})
	write := func() {
		defer close(done)
		defer f.Close()
		runtime.GC()
		_ = pprof.WriteHeapProfile(f)
	}
	stop := context.AfterFunc(ctx, write)
	return func() {
		if stop() { // ctx never ended: write it now
			write()
		}
		<-done
	}, nil
}

func versionString() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return version
}
