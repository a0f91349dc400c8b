package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
)

// cmdCheck is `leasewatch check config FILE...`: each file is validated as
// serve would load it, as promtool check config does, and the first error
// names the file and the field. With --syntax-only the secrets it names
// (password files and variables, token files, the TLS pairs) are not read,
// for a check where they are not, such as a chart's rendering.
func cmdCheck(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "config" {
		return usageError{errors.New("want: check config [--syntax-only] FILE")}
	}
	fs := flag.NewFlagSet("check config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	syntaxOnly := fs.Bool("syntax-only", false, "check the file alone, without reading the secrets it names")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() == 0 {
		return usageError{fmt.Errorf("config: name at least one file")}
	}
	load := config.Load
	if *syntaxOnly {
		load = config.Read
	}
	for _, path := range fs.Args() {
		cfg, err := load(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: OK, %d source(s), database %s\n", path, len(cfg.Sources), cfg.DatabaseName())
	}
	return nil
}
